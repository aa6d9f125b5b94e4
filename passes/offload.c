/* offload.c — pass "offload": weights that live in host memory and are
 * copied into the device arena before use (diffc --offload).
 *
 * Requires: a verified module after dce (every weight is read); no memory
 *   plan yet (memplan runs after and places the uploads like any value).
 * Guarantees: each offloaded weight is read by exactly one OP_UPLOAD node
 *   and every former reader reads the upload instead; the upload of a group
 *   sits right before the group's first use, or, with --prefetch=D, right
 *   before the first use of the group D places earlier in use order, so
 *   its copy overlaps the compute in between (the runtime issues uploads on
 *   the copy stream; a copy waits for the compute before it in the
 *   schedule, a kernel waits only for the uploads it reads).  An upload is
 *   freed after its last reader (hold=1 for --offload model: kept to the end).
 *   Module metadata "offload" says what was done, and "host_memory" where
 *   offloaded weights wait between uploads (pinned | on-demand; --host-memory,
 *   DEFAULT = pinned here: the driver resolves it to on-demand for
 *   --offload-dir before the pipeline runs); the runtime reads it.
 * Invalidates: node ids (inputs and outputs remapped here).
 *
 * Groups, following diffusers' ModelMixin / pipeline offloading hooks (the
 * whole flow: docs/ARCHITECTURE.md, "Offload, prefetch and placement"):
 *   model       one group, uploaded at the start and held for the run
 *               (enable_model_cpu_offload for one model);
 *   sequential  one group per module that owns weights, uploaded right
 *               before use (enable_sequential_cpu_offload);
 *   group leaf  the same groups, prefetch allowed (enable_group_offload
 *               leaf_level; diffusers buckets norm weights with their owner
 *               — here each module is its own group, which needs no more);
 *   group block N consecutive entries of each block list (a path component
 *               followed by an index: down_blocks.3, up_blocks.0, ...; or
 *               inside one of the class's block modules, the module's
 *               facts->block_modules as diffusers'
 *               _group_offload_block_modules); weights outside every list
 *               stay resident, as diffusers' "unmatched group" is for the
 *               whole forward.
 * Unlike diffusers, a group's weights are freed one by one after their last
 * reader, not together at the group's end: never more memory, often less.
 * A group that runs more than once (a tiled VAE's decoder, once per tile) is
 * uploaded again for each run, as diffusers' hooks onload it at each call;
 * its weights are not held between runs.  The "group" attribute numbers
 * these group runs in order of first use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

const char *dc_offload_name(dc_offload_kind k) {
  switch (k) {
    case DC_OFFLOAD_NONE: return "none";
    case DC_OFFLOAD_MODEL: return "model";
    case DC_OFFLOAD_SEQUENTIAL: return "sequential";
    case DC_OFFLOAD_GROUP: return "group";
  }
  return "?";
}

const char *dc_group_level_name(dc_group_level g) {
  switch (g) {
    case DC_GROUP_NONE: return "none";
    case DC_GROUP_BLOCK: return "block";
    case DC_GROUP_LEAF: return "leaf";
  }
  return "?";
}

static const char *host_memory_name(dc_host_memory h) {
  return h == DC_HOST_ON_DEMAND ? "on-demand" : "pinned";
}

dc_status *dc_memory_options_check(const dc_memory_options *o) {
  if (o->offload == DC_OFFLOAD_GROUP && o->group_level == DC_GROUP_NONE)
    return dc_error(DC_ERR_ARGUMENT, "--offload group needs --group-level block|leaf");
  if (o->offload != DC_OFFLOAD_GROUP && o->group_level != DC_GROUP_NONE)
    return dc_error(DC_ERR_ARGUMENT, "--group-level %s needs --offload group (it is --offload %s)",
                    dc_group_level_name(o->group_level), dc_offload_name(o->offload));
  if (o->group_level == DC_GROUP_BLOCK && o->blocks_per_group < 1)
    return dc_error(DC_ERR_ARGUMENT, "--group-level block needs --blocks-per-group N (N >= 1)");
  if (o->group_level != DC_GROUP_BLOCK && o->blocks_per_group != 0)
    return dc_error(DC_ERR_ARGUMENT, "--blocks-per-group applies to --group-level block only");
  if (o->prefetch < 0) return dc_error(DC_ERR_ARGUMENT, "--prefetch depth must be >= 1");
  if (o->nskip_cast && o->storage == DT_F32)
    return dc_error(DC_ERR_ARGUMENT, "--skip-cast needs --storage-dtype (nothing is cast)");
  if (o->nskip_cast && o->storage_all)
    return dc_error(DC_ERR_ARGUMENT, "--skip-cast needs --storage-dtype: --compute-dtype %s alone stores every weight in "
                    "%s, as diffusers' pipe.to() does, and skips nothing (give --storage-dtype for layerwise casting "
                    "with skip patterns)", dc_dtype_name(o->storage), dc_dtype_name(o->storage));
  if (o->host_memory != DC_HOST_DEFAULT && o->offload == DC_OFFLOAD_NONE && o->device_map == DC_MAP_NONE)
    return dc_error(DC_ERR_ARGUMENT,
                    "--host-memory %s needs --offload model|sequential|group (nothing is offloaded, so no weight waits "
                    "in host memory)",
                    host_memory_name(o->host_memory));
  if (o->prefetch > 0 && o->offload != DC_OFFLOAD_GROUP)
    return dc_error(DC_ERR_ARGUMENT, "--prefetch needs --offload group (%s)",
                    o->offload == DC_OFFLOAD_NONE ? "nothing is offloaded"
                    : o->offload == DC_OFFLOAD_SEQUENTIAL
                        ? "sequential offload is synchronous by definition; --offload group --group-level leaf --prefetch "
                          "is its overlapped form"
                        : "the whole model is uploaded at the start");
  return NULL;
}

/* ---- grouping --------------------------------------------------------- */

static int is_index(const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

/* Length of the path component at s (up to '.' or the end). */
static size_t component(const char *s) { return strcspn(s, "."); }

/* The block group of a weight: "down_blocks:0" for the first chunk of
 * down_blocks, with a prefix when the block list sits inside one of the
 * class's block modules (facts->block_modules: "encoder.down_blocks:0").  0
 * when the weight is in no block list (it stays resident). */
static int block_key(const dc_model_facts *facts, const char *name, int per_group, char *key, size_t cap) {
  const char *p = name;
  size_t prefix = 0;
  for (const char *const *b = facts ? facts->block_modules : NULL; b && *b; b++) {
    size_t n = strlen(*b);
    if (strncmp(p, *b, n) == 0 && p[n] == '.') prefix = n + 1;
  }
  p += prefix;
  size_t list = component(p);
  if (!p[list]) return 0;
  const char *idx = p + list + 1;
  size_t ni = component(idx);
  if (!is_index(idx, ni) || !idx[ni] || ni > 9) return 0;
  long i = strtol(idx, NULL, 10);
  snprintf(key, cap, "%.*s:%ld", (int)(prefix + list), name, i / per_group);
  return 1;
}

/* A weight's group key into key; 0 when it stays resident. */
static int option_key(const dc_module *m, const dc_memory_options *o, const dc_node *w, char *key, size_t cap) {
  const char *name = m->weights[w->ref].name;
  switch (o->offload) {
    case DC_OFFLOAD_MODEL: /* one group per component of a pipeline (its path's first component) */
      if (m->nphases == 0) snprintf(key, cap, "model");
      else snprintf(key, cap, "model:%.*s", (int)component(name), name);
      return 1;
    case DC_OFFLOAD_SEQUENTIAL: snprintf(key, cap, "%s", w->scope ? w->scope : name); return 1;
    case DC_OFFLOAD_GROUP:
      if (o->group_level == DC_GROUP_LEAF) {
        snprintf(key, cap, "%s", w->scope ? w->scope : name);
        return 1;
      }
      return block_key(m->facts, name, o->blocks_per_group, key, cap);
    default: return 0;
  }
}

/* A weight's group key into key; 0 when it stays resident.  A weight that
 * --device-map put on the cpu or disk is offloaded whatever --offload says:
 * by the option's grouping when it has one, else module by module, as
 * accelerate's hooks onload each offloaded leaf module before it runs. */
static int group_key(const dc_module *m, const dc_memory_options *o, const dc_node *w, char *key, size_t cap) {
  if (option_key(m, o, w, key, cap)) return 1;
  if (m->weights[w->ref].place == DC_PLACE_DEVICE) return 0;
  snprintf(key, cap, "%s", w->scope ? w->scope : m->weights[w->ref].name);
  return 1;
}

static int placed_off_device(const dc_module *m) {
  for (int32_t w = 0; w < m->nweights; w++)
    if (m->weights[w].place != DC_PLACE_DEVICE) return 1;
  return 0;
}

/* A group is a key (group_key); a group instance is one invocation of it,
 * which begins with a read of the group's lead (the weight it reads first)
 * and takes every read of its weights until the lead is read again.  A
 * module that runs more than once (the decoder of every tile of a tiled
 * VAE) uploads its weights again each time, as diffusers' hooks onload a
 * module at every call, instead of holding them across every invocation;
 * a weight one invocation reads twice (CogVideoX's norm, shared by the
 * text and the video stream) is uploaded once for it, as the hooks do.
 * An invocation also ends where the phase changes: a loop's phases run
 * as separate graphs, so an upload never serves another phase. */
typedef struct {
  int32_t *group_of;   /* per node: the group key of an offloaded weight, else -1 */
  int32_t *slot_pair;  /* per (node, input slot): the upload pair it reads, else -1 */
  int32_t *pair_w, *pair_inst, npairs; /* an upload: (weight node, group instance), first-use order */
  int32_t *inst_key, *inst_occ, ninst; /* group instance: key and occurrence */
  int32_t *first_use;  /* per instance: the first node that reads one of its weights */
  int32_t *rank;       /* per instance: position in order of first use */
  int32_t *anchor;     /* per instance: the node its uploads go right before */
  int32_t *phase;      /* per instance: the phase its uploads belong to */
  int32_t ngroups;     /* keys */
} grouping;

#define SLOT(i, k) ((size_t)(i) * DC_MAX_INPUTS + (size_t)(k))

static void grouping_free(grouping *g) {
  dc_free(g->group_of), dc_free(g->slot_pair), dc_free(g->pair_w), dc_free(g->pair_inst);
  dc_free(g->inst_key), dc_free(g->inst_occ), dc_free(g->first_use), dc_free(g->rank), dc_free(g->anchor);
  dc_free(g->phase);
}

static int has_reader(const dc_module *m, int32_t id) {
  for (int32_t i = id + 1; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++)
      if (m->nodes[i].inputs[k] == id) return 1;
  return 0;
}

/* Assigns group keys to weights, in order of first appearance. */
static dc_status *assign_groups(const dc_module *m, const dc_memory_options *o, grouping *g) {
  char **keys = dc_calloc((size_t)m->nnodes + 1, sizeof *keys);
  g->group_of = dc_calloc((size_t)m->nnodes + 1, sizeof *g->group_of);
  dc_status *st = keys && g->group_of ? NULL : dc_nomem("grouping weights for offload");
  for (int32_t i = 0; i < m->nnodes && !st; i++) {
    g->group_of[i] = -1;
    char key[512];
    if (m->nodes[i].op != OP_WEIGHT || !group_key(m, o, &m->nodes[i], key, sizeof key)) continue;
    if (!has_reader(m, i)) continue; /* dce dropped unread weights; be safe */
    int32_t k = 0;
    while (k < g->ngroups && strcmp(keys[k], key) != 0) k++;
    if (k == g->ngroups) {
      if (!(keys[k] = dc_strdup(key))) st = dc_nomem("grouping weights for offload");
      g->ngroups++;
    }
    g->group_of[i] = k;
  }
  for (int32_t i = 0; keys && i < g->ngroups; i++) dc_free(keys[i]);
  dc_free(keys);
  return st;
}

static int32_t find_or_add(int32_t *a, int32_t *b, int32_t *n, int32_t x, int32_t y) {
  for (int32_t i = *n - 1; i >= 0; i--)
    if (a[i] == x && b[i] == y) return i;
  a[*n] = x, b[*n] = y;
  return (*n)++;
}

/* Each read of an offloaded weight: its group instance and upload pair.
 * Model offload has one instance (everything uploaded once, held). */
static dc_status *assign_instances(const dc_module *m, int model, grouping *g) {
  size_t nslots = (size_t)m->nnodes * DC_MAX_INPUTS + 1;
  /* per key: its lead weight and the current invocation (-1: none yet) */
  int32_t *lead = dc_malloc(((size_t)g->ngroups + 1) * sizeof *lead);
  int32_t *occ = dc_malloc(((size_t)g->ngroups + 1) * sizeof *occ);
  int32_t *at_phase = dc_malloc(((size_t)g->ngroups + 1) * sizeof *at_phase); /* the current invocation's */
  g->slot_pair = dc_malloc(nslots * sizeof *g->slot_pair);
  g->pair_w = dc_calloc(nslots, sizeof *g->pair_w), g->pair_inst = dc_calloc(nslots, sizeof *g->pair_inst);
  g->inst_key = dc_calloc(nslots, sizeof *g->inst_key), g->inst_occ = dc_calloc(nslots, sizeof *g->inst_occ);
  g->first_use = dc_calloc(nslots, sizeof *g->first_use);
  if (!lead || !occ || !at_phase || !g->slot_pair || !g->pair_w || !g->pair_inst || !g->inst_key || !g->inst_occ ||
      !g->first_use) {
    dc_free(lead), dc_free(occ), dc_free(at_phase);
    return dc_nomem("grouping weights for offload");
  }
  for (int32_t k = 0; k < g->ngroups; k++) lead[k] = -1, occ[k] = -1, at_phase[k] = -1;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    for (int k = 0; k < DC_MAX_INPUTS; k++) g->slot_pair[SLOT(i, k)] = -1;
    for (int k = 0; k < n->ninputs; k++) {
      int32_t w = n->inputs[k], key = g->group_of[w];
      if (key < 0) continue;
      int same = 0; /* a node reading a weight twice reads one upload */
      for (int j = 0; j < k; j++) same |= n->inputs[j] == w;
      if (lead[key] < 0) lead[key] = w;
      /* an invocation never spans phases: a CFG half's own copy of a table
       * (constants become weights per half on cuda) is read in its phase */
      int new_phase = occ[key] >= 0 && n->phase != at_phase[key];
      if (!same && (w == lead[key] || new_phase)) occ[key]++, at_phase[key] = n->phase;
      int32_t before = g->ninst, inst = find_or_add(g->inst_key, g->inst_occ, &g->ninst, key, model ? 0 : occ[key]);
      if (inst == before) g->first_use[inst] = i;
      g->slot_pair[SLOT(i, k)] = find_or_add(g->pair_w, g->pair_inst, &g->npairs, w, inst);
    }
  }
  dc_free(lead), dc_free(occ), dc_free(at_phase);
  return NULL;
}

static const grouping *sort_ctx;
static int by_first_use(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  int32_t fx = sort_ctx->first_use[x], fy = sort_ctx->first_use[y];
  return fx != fy ? (fx > fy) - (fx < fy) : (x > y) - (x < y);
}

/* The anchor of a prefetched instance, kept inside the phase of its first
 * use: an upload issued in another phase would be lost when that phase is
 * skipped or repeated (a static schedule cannot prefetch across a loop's
 * iterations). */
static int32_t anchor_in_phase(const dc_module *m, const int32_t *phase_first, int32_t anchor, int32_t use) {
  int32_t p = m->nodes[use].phase;
  return m->nodes[anchor].phase == p ? anchor : phase_first[p];
}

/* --offload model: a component held for a loop is uploaded once, before
 * it, in the phase before the loop (the prologue), not in the loop's first
 * phase: the other phases of the loop read it too, and that first phase
 * may be skipped. */
static void held_before_loop(const dc_module *m, const int32_t *phase_first, int32_t *anchor, int32_t *phase) {
  int32_t p = m->nodes[*anchor].phase;
  if (m->nphases == 0 || !m->phases[p].loop) return;
  while (p > 0 && m->phases[p - 1].loop) p--;
  if (p == 0) return; /* no phase before the loop: the verifier will say so */
  *anchor = phase_first[p];
  *phase = p - 1;
}

/* rank and anchor of every group instance. */
static dc_status *order_groups(const dc_module *m, const dc_memory_options *o, grouping *g) {
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  g->phase = dc_calloc((size_t)g->ninst + 1, sizeof *g->phase);
  if (!g->phase) return dc_nomem("ordering offload groups");
  int32_t *order = dc_calloc((size_t)g->ninst + 1, sizeof *order);
  g->rank = dc_calloc((size_t)g->ninst + 1, sizeof *g->rank);
  g->anchor = dc_calloc((size_t)g->ninst + 1, sizeof *g->anchor);
  if (!order || !g->rank || !g->anchor) {
    dc_free(order);
    return dc_nomem("ordering offload groups");
  }
  for (int32_t k = 0; k < g->ninst; k++) order[k] = k;
  sort_ctx = g;
  qsort(order, (size_t)g->ninst, sizeof *order, by_first_use);
  for (int32_t r = 0; r < g->ninst; r++) {
    g->rank[order[r]] = r;
    int32_t ahead = r - o->prefetch < 0 ? 0 : r - o->prefetch;
    g->anchor[order[r]] = anchor_in_phase(m, first, g->first_use[order[ahead]], g->first_use[order[r]]);
    g->phase[order[r]] = m->nodes[g->anchor[order[r]]].phase;
    if (o->offload == DC_OFFLOAD_MODEL) held_before_loop(m, first, &g->anchor[order[r]], &g->phase[order[r]]);
  }
  dc_free(order);
  return NULL;
}

/* ---- rewriting -------------------------------------------------------- */

static dc_status *add(dc_module *m, const dc_node *n, int32_t *id) {
  *id = dc_module_add_node(m, n);
  return *id < 0 ? dc_nomem("inserting uploads") : NULL;
}

/* The uploads anchored at node `at` (and their weight nodes, moved here
 * the first time one is uploaded). */
static dc_status *emit_uploads_before(dc_module *m, const dc_node *old, const grouping *g, int hold, int32_t at,
                                      int32_t *map, int32_t *upload_of_pair) {
  for (int32_t p = 0; p < g->npairs; p++) {
    int32_t w = g->pair_w[p], inst = g->pair_inst[p];
    if (g->anchor[inst] != at) continue;
    if (map[w] < 0) { /* the weight leaf joins its first upload's phase */
      dc_node wn = old[w];
      wn.phase = g->phase[inst];
      DC_TRY(add(m, &wn, &map[w]));
    }
    dc_node u = dc_node_make(OP_UPLOAD, 1, &map[w]);
    u.phase = g->phase[inst];
    u.type = old[w].type;
    u.layout = old[w].layout;
    u.device = old[w].device;
    u.scope = old[w].scope;
    dc_node_set_int(&u, "group", g->rank[inst]);
    dc_node_set_int(&u, "hold", hold);
    DC_TRY(add(m, &u, &upload_of_pair[p]));
  }
  return NULL;
}

static dc_status *rewrite(dc_module *m, const grouping *g, int hold) {
  int32_t n = m->nnodes;
  dc_node *old = dc_malloc(sizeof *old * (size_t)n);
  int32_t *map = dc_calloc((size_t)n + 1, sizeof *map), *upload = dc_calloc((size_t)g->npairs + 1, sizeof *upload);
  if (!old || !map || !upload) {
    dc_free(old), dc_free(map), dc_free(upload);
    return dc_nomem("inserting uploads");
  }
  memcpy(old, m->nodes, sizeof *old * (size_t)n);
  for (int32_t i = 0; i < n; i++) map[i] = -1;
  m->nnodes = 0;
  dc_status *st = NULL;
  for (int32_t i = 0; i < n && !st; i++) {
    st = emit_uploads_before(m, old, g, hold, i, map, upload);
    if (g->group_of[i] >= 0) continue; /* an offloaded weight: emitted with its first upload */
    dc_node node = old[i];
    for (int k = 0; k < node.ninputs; k++) {
      int32_t p = g->slot_pair[SLOT(i, k)];
      node.inputs[k] = p >= 0 ? upload[p] : map[node.inputs[k]];
    }
    if (!st) st = add(m, &node, &map[i]);
  }
  if (!st) {
    for (int i = 0; i < m->ninputs; i++) m->inputs[i].node = map[m->inputs[i].node];
    for (int i = 0; i < m->noutputs; i++) m->outputs[i].node = map[m->outputs[i].node];
  }
  dc_free(old), dc_free(map), dc_free(upload);
  return st;
}

static dc_status *describe(dc_module *m, const dc_memory_options *o, int32_t ngroups) {
  char what[160];
  int uploads = 0;
  for (int32_t i = 0; i < m->nnodes; i++) uploads += m->nodes[i].op == OP_UPLOAD;
  if (o->offload == DC_OFFLOAD_GROUP && o->group_level == DC_GROUP_BLOCK)
    snprintf(what, sizeof what, "group, block level, %d block(s) per group, prefetch %d: %d groups, %d uploads",
             o->blocks_per_group, o->prefetch, (int)ngroups, uploads);
  else if (o->offload == DC_OFFLOAD_GROUP)
    snprintf(what, sizeof what, "group, leaf level, prefetch %d: %d groups, %d uploads", o->prefetch, (int)ngroups,
             uploads);
  else if (o->offload == DC_OFFLOAD_NONE)
    snprintf(what, sizeof what, "the modules --device-map put on cpu/disk, leaf by leaf: %d groups, %d uploads",
             (int)ngroups, uploads);
  else
    snprintf(what, sizeof what, "%s: %d groups, %d uploads", dc_offload_name(o->offload), (int)ngroups, uploads);
  DC_TRY(dc_module_set_meta(m, "offload", what));
  return uploads ? dc_module_set_meta(m, "host_memory", host_memory_name(o->host_memory)) : NULL;
}

dc_status *dc_pass_offload(dc_module *m, const dc_memory_options *o) {
  if (!o || (o->offload == DC_OFFLOAD_NONE && !placed_off_device(m))) return NULL;
  DC_TRY(dc_memory_options_check(o));
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_UPLOAD) return dc_error(DC_ERR_INTERNAL, "the module is offloaded already");
  grouping g = {0};
  dc_status *st = assign_groups(m, o, &g);
  if (!st && g.ngroups == 0)
    st = dc_error(DC_ERR_UNSUPPORTED,
                  "--offload group --group-level block: this %s has no block lists (a module list such as "
                  "down_blocks.N) to group; use --group-level leaf",
                  dc_module_get_meta(m, "class") ? dc_module_get_meta(m, "class") : "model");
  if (!st) st = assign_instances(m, o->offload == DC_OFFLOAD_MODEL, &g);
  if (!st) st = order_groups(m, o, &g);
  if (!st) st = rewrite(m, &g, o->offload == DC_OFFLOAD_MODEL);
  if (!st) st = describe(m, o, g.ninst);
  grouping_free(&g);
  return st;
}
