/* memory_report.c — where a planned module's memory goes (ir.h, "memory
 * report"), built from liveness and the memory series so its numbers are
 * the IR dump's and the runtime's: the peak per device as dev_weights +
 * dev_peak, the bytes by kind at the peak step as the series gives them,
 * offloaded and uploaded bytes as liveness and drt_stats count them.  What
 * it adds is grouping (by top-level module, by phase, by component) and
 * rendering: text in human units (memory_report_text.c) and JSON in bytes
 * (memory_report_json.c). */
#include <string.h>

#include "ir.h"

static int is_index(const char *s, size_t n) {
  if (!n) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

/* The length of the scope's first k path elements (the whole scope when it
 * has fewer); a numeric element after them is taken too ("up_blocks.1"). */
static size_t prefix_len(const char *scope, int k) {
  size_t at = 0, len = strlen(scope);
  for (int e = 0; e < k && at < len; e++) {
    const char *dot = strchr(scope + at, '.');
    at = dot ? (size_t)(dot - scope) + 1 : len + 1;
  }
  if (at > len) return len;
  const char *dot = strchr(scope + at, '.');
  size_t next = dot ? (size_t)(dot - scope) : len;
  return is_index(scope + at, next - at) ? next : at - 1;
}

const char *dc_mem_report_module_of(const dc_module *m, const char *scope, char *buf, size_t cap) {
  if (!scope || !*scope) {
    snprintf(buf, cap, "(no module)");
    return buf;
  }
  size_t n = prefix_len(scope, m->nphases ? 2 : 1); /* a pipeline's scopes start with the component */
  snprintf(buf, cap, "%.*s", (int)n, scope);
  return buf;
}

void dc_mem_report_deinit(dc_mem_report *r) {
  if (r->arena) dc_arena_destroy(r->arena);
  memset(r, 0, sizeof *r);
}

/* ---- the peak of one device ---- */

static void add_top(dc_mem_report_device *d, int32_t node, uint64_t bytes, dc_mem_kind kind) {
  int at = d->ntop < DC_MEM_REPORT_TOP ? d->ntop++ : DC_MEM_REPORT_TOP;
  if (at == DC_MEM_REPORT_TOP && bytes <= d->top[DC_MEM_REPORT_TOP - 1].bytes) return;
  if (at == DC_MEM_REPORT_TOP) at = DC_MEM_REPORT_TOP - 1;
  for (; at > 0 && d->top[at - 1].bytes < bytes; at--) d->top[at] = d->top[at - 1]; /* ties keep node order */
  d->top[at] = (dc_mem_report_value){node, bytes, kind};
}

static dc_status *add_module(dc_arena *a, dc_mem_report_device *d, const char *name, uint64_t bytes, int32_t cap) {
  for (int32_t i = 0; i < d->nmodules; i++)
    if (!strcmp(d->modules[i].name, name)) return d->modules[i].bytes += bytes, d->modules[i].values++, NULL;
  if (d->nmodules == cap) return dc_error(DC_ERR_INTERNAL, "memory report: more modules than live values");
  const char *copy = dc_arena_strdup(a, name);
  if (!copy) return dc_nomem("building the memory report");
  d->modules[d->nmodules++] = (dc_mem_report_module){copy, bytes, 1};
  return NULL;
}

static void sort_modules(dc_mem_report_device *d) { /* largest first; ties by name, so the order is stable */
  for (int32_t i = 1; i < d->nmodules; i++)
    for (int32_t j = i; j > 0; j--) {
      dc_mem_report_module *x = &d->modules[j - 1], *y = &d->modules[j];
      if (x->bytes > y->bytes || (x->bytes == y->bytes && strcmp(x->name, y->name) <= 0)) break;
      dc_mem_report_module t = *x;
      *x = *y, *y = t;
    }
}

/* What occupies device dev while step s runs, by module and largest values. */
static dc_status *live_at(dc_mem_report *r, const dc_liveness *l, int dev, int32_t s) {
  const dc_module *m = r->m;
  dc_mem_report_device *d = &r->dev[dev];
  int32_t cap = 0;
  for (int32_t i = 0; i < m->nnodes; i++) cap += dc_node_is_activation(&m->nodes[i]) && m->nodes[i].device == dev;
  d->modules = dc_arena_alloc(r->arena, sizeof *d->modules * (size_t)(cap ? cap : 1));
  if (!d->modules) return dc_nomem("building the memory report");
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!dc_node_is_activation(n) || n->device != dev) continue;
    if (dc_value_first_step(m, i) > s || dc_value_last_step(l, i) < s) continue;
    uint64_t b = dc_type_bytes(&n->type);
    d->live_at_peak_bytes += b;
    char name[256];
    if (n->op == OP_INPUT) snprintf(name, sizeof name, "(inputs)");
    else dc_mem_report_module_of(m, n->scope, name, sizeof name);
    DC_TRY(add_module(r->arena, d, name, b, cap));
    add_top(d, i, b, dc_mem_value_kind(m, i));
  }
  sort_modules(d);
  return NULL;
}

static dc_status *device_peak(dc_mem_report *r, const dc_liveness *l, const dc_mem_series *s, int dev) {
  dc_mem_report_device *d = &r->dev[dev];
  d->weight_bytes = l->dev_weights[dev];
  d->arena_bytes = l->dev_peak[dev];
  d->peak_bytes = d->weight_bytes + d->arena_bytes;
  d->peak_step = 0;
  for (int32_t st = s->nsteps - 1; st >= 0; st--) /* the first step whose allocation reaches the top */
    if (s->arena_top[(size_t)dev * (size_t)s->nsteps + (size_t)st] >= d->arena_bytes) d->peak_step = st;
  for (int32_t st = 0; st < s->nsteps; st++) {
    uint64_t live = 0;
    for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS; k++) live += dc_mem_series_at(s, st, dev, (dc_mem_kind)k);
    if (live > d->live_peak_bytes) d->live_peak_bytes = live;
  }
  for (int k = 0; k < DC_MEM_KINDS && s->nsteps; k++) d->kind_bytes[k] = dc_mem_series_at(s, d->peak_step, dev, (dc_mem_kind)k);
  return s->nsteps ? live_at(r, l, dev, d->peak_step) : NULL;
}

/* ---- host, copies, phases, components ---- */

/* Weights read only by uploads wait in host memory; any other weight is
 * resident (liveness's rule, kept per weight node here). */
static unsigned char *weight_places(const dc_module *m) {
  unsigned char *how = dc_calloc((size_t)m->nnodes + 1, 1); /* 1: a kernel reads it, 2: only uploads */
  if (!how) return NULL;
  for (int32_t i = 0; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) {
      int32_t p = m->nodes[i].inputs[k];
      if (m->nodes[p].op != OP_WEIGHT) continue;
      if (m->nodes[i].op != OP_UPLOAD) how[p] = 1;
      else if (!how[p]) how[p] = 2;
    }
  return how;
}

static dc_mem_report_component *component(dc_mem_report *r, const char *weight_name, int32_t cap) {
  size_t n = strcspn(weight_name, ".");
  for (int32_t c = 0; c < r->ncomponents; c++)
    if (strlen(r->components[c].name) == n && !strncmp(r->components[c].name, weight_name, n)) return &r->components[c];
  if (r->ncomponents == cap) return NULL;
  char *name = dc_arena_alloc(r->arena, n + 1);
  if (!name) return NULL;
  memcpy(name, weight_name, n);
  r->components[r->ncomponents] = (dc_mem_report_component){name, 0, 0};
  return &r->components[r->ncomponents++];
}

static dc_status *weights(dc_mem_report *r) {
  const dc_module *m = r->m;
  unsigned char *how = weight_places(m);
  if (!how) return dc_nomem("building the memory report");
  int32_t cap = m->nphases ? m->nweights : 0;
  r->components = cap ? dc_arena_alloc(r->arena, sizeof *r->components * (size_t)cap) : NULL;
  dc_status *st = cap && !r->components ? dc_nomem("building the memory report") : NULL;
  for (int32_t i = 0; i < m->nnodes && !st; i++) {
    if (m->nodes[i].op != OP_WEIGHT) continue;
    const dc_weight *w = &m->weights[m->nodes[i].ref];
    int offloaded = how[i] == 2;
    if (offloaded) r->offloaded_weight_bytes += w->bytes;
    else r->resident_weight_bytes += w->bytes;
    if (offloaded && w->bytes > r->largest_offloaded_bytes) r->largest_offloaded_bytes = w->bytes;
    if (!cap) continue;
    dc_mem_report_component *c = component(r, w->name, cap);
    if (!c) st = dc_nomem("building the memory report");
    else if (offloaded) c->offloaded_bytes += w->bytes;
    else c->resident_bytes += w->bytes;
  }
  dc_free(how);
  return st;
}

/* host_memory as the runtime reads it (absent: pinned); the offload dir
 * from its metadata "DIR (N group files)", and the plan's files in it. */
static void host_side(dc_mem_report *r) {
  const dc_module *m = r->m;
  const char *hm = dc_module_get_meta(m, "host_memory");
  if (r->offloaded_weight_bytes) r->host_memory = hm && !strcmp(hm, "on-demand") ? "on-demand" : "pinned";
  const char *dir = dc_module_get_meta(m, "offload_dir");
  if (!dir) return;
  const char *paren = strstr(dir, " (");
  for (const char *p = paren; p; p = strstr(p + 1, " (")) paren = p;
  size_t n = paren ? (size_t)(paren - dir) : strlen(dir);
  char *copy = dc_arena_alloc(r->arena, n + 1);
  if (!copy) return; /* the report then names no dir: nothing is claimed that is not known */
  memcpy(copy, dir, n);
  r->offload_dir = copy;
  for (int32_t f = 0; f < m->nfiles; f++) {
    const char *path = m->files[f].path;
    if (strncmp(path, copy, n) != 0 || path[n] != '/') continue;
    r->offload_files++;
    r->offload_file_bytes += m->files[f].file_size;
  }
}

static void copies(dc_mem_report *r, int32_t first, int32_t end, uint64_t *up, uint64_t *xfer) {
  for (int32_t i = first; i < end; i++) {
    const dc_node *n = &r->m->nodes[i];
    if (n->op == OP_UPLOAD) *up += dc_type_bytes(&n->type);
    if (n->op == OP_TRANSFER) *xfer += dc_type_bytes(&n->type);
  }
}

static void phases(dc_mem_report *r, const dc_mem_series *s) {
  const dc_module *m = r->m;
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  r->nphases = m->nphases;
  if (!m->nphases) return;
  dc_phase_spans(m, first, end);
  for (int p = 0; p < m->nphases; p++) {
    dc_mem_report_phase *ph = &r->phases[p];
    ph->first = first[p], ph->end = end[p];
    copies(r, first[p], end[p], &ph->uploaded_bytes, &ph->transferred_bytes);
    for (int32_t i = first[p]; i < end[p]; i++) { /* what the runtime measures: the values placed in the phase */
      const dc_node *n = &m->nodes[i];
      uint64_t top = dc_node_is_activation(n) && n->offset >= 0 ? (uint64_t)n->offset + dc_type_bytes(&n->type) : 0;
      if (top > ph->arena_bytes) ph->arena_bytes = top;
      uint64_t live = 0;
      for (int d = 0; d < s->ndevices; d++)
        for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS; k++) live += dc_mem_series_at(s, i, d, (dc_mem_kind)k);
      if (live > ph->live_peak_bytes) ph->live_peak_bytes = live;
    }
    uint64_t times = !m->phases[p].loop ? 1 : (uint64_t)(r->ctx.steps_per_image > 0 ? r->ctx.steps_per_image : 0);
    r->image_uploaded_bytes += ph->uploaded_bytes * times;
    r->image_transferred_bytes += ph->transferred_bytes * times;
  }
}

static void io_bytes(dc_mem_report *r) {
  for (int i = 0; i < r->m->ninputs; i++) r->input_bytes += dc_type_bytes(&r->m->nodes[r->m->inputs[i].node].type);
  for (int i = 0; i < r->m->noutputs; i++) r->output_bytes += dc_type_bytes(&r->m->nodes[r->m->outputs[i].node].type);
}

static dc_status *build(dc_mem_report *r, const dc_liveness *l, const dc_mem_series *s) {
  r->ndevices = s->ndevices;
  for (int d = 0; d < r->ndevices; d++) {
    DC_TRY(device_peak(r, l, s, d));
    if (r->dev[d].peak_bytes > r->dev[r->peak_device].peak_bytes) r->peak_device = d;
  }
  DC_TRY(weights(r));
  if (r->ctx.bounce_bytes > r->largest_offloaded_bytes) /* the runtime's cap: no chunk beyond the largest weight */
    r->ctx.bounce_bytes = r->largest_offloaded_bytes;
  host_side(r);
  for (int32_t i = 0; i < r->m->nnodes; i++) {
    r->uploads += r->m->nodes[i].op == OP_UPLOAD;
    r->transfers += r->m->nodes[i].op == OP_TRANSFER;
  }
  copies(r, 0, r->m->nnodes, &r->uploaded_bytes, &r->transferred_bytes);
  phases(r, s);
  io_bytes(r);
  return NULL;
}

dc_status *dc_mem_report_build(const dc_module *m, const dc_liveness *l, const dc_mem_series *s,
                               const dc_mem_report_context *ctx, dc_mem_report *out) {
  memset(out, 0, sizeof *out);
  if (!l->planned)
    return dc_error(DC_ERR_ARGUMENT, "memory report: the module's memory is not planned (pass memplan has not run)");
  out->m = m;
  if (ctx) out->ctx = *ctx;
  if (!(out->arena = dc_arena_create())) return dc_nomem("building the memory report");
  dc_status *st = build(out, l, s);
  if (st) dc_mem_report_deinit(out);
  return st;
}

dc_status *dc_mem_report_render(const dc_module *m, const dc_mem_report_context *ctx, int json, dc_buf *out) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_mem_series s;
  dc_mem_report r;
  dc_status *st = dc_mem_series_compute(m, &l, &s);
  if (!st) st = dc_mem_report_build(m, &l, &s, ctx, &r);
  if (!st) {
    st = json ? dc_mem_report_json(&r, out) : dc_mem_report_text(&r, out);
    dc_mem_report_deinit(&r);
  }
  if (s.bytes) dc_mem_series_deinit(&s);
  dc_liveness_deinit(&l);
  return st;
}
