/* test_memplan.c — static memory planning: the planner (passes/memplan.c),
 * the plan checker (ir/liveness.c) and the runtime's one arena.
 *
 * Hand-built graphs pin each rule: an elementwise chain reuses memory in
 * place; a value with two readers is not overwritten while one still needs
 * it; graph inputs and outputs are never taken over; each of the three
 * placements (greedy by size, greedy by lifetime, the ggml-alloc walk)
 * wins where it packs tightest, and the trace says why each value sits
 * where it does; offsets are 64-aligned; the checker names both values of
 * a corrupted plan and diffrun refuses it.  Every planned graph also runs
 * twice with the reference kernels — in the arena and with a buffer per
 * value — and the outputs must be the same bits.  On the diffusers fixtures
 * the planned arena must equal the peak diffrun measures and pack the live
 * bytes tightly. */
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "runtime/kernels.h"
#include "plan/plan_format.h"
#include "testutil.h"

/* ---- building graphs by hand ---- */
static int32_t add_node(dc_module *m, dc_node n) {
  CHECK_OK(dc_infer_type(m, &n, &n.type));
  return dc_module_add_node(m, &n);
}

static int32_t op1(dc_module *m, dc_op op, int32_t a) { return add_node(m, dc_node_make(op, 1, &a)); }
static int32_t op2(dc_module *m, dc_op op, int32_t a, int32_t b) {
  return add_node(m, dc_node_make(op, 2, (int32_t[]){a, b}));
}

static int32_t input(dc_module *m, const char *name, int64_t d0, int64_t d1) {
  dc_type t = {DT_F32, 2, {d0, d1}};
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

static int64_t off(const dc_module *m, int32_t id) { return m->nodes[id].offset; }

/* Plans m; returns the trace (free()). The plan must pass the checker. */
static char *plan(dc_module *m) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK_OK(dc_verify(m, "test"));
  CHECK_OK(dc_memplan(m, f));
  fclose(f);
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK_OK(dc_memplan_check(m, &l));
  CHECK(l.planned && l.peak_bytes == m->arena_bytes);
  dc_liveness_deinit(&l);
  return text;
}

static int32_t ninplace(const dc_module *m) {
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  int32_t n = l.ninplace;
  dc_liveness_deinit(&l);
  return n;
}

static dc_status *check(const dc_module *m) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_status *st = dc_memplan_check(m, &l);
  dc_liveness_deinit(&l);
  return st;
}

/* ---- running a graph: in the planned arena, or a buffer per value ---- */
typedef struct {
  dc_mapped_file maps[8];
  int n;
} weight_maps;

/* Values of m after a run with the reference kernels.  arena != NULL puts
 * every activation at arena + offset, as diffrun does; NULL gives each its
 * own buffer, the model before planning. */
static void **execute(const dc_module *m, uint8_t *arena, const weight_maps *w, float *const *inputs) {
  void **val = calloc((size_t)m->nnodes, sizeof *val);
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) {
      const dc_weight *wt = &m->weights[n->ref];
      val[s] = (void *)(w->maps[wt->file].data + wt->offset);
      continue;
    }
    val[s] = arena ? arena + n->offset : malloc(dc_type_bytes(&n->type) + 1);
    if (n->op == OP_INPUT) {
      memcpy(val[s], inputs[n->ref], dc_type_bytes(&n->type));
      continue;
    }
    const void *in[DC_MAX_INPUTS];
    for (int k = 0; k < n->ninputs; k++) in[k] = val[n->inputs[k]];
    CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, val[s]));
  }
  return val;
}

static void free_values(const dc_module *m, void **val, int own) {
  for (int32_t s = 0; own && s < m->nnodes; s++)
    if (dc_node_is_activation(&m->nodes[s])) free(val[s]);
  free(val);
}

static uint8_t *arena_create(const dc_module *m, void **block) {
  *block = malloc(m->arena_bytes + 64);
  return (uint8_t *)(((uintptr_t)*block + 63) & ~(uintptr_t)63);
}

/* Seeded inputs, a different pattern per input. */
static float **make_inputs(const dc_module *m) {
  float **in = calloc((size_t)m->ninputs + 1, sizeof *in);
  for (int i = 0; i < m->ninputs; i++) {
    uint64_t n = dc_type_numel(&m->nodes[m->inputs[i].node].type);
    in[i] = malloc(n * sizeof(float) + 4);
    for (uint64_t k = 0; k < n; k++) in[i][k] = (float)((int)((k * 7 + (uint64_t)i * 13) % 17) - 8) * 0.25f;
  }
  return in;
}

/* The planned graph gives the same bits as a buffer per value. */
static void check_same_bits(const dc_module *m) {
  float **in = make_inputs(m);
  void *block;
  uint8_t *arena = arena_create(m, &block);
  weight_maps none = {.n = 0};
  void **a = execute(m, arena, &none, in), **b = execute(m, NULL, &none, in);
  for (int i = 0; i < m->noutputs; i++) {
    int32_t v = m->outputs[i].node;
    CHECK(memcmp(a[v], b[v], dc_type_bytes(&m->nodes[v].type)) == 0);
  }
  free_values(m, a, 0);
  free_values(m, b, 1);
  free(block);
  for (int i = 0; i < m->ninputs; i++) free(in[i]);
  free(in);
}

/* ---- the rules ---- */
/* x -> silu -> gelu -> clamp -> silu: the first silu gets fresh memory (x
 * is a graph input), each later op writes over its single-reader parent. */
static void test_inplace_chain(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 4, 16);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, a);
  dc_node cl = dc_node_make(OP_CLAMP, 1, &b);
  dc_node_set_float(&cl, "min", -1);
  dc_node_set_float(&cl, "max", 1);
  int32_t c = add_node(m, cl), d = op1(m, OP_SILU, c);
  CHECK_OK(dc_module_add_output(m, "y", d));
  char *trace = plan(m);
  CHECK(off(m, a) != off(m, x));
  CHECK(off(m, b) == off(m, a) && off(m, c) == off(m, a) && off(m, d) == off(m, a));
  CHECK(m->arena_bytes == 512 && ninplace(m) == 3);
  CHECK(strstr(trace, "memplan: %0 input \"x\" 256 B at offset 0 (lowest free offset over its lifetime %0..%1, "
                      "size rank 1)\n"));
  /* the chain %1..%4 is one block, alive from %1 to the end */
  CHECK(strstr(trace, "memplan: %1 silu 256 B at offset 256 (lowest free offset over its lifetime %1..%4, "
                      "size rank 2, above %0)\n"));
  CHECK(strstr(trace, "memplan: %2 gelu 256 B in place over %1 (single reader)\n"));
  CHECK(strstr(trace, "memplan: arena 512 B (512 bytes): 2 values placed, 3 in place\n"));
  check_same_bits(m);
  printf("in place: a chain of 4 elementwise ops uses 2 buffers (arena %llu bytes), same bits as unplanned\n",
         (unsigned long long)m->arena_bytes);
  free(trace);
  dc_module_destroy(m);
}

/* a = silu(x) is read by b = gelu(a) and then by c = add(a, b): b must not
 * overwrite a (c still needs it); c, a's last reader, may.  add(s, s) reads
 * s twice, so it never writes over s. */
static void test_two_readers(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 8, 16);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, a), c = op2(m, OP_ADD, a, b);
  int32_t s = op1(m, OP_SILU, c), t = op2(m, OP_MUL, s, s), u = op1(m, OP_GELU, t);
  CHECK_OK(dc_module_add_output(m, "y", u));
  char *trace = plan(m);
  CHECK(off(m, b) != off(m, a));
  CHECK(off(m, c) == off(m, a));
  CHECK(strstr(trace, "memplan: %3 add 512 B in place over %1 (last of its 2 readers)\n"));
  CHECK(off(m, s) == off(m, c) && off(m, t) != off(m, s) && off(m, u) == off(m, t));
  check_same_bits(m);
  printf("two readers: the first reader gets its own memory, the last may write over it; add(s, s) never\n");
  free(trace);
  dc_module_destroy(m);
}

/* Inputs and outputs are never written over; an output keeps its bytes to
 * the end, even when something reads it afterwards. */
static void test_inputs_outputs(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 4, 16);
  int32_t y = op1(m, OP_SILU, x), z = op1(m, OP_GELU, y), w = op1(m, OP_SILU, z);
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_module_add_output(m, "w", w));
  char *trace = plan(m);
  CHECK(off(m, y) != off(m, x) && off(m, z) != off(m, y));
  CHECK(off(m, w) == off(m, z)); /* z is neither: w takes it over */
  CHECK(strstr(trace, "memplan: %1 silu 256 B at offset 256 (lowest free offset over its lifetime %1..%3,"));
  check_same_bits(m);
  printf("inputs and outputs: never overwritten in place; an output's lifetime runs to the end\n");
  free(trace);
  dc_module_destroy(m);
}

/* x -> silu -> concat(s, s), and variants: each placement wins one. */
static int32_t concat2(dc_module *m, int32_t a, int32_t b) {
  dc_node cat = dc_node_make(OP_CONCAT, 2, (int32_t[]){a, b});
  dc_node_set_int(&cat, "axis", 1);
  return add_node(m, cat);
}

static void expect_winner(const char *what, dc_module *m, const char *const *lines, int nlines) {
  char *trace = plan(m);
  int all = 1;
  for (int i = 0; i < nlines; i++) {
    int found = strstr(trace, lines[i]) != NULL;
    if (!found) fprintf(stderr, "missing in the trace: %s\n--- trace:\n%s", lines[i], trace);
    all &= found;
  }
  CHECK(all);
  check_same_bits(m);
  printf("%s: %s", what, strstr(trace, "memplan: ") + strlen("memplan: "));
  free(trace);
  dc_module_destroy(m);
}

static void test_strategies(void) {
  /* The walk places x and s before it meets the 128-byte concat: no hole
   * fits it.  By size places the concat first, x below it in time. */
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 1, 16), s = op1(m, OP_SILU, x);
  CHECK_OK(dc_module_add_output(m, "y", concat2(m, s, s)));
  const char *by_size[] = {
      "memplan: greedy by size packs tightest: greedy by size 192 bytes, greedy by lifetime 256 bytes, "
      "the walk 256 bytes\n",
      "memplan: %2 concat 128 B at offset 0 (lowest free offset over its lifetime %2..%2, size rank 1)\n",
      "memplan: %0 input \"x\" 64 B at offset 0 (lowest free offset over its lifetime %0..%1, size rank 2)\n",
      "memplan: %1 silu 64 B at offset 128 (lowest free offset over its lifetime %1..%2, size rank 3, above %2)\n",
      "memplan: arena 192 B (192 bytes): 3 values placed, 0 in place\n"};
  expect_winner("x -> silu -> concat(s, s)", m, by_size, 5);

  /* Sizes tie (x, s, the concat: 128 bytes); by size puts the slice on top
   * of all three, by lifetime under the concat. */
  m = dc_module_create();
  x = input(m, "x", 1, 32);
  s = op1(m, OP_SILU, x);
  dc_node sl = dc_node_make(OP_SLICE, 1, &s);
  dc_node_set_int(&sl, "axis", 1);
  dc_node_set_int(&sl, "end", 16);
  int32_t q = add_node(m, sl);
  CHECK_OK(dc_module_add_output(m, "y", concat2(m, q, q)));
  const char *by_lifetime[] = {
      "memplan: greedy by lifetime packs tightest: greedy by size 320 bytes, greedy by lifetime 256 bytes, "
      "the walk 256 bytes\n",
      "memplan: %2 slice 64 B at offset 0 (lowest free offset over its lifetime %2..%3, lifetime rank 3)\n",
      "memplan: %3 concat 128 B at offset 64 (lowest free offset over its lifetime %3..%3, lifetime rank 4, "
      "above %2)\n"};
  expect_winner("x -> silu -> slice -> concat(q, q)", m, by_lifetime, 3);

  /* An unread input u ahead: the offline orders put the concat at 0 over
   * u's bytes in time and x, s above; the walk frees u at once, best fit
   * puts s into u's hole, and the concat into what u and x leave. */
  m = dc_module_create();
  input(m, "u", 1, 32);
  x = input(m, "x", 1, 16);
  s = op1(m, OP_SILU, x);
  CHECK_OK(dc_module_add_output(m, "y", concat2(m, s, s)));
  const char *walk[] = {
      "memplan: the walk packs tightest: greedy by size 256 bytes, greedy by lifetime 256 bytes, "
      "the walk 192 bytes\n",
      "memplan: %1 input \"x\" 64 B at offset 128 (graph input: top of the arena, now 192 B)\n",
      "memplan: free %0 after %0 (last use)\n",
      "memplan: %2 silu 64 B at offset 0 (best fit in a 128 B hole)\n",
      "memplan: %3 concat 128 B at offset 64 (best fit in a 128 B hole)\n",
      "memplan: arena 192 B (192 bytes): 4 values placed, 0 in place\n"};
  expect_winner("u unread; x -> silu -> concat(s, s)", m, walk, 6);
}

/* Odd sizes (12, 20, 44 bytes) still give 64-aligned offsets; the arena
 * ends at the last value's last byte. */
static void test_alignment(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 1, 3), y = input(m, "y", 1, 5);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, y);
  dc_node cat = dc_node_make(OP_CONCAT, 2, (int32_t[]){a, b});
  dc_node_set_int(&cat, "axis", 1);
  int32_t c = add_node(m, cat);
  dc_node cat2 = dc_node_make(OP_CONCAT, 2, (int32_t[]){c, x});
  dc_node_set_int(&cat2, "axis", 1);
  int32_t d = add_node(m, cat2);
  CHECK_OK(dc_module_add_output(m, "d", d));
  free(plan(m));
  int aligned = 1;
  uint64_t top = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    aligned &= m->nodes[i].offset % 64 == 0;
    uint64_t end = (uint64_t)m->nodes[i].offset + dc_type_bytes(&m->nodes[i].type);
    if (end > top) top = end;
  }
  CHECK(aligned && m->arena_bytes == top && top % 64 != 0);
  check_same_bits(m);
  printf("alignment: every offset a multiple of 64; arena %llu bytes = the last byte used\n",
         (unsigned long long)m->arena_bytes);
  dc_module_destroy(m);
}

/* Residual epilogues: out must never alias x (conv and linear read x's
 * neighbourhood); the residual may be written over only if the kernels
 * read residual[i] before writing out[i] — dc_node_inplace_input says
 * whether the planner does it, and then the kernels must be alias-safe. */
static dc_node epilogue_node(dc_module *m, dc_op op, int32_t x, int32_t w, int32_t bias, int32_t res) {
  dc_node n = dc_node_make(op, 4, (int32_t[]){x, w, bias, res});
  dc_node_set_int(&n, "bias", 1);
  dc_node_set_int(&n, "residual", 1);
  dc_node_set_int(&n, "act", ACT_SILU);
  if (op == OP_CONV2D) {
    dc_node_set_int(&n, "stride", 1);
    dc_node_set_int(&n, "pad_t", 1);
    dc_node_set_int(&n, "pad_b", 1);
    dc_node_set_int(&n, "pad_l", 1);
    dc_node_set_int(&n, "pad_r", 1);
  }
  return n;
}

/* Runs node n of m (inputs from make_inputs) with out separate and with out
 * over input k; 1 when both give the same bits. */
static int alias_safe(const dc_module *m, int32_t id, int k) {
  const dc_node *n = &m->nodes[id];
  float **vals = make_inputs(m);
  const void *in[DC_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) in[i] = vals[m->nodes[n->inputs[i]].ref];
  size_t bytes = dc_type_bytes(&n->type);
  float *sep = malloc(bytes), *alias = malloc(bytes);
  memcpy(alias, in[k], bytes);
  CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, sep));
  in[k] = alias;
  CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, alias));
  int same = memcmp(sep, alias, bytes) == 0;
  free(sep);
  free(alias);
  for (int i = 0; i < m->ninputs; i++) free(vals[i]);
  free(vals);
  return same;
}

static void test_kernel_aliasing(void) {
  dc_module *m = dc_module_create();
  dc_type t = {DT_F32, 3, {3, 5, 7}}, tb = {DT_F32, 2, {5, 1}};
  int32_t x = dc_module_add_input(m, "x", &t, INIT_NORMAL), y = dc_module_add_input(m, "y", &tb, INIT_NORMAL);
  int32_t ids[5] = {op2(m, OP_ADD, x, y), op2(m, OP_MUL, x, y), op1(m, OP_SILU, x), op1(m, OP_GELU, x), -1};
  dc_node cl = dc_node_make(OP_CLAMP, 1, &x);
  dc_node_set_float(&cl, "min", -0.5);
  dc_node_set_float(&cl, "max", 0.5);
  ids[4] = add_node(m, cl);
  for (int i = 0; i < 5; i++) {
    CHECK(dc_node_inplace_input(&m->nodes[ids[i]]) == 0);
    CHECK(alias_safe(m, ids[i], 0));
  }
  printf("kernels: add, mul (broadcast), silu, gelu, clamp give the same bits writing over input 0\n");
  dc_module_destroy(m);

  m = dc_module_create();
  dc_type cx = {DT_F32, 4, {1, 3, 5, 5}}, cw = {DT_F32, 4, {4, 3, 3, 3}}, cb = {DT_F32, 1, {4}};
  dc_type cr = {DT_F32, 4, {1, 4, 5, 5}};
  dc_type lx = {DT_F32, 2, {6, 8}}, lw = {DT_F32, 2, {5, 8}}, lb = {DT_F32, 1, {5}}, lr = {DT_F32, 2, {6, 5}};
  int32_t in[8];
  const dc_type *ts[8] = {&cx, &cw, &cb, &cr, &lx, &lw, &lb, &lr};
  const char *names[8] = {"cx", "cw", "cb", "cr", "lx", "lw", "lb", "lr"};
  for (int i = 0; i < 8; i++) in[i] = dc_module_add_input(m, names[i], ts[i], INIT_NORMAL);
  int32_t conv = add_node(m, epilogue_node(m, OP_CONV2D, in[0], in[1], in[2], in[3]));
  int32_t lin = add_node(m, epilogue_node(m, OP_LINEAR, in[4], in[5], in[6], in[7]));
  int32_t both[2] = {conv, lin};
  for (int i = 0; i < 2; i++) {
    const dc_node *n = &m->nodes[both[i]];
    int k = dc_node_inplace_input(n), safe = alias_safe(m, both[i], 3);
    CHECK(k == -1 || k == 3); /* never x */
    if (k == 3) CHECK(safe);
    printf("kernels: %s with a residual: the planner %s write over it; the reference kernel is %salias-safe\n",
           dc_op_get(n->op)->name, k == 3 ? "does" : "does not", safe ? "" : "not ");
  }
  dc_module_destroy(m);
}

/* A resnet tail and a transformer projection: the residual (computed, not
 * a graph input, read by nobody after) gives its bytes to the output; a
 * residual that is also x, or that someone reads later, does not. */
static void test_inplace_residual(void) {
  dc_module *m = dc_module_create();
  dc_type cx = {DT_F32, 4, {1, 4, 5, 5}}, cw = {DT_F32, 4, {4, 4, 3, 3}}, cb = {DT_F32, 1, {4}};
  dc_type lw = {DT_F32, 2, {5, 5}}, lb = {DT_F32, 1, {5}};
  int32_t x = dc_module_add_input(m, "x", &cx, INIT_NORMAL), w = dc_module_add_input(m, "w", &cw, INIT_NORMAL);
  int32_t b = dc_module_add_input(m, "b", &cb, INIT_NORMAL);
  int32_t lwi = dc_module_add_input(m, "lw", &lw, INIT_NORMAL), lbi = dc_module_add_input(m, "lb", &lb, INIT_NORMAL);
  int32_t h = op1(m, OP_SILU, x), r = op1(m, OP_GELU, x);
  int32_t y = add_node(m, epilogue_node(m, OP_CONV2D, h, w, b, r));      /* over r */
  int32_t y2 = add_node(m, epilogue_node(m, OP_CONV2D, y, w, b, y));     /* y is x too: never */
  int32_t z = add_node(m, epilogue_node(m, OP_LINEAR, y2, lwi, lbi, h)); /* h: x of y, then residual here */
  int32_t q = op1(m, OP_SILU, z);
  int32_t z2 = add_node(m, epilogue_node(m, OP_LINEAR, q, lwi, lbi, z)); /* over z, though q came after it */
  CHECK_OK(dc_module_add_output(m, "y", z2));
  char *trace = plan(m);
  CHECK(off(m, y) == off(m, r) && off(m, y2) != off(m, y) && off(m, z) == off(m, h) && off(m, z2) == off(m, z));
  CHECK(strstr(trace, "memplan: %7 conv2d 400 B in place over %6 (residual, single reader)\n"));
  CHECK(strstr(trace, "memplan: %9 linear 400 B in place over %5 (residual, last of its 2 readers)\n"));
  CHECK(strstr(trace, "memplan: %11 linear 400 B in place over %9 (residual, last of its 2 readers)\n"));
  CHECK(ninplace(m) == 3); /* q = silu(z) not over z: z2 reads z after it */
  check_same_bits(m);
  printf("in place over the residual: conv2d and linear take their residual's bytes (%d of %d values in place), "
         "never x's; same bits as unplanned\n", ninplace(m), m->nnodes - m->ninputs);
  free(trace);
  dc_module_destroy(m);
}

/* ---- the checker and the runtime refuse wrong plans ---- */
static void test_checker(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 8, 16);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, a), c = op2(m, OP_ADD, a, b);
  CHECK_OK(dc_module_add_output(m, "y", c));
  free(plan(m));
  CHECK(off(m, x) == 0 && off(m, a) == 512 && off(m, b) == 0 && off(m, c) == 512 && m->arena_bytes == 1024);
  m->nodes[b].offset = 448; /* b and a are both live while b runs */
  CHECK_ERR(check(m),
            "memory plan: %2 gelu at [448, 960) overlaps %1 silu at [512, 1024) while both are live at step %2");
  m->nodes[b].offset = 512; /* looks like in place, but c still reads a */
  CHECK_ERR(check(m), "%2 gelu at [512, 1024) overlaps %1 silu at [512, 1024)");
  m->nodes[b].offset = 32;
  CHECK_ERR(check(m), "memory plan: %2 gelu has offset 32, not a multiple of 64");
  m->nodes[b].offset = 1024;
  CHECK_ERR(check(m), "memory plan: %2 gelu at [1024, +512) runs past the end of the 1024-byte arena");
  m->nodes[b].offset = 0;
  m->arena_bytes = 1ull << 50;
  CHECK_ERR(check(m), "more than all 4 values take side by side");
  m->arena_bytes = 1024;
  CHECK_OK(check(m));
  printf("checker: overlaps (naming both values), misalignment, overflow and absurd arena sizes are refused\n");
  dc_module_destroy(m);
}

static char *write_plan(dc_module *m, const char *name) {
  dc_buf text;
  dc_buf_init(&text);
  CHECK_OK(dc_print(m, &text));
  dc_buf_u8(&text, 0);
  char *path = tu_path(name);
  dc_plan p = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = (char *)text.data, .module = m};
  CHECK_OK(dc_plan_write(path, &p));
  dc_buf_deinit(&text);
  return path;
}

/* The plan file carries the memory plan; diffrun runs it in one arena and
 * measures the same peak, and refuses a corrupted or missing plan. */
static void test_runtime(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 8, 16);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, a), c = op2(m, OP_ADD, a, b);
  CHECK_OK(dc_module_add_output(m, "y", c));
  free(plan(m));
  char *path = write_plan(m, "ok.dplan");
  dc_plan back;
  CHECK_OK(dc_plan_read(path, &back));
  int same = back.module && back.module->arena_bytes == m->arena_bytes;
  for (int32_t i = 0; same && i < m->nnodes; i++) same = back.module->nodes[i].offset == m->nodes[i].offset;
  CHECK(same);
  dc_plan_deinit(&back);
  drt_plan *p;
  CHECK_OK(drt_load(path, NULL, &p));
  drt_stats s;
  drt_set_random_inputs(p, 1);
  CHECK_OK(drt_run(p, &s));
  CHECK(s.device_peak_bytes == m->arena_bytes && s.device_predicted_bytes == m->arena_bytes);
  drt_destroy(p);
  printf("runtime: the plan round-trips its offsets; diffrun measures the planned %llu bytes\n",
         (unsigned long long)s.device_peak_bytes);

  m->nodes[b].offset = off(m, a);
  char *bad = write_plan(m, "bad.dplan");
  CHECK_ERR(drt_load(bad, NULL, &p), "bad.dplan: memory plan: %2 gelu at [512, 1024) overlaps %1 silu at [512, 1024)");
  for (int32_t i = 0; i < m->nnodes; i++) m->nodes[i].offset = -1;
  m->arena_bytes = 0;
  char *none = write_plan(m, "none.dplan");
  CHECK_ERR(drt_load(none, NULL, &p), "none.dplan: the plan has no memory plan (arena offsets); recompile it");
  printf("runtime: a plan whose values overlap, or that has no memory plan, is refused at load\n");
  free(path);
  free(bad);
  free(none);
  dc_module_destroy(m);
}

/* Every allocation of planning, checking, printing and loading can fail:
 * each failure is a clean error (valgrind sees no leak). */
static void test_out_of_memory(void) {
  dc_module *m = dc_module_create();
  int32_t x = input(m, "x", 8, 16);
  int32_t a = op1(m, OP_SILU, x), b = op1(m, OP_GELU, a), c = op2(m, OP_ADD, a, b);
  CHECK_OK(dc_module_add_output(m, "y", c));
  free(plan(m));
  char *path = write_plan(m, "oom.dplan");
  int fails = 0, bad = 0;
  for (long k = 0; k < 1000; k++) {
    dc_buf text;
    dc_buf_init(&text);
    drt_plan *p = NULL;
    dc_alloc_fail_after(k);
    dc_status *st = dc_memplan(m, NULL);
    if (!st) st = check(m);
    if (!st) st = dc_print(m, &text);
    if (!st) st = drt_load(path, NULL, &p);
    dc_alloc_fail_after(-1);
    bad += st ? dc_status_code_of(st) != DC_ERR_NOMEM || p != NULL : p == NULL;
    fails += st != NULL;
    drt_destroy(p);
    dc_buf_deinit(&text);
    dc_status_free(st);
    if (!st) break;
  }
  CHECK(bad == 0 && fails > 10);
  printf("out of memory: %d injected failures in planning, checking, printing, loading: each a clean error\n", fails);
  free(path);
  dc_module_destroy(m);
}

static void test_pipeline(void) {
  int n;
  const dc_pass *ps = dc_pass_list(&n);
  CHECK(n > 0 && strcmp(ps[n - 1].name, "memplan") == 0);
  char *dir = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model"), *out = tu_path("never.dplan");
  dc_compile_options co = {.model = dir, .debug = "memplan,offload"};
  CHECK_ERR(dc_compile(&co, out, NULL), "--debug memplan,offload: unknown channel \"offload\" (channels: memplan)");
  printf("pipeline: memplan is the last pass; --debug names its channels\n");
  free(dir);
  free(out);
}

/* Sum-of-live peak of the unplanned graph (what the dump said before
 * memplan) and the planned numbers. */
static void report(const char *label, dc_module *m) {
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK_OK(dc_memplan_check(m, &l));
  uint64_t arena = l.peak_bytes, live = l.live_peak_bytes;
  int32_t inplace = l.ninplace, placed = 0;
  dc_liveness_deinit(&l);
  int64_t *saved = malloc(sizeof(int64_t) * (size_t)m->nnodes);
  for (int32_t i = 0; i < m->nnodes; i++) {
    saved[i] = m->nodes[i].offset;
    m->nodes[i].offset = -1;
    placed += dc_node_is_activation(&m->nodes[i]);
  }
  uint64_t arena_bytes = m->arena_bytes;
  m->arena_bytes = 0;
  CHECK_OK(dc_liveness_compute(m, &l));
  uint64_t old = l.peak_bytes;
  dc_liveness_deinit(&l);
  for (int32_t i = 0; i < m->nnodes; i++) m->nodes[i].offset = saved[i];
  m->arena_bytes = arena_bytes;
  free(saved);
  printf("%s: sum of live bytes (unplanned) %llu; arena %llu (%+.1f%%), live bound %llu (%.0f%% packed); "
         "%d of %d values in place\n",
         label, (unsigned long long)old, (unsigned long long)arena, 100.0 * ((double)arena - (double)old) / (double)old,
         (unsigned long long)live, 100.0 * (double)live / (double)arena, inplace, placed);
  /* Every lifetime is known before the run: the offline placement gets the
   * UNet and VAE fixtures within 1% of the live bytes (the walk: 74%). */
  CHECK(100 * live >= 95 * arena);
}

static void fixture(const char *name, const char *io_name, const char *entry) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fdir = dc_path_join(dir, name);
  char *model = dc_path_join(fdir, "model"), *io_path = dc_path_join(fdir, io_name), *path = tu_path("fx.dplan");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  dc_compile_options co = {.model = model, .entry = entry, .shapes = shapes, .nshapes = tu_io_shapes(&io, shapes, 8)};
  CHECK_OK(dc_compile(&co, path, NULL));
  dc_plan plan;
  CHECK_OK(dc_plan_read(path, &plan));
  dc_module *m = plan.module;
  char label[128];
  snprintf(label, sizeof label, "%s %s", name, io_name);
  report(label, m);

  /* diffrun: one arena, the measured peak */
  drt_plan *p;
  drt_options ro = {.backend = "reference"};
  CHECK_OK(drt_load(path, &ro, &p));
  float **in = calloc((size_t)m->ninputs, sizeof *in);
  for (int i = 0; i < m->ninputs; i++) {
    const dc_st_tensor *t = dc_st_find(&io, m->inputs[i].name);
    in[i] = malloc(t->bytes);
    memcpy(in[i], io.file.data + t->offset, t->bytes);
    CHECK_OK(drt_set_input(p, t->name, in[i], t->bytes / 4));
  }
  drt_stats s;
  CHECK_OK(drt_run(p, &s));
  CHECK(s.device_peak_bytes == s.device_predicted_bytes && s.device_peak_bytes == m->arena_bytes);

  /* the same graph with a buffer per value: the same bits */
  weight_maps w = {.n = m->nfiles};
  for (int i = 0; i < m->nfiles; i++) CHECK_OK(dc_file_map(m->files[i].path, &w.maps[i]));
  void **val = execute(m, NULL, &w, in);
  int same = 1;
  for (int i = 0; i < m->noutputs; i++) {
    int32_t v = m->outputs[i].node;
    same &= memcmp(drt_output(p, m->outputs[i].name, NULL), val[v], dc_type_bytes(&m->nodes[v].type)) == 0;
  }
  CHECK(same);
  printf("  measured %llu bytes = planned; outputs %s those of a buffer per value\n",
         (unsigned long long)s.device_peak_bytes, same ? "bit-identical to" : "DIFFER from");
  free_values(m, val, 1);
  for (int i = 0; i < m->nfiles; i++) dc_file_unmap(&w.maps[i]);
  for (int i = 0; i < m->ninputs; i++) free(in[i]);
  free(in);
  drt_destroy(p);
  dc_plan_deinit(&plan);
  dc_st_close(&io);
  free(dir);
  free(fdir);
  free(model);
  free(io_path);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_inplace_chain();
  test_two_readers();
  test_inputs_outputs();
  test_strategies();
  test_alignment();
  test_kernel_aliasing();
  test_inplace_residual();
  test_checker();
  test_runtime();
  test_out_of_memory();
  test_pipeline();
  fixture("unet_sd15", "io_forward.safetensors", "forward");
  fixture("vae_sd", "io_decode.safetensors", "decode");
  return tu_finish();
}
