/* memplan.c — pass "memplan": static memory planning, after ggml-alloc.
 * Requires: a verified module whose node order is the final schedule; it is
 *   the LAST pass: a pass after it must not add, remove or reorder nodes or
 *   change a type (dc_memplan_check at compile and load time catches it).
 * Guarantees: every activation value (inputs included) has a 64-byte
 *   aligned offset in one arena of m->arena_bytes bytes; no two values that
 *   occupy memory at the same step overlap (the model of ir/liveness.c);
 *   m->arena_bytes is the highest byte any value occupies.  Weights keep
 *   offset -1.
 * Invalidates: nothing; offsets are recomputed from scratch on every run.
 *
 * The rules, ggml-alloc's: walk the schedule; graph inputs are allocated
 * first (the runtime copies them in before step 0); a node's output is
 * allocated when it runs, over its parent in place when dc_inplace_parent
 * allows (the parent's bytes pass to the child, nothing is freed), else from
 * a best-fit list of free blocks, coalesced on free, above the arena's top
 * when no hole fits; a value is freed after its last reader runs; graph
 * outputs never.  Sizes round up to 64 bytes, so every offset stays aligned.
 * Why best fit: big holes stay whole for the big tensors that follow. */
#include <inttypes.h>

#include "passes.h"

typedef struct {
  uint64_t off, size;
} block;

/* Free blocks below the top, sorted by offset, never adjacent (coalesced). */
typedef struct {
  block *free;
  int32_t nfree;
  uint64_t top; /* end of the highest block handed out */
} allocator;

typedef struct {
  dc_module *m;
  const dc_liveness *live;
  allocator a;
  FILE *trace;
  int32_t nplaced, ninplace;
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

/* ---- the allocator ---- */
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
  block *b = &a->free[best];
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
 * The list has room: it never holds more blocks than values were freed. */
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
    a->free[i] = (block){off, size};
    a->nfree++;
  }
}

/* ---- the trace: one line per decision, with its reason ---- */
static void trace_value(const planner *p, int32_t id) {
  const dc_node *n = &p->m->nodes[id];
  char bb[32];
  fprintf(p->trace, "memplan: %%%d %s", id, dc_op_get(n->op)->name);
  if (n->op == OP_INPUT) fprintf(p->trace, " \"%s\"", p->m->inputs[n->ref].name);
  else if (n->scope) fprintf(p->trace, " (%s)", n->scope);
  fprintf(p->trace, " %s", dc_format_bytes(dc_type_bytes(&n->type), bb, sizeof bb));
}

static void trace_alloc(const planner *p, int32_t id, const placement *pl) {
  char b1[32], b2[32];
  if (!p->trace) return;
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

static void trace_inplace(const planner *p, int32_t id, int32_t parent, int32_t readers) {
  if (!p->trace) return;
  trace_value(p, id);
  const dc_node *n = &p->m->nodes[id];
  const char *what = dc_node_inplace_input(n) == 0 ? "" : "residual, ";
  if (readers == 1) fprintf(p->trace, " in place over %%%d (%ssingle reader)\n", parent, what);
  else fprintf(p->trace, " in place over %%%d (%slast of its %d readers)\n", parent, what, readers);
}

/* ---- the walk ---- */
static void place(planner *p, int32_t id) {
  dc_node *n = &p->m->nodes[id];
  placement pl = alloc_block(&p->a, block_size(n));
  n->offset = (int64_t)pl.off;
  p->nplaced++;
  trace_alloc(p, id, &pl);
}

static int32_t count_readers(const dc_module *m, int32_t v) {
  int32_t r = 0;
  for (int32_t i = v + 1; i < m->nnodes; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) r += m->nodes[i].inputs[k] == v;
  return r;
}

/* The value's bytes go back to the free list unless it is an output or a
 * child took them over (its offset then belongs to the child). */
static void release(planner *p, int32_t v, int32_t step, int32_t child) {
  const dc_node *n = &p->m->nodes[v];
  if (!dc_node_is_activation(n) || p->live->last_use[v] != step || dc_node_is_output(p->m, v) || v == child) return;
  free_block(&p->a, (uint64_t)n->offset, block_size(n));
  if (p->trace) fprintf(p->trace, "memplan: free %%%d after %%%d (last use)\n", v, step);
}

static void run_step(planner *p, int32_t s) {
  dc_module *m = p->m;
  dc_node *n = &m->nodes[s];
  int32_t parent = -1;
  if (n->op != OP_INPUT) {
    parent = dc_inplace_parent(m, p->live, s);
    if (parent >= 0) {
      n->offset = m->nodes[parent].offset;
      p->ninplace++;
      if (p->trace) trace_inplace(p, s, parent, count_readers(m, parent));
    } else {
      place(p, s);
    }
  }
  /* Each distinct input whose last reader this is, then the node itself
   * when nothing reads it. */
  for (int k = 0; k < n->ninputs; k++) {
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= n->inputs[j] == n->inputs[k];
    if (!dup) release(p, n->inputs[k], s, parent);
  }
  release(p, s, s, -1);
}

dc_status *dc_memplan(dc_module *m, FILE *trace) {
  dc_liveness live;
  for (int32_t i = 0; i < m->nnodes; i++) m->nodes[i].offset = -1;
  m->arena_bytes = 0;
  DC_TRY(dc_liveness_compute(m, &live));
  planner p = {m, &live, {NULL, 0, 0}, trace, 0, 0};
  p.a.free = dc_malloc(sizeof(block) * ((size_t)m->nnodes + 1));
  if (!p.a.free) {
    dc_liveness_deinit(&live);
    return dc_nomem("planning memory");
  }
  for (int i = 0; i < m->ninputs; i++) place(&p, m->inputs[i].node);
  for (int32_t s = 0; s < m->nnodes; s++)
    if (dc_node_is_activation(&m->nodes[s])) run_step(&p, s);
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    uint64_t end = dc_node_is_activation(n) ? (uint64_t)n->offset + dc_type_bytes(&n->type) : 0;
    if (end > m->arena_bytes) m->arena_bytes = end;
  }
  if (trace) {
    char bb[32];
    fprintf(trace, "memplan: arena %s (%" PRIu64 " bytes): %d values placed, %d in place\n",
            dc_format_bytes(m->arena_bytes, bb, sizeof bb), m->arena_bytes, p.nplaced, p.ninplace);
  }
  dc_free(p.a.free);
  dc_liveness_deinit(&live);
  return NULL;
}

dc_status *dc_pass_memplan(dc_module *m) { return dc_memplan(m, trace_sink); }
