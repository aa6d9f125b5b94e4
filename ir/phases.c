/* phases.c — the phases of a module (ir.h, "phases"): the table, its
 * metadata form, and the rules the verifier checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

int32_t dc_module_add_phase(dc_module *m, const char *name, int loop) {
  if (m->nphases >= DC_MAX_PHASES || strlen(name) >= 64 || strpbrk(name, " @*")) return -1;
  char *nm = dc_arena_strdup(m->arena, name);
  if (!nm) return -1;
  m->phases[m->nphases] = (dc_phase){nm, loop ? 1 : 0};
  return m->nphases++;
}

int32_t dc_phase_find(const dc_module *m, const char *name) {
  for (int32_t p = 0; p < m->nphases; p++)
    if (!strcmp(m->phases[p].name, name)) return p;
  return -1;
}

/* Phases never decrease along the schedule (the verifier's rule), so each
 * one is the run of nodes between its first node and the next phase's. */
void dc_phase_spans(const dc_module *m, int32_t *first, int32_t *end) {
  int32_t n = m->nphases > 0 ? m->nphases : 1;
  for (int32_t p = 0; p < n; p++) first[p] = end[p] = -1;
  for (int32_t i = 0; i < m->nnodes; i++) {
    int32_t p = m->nodes[i].phase;
    if (p < 0 || p >= n) continue;
    if (first[p] < 0) first[p] = i;
    end[p] = i + 1;
  }
  int32_t next = m->nnodes; /* an empty phase sits where the next one starts */
  for (int32_t p = n - 1; p >= 0; p--) {
    if (first[p] < 0) first[p] = end[p] = next;
    next = first[p];
  }
}

int32_t dc_phase_region_end(const dc_module *m, const int32_t *end, int32_t p) {
  if (p < 0 || p >= m->nphases || !m->phases[p].loop) return end[p < 0 ? 0 : p];
  while (p + 1 < m->nphases && m->phases[p + 1].loop) p++;
  return end[p];
}

/* The metadata text the nodes imply. */
static void phases_text(const dc_module *m, char *text, size_t cap) {
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  text[0] = 0;
  for (int32_t p = 0; p < m->nphases; p++) {
    size_t len = strlen(text);
    snprintf(text + len, cap - len, "%s%s%s@%d", p ? " " : "", m->phases[p].name, m->phases[p].loop ? "*" : "",
             first[p]);
  }
}

dc_status *dc_phases_sync_meta(dc_module *m) {
  if (m->nphases == 0) return NULL;
  char text[DC_MAX_PHASES * 96];
  phases_text(m, text, sizeof text);
  return dc_module_set_meta(m, "phases", text);
}

static dc_status *meta_error(const char *text, const char *why) {
  return dc_error(DC_ERR_FORMAT, "module metadata \"phases\" = \"%.200s\": %s", text, why);
}

/* One "name[*]@first" entry at *s; advances *s. */
static dc_status *read_phase_entry(dc_module *m, const char *text, const char **s, int32_t *first) {
  const char *at = strchr(*s, '@');
  const char *stop = *s + strcspn(*s, " ");
  if (!at || at > stop || at == *s) return meta_error(text, "expected name@first-node entries separated by spaces");
  int loop = at[-1] == '*';
  char name[64];
  size_t len = (size_t)(at - *s) - (size_t)loop;
  if (len == 0 || len >= sizeof name) return meta_error(text, "a phase name is empty or longer than 63 bytes");
  memcpy(name, *s, len);
  name[len] = 0;
  char *e;
  long v = strtol(at + 1, &e, 10);
  if (e != stop || v < 0 || v > m->nnodes) return meta_error(text, "a phase's first node is not a node index");
  if (dc_module_add_phase(m, name, loop) < 0) return meta_error(text, "more than 8 phases, or a bad name");
  *first = (int32_t)v;
  *s = *stop ? stop + 1 : stop;
  return NULL;
}

dc_status *dc_phases_from_meta(dc_module *m) {
  const char *text = dc_module_get_meta(m, "phases");
  m->nphases = 0;
  if (!text) return NULL;
  int32_t first[DC_MAX_PHASES + 1];
  for (const char *s = text; *s;) {
    if (m->nphases == DC_MAX_PHASES) return meta_error(text, "more than 8 phases");
    DC_TRY(read_phase_entry(m, text, &s, &first[m->nphases]));
    if (m->nphases > 1 && first[m->nphases - 1] < first[m->nphases - 2])
      return meta_error(text, "phases must start in schedule order");
  }
  if (m->nphases == 0) return meta_error(text, "no phases");
  if (first[0] != 0) return meta_error(text, "the first phase must start at node 0");
  first[m->nphases] = m->nnodes;
  for (int32_t p = 0; p < m->nphases; p++)
    for (int32_t i = first[p]; i < first[p + 1]; i++) m->nodes[i].phase = p;
  return NULL;
}

static dc_status *phase_bad(const char *after, int32_t id, const char *fmt, const char *a, const char *b) {
  char what[256];
  snprintf(what, sizeof what, fmt, a, b);
  return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): %%%d: %s", after, id, what);
}

/* A value the node may not read across phases: a loop phase's value read
 * by another phase (leaves — weights, constants — are not per-run values). */
static int crosses_loop(const dc_module *m, const dc_node *n, const dc_node *in) {
  if (in->phase == n->phase || (dc_op_get(in->op)->flags & OPF_LEAF && in->op != OP_INPUT)) return 0;
  return m->phases[in->phase].loop;
}

dc_status *dc_phases_verify(const dc_module *m, const char *after) {
  int32_t n = m->nphases > 0 ? m->nphases : 1;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *node = &m->nodes[i];
    char num[32];
    snprintf(num, sizeof num, "%d", node->phase);
    if (node->phase < 0 || node->phase >= n) return phase_bad(after, i, "phase %s of %s out of range", num, "the table");
    if (i > 0 && node->phase < m->nodes[i - 1].phase)
      return phase_bad(after, i, "phase %s comes after a node of a later phase (%s)", m->phases[node->phase].name,
                       m->phases[m->nodes[i - 1].phase].name);
    for (int k = 0; k < node->ninputs && m->nphases > 0; k++) {
      const dc_node *in = &m->nodes[node->inputs[k]];
      if (crosses_loop(m, node, in))
        return phase_bad(after, i, "reads a value of loop phase %s from phase %s", m->phases[in->phase].name,
                         m->phases[node->phase].name);
    }
  }
  const char *meta = dc_module_get_meta(m, "phases");
  if (m->nphases == 0) return meta ? dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): metadata \"phases\" but no phase table", after) : NULL;
  char text[DC_MAX_PHASES * 96];
  phases_text(m, text, sizeof text);
  if (!meta || strcmp(meta, text) != 0)
    return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): metadata \"phases\" is \"%s\", the nodes say \"%s\"",
                    after, meta ? meta : "(absent)", text);
  return NULL;
}
