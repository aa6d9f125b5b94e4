/* place.c — pass "place" (diffc --device-map, --max-memory): modules placed
 * across GPUs, cpu and disk, as accelerate's device_map does, but decided
 * once at compile time.
 * Requires: a verified module after dce (only live weights count), before
 *   offload (which uploads the weights placed on cpu/disk) and memplan
 *   (which plans one arena per device).
 * Guarantees: every node carries its device: the device of the unit its
 *   module belongs to (units: block-list entries such as down_blocks.1 and
 *   the other top-level modules, in the order they first run), or of the
 *   longest module path of a map file that contains it; graph inputs are on
 *   device 0, where the caller hands them over.  A value read on another
 *   device is read through one OP_TRANSFER per (value, device), placed
 *   right before its first reader there.  Units placed on cpu or disk run
 *   on device 0 with their weights marked (dc_weight.place) for the offload
 *   pass, as accelerate runs an offloaded module on the main device.
 *   Module meta "device_map" says which unit went where.
 * Strategies (budgets from --max-memory; each GPU's first keeps room for
 * the activations, as much as the whole model has live at its peak, which
 * bounds what any part of it needs; dc_place_check_budgets then checks the
 * planned weights + arena of every device exactly):
 *   sequential  fill GPU 0, then 1, ..., then cpu, then disk, in run order;
 *   balanced    the same, but each GPU but the last stops at an even share
 *               of the weights (the unit that crosses the share goes to the
 *               side it straddles least), so the GPUs hold about the same
 *               (accelerate's get_balanced_memory allows a whole extra
 *               largest layer on each, which leaves them uneven);
 *   auto        = balanced, as in accelerate. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
  char *name;
  uint64_t weight_bytes;
  int device; /* >= 0 a GPU, DC_ON_CPU, DC_ON_DISK */
} unit;

typedef struct {
  dc_module *m;
  const dc_memory_options *o;
  char **containers; /* module paths that hold a block list somewhere below */
  int ncontainers;
  unit *units;
  int nunits;
  int32_t *unit_of;  /* per node, -1 without a scope */
} placer;

static int is_index(const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

static int is_container(const placer *p, const char *s, size_t n) {
  for (int i = 0; i < p->ncontainers; i++)
    if (strlen(p->containers[i]) == n && !strncmp(p->containers[i], s, n)) return 1;
  return 0;
}

/* Every prefix that ends before a "list.N" pair of a scope holds a list. */
static dc_status *find_containers(placer *p) {
  for (int32_t i = 0; i < p->m->nnodes; i++) {
    const char *s = p->m->nodes[i].scope;
    if (!s) continue;
    size_t prev_end = 0, at = 0; /* end of the component before the current one */
    while (s[at]) {
      size_t n = strcspn(s + at, ".");
      if (is_index(s + at, n) && prev_end > 0) {
        size_t list_start = prev_end; /* "a.b.list" + ".N": containers end before "list" */
        while (list_start > 0 && s[list_start - 1] != '.') list_start--;
        if (list_start > 0 && !is_container(p, s, list_start - 1)) {
          char *c = dc_strndup(s, list_start - 1);
          char **grown = dc_realloc(p->containers, sizeof *grown * (size_t)(p->ncontainers + 1));
          if (!c || !grown) {
            dc_free(c);
            if (grown) p->containers = grown;
            return dc_nomem("placing modules");
          }
          p->containers = grown;
          p->containers[p->ncontainers++] = c;
        }
      }
      prev_end = at + n;
      at += n + (s[at + n] == '.');
    }
  }
  return NULL;
}

/* Length of the unit path of a scope: the first prefix that holds no list
 * of its own — a list entry such as down_blocks.1.resnets.0 (a block entry
 * that holds lists itself, down_blocks.1, is entered), or a module outside
 * any list such as conv_in.  Units are what accelerate keeps whole (its
 * no-split modules: ResnetBlock2D, the transformer blocks). */
static size_t unit_len(const placer *p, const char *s) {
  size_t at = 0;
  while (s[at]) {
    size_t n = strcspn(s + at, "."), end = at + n;
    if (!s[end]) return end;
    size_t next = strcspn(s + end + 1, ".");
    if (is_index(s + end + 1, next)) {
      size_t through = end + 1 + next;
      if (!s[through] || !is_container(p, s, through)) return through;
      at = through + 1; /* an entry holding lists: place its parts */
      continue;
    }
    if (!is_container(p, s, end)) return end;
    at = end + 1;
  }
  return at;
}

static dc_status *assign_units(placer *p) {
  dc_module *m = p->m;
  p->unit_of = dc_calloc((size_t)m->nnodes + 1, sizeof *p->unit_of);
  p->units = dc_calloc((size_t)m->nnodes + 1, sizeof *p->units);
  if (!p->unit_of || !p->units) return dc_nomem("placing modules");
  for (int32_t i = 0; i < m->nnodes; i++) {
    p->unit_of[i] = -1;
    const char *s = m->nodes[i].scope;
    if (!s || m->nodes[i].op == OP_INPUT) continue;
    size_t n = unit_len(p, s);
    int u = 0;
    while (u < p->nunits && !(strlen(p->units[u].name) == n && !strncmp(p->units[u].name, s, n))) u++;
    if (u == p->nunits) {
      if (!(p->units[u].name = dc_strndup(s, n))) return dc_nomem("placing modules");
      p->nunits++;
    }
    p->unit_of[i] = u;
    if (m->nodes[i].op == OP_WEIGHT) p->units[u].weight_bytes += m->weights[m->nodes[i].ref].bytes;
  }
  return NULL;
}

/* ---- strategies ------------------------------------------------------- */

static uint64_t total_weights(const placer *p) {
  uint64_t t = 0;
  for (int u = 0; u < p->nunits; u++) t += p->units[u].weight_bytes;
  return t;
}

/* share: 0 for sequential; for balanced, the even share of the weights a
 * GPU but the last stops at: it moves on when the next unit would take it
 * further past the share than stopping short leaves it. */
static dc_status *fill(placer *p, const uint64_t *gpu_budget, uint64_t reserve, uint64_t share) {
  const dc_max_memory *mm = &p->o->max_memory;
  int d = 0; /* GPUs first, then cpu (ngpus), then disk (ngpus + 1) */
  uint64_t used = 0;
  for (int u = 0; u < p->nunits; u++) {
    uint64_t b = p->units[u].weight_bytes;
    for (;;) {
      uint64_t cap = d < mm->ngpus ? gpu_budget[d] : d == mm->ngpus ? (mm->has_cpu ? mm->cpu : 0)
                                                   : (mm->has_disk ? mm->disk : 0);
      if (d > mm->ngpus + 1) {
        char b1[32], b2[32], b3[32];
        return dc_error(DC_ERR_ARGUMENT,
                        "--max-memory: module %s (%s of weights) fits on no device after those before it (the model's "
                        "weights are %s, and each GPU keeps %s for activations); raise a budget or add cpu=SIZE or "
                        "disk=SIZE",
                        p->units[u].name, dc_format_bytes(b, b1, sizeof b1), dc_format_bytes(total_weights(p), b2, sizeof b2),
                        dc_format_bytes(reserve, b3, sizeof b3));
      }
      int past_share = share && d + 1 < mm->ngpus && used > 0 && used + b / 2 > share;
      if (used + b <= cap && !past_share) break;
      d++, used = 0;
    }
    used += b;
    p->units[u].device = d < mm->ngpus ? d : d == mm->ngpus ? DC_ON_CPU : DC_ON_DISK;
  }
  return NULL;
}

static dc_status *place_by_strategy(placer *p) {
  const dc_max_memory *mm = &p->o->max_memory;
  if (mm->ngpus == 0)
    return dc_error(DC_ERR_ARGUMENT,
                    "--device-map %s needs --max-memory with each GPU's budget, e.g. --max-memory 0=20GiB,1=20GiB (diffc "
                    "compiles ahead of time and cannot ask the GPUs)",
                    p->o->device_map == DC_MAP_SEQUENTIAL ? "sequential" : p->o->device_map == DC_MAP_AUTO ? "auto" : "balanced");
  dc_liveness l;
  DC_TRY(dc_liveness_compute(p->m, &l));
  uint64_t reserve = l.peak_bytes; /* unplanned: the most bytes live at once */
  dc_liveness_deinit(&l);
  uint64_t budget[DC_MAX_DEVICES];
  for (int d = 0; d < mm->ngpus; d++) budget[d] = mm->gpu[d] > reserve ? mm->gpu[d] - reserve : 0;
  uint64_t share = 0;
  if (p->o->device_map != DC_MAP_SEQUENTIAL) share = (total_weights(p) + (uint64_t)mm->ngpus - 1) / (uint64_t)mm->ngpus;
  return fill(p, budget, reserve, share);
}

/* ---- a map file: the longest module path containing each node ---------- */

static int path_contains(const char *module, const char *scope) {
  size_t n = strlen(module);
  return n == 0 || (!strncmp(module, scope, n) && (scope[n] == '.' || scope[n] == 0));
}

static dc_status *place_by_file(placer *p, int *device_of_node) {
  const dc_memory_options *o = p->o;
  const char *file = o->device_map_file ? o->device_map_file : "the device map";
  for (int e = 0; e < o->nmap; e++) {
    int used = 0;
    for (int32_t i = 0; i < p->m->nnodes && !used; i++)
      used = p->m->nodes[i].scope && path_contains(o->map[e].module, p->m->nodes[i].scope);
    if (!used) {
      char names[400] = "";
      for (int u = 0; u < p->nunits && strlen(names) < 300; u++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", u ? ", " : "", p->units[u].name);
      return dc_error(DC_ERR_ARGUMENT, "%s: module \"%s\" does not exist in this %s (its modules: %s%s)", file,
                      o->map[e].module, dc_module_get_meta(p->m, "class") ? dc_module_get_meta(p->m, "class") : "model",
                      names, strlen(names) >= 300 ? ", ..." : "");
    }
    if (o->map[e].device >= DC_MAX_DEVICES || (o->max_memory.ngpus && o->map[e].device >= o->max_memory.ngpus))
      return dc_error(DC_ERR_ARGUMENT, "%s: module \"%s\" on device %d, but %s", file, o->map[e].module, o->map[e].device,
                      o->max_memory.ngpus ? "--max-memory names fewer GPUs" : "diffc places on at most 8 devices");
  }
  for (int32_t i = 0; i < p->m->nnodes; i++) {
    const char *s = p->m->nodes[i].scope;
    device_of_node[i] = 0;
    if (!s || p->m->nodes[i].op == OP_INPUT) continue;
    int best = -1;
    for (int e = 0; e < o->nmap; e++)
      if (path_contains(o->map[e].module, s) && (best < 0 || strlen(o->map[e].module) > strlen(o->map[best].module)))
        best = e;
    if (best < 0)
      return dc_error(DC_ERR_ARGUMENT, "%s: module \"%s\" has no device (map it, or a module containing it)", file, s);
    device_of_node[i] = o->map[best].device;
  }
  return NULL;
}

/* ---- rewriting: devices and transfers ------------------------------------ */

/* Where each node runs: its unit's (or map entry's) device; off-device
 * placements run on device 0 and mark their weights. */
static void settle_devices(placer *p, int *where) {
  dc_module *m = p->m;
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_node *n = &m->nodes[i];
    int d = where[i];
    if (n->op == OP_INPUT) d = 0;
    else if (!n->scope) d = n->ninputs ? m->nodes[n->inputs[0]].device : 0; /* follows its data */
    if (n->op == OP_WEIGHT && d < 0) m->weights[n->ref].place = d == DC_ON_CPU ? DC_PLACE_CPU : DC_PLACE_DISK;
    n->device = d < 0 ? 0 : d;
  }
  /* A weight lives where its first reader runs (where[] is free now). */
  for (int32_t i = 0; i < m->nnodes; i++) where[i] = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) {
      int32_t w = m->nodes[i].inputs[k];
      if (m->nodes[w].op == OP_WEIGHT && !where[w]) m->nodes[w].device = m->nodes[i].device, where[w] = 1;
    }
}

static dc_status *insert_transfers(dc_module *m, int *ntransfers) {
  int32_t n = m->nnodes;
  dc_node *old = dc_malloc(sizeof *old * (size_t)(n + 1));
  int32_t *map = dc_calloc((size_t)n + 1, sizeof *map);
  int32_t *copy = dc_calloc((size_t)n * DC_MAX_DEVICES + 1, sizeof *copy); /* (value, device) -> transfer */
  if (!old || !map || !copy) {
    dc_free(old), dc_free(map), dc_free(copy);
    return dc_nomem("placing modules");
  }
  memcpy(old, m->nodes, sizeof *old * (size_t)n);
  for (int32_t i = 0; i < n * DC_MAX_DEVICES; i++) copy[i] = -1;
  m->nnodes = 0;
  dc_status *st = NULL;
  for (int32_t i = 0; i < n && !st; i++) {
    dc_node node = old[i];
    for (int k = 0; k < node.ninputs && !st; k++) {
      int32_t v = node.inputs[k];
      if (old[v].device == node.device) {
        node.inputs[k] = map[v];
        continue;
      }
      int32_t *c = &copy[(size_t)v * DC_MAX_DEVICES + (size_t)node.device];
      if (*c < 0 || m->nodes[*c].phase != node.phase) { /* one copy per value, device and phase */
        dc_node t = dc_node_make(OP_TRANSFER, 1, &map[v]);
        t.type = old[v].type;
        t.layout = old[v].layout;
        t.device = node.device;
        t.scope = node.scope;
        t.phase = node.phase; /* copied where it is read, in the reader's phase */
        *c = dc_module_add_node(m, &t);
        if (*c < 0) st = dc_nomem("placing modules");
        else (*ntransfers)++;
      }
      node.inputs[k] = *c;
    }
    if (!st && (map[i] = dc_module_add_node(m, &node)) < 0) st = dc_nomem("placing modules");
  }
  if (!st) {
    for (int i = 0; i < m->ninputs; i++) m->inputs[i].node = map[m->inputs[i].node];
    for (int i = 0; i < m->noutputs; i++) m->outputs[i].node = map[m->outputs[i].node];
  }
  dc_free(old), dc_free(map), dc_free(copy);
  return st;
}

static const char *device_name(int d, char *buf, size_t cap) {
  if (d == DC_ON_CPU) return "cpu";
  if (d == DC_ON_DISK) return "disk";
  snprintf(buf, cap, "%d", d);
  return buf;
}

/* "sequential: 0 = time_proj .. up_blocks.0.resnets.2 (40 units, 3.1 MiB);
 * 1 = ...; 15 transfers": each run of consecutive units on one device. */
static dc_status *describe(placer *p, const char *how, int ntransfers) {
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "%s:", how);
  char db[16], bb[32];
  for (int u = 0; u < p->nunits;) {
    int d = p->units[u].device, v = u;
    uint64_t bytes = 0;
    for (; v < p->nunits && p->units[v].device == d; v++) bytes += p->units[v].weight_bytes;
    dc_buf_printf(&b, "%s %s = %s", u ? ";" : "", device_name(d, db, sizeof db), p->units[u].name);
    if (v - u > 1) dc_buf_printf(&b, " .. %s (%d units, %s)", p->units[v - 1].name, v - u, dc_format_bytes(bytes, bb, sizeof bb));
    else dc_buf_printf(&b, " (%s)", dc_format_bytes(bytes, bb, sizeof bb));
    u = v;
  }
  dc_buf_printf(&b, ";");
  dc_buf_printf(&b, " %d transfers", ntransfers);
  dc_buf_u8(&b, 0);
  dc_status *st = dc_buf_status(&b, "describing the device map");
  if (!st) st = dc_module_set_meta(p->m, "device_map", (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

dc_status *dc_pass_place(dc_module *m, const dc_memory_options *o) {
  if (!o || o->device_map == DC_MAP_NONE) return NULL;
  placer p = {.m = m, .o = o};
  int *where = dc_calloc((size_t)m->nnodes + 1, sizeof *where);
  dc_status *st = where ? find_containers(&p) : dc_nomem("placing modules");
  if (!st) st = assign_units(&p);
  if (!st && o->device_map == DC_MAP_FILE) {
    st = place_by_file(&p, where);
    /* a unit's device, for the summary: its first node's */
    for (int u = 0; !st && u < p.nunits; u++) p.units[u].device = -100;
    for (int32_t i = 0; !st && i < m->nnodes; i++)
      if (p.unit_of[i] >= 0 && p.units[p.unit_of[i]].device == -100) p.units[p.unit_of[i]].device = where[i];
  } else if (!st) {
    st = place_by_strategy(&p);
    for (int32_t i = 0; !st && i < m->nnodes; i++) where[i] = p.unit_of[i] >= 0 ? p.units[p.unit_of[i]].device : 0;
  }
  int ntransfers = 0;
  if (!st) settle_devices(&p, where);
  if (!st) st = insert_transfers(m, &ntransfers);
  if (!st) {
    const char *how = o->device_map == DC_MAP_FILE ? (o->device_map_file ? o->device_map_file : "map")
                      : o->device_map == DC_MAP_SEQUENTIAL ? "sequential"
                      : o->device_map == DC_MAP_AUTO      ? "auto"
                                                          : "balanced";
    st = describe(&p, how, ntransfers);
  }
  for (int i = 0; i < p.ncontainers; i++) dc_free(p.containers[i]);
  for (int u = 0; p.units && u < p.nunits; u++) dc_free(p.units[u].name);
  dc_free(p.containers), dc_free(p.units), dc_free(p.unit_of), dc_free(where);
  return st;
}

/* ---- parsing and checking budgets -------------------------------------- */

dc_status *dc_parse_max_memory(const char *s, dc_max_memory *out) {
  memset(out, 0, sizeof *out);
  int seen[DC_MAX_DEVICES] = {0};
  const char *p = s;
  while (*p) {
    size_t n = strcspn(p, ",");
    char item[128];
    if (n == 0 || n >= sizeof item)
      return dc_error(DC_ERR_ARGUMENT, "--max-memory %s: expected DEVICE=SIZE entries separated by commas", s);
    memcpy(item, p, n);
    item[n] = 0;
    char *eq = strchr(item, '=');
    uint64_t bytes;
    if (!eq || dc_parse_bytes(eq + 1, &bytes) != 0)
      return dc_error(DC_ERR_ARGUMENT,
                      "--max-memory %s: \"%s\" is not DEVICE=SIZE (e.g. 0=4GiB; GiB/MiB are powers of 1024, GB/MB of "
                      "1000)", s, item);
    *eq = 0;
    if (!strcmp(item, "cpu")) out->has_cpu = 1, out->cpu = bytes;
    else if (!strcmp(item, "disk")) out->has_disk = 1, out->disk = bytes;
    else {
      char *end;
      long d = strtol(item, &end, 10);
      if (!*item || *end || d < 0 || d >= DC_MAX_DEVICES)
        return dc_error(DC_ERR_ARGUMENT, "--max-memory %s: device \"%s\": expected a GPU number 0..%d, cpu or disk", s,
                        item, DC_MAX_DEVICES - 1);
      if (seen[d]++) return dc_error(DC_ERR_ARGUMENT, "--max-memory %s: GPU %ld given twice", s, d);
      out->gpu[d] = bytes;
      if (d + 1 > out->ngpus) out->ngpus = (int)d + 1;
    }
    p += n + (p[n] == ',');
  }
  for (int d = 0; d < out->ngpus; d++)
    if (!seen[d]) return dc_error(DC_ERR_ARGUMENT, "--max-memory %s: GPU %d is missing (GPUs are numbered from 0)", s, d);
  return NULL;
}

dc_status *dc_place_check_budgets(const dc_module *m, const dc_memory_options *o) {
  if (!o || o->max_memory.ngpus == 0) return NULL;
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_status *st = NULL;
  for (int d = 0; d < l.ndevices && !st; d++) {
    uint64_t need = l.dev_weights[d] + l.dev_peak[d], cap = d < o->max_memory.ngpus ? o->max_memory.gpu[d] : 0;
    if (need <= cap) continue;
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    st = dc_error(DC_ERR_ARGUMENT,
                  "--max-memory: device %d needs %s (weights %s + activations %s) but its budget is %s: over by %s "
                  "(%" PRIu64 " bytes); raise it, add a GPU, or place less there",
                  d, dc_format_bytes(need, b1, sizeof b1), dc_format_bytes(l.dev_weights[d], b2, sizeof b2),
                  dc_format_bytes(l.dev_peak[d], b3, sizeof b3), dc_format_bytes(cap, b4, sizeof b4),
                  dc_format_bytes(need - cap, b5, sizeof b5), need - cap);
  }
  dc_liveness_deinit(&l);
  return st;
}
