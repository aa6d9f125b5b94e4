/* liveness.c — the activation memory model that the IR dump predicts, the
 * memory planner packs and the runtime measures: one definition, so the
 * three agree exactly.
 *
 * A non-leaf value is allocated just before its node runs and freed after
 * its last reader runs; a graph input is allocated before step 0; a graph
 * output lives to the end.  Weights are counted apart, as resident bytes.
 * In a planned module a value written in place over its parent takes the
 * parent's bytes over at its own step (see ir.h); dc_memplan_check proves
 * that no two values occupying memory at the same step overlap. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

int dc_node_is_output(const dc_module *m, int32_t id) {
  for (int i = 0; i < m->noutputs; i++)
    if (m->outputs[i].node == id) return 1;
  return 0;
}

/* An input is written before its phase runs: it lives from the phase's
 * first step (the whole run's, without phases). */
int32_t dc_value_first_step(const dc_module *m, int32_t id) {
  if (m->nodes[id].op != OP_INPUT) return id;
  int32_t j = id;
  while (j > 0 && m->nodes[j - 1].phase == m->nodes[id].phase) j--;
  return j;
}

/* conv2d and linear may write over their residual: every kernel of them,
 * reference and generated, reads residual[i] before anything writes out[i]
 * (runtime/kernels.h), which tests/test_memplan.c (reference) and
 * tests/test_llvm_alias.c (LLVM) check with out == residual.  0 turns it
 * off, e.g. for a backend whose kernels are not alias-safe. */
static const int inplace_over_residual = 1;

int dc_node_inplace_input(const dc_node *n) {
  int k = -1;
  if (dc_op_get(n->op)->flags & OPF_INPLACE) k = 0;
  else if (inplace_over_residual && (n->op == OP_CONV2D || n->op == OP_LINEAR) && dc_node_int(n, "residual"))
    k = dc_node_int(n, "bias") ? 3 : 2;
  return k < n->ninputs ? k : -1;
}

int32_t dc_inplace_parent(const dc_module *m, const dc_liveness *l, int32_t id) {
  const dc_node *n = &m->nodes[id];
  int k = dc_node_inplace_input(n);
  if (k < 0 || !dc_node_is_activation(n)) return -1;
  int32_t p = n->inputs[k];
  const dc_node *pn = &m->nodes[p];
  if (!dc_node_is_activation(pn) || pn->op == OP_INPUT || dc_node_is_output(m, p)) return -1;
  /* a loop's next iteration reads the value again: a value from before the
   * loop is never overwritten inside it, even by its last reader */
  if (m->nphases && pn->phase != n->phase && m->phases[n->phase].loop) return -1;
  if (l->last_use[p] != id || !dc_type_equal(&pn->type, &n->type)) return -1;
  int reads = 0; /* add(a, a) reads a twice: the second read would see the first write */
  for (int i = 0; i < n->ninputs; i++) reads += n->inputs[i] == p;
  return reads == 1 ? p : -1;
}

/* The last step a value occupies memory: its last use, or the step before
 * when its last reader took its bytes over in place. */
int dc_weight_offloaded(const dc_module *m, int32_t id) {
  int readers = 0;
  for (int32_t i = id + 1; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++)
      if (m->nodes[i].inputs[k] == id) {
        if (m->nodes[i].op != OP_UPLOAD) return 0;
        readers++;
      }
  return readers > 0;
}

/* Weights read by any kernel are resident on the device; weights read only
 * by uploads live in host memory.  inplace_of is borrowed as scratch:
 * 1 = a kernel reads it, 2 = only uploads so far (reset by find_inplace). */
static void weight_residency(const dc_module *m, dc_liveness *l) {
  int32_t *how = l->inplace_of;
  for (int32_t i = 0; i < m->nnodes; i++) how[i] = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) {
      int32_t p = m->nodes[i].inputs[k];
      if (m->nodes[p].op != OP_WEIGHT) continue;
      if (m->nodes[i].op != OP_UPLOAD) how[p] = 1;
      else if (how[p] == 0) how[p] = 2;
    }
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (m->nodes[i].op != OP_WEIGHT) continue;
    uint64_t b = m->weights[m->nodes[i].ref].bytes;
    if (how[i] == 2) l->host_weight_bytes += b;
    else l->weight_bytes += b, l->dev_weights[m->nodes[i].device] += b;
  }
}

static int32_t last_step(const dc_liveness *l, int32_t id) {
  int32_t c = l->last_use[id];
  return l->inplace_of[c] == id ? c - 1 : c;
}

static int is_planned(const dc_module *m) {
  int any = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (!dc_node_is_activation(&m->nodes[i])) continue;
    if (m->nodes[i].offset < 0) return 0;
    any = 1;
  }
  return any && m->arena_bytes > 0;
}

static void find_inplace(const dc_module *m, dc_liveness *l) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    l->inplace_of[i] = -1;
    if (!l->planned) continue;
    int32_t p = dc_inplace_parent(m, l, i);
    if (p >= 0 && m->nodes[p].offset == m->nodes[i].offset) {
      l->inplace_of[i] = p;
      l->ninplace++;
    }
  }
}

/* live_bytes per step through a difference array over the occupied steps. */
static dc_status *sum_live(const dc_module *m, dc_liveness *l) {
  int32_t n = m->nnodes;
  int64_t *delta = dc_calloc((size_t)n + 1, sizeof *delta);
  if (!delta) return dc_nomem("computing live ranges");
  for (int32_t i = 0; i < n; i++) {
    const dc_node *node = &m->nodes[i];
    if (!dc_node_is_activation(node)) continue;
    delta[dc_value_first_step(m, i)] += (int64_t)dc_type_bytes(&node->type);
    delta[last_step(l, i) + 1] -= (int64_t)dc_type_bytes(&node->type);
  }
  int64_t live = 0;
  for (int32_t s = 0; s < n; s++) {
    live += delta[s];
    l->live_bytes[s] = (uint64_t)live;
    if (l->live_bytes[s] > l->live_peak_bytes) {
      l->live_peak_bytes = l->live_bytes[s];
      if (!l->planned) l->peak_step = s;
    }
  }
  if (!l->planned) l->peak_bytes = l->live_peak_bytes;
  if (l->ndevices > 1 && !l->planned) { /* each device's own most live bytes */
    for (int d = 0; d < l->ndevices; d++) {
      memset(delta, 0, sizeof *delta * ((size_t)n + 1));
      for (int32_t i = 0; i < n; i++) {
        const dc_node *node = &m->nodes[i];
        if (!dc_node_is_activation(node) || node->device != d) continue;
        delta[dc_value_first_step(m, i)] += (int64_t)dc_type_bytes(&node->type);
        delta[last_step(l, i) + 1] -= (int64_t)dc_type_bytes(&node->type);
      }
      live = 0;
      for (int32_t s = 0; s < n; s++)
        if ((live += delta[s]) > (int64_t)l->dev_peak[d]) l->dev_peak[d] = (uint64_t)live;
    }
  } else if (!l->planned) {
    l->dev_peak[0] = l->peak_bytes;
  }
  dc_free(delta);
  return NULL;
}

/* The arena's high-water mark: the highest byte any value occupies, first
 * reached when that value is allocated. */
static void arena_peak(const dc_module *m, dc_liveness *l) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *node = &m->nodes[i];
    if (!dc_node_is_activation(node)) continue;
    uint64_t top = (uint64_t)node->offset + dc_type_bytes(&node->type);
    int32_t first = dc_value_first_step(m, i);
    if (top > l->dev_peak[node->device]) l->dev_peak[node->device] = top;
    if (top > l->peak_bytes || (top == l->peak_bytes && first < l->peak_step)) {
      l->peak_bytes = top;
      l->peak_step = first;
    }
  }
}

/* What phases add to the last uses (ir.h, "phases"): a value computed
 * before a loop and read inside it lives to the loop's end; an output to
 * its phase's end (where the host reads it); a held upload (--offload
 * model) to the end of the phase, or loop, of its last reader.  Without
 * phases the whole run is one phase. */
static void phase_lifetimes(const dc_module *m, int32_t *last_use) {
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *node = &m->nodes[i];
    if (m->nphases == 0 || !m->phases[node->phase].loop) continue;
    int32_t region_end = dc_phase_region_end(m, end, node->phase);
    int32_t loop_start = node->phase;
    while (loop_start > 0 && m->phases[loop_start - 1].loop) loop_start--;
    for (int k = 0; k < node->ninputs; k++) {
      int32_t v = node->inputs[k];
      if (m->nodes[v].phase < loop_start && last_use[v] < region_end - 1) last_use[v] = region_end - 1;
    }
  }
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *node = &m->nodes[i];
    if (dc_node_is_output(m, i)) last_use[i] = end[m->nphases ? node->phase : 0] - 1;
    else if (node->op == OP_UPLOAD && dc_node_int(node, "hold")) {
      int32_t p = m->nphases ? m->nodes[last_use[i]].phase : 0;
      int32_t e = dc_phase_region_end(m, end, p) - 1;
      if (last_use[i] < e) last_use[i] = e;
    }
  }
}

dc_status *dc_liveness_compute(const dc_module *m, dc_liveness *l) {
  int32_t n = m->nnodes;
  memset(l, 0, sizeof *l);
  l->last_use = dc_calloc((size_t)n + 1, sizeof *l->last_use);
  l->inplace_of = dc_calloc((size_t)n + 1, sizeof *l->inplace_of);
  l->live_bytes = dc_calloc((size_t)n + 1, sizeof *l->live_bytes);
  if (!l->last_use || !l->inplace_of || !l->live_bytes) {
    dc_liveness_deinit(l);
    return dc_nomem("computing live ranges");
  }
  for (int32_t i = 0; i < n; i++) l->last_use[i] = i;
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) l->last_use[m->nodes[i].inputs[k]] = i;
  phase_lifetimes(m, l->last_use);
  l->planned = is_planned(m);
  l->ndevices = 1;
  for (int32_t i = 0; i < n; i++)
    if (m->nodes[i].device >= l->ndevices) l->ndevices = m->nodes[i].device + 1;
  weight_residency(m, l); /* before find_inplace, whose array it borrows */
  find_inplace(m, l);
  dc_status *st = sum_live(m, l);
  if (st) {
    dc_liveness_deinit(l);
    return st;
  }
  if (l->planned) arena_peak(m, l);
  return NULL;
}

void dc_liveness_deinit(dc_liveness *l) {
  dc_free(l->last_use);
  dc_free(l->inplace_of);
  dc_free(l->live_bytes);
  l->last_use = NULL;
  l->inplace_of = NULL;
  l->live_bytes = NULL;
}

int32_t dc_value_last_step(const dc_liveness *l, int32_t id) { return last_step(l, id); }

/* ---- the memory plan checker ------------------------------------------ */
/* A sweep over the steps keeps the values occupying memory in a Fenwick
 * tree indexed by their offsets' ranks.  Live values are pairwise disjoint
 * (else the sweep has stopped), so sorted by start their ends are sorted
 * too: a new range [a, b) overlaps a live one iff the live one with the
 * largest start below b ends after a.  O(n log n). */
typedef struct {
  int32_t nkeys, *tree, *occupant; /* tree counts live values per rank; occupant holds them */
  uint64_t *keys;                  /* the distinct offsets, sorted */
} sweep;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Number of keys below v. */
static int32_t rank_below(const sweep *w, uint64_t v) {
  int32_t lo = 0, hi = w->nkeys;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (w->keys[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void tree_add(sweep *w, int32_t rank, int32_t d) {
  for (int32_t i = rank + 1; i <= w->nkeys; i += i & -i) w->tree[i] += d;
}

static int32_t tree_prefix(const sweep *w, int32_t count) { /* live values among the first count ranks */
  int32_t s = 0;
  for (int32_t i = count; i > 0; i -= i & -i) s += w->tree[i];
  return s;
}

static int32_t tree_kth(const sweep *w, int32_t k) { /* rank of the k-th live value, k >= 1 */
  int32_t pos = 0, step = 1;
  while (step * 2 <= w->nkeys) step *= 2;
  for (; step > 0; step /= 2)
    if (pos + step <= w->nkeys && w->tree[pos + step] < k) {
      pos += step;
      k -= w->tree[pos];
    }
  return pos;
}

/* "%5 conv2d (down_blocks.0.resnets.0.conv1)", for messages. */
static const char *describe(const dc_module *m, int32_t id, char *buf, size_t cap) {
  const dc_node *n = &m->nodes[id];
  int k = snprintf(buf, cap, "%%%d %s", id, dc_op_get(n->op)->name);
  if (n->scope && k >= 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, " (%s)", n->scope);
  return buf;
}

static dc_status *overlap_error(const dc_module *m, int32_t a, int32_t b, int32_t step) {
  const dc_node *x = &m->nodes[a], *y = &m->nodes[b];
  char da[256], db[256];
  return dc_error(DC_ERR_INTERNAL,
                  "memory plan: %s at [%" PRId64 ", %" PRIu64 ") overlaps %s at [%" PRId64 ", %" PRIu64
                  ") while both are live at step %%%d; the plan is corrupt or a pass after memplan changed the graph",
                  describe(m, a, da, sizeof da), x->offset, (uint64_t)x->offset + dc_type_bytes(&x->type),
                  describe(m, b, db, sizeof db), y->offset, (uint64_t)y->offset + dc_type_bytes(&y->type), step);
}

/* Every activation aligned and inside the arena, and the arena no larger
 * than all values side by side (so a corrupt size cannot ask for terabytes). */
static dc_status *check_bounds(const dc_module *m) {
  uint64_t all = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!dc_node_is_activation(n)) continue;
    uint64_t bytes = dc_type_bytes(&n->type);
    char d[256];
    all += (bytes + DC_ARENA_ALIGN - 1) / DC_ARENA_ALIGN * DC_ARENA_ALIGN + DC_ARENA_ALIGN;
    if (n->offset < 0 || n->offset % DC_ARENA_ALIGN)
      return dc_error(DC_ERR_INTERNAL, "memory plan: %s has offset %" PRId64 ", not a multiple of %d",
                      describe(m, i, d, sizeof d), n->offset, DC_ARENA_ALIGN);
    if ((uint64_t)n->offset > m->arena_bytes || bytes > m->arena_bytes - (uint64_t)n->offset)
      return dc_error(DC_ERR_INTERNAL,
                      "memory plan: %s at [%" PRId64 ", +%" PRIu64 ") runs past the end of the %" PRIu64 "-byte arena",
                      describe(m, i, d, sizeof d), n->offset, bytes, m->arena_bytes);
  }
  if (m->arena_bytes > all)
    return dc_error(DC_ERR_INTERNAL,
                    "memory plan: an arena of %" PRIu64 " bytes, more than all %d values take side by side (%" PRIu64 ")",
                    m->arena_bytes, m->nnodes, all);
  return NULL;
}

/* Values bucketed by step: order[start[s] .. start[s+1]) hold those whose
 * key (first or last occupied step) is s.  A counting sort, O(n). */
static void bucket(const int32_t *key, int32_t n, int32_t *start, int32_t *order) {
  for (int32_t s = 0; s <= n; s++) start[s] = 0;
  for (int32_t v = 0; v < n; v++)
    if (key[v] >= 0) start[key[v] + 1]++;
  for (int32_t s = 0; s < n; s++) start[s + 1] += start[s];
  int32_t *fill = start + n + 1; /* scratch of n + 1 after start */
  for (int32_t s = 0; s <= n; s++) fill[s] = start[s];
  for (int32_t v = 0; v < n; v++)
    if (key[v] >= 0) order[fill[key[v]]++] = v;
}

/* Each device's arena is its own address space: device d's offsets sit at
 * d << 48 in the sweep, so values on two devices never meet (offsets are
 * checked below 2^48 by check_bounds' size limit). */
static uint64_t vaddr(const dc_node *n) { return ((uint64_t)n->device << 48) + (uint64_t)n->offset; }

static dc_status *sweep_insert(sweep *w, const dc_module *m, int32_t v, int32_t step) {
  const dc_node *n = &m->nodes[v];
  uint64_t a = vaddr(n), b = a + dc_type_bytes(&n->type);
  int32_t below = tree_prefix(w, rank_below(w, b));
  if (below > 0) {
    int32_t u = w->occupant[tree_kth(w, below)];
    const dc_node *un = &m->nodes[u];
    if (vaddr(un) + dc_type_bytes(&un->type) > a) return overlap_error(m, v, u, step);
  }
  int32_t r = rank_below(w, a);
  tree_add(w, r, 1);
  w->occupant[r] = v;
  return NULL;
}

static dc_status *sweep_run(sweep *w, const dc_module *m, const int32_t *first, const int32_t *last) {
  int32_t n = m->nnodes;
  /* Two bucketings, each 2n + 2 bucket starts (with scratch) and n values. */
  int32_t *mem = dc_malloc(sizeof(int32_t) * (6 * (size_t)n + 4));
  if (!mem) return dc_nomem("checking the memory plan");
  int32_t *fstart = mem, *forder = fstart + 2 * n + 2, *lstart = forder + n, *lorder = lstart + 2 * n + 2;
  dc_status *st = NULL;
  bucket(first, n, fstart, forder);
  bucket(last, n, lstart, lorder);
  for (int32_t s = 0; !st && s < n; s++) {
    for (int32_t j = s > 0 ? lstart[s - 1] : 0; j < lstart[s]; j++) { /* their last step was s - 1 */
      int32_t r = rank_below(w, vaddr(&m->nodes[lorder[j]]));
      tree_add(w, r, -1);
      w->occupant[r] = -1;
    }
    for (int32_t j = fstart[s]; !st && j < fstart[s + 1]; j++) st = sweep_insert(w, m, forder[j], s);
  }
  dc_free(mem);
  return st;
}

dc_status *dc_memplan_check(const dc_module *m, const dc_liveness *l) {
  int32_t n = m->nnodes;
  if (!l->planned) return dc_error(DC_ERR_INTERNAL, "memory plan: the module has none (pass memplan has not run)");
  DC_TRY(check_bounds(m));
  sweep w = {0, NULL, NULL, NULL};
  int32_t *first = dc_malloc(sizeof(int32_t) * ((size_t)n + 1)), *last = dc_malloc(sizeof(int32_t) * ((size_t)n + 1));
  w.keys = dc_malloc(sizeof(uint64_t) * ((size_t)n + 1));
  w.tree = dc_calloc((size_t)n + 2, sizeof(int32_t));
  w.occupant = dc_malloc(sizeof(int32_t) * ((size_t)n + 1));
  dc_status *st = NULL;
  if (!first || !last || !w.keys || !w.tree || !w.occupant) st = dc_nomem("checking the memory plan");
  for (int32_t v = 0; !st && v < n; v++) { /* zero-byte values occupy nothing */
    const dc_node *node = &m->nodes[v];
    int occupies = dc_node_is_activation(node) && dc_type_bytes(&node->type) > 0;
    first[v] = occupies ? dc_value_first_step(m, v) : -1;
    last[v] = occupies ? last_step(l, v) : -1;
    if (occupies) w.keys[w.nkeys++] = vaddr(node);
  }
  if (!st) {
    qsort(w.keys, (size_t)w.nkeys, sizeof *w.keys, cmp_u64);
    int32_t k = 0;
    for (int32_t i = 0; i < w.nkeys; i++)
      if (k == 0 || w.keys[i] != w.keys[k - 1]) w.keys[k++] = w.keys[i];
    w.nkeys = k;
    st = sweep_run(&w, m, first, last);
  }
  dc_free(first);
  dc_free(last);
  dc_free(w.keys);
  dc_free(w.tree);
  dc_free(w.occupant);
  return st;
}
