/* memplan.c — pass "memplan": static memory planning.
 * Requires: a verified module whose node order is the final schedule; it is
 *   the LAST pass: a pass after it must not add, remove or reorder nodes or
 *   change a type (dc_memplan_check at compile and load time catches it).
 * Guarantees: every activation value (inputs included) has a 64-byte
 *   aligned offset in its device's arena (one per device a value is placed
 *   on, --device-map; each planned on its own); no two values of a device
 *   that occupy memory at the same step overlap (the model of
 *   ir/liveness.c); m->arena_bytes is the highest byte any value occupies
 *   on any device (each device's own size: dc_liveness.dev_peak).  Weights
 *   keep offset -1.
 * Invalidates: nothing; offsets are recomputed from scratch on every run.
 *
 * In place first, ggml-alloc's rule: a value takes its parent's bytes over
 * when dc_inplace_parent allows (the op may write over that input, the
 * parent has no later reader and is no graph input or output).  A value and
 * those written over it one after another form a chain: one block of
 * memory, alive from the first one's first step to the last one's last.
 *
 * Then the blocks get offsets.  The schedule is static, so every lifetime
 * is known before anything runs and the placement can be offline:
 *   by size      largest block first (ties: the earlier start), each at the
 *                lowest offset where it overlaps no placed block whose
 *                lifetime meets its own ("greedy by size", Pisarchyk & Lee
 *                2020): the big blocks (skip connections, concats) take
 *                their places first, the small ones fill the gaps between;
 *   by lifetime  the same, longest lifetime first (ties: the larger);
 *   the walk     ggml-alloc's online walk down the schedule: graph inputs
 *                first, then each block when its first value runs, from a
 *                best-fit free list coalesced on free, above the top when
 *                no hole fits; freed after its last reader; outputs never.
 * All three run (each O(n²) at worst, milliseconds for a UNet) and the
 * smallest arena wins, ties in that order.  Sizes round up to 64 bytes, so
 * every offset stays aligned.  The trace (--debug memplan) names the
 * winner, then gives one line per value in schedule order: its offset and
 * why (the lowest free offset over its lifetime, and above which value;
 * best fit in a hole; the top of the arena; in place over its parent). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef enum { BY_SIZE, BY_LIFETIME, WALK, NSTRATEGIES } strategy;
static const char *const strategy_name[NSTRATEGIES] = {"greedy by size", "greedy by lifetime", "the walk"};

/* A value and the values written over it in place, one after another. */
typedef struct {
  int32_t head, tail;   /* its first and last value */
  int32_t first, last;  /* the steps it occupies memory */
  uint64_t size, off;   /* rounded to DC_ARENA_ALIGN */
  int32_t rank, below;  /* offline: placed rank-th (from 1), right above chain `below` (-1: at 0) */
} chain;

typedef struct {
  uint64_t off, size;
} span;

/* The walk's free blocks below the top, sorted by offset, never adjacent. */
typedef struct {
  span *free;
  int32_t nfree;
  uint64_t top; /* end of the highest block handed out */
} allocator;

typedef struct {
  dc_module *m;
  const dc_liveness *live;
  int device;        /* the arena being planned: values on this device only */
  int32_t *parent;   /* per value: the parent it takes over in place, or -1 */
  int32_t *chain_of; /* per activation value: its chain */
  chain *chains;
  int32_t nchains;
  int32_t *order, *placed; /* offline: chains in placing order; placed ones by offset */
  allocator a;
  FILE *trace;
} planner;

static FILE *trace_sink;

void dc_memplan_trace(FILE *f) { trace_sink = f; }

static uint64_t round_up(uint64_t v) { return (v + DC_ARENA_ALIGN - 1) / DC_ARENA_ALIGN * DC_ARENA_ALIGN; }

/* Every value takes at least one aligned unit, so zero-sized values still
 * get an offset no one else uses. */
static uint64_t block_size(const dc_node *n) {
  uint64_t b = dc_type_bytes(&n->type);
  return round_up(b ? b : 1);
}

/* ---- chains: the in-place decisions, made once for every strategy ---- */
static void build_chains(planner *p) {
  dc_module *m = p->m;
  p->nchains = 0;
  for (int32_t s = 0; s < m->nnodes; s++) {
    p->parent[s] = p->chain_of[s] = -1;
    if (!dc_node_is_activation(&m->nodes[s]) || m->nodes[s].device != p->device) continue;
    int32_t par = m->nodes[s].op == OP_INPUT ? -1 : dc_inplace_parent(m, p->live, s);
    p->parent[s] = par;
    if (par >= 0) { /* par's last reader is s: the chain now ends where s's bytes do */
      chain *c = &p->chains[p->chain_of[par]];
      c->tail = s;
      c->last = p->live->last_use[s];
      p->chain_of[s] = p->chain_of[par];
      continue;
    }
    p->chain_of[s] = p->nchains;
    p->chains[p->nchains++] = (chain){s, s, dc_value_first_step(m, s), p->live->last_use[s],
                                      block_size(&m->nodes[s]), 0, 0, -1};
  }
}

/* Offsets of every value from its chain's; the arena is the highest byte. */
static uint64_t apply_chains(planner *p) {
  dc_module *m = p->m;
  uint64_t top = 0;
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_node *n = &m->nodes[s];
    if (p->chain_of[s] < 0) continue;
    n->offset = (int64_t)p->chains[p->chain_of[s]].off;
    uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
    if (end > top) top = end;
  }
  return top;
}

/* ---- offline: place chains in a chosen order, each as low as it fits ---- */
static const chain *sort_chains; /* qsort has no context argument; planning is single-threaded */

static int cmp_by_size(const void *x, const void *y) {
  const chain *a = &sort_chains[*(const int32_t *)x], *b = &sort_chains[*(const int32_t *)y];
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return (a->head > b->head) - (a->head < b->head);
}

static int cmp_by_lifetime(const void *x, const void *y) {
  const chain *a = &sort_chains[*(const int32_t *)x], *b = &sort_chains[*(const int32_t *)y];
  int32_t la = a->last - a->first, lb = b->last - b->first;
  if (la != lb) return la > lb ? -1 : 1;
  return cmp_by_size(x, y);
}

/* The lowest offset where chain c overlaps none of the placed chains whose
 * lifetime meets its own: a scan of the placed ones in offset order. */
static void place_lowest(planner *p, int32_t nplaced, chain *c) {
  uint64_t at = 0;
  c->below = -1;
  for (int32_t j = 0; j < nplaced; j++) {
    const chain *q = &p->chains[p->placed[j]];
    if (q->last < c->first || c->last < q->first) continue;
    if (q->off >= at + c->size) break; /* the gap below q fits */
    if (q->off + q->size > at) {
      at = q->off + q->size;
      c->below = p->placed[j];
    }
  }
  c->off = at;
}

static void plan_offline(planner *p, strategy s) {
  for (int32_t i = 0; i < p->nchains; i++) p->order[i] = i;
  sort_chains = p->chains;
  qsort(p->order, (size_t)p->nchains, sizeof *p->order, s == BY_SIZE ? cmp_by_size : cmp_by_lifetime);
  for (int32_t r = 0; r < p->nchains; r++) {
    chain *c = &p->chains[p->order[r]];
    c->rank = r + 1;
    place_lowest(p, r, c);
    int32_t j = r; /* keep placed[0..r] sorted by offset */
    while (j > 0 && p->chains[p->placed[j - 1]].off > c->off) {
      p->placed[j] = p->placed[j - 1];
      j--;
    }
    p->placed[j] = p->order[r];
  }
}

/* ---- the walk: a best-fit free list ---- */
typedef struct {
  uint64_t off, hole; /* where, and the hole it came from (0: from the top) */
  int extended;       /* the hole touched the top and was too small: grew it */
} placement;

static placement alloc_block(allocator *a, uint64_t size) {
  int32_t best = -1;
  for (int32_t i = 0; i < a->nfree; i++)
    if (a->free[i].size >= size && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
  placement p = {a->top, 0, 0};
  if (best < 0 && a->nfree > 0 && a->free[a->nfree - 1].off + a->free[a->nfree - 1].size == a->top) {
    best = a->nfree - 1; /* the top hole is too small, but growing it wastes nothing below */
    p.extended = 1;
  }
  if (best < 0) {
    a->top += size;
    return p;
  }
  span *b = &a->free[best];
  p.off = b->off;
  p.hole = b->size;
  if (p.extended) {
    a->top = b->off + size;
    b->size = 0;
  } else {
    b->off += size;
    b->size -= size;
  }
  if (b->size == 0) {
    for (int32_t i = best; i + 1 < a->nfree; i++) a->free[i] = a->free[i + 1];
    a->nfree--;
  }
  return p;
}

/* Inserts [off, off + size) into the sorted list, merging with neighbours.
 * The list has room: it never holds more blocks than chains were freed. */
static void free_block(allocator *a, uint64_t off, uint64_t size) {
  int32_t i = 0;
  while (i < a->nfree && a->free[i].off < off) i++;
  int merge_prev = i > 0 && a->free[i - 1].off + a->free[i - 1].size == off;
  int merge_next = i < a->nfree && off + size == a->free[i].off;
  if (merge_prev && merge_next) {
    a->free[i - 1].size += size + a->free[i].size;
    for (int32_t k = i; k + 1 < a->nfree; k++) a->free[k] = a->free[k + 1];
    a->nfree--;
  } else if (merge_prev) {
    a->free[i - 1].size += size;
  } else if (merge_next) {
    a->free[i].off = off;
    a->free[i].size += size;
  } else {
    for (int32_t k = a->nfree; k > i; k--) a->free[k] = a->free[k - 1];
    a->free[i] = (span){off, size};
    a->nfree++;
  }
}

/* ---- the trace: one line per value, with its reason ---- */
static void trace_value(const planner *p, int32_t id) {
  const dc_node *n = &p->m->nodes[id];
  char bb[32];
  fprintf(p->trace, "memplan: %%%d %s", id, dc_op_get(n->op)->name);
  if (n->op == OP_INPUT) fprintf(p->trace, " \"%s\"", p->m->inputs[n->ref].name);
  else if (n->scope) fprintf(p->trace, " (%s)", n->scope);
  fprintf(p->trace, " %s", dc_format_bytes(dc_type_bytes(&n->type), bb, sizeof bb));
}

static int32_t count_readers(const dc_module *m, int32_t v) {
  int32_t r = 0;
  for (int32_t i = v + 1; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) r += m->nodes[i].inputs[k] == v;
  return r;
}

static void trace_inplace(const planner *p, int32_t id) {
  int32_t parent = p->parent[id], readers = count_readers(p->m, parent);
  trace_value(p, id);
  const char *what = dc_node_inplace_input(&p->m->nodes[id]) == 0 ? "" : "residual, ";
  if (readers == 1) fprintf(p->trace, " in place over %%%d (%ssingle reader)\n", parent, what);
  else fprintf(p->trace, " in place over %%%d (%slast of its %d readers)\n", parent, what, readers);
}

static void trace_alloc(const planner *p, int32_t id, const placement *pl) {
  char b1[32], b2[32];
  trace_value(p, id);
  fprintf(p->trace, " at offset %" PRIu64, pl->off);
  if (pl->extended)
    fprintf(p->trace, " (no hole fits: extends the %s hole at the top, arena now %s)\n",
            dc_format_bytes(pl->hole, b1, sizeof b1), dc_format_bytes(p->a.top, b2, sizeof b2));
  else if (pl->hole)
    fprintf(p->trace, " (best fit in a %s hole)\n", dc_format_bytes(pl->hole, b1, sizeof b1));
  else
    fprintf(p->trace, " (%s: top of the arena, now %s)\n",
            p->m->nodes[id].op == OP_INPUT ? "graph input" : "no hole fits", dc_format_bytes(p->a.top, b2, sizeof b2));
}

/* "…at offset 512 (lowest free offset over its lifetime %3..%9, size rank 2, above %1)" */
static void trace_offline(const planner *p, strategy s) {
  for (int32_t id = 0; id < p->m->nnodes; id++) {
    if (p->chain_of[id] < 0) continue;
    if (p->parent[id] >= 0) {
      trace_inplace(p, id);
      continue;
    }
    const chain *c = &p->chains[p->chain_of[id]];
    trace_value(p, id);
    fprintf(p->trace, " at offset %" PRIu64 " (lowest free offset over its lifetime %%%d..%%%d, %s rank %d", c->off,
            c->first, c->last, s == BY_SIZE ? "size" : "lifetime", c->rank);
    if (c->below >= 0) fprintf(p->trace, ", above %%%d", p->chains[c->below].head);
    fprintf(p->trace, ")\n");
  }
}

/* ---- the walk ---- */
static void walk_place(planner *p, int32_t id) {
  placement pl = alloc_block(&p->a, p->chains[p->chain_of[id]].size);
  p->chains[p->chain_of[id]].off = pl.off;
  if (p->trace) trace_alloc(p, id, &pl);
}

/* A chain's bytes go back to the free list after its tail's last reader
 * runs, unless that tail is a graph output. */
static void walk_release(planner *p, int32_t v, int32_t step) {
  int32_t c = p->chain_of[v];
  if (c < 0 || p->chains[c].tail != v || p->live->last_use[v] != step || dc_node_is_output(p->m, v)) return;
  free_block(&p->a, p->chains[c].off, p->chains[c].size);
  if (p->trace) fprintf(p->trace, "memplan: free %%%d after %%%d (last use)\n", v, step);
}

static void plan_walk(planner *p) {
  dc_module *m = p->m;
  p->a.nfree = 0;
  p->a.top = 0;
  for (int i = 0; i < m->ninputs; i++)
    if (p->chain_of[m->inputs[i].node] >= 0) walk_place(p, m->inputs[i].node);
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_node *n = &m->nodes[s];
    if (p->chain_of[s] < 0) continue;
    if (p->parent[s] >= 0) {
      if (p->trace) trace_inplace(p, s);
    } else if (n->op != OP_INPUT) {
      walk_place(p, s);
    }
    /* Each distinct input whose last reader this is, then the node itself
     * when nothing reads it. */
    for (int k = 0; k < n->ninputs; k++) {
      int dup = 0;
      for (int j = 0; j < k; j++) dup |= n->inputs[j] == n->inputs[k];
      if (!dup) walk_release(p, n->inputs[k], s);
    }
    walk_release(p, s, s);
  }
}

/* ---- the pass ---- */
static uint64_t run_strategy(planner *p, strategy s) {
  if (s == WALK) plan_walk(p);
  else plan_offline(p, s);
  if (p->trace && s != WALK) trace_offline(p, s);
  return apply_chains(p);
}

/* Plans device p->device's arena; returns its size. */
static uint64_t plan_device(planner *p, FILE *trace) {
  dc_module *m = p->m;
  build_chains(p);
  uint64_t arena[NSTRATEGIES];
  strategy best = BY_SIZE;
  for (int s = 0; s < NSTRATEGIES; s++) {
    arena[s] = run_strategy(p, (strategy)s);
    if (arena[s] < arena[best]) best = (strategy)s;
  }
  if (!trace) return best == WALK ? arena[WALK] : run_strategy(p, best); /* the walk ran last */
  char bb[32];
  if (p->live->ndevices > 1) fprintf(trace, "memplan: device %d\n", p->device);
  fprintf(trace, "memplan: %s packs tightest:", strategy_name[best]);
  for (int s = 0; s < NSTRATEGIES; s++)
    fprintf(trace, "%s %s %" PRIu64 " bytes", s ? "," : "", strategy_name[s], arena[s]);
  fprintf(trace, "\n");
  p->trace = trace;
  uint64_t size = run_strategy(p, best);
  p->trace = NULL;
  int32_t ninplace = 0;
  for (int32_t i = 0; i < m->nnodes; i++) ninplace += p->parent[i] >= 0;
  fprintf(trace, "memplan: arena %s (%" PRIu64 " bytes): %d values placed, %d in place\n",
          dc_format_bytes(size, bb, sizeof bb), size, p->nchains, ninplace);
  return size;
}

dc_status *dc_memplan(dc_module *m, FILE *trace) {
  dc_liveness live;
  for (int32_t i = 0; i < m->nnodes; i++) m->nodes[i].offset = -1;
  m->arena_bytes = 0;
  DC_TRY(dc_liveness_compute(m, &live));
  size_t n = (size_t)m->nnodes + 1;
  planner p = {m, &live, 0, NULL, NULL, NULL, 0, NULL, NULL, {NULL, 0, 0}, NULL};
  p.parent = dc_malloc(sizeof(int32_t) * n * 4);
  p.chains = dc_malloc(sizeof(chain) * n);
  p.a.free = dc_malloc(sizeof(span) * n);
  if (!p.parent || !p.chains || !p.a.free) {
    dc_free(p.parent);
    dc_free(p.chains);
    dc_free(p.a.free);
    dc_liveness_deinit(&live);
    return dc_nomem("planning memory");
  }
  p.chain_of = p.parent + n;
  p.order = p.chain_of + n;
  p.placed = p.order + n;
  for (p.device = 0; p.device < live.ndevices; p.device++) {
    uint64_t size = plan_device(&p, trace);
    if (size > m->arena_bytes) m->arena_bytes = size;
  }
  dc_free(p.parent);
  dc_free(p.chains);
  dc_free(p.a.free);
  dc_liveness_deinit(&live);
  return NULL;
}

dc_status *dc_pass_memplan(dc_module *m) { return dc_memplan(m, trace_sink); }
