/* test_ir_types.c — the IR representation issue 12 (part 3) made room for:
 * integer inputs, constants, and nodes with more inputs and attributes than
 * the old fixed limits (4 and 8).  Each goes through every form a module
 * takes — text dump, parser, binary schedule, plan file — and back, and the
 * runtime runs a constant on the reference and llvm backends with integer
 * and float inputs bound; diffrun's --inputs refuses a tensor of the wrong
 * kind, naming the input and both dtypes. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit_cuda.h"
#include "codegen/emit_kernels.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "testutil.h"

static const float SCALE[4] = {1.0f, 2.5f, -3.0f, 1e-7f};

/* text -> module -> text must give the same bytes */
static void check_parse_round_trip(const dc_module *m, const char *what) {
  char *text = tu_ir_text(m);
  dc_module *back = NULL;
  CHECK_OK(dc_parse(text, strlen(text), what, &back));
  char *again = back ? tu_ir_text(back) : NULL;
  CHECK(again && strcmp(text, again) == 0);
  if (again && strcmp(text, again) != 0) fprintf(stderr, "--- printed\n%s--- parsed and printed\n%s", text, again);
  dc_free(text);
  dc_free(again);
  dc_module_destroy(back);
}

/* module -> bytes -> module must give the same dump */
static void check_serialize_round_trip(const dc_module *m) {
  dc_buf w, s;
  dc_buf_init(&w);
  dc_buf_init(&s);
  CHECK_OK(dc_serialize_weights(m, &w));
  CHECK_OK(dc_serialize(m, &s));
  dc_module *back = NULL;
  CHECK_OK(dc_deserialize(w.data, w.len, "weights", s.data, s.len, "schedule", &back));
  char *a = tu_ir_text(m), *b = back ? tu_ir_text(back) : NULL;
  CHECK(b && strcmp(a, b) == 0);
  dc_free(a);
  dc_free(b);
  dc_module_destroy(back);
  dc_buf_deinit(&w);
  dc_buf_deinit(&s);
}

/* input_ids i64[2,7] (token ids: bound but not read by any op yet),
 * x f32[2,4]; y = x + scale, scale a constant f32[4]. */
static dc_module *build_ids_and_constant(void) {
  dc_module *m = dc_module_create();
  dc_type ids_t = {DT_I64, 2, {2, 7}}, xt = {DT_F32, 2, {2, 4}}, ct = {DT_F32, 1, {4}};
  CHECK(dc_module_add_input(m, "input_ids", &ids_t, INIT_NORMAL) == 0);
  int32_t x = dc_module_add_input(m, "x", &xt, INIT_NORMAL);
  int32_t c = dc_module_add_constant(m, "time_proj.scale", &ct, SCALE);
  dc_node add = dc_node_make(OP_ADD, 2, (int32_t[]){x, c});
  add.scope = "time_proj";
  CHECK_OK(dc_infer_type(m, &add, &add.type));
  int32_t y = dc_module_add_node(m, &add);
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_module_set_meta(m, "class", "Test"));
  CHECK_OK(dc_verify(m, "building"));
  return m;
}

static void test_text_and_binary(void) {
  dc_module *m = build_ids_and_constant();
  char *text = tu_ir_text(m);
  CHECK(strstr(text, "# input input_ids : i64[2,7]\n") != NULL);
  CHECK(strstr(text, "%0 = input \"input_ids\" : i64[2,7]  # row, dev0, 112 B, live 0..0\n") != NULL);
  CHECK(strstr(text, "%2 = constant [1, 2.5, -3, 1.00000001e-07] : f32[4]  # time_proj.scale, row, dev0, 16 B, live 2..3\n") !=
        NULL);
  check_parse_round_trip(m, "unplanned");
  check_serialize_round_trip(m);
  CHECK_OK(dc_pipeline_run(m, NULL)); /* through memplan */
  check_parse_round_trip(m, "planned");
  check_serialize_round_trip(m);
  /* the constant's value survives every form bit for bit */
  dc_module *back = NULL;
  char *planned = tu_ir_text(m);
  CHECK_OK(dc_parse(planned, strlen(planned), "planned", &back));
  for (int32_t i = 0; back && i < back->nnodes; i++)
    if (back->nodes[i].op == OP_CONSTANT) CHECK(memcmp(back->nodes[i].data, SCALE, sizeof SCALE) == 0);
  printf("i64 input and f32 constant: dump, parse and serialize round trips, before and after memplan\n");
  dc_module_destroy(back);
  dc_free(planned);
  dc_free(text);
  dc_module_destroy(m);
}

/* A constant is an arena value like any computed one: allocated at its
 * step, freed after its last reader, never a weight. */
static void test_liveness(void) {
  dc_module *m = build_ids_and_constant();
  CHECK_OK(dc_pipeline_run(m, NULL));
  int32_t c = -1;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_CONSTANT) c = i;
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK(c >= 0 && dc_node_is_activation(&m->nodes[c]));
  CHECK(c >= 0 && dc_value_first_step(m, c) == c && l.last_use[c] == c + 1);
  CHECK(c >= 0 && m->nodes[c].offset >= 0 && m->nodes[c].offset % DC_ARENA_ALIGN == 0);
  CHECK(l.weight_bytes == 0 && l.host_weight_bytes == 0);
  CHECK(l.planned && l.live_bytes[c] == 32 + 16); /* x and the constant while it is placed (ids: no reader) */
  CHECK_OK(dc_memplan_check(m, &l));
  printf("liveness: a constant lives from its step to its last reader, in the arena, not a weight\n");
  dc_liveness_deinit(&l);
  dc_module_destroy(m);
}

static dc_status *parse_text(const char *text) {
  dc_module *m = NULL;
  dc_status *st = dc_parse(text, strlen(text), "t.ir", &m);
  dc_module_destroy(m);
  return st;
}

static void test_constant_forms(void) {
  dc_module *m = dc_module_create();
  dc_type s = {DT_F32, 0, {0}}, i32 = {DT_I32, 2, {2, 2}}, i64 = {DT_I64, 1, {3}}, big = {DT_F32, 2, {16, 17}};
  float one = 1.0f, ramp[16 * 17];
  int32_t mask[4] = {0, INT32_MIN, INT32_MAX, -1};
  int64_t pos[3] = {0, INT64_MAX, INT64_MIN};
  for (int k = 0; k < 16 * 17; k++) ramp[k] = (float)k / 3.0f;
  int32_t a = dc_module_add_constant(m, NULL, &s, &one);
  dc_module_add_constant(m, "mask", &i32, mask);
  dc_module_add_constant(m, "pos", &i64, pos);
  int32_t b = dc_module_add_constant(m, "table", &big, ramp);
  dc_node add = dc_node_make(OP_ADD, 2, (int32_t[]){b, a}); /* a scalar broadcasts */
  CHECK_OK(dc_infer_type(m, &add, &add.type));
  CHECK_OK(dc_module_add_output(m, "y", dc_module_add_node(m, &add)));
  CHECK_OK(dc_verify(m, "building"));
  char *text = tu_ir_text(m);
  CHECK(strstr(text, "%0 = constant [1] : f32[]  # row, dev0, 4 B, live 0..4\n") != NULL);
  CHECK(strstr(text, "%1 = constant [0, -2147483648, 2147483647, -1] : i32[2,2]  # mask, row") != NULL);
  CHECK(strstr(text, "%2 = constant [0, 9223372036854775807, -9223372036854775808] : i64[3]  # pos, row") != NULL);
  CHECK(strstr(text, "%3 = constant [... 272 values, xxh64 ") != NULL);
  CHECK_ERR(dc_parse(text, strlen(text), "t.ir", &(dc_module *){0}),
            "t.ir:6: constant %3 is printed elided (more than 256 values), so this dump cannot be read back");
  check_serialize_round_trip(m); /* the binary form holds any size */
  dc_free(text);
  dc_module_destroy(m);

  const char *out = "output y = %0\n";
  char buf[512];
  snprintf(buf, sizeof buf, "%%0 = constant [1, 2] : f32[3]  # row, dev0, 12 B, live 0..0\n%s", out);
  CHECK_ERR(parse_text(buf), "t.ir:1: constant of type f32[3] has 2 values; expected 3");
  snprintf(buf, sizeof buf, "%%0 = constant [1, 2, 3, 4] : f32[3]  # row, dev0, 12 B, live 0..0\n%s", out);
  CHECK_ERR(parse_text(buf), "t.ir:1: constant of type f32[3] has more than 3 values");
  snprintf(buf, sizeof buf, "%%0 = constant [4294967296] : i32[1]  # row, dev0, 4 B, live 0..0\n%s", out);
  CHECK_ERR(parse_text(buf), "t.ir:1: value 4294967296 does not fit in i32");
  snprintf(buf, sizeof buf, "%%0 = constant [1] : f16[1]  # row, dev0, 2 B, live 0..0\n%s", out);
  CHECK_ERR(parse_text(buf), "t.ir:1: a constant is f32, i32 or i64, not f16");
  snprintf(buf, sizeof buf, "%%0 = constant [1.5] : i64[1]  # row, dev0, 8 B, live 0..0\n%s", out);
  CHECK_ERR(parse_text(buf), "t.ir:1: value 0 of the i64 constant is followed by \".5\"");
  /* integers reach no op that computes, and cast does not take them */
  snprintf(buf, sizeof buf,
           "%%0 = input \"ids\" : i64[2]  # row, dev0, 16 B, live 0..1\n"
           "%%1 = silu(%%0) : i64[2]  # row, dev0, 16 B, live 1..1\noutput y = %%1\n");
  CHECK_ERR(parse_text(buf), "silu (?): input 0 is i64[2]; expected f32");
  snprintf(buf, sizeof buf,
           "%%0 = input \"ids\" : i64[2]  # row, dev0, 16 B, live 0..1\n"
           "%%1 = cast(%%0) : f32[2]  # row, dev0, 8 B, live 1..1\noutput y = %%1\n");
  CHECK_ERR(parse_text(buf), "cast i64[2] to f32[2]: no kernel casts integers");
  snprintf(buf, sizeof buf,
           "%%0 = input \"ids\" : i64[2,3]  # row, dev0, 48 B, live 0..1\n"
           "%%1 = reshape(%%0) : i64[6]  # row, dev0, 48 B, live 1..1\noutput y = %%1\n");
  CHECK_OK(parse_text(buf)); /* a reshape moves bytes, any dtype */
  printf("constants: scalar, i32 and i64 extremes print exactly; a large one is elided and refused by the parser; "
         "wrong counts, ranges and dtypes are refused\n");
}

/* probe: 10 inputs and 11 attributes of every kind (int, float, act, list). */
static void test_wide_node(void) {
  dc_module *m = dc_module_create();
  dc_type xt = {DT_F32, 1, {8}};
  int32_t ins[10];
  for (int k = 0; k < 10; k++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", k);
    ins[k] = dc_module_add_input(m, name, &xt, INIT_NORMAL);
  }
  dc_node n = dc_node_make(OP_PROBE, 10, ins);
  const char *ints = "abcdeik";
  for (int k = 0; ints[k]; k++) dc_node_set_int(&n, (char[]){ints[k], 0}, (int64_t)(k + 1) * -1000003);
  dc_node_set_float(&n, "f", 0.1);
  dc_node_set_float(&n, "g", -1e300);
  dc_node_set_int(&n, "h", ACT_GEGLU);
  n.nlist = 3;
  n.list[0] = 2, n.list[1] = 0, n.list[2] = 1;
  n.type = (dc_type){DT_F32, 2, {2, 4}};
  n.scope = "blocks.0";
  int32_t p = dc_module_add_node(m, &n);
  CHECK_OK(dc_module_add_output(m, "y", p));
  CHECK(dc_op_get(OP_PROBE)->nattrs == 11 && DC_MAX_INPUTS >= 64);
  CHECK_OK(dc_verify(m, "building"));
  char *text = tu_ir_text(m);
  CHECK(strstr(text, "%10 = probe(%0, %1, %2, %3, %4, %5, %6, %7, %8, %9) {a=-1000003, b=-2000006, c=-3000009, "
                     "d=-4000012, e=-5000015, f=0.1, g=-1e+300, h=geglu, i=-6000018, j=[2,0,1], k=-7000021} : "
                     "f32[2,4]  # blocks.0, row, dev0, 32 B, live 10..10\n") != NULL);
  check_parse_round_trip(m, "wide");
  check_serialize_round_trip(m);
  CHECK_OK(dc_pipeline_run(m, NULL));
  check_parse_round_trip(m, "wide, planned");
  check_serialize_round_trip(m);
  dc_free(text);
  dc_module_destroy(m);

  /* 65 inputs: more than any node holds, refused with the limit named */
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "%%0 = input \"x\" : f32[1]  # row, dev0, 4 B, live 0..1\n%%1 = probe(");
  for (int k = 0; k <= DC_MAX_INPUTS; k++) dc_buf_printf(&b, k ? ", %%0" : "%%0");
  dc_buf_printf(&b, ") {a=0, b=0, c=0, d=0, e=0, f=0, g=0, h=none, i=0, j=[], k=0} : f32[1]  # row, dev0, 4 B, live 1..1\n");
  dc_buf_printf(&b, "output y = %%1\n");
  dc_module *bad = NULL;
  CHECK_ERR(dc_parse((const char *)b.data, b.len, "t.ir", &bad), "t.ir:2: more than 64 inputs");
  dc_buf_deinit(&b);
  printf("wide node: 10 inputs and 11 attributes verify, print, parse and serialize; 65 inputs are refused\n");
}

/* The module as a plan with CPU kernels (the add gets an LLVM kernel; the
 * constant's step runs its reference kernel on either backend). */
static void write_plan(dc_module *m, const char *path) {
  char *text = tu_ir_text(m);
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = text, .module = m};
  dc_cpu_target t;
  CHECK_OK(dc_cpu_target_host(&t));
  dc_cpu_emit_options eo = {0};
  CHECK_OK(dc_emit_cpu_kernels(m, &t, &eo, &plan.kernels));
  dc_cpu_target_deinit(&t);
  CHECK(plan.kernels.nentries == 1);
  CHECK_OK(dc_plan_write(path, &plan));
  dc_plan_kernels_deinit(&plan.kernels);
  dc_free(text);
}

static void run_backend(const char *path, const char *backend) {
  drt_options o = {.backend = backend, .threads = 2};
  drt_plan *p = NULL;
  CHECK_OK(drt_load(path, &o, &p));
  if (!p) return;
  CHECK(drt_input_count(p) == 2 && !strcmp(drt_input_info(p, 0)->dtype, "i64") &&
        !strcmp(drt_input_info(p, 1)->dtype, "f32") && !strcmp(drt_output_info(p, 0)->dtype, "f32"));
  int64_t ids[14];
  float x[8] = {0, 1, 2, 3, -4, -5, 6.5f, 7}, ones[14];
  for (int k = 0; k < 14; k++) ids[k] = 49406 + k, ones[k] = 1;
  CHECK_ERR(drt_set_input(p, "input_ids", ones, 14), "input \"input_ids\" is i64, but f32 values were given");
  CHECK_ERR(drt_set_input_data(p, "x", "i64", ids, 8), "input \"x\" is f32, but i64 values were given");
  CHECK_OK(drt_set_input_data(p, "input_ids", "i64", ids, 14));
  CHECK_OK(drt_set_input(p, "x", x, 8));
  drt_stats s;
  CHECK_OK(drt_run(p, &s));
  size_t n = 0;
  const float *y = drt_output(p, "y", &n);
  int exact = n == 8;
  for (int k = 0; exact && k < 8; k++) exact = y[k] == x[k] + SCALE[k % 4];
  CHECK(exact);
  CHECK(s.device_peak_bytes == s.device_predicted_bytes);
  CHECK(strcmp(backend, "llvm") != 0 || s.reference_steps == 0); /* a constant is placed, not computed */
  drt_set_random_inputs(p, 7);
  CHECK_OK(drt_run(p, NULL));
  drt_destroy(p);
  printf("plan on %s: the i64 input binds, the constant feeds an add exactly, peak as predicted\n", backend);
}

static void test_plan(void) {
  dc_module *m = build_ids_and_constant();
  CHECK_OK(dc_pipeline_run(m, NULL));
  char *path = tu_path("types.dplan");
  write_plan(m, path);
  dc_plan back;
  CHECK_OK(dc_plan_read(path, &back));
  char *a = tu_ir_text(m), *b = back.module ? tu_ir_text(back.module) : NULL;
  CHECK(b && strcmp(a, b) == 0);
  dc_plan_deinit(&back);
  run_backend(path, "reference");
  run_backend(path, "llvm");
  /* the CUDA emitter places no constants (diffc runs pass constant-weights before it; this
   * module skipped it): refused at compile time, naming the node */
  dc_cuda_emit_options co = {.no_cache = 1};
  dc_plan_cuda cuda;
  CHECK_ERR(dc_emit_cuda_kernels(m, NULL, &co, &cuda, NULL),
            "--target cuda: node %2 (constant in time_proj.scale) cannot run there yet");
  dc_free(a);
  dc_free(b);
  free(path);
  dc_module_destroy(m);
}

/* diffrun --inputs: an integer input takes I64 or I32, an f32 input F32;
 * the wrong kind is refused naming the input and both dtypes. */
static char *diffrun_path(void) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return NULL;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return NULL;
  *slash = 0;
  char *p = dc_path_join(self, "../diffrun");
  return p;
}

/* Runs diffrun on the plan with the given inputs file; returns its exit
 * status and its stderr+stdout in out. */
static int run_diffrun(const char *diffrun, const char *plan, const char *inputs, const char *extra, char *out,
                       size_t cap) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' '%s' %s%s%s -q 2>&1", diffrun, plan, inputs ? "--inputs '" : "", inputs ? inputs : "",
           inputs ? "'" : "");
  if (extra) snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %s", extra);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  return pclose(f);
}

static void test_diffrun_inputs(void) {
  char *diffrun = diffrun_path();
  if (!diffrun || access(diffrun, X_OK) != 0) {
    printf("diffrun --inputs: skipped (no diffrun beside the tests)\n");
    free(diffrun);
    return;
  }
  dc_module *m = build_ids_and_constant();
  CHECK_OK(dc_pipeline_run(m, NULL));
  char *plan = tu_path("cli.dplan");
  write_plan(m, plan);
  dc_module_destroy(m);
  int64_t ids64[14];
  int32_t ids32[14];
  float fids[14], x[8] = {0};
  for (int k = 0; k < 14; k++) ids64[k] = ids32[k] = k, fids[k] = (float)k;
  dc_type xt = {DT_F32, 2, {2, 4}};
  struct {
    const char *name;
    dc_st_out t[2];
    int ok;
    const char *needle;
  } cases[] = {
      {"i64.safetensors", {{"input_ids", {DT_I64, 2, {2, 7}}, ids64}, {"x", xt, x}}, 1, NULL},
      {"i32.safetensors", {{"input_ids", {DT_I32, 2, {2, 7}}, ids32}, {"x", xt, x}}, 1, NULL},
      {"f32ids.safetensors",
       {{"input_ids", {DT_F32, 2, {2, 7}}, fids}, {"x", xt, x}},
       0,
       "tensor \"input_ids\" has dtype F32, but the plan's input input_ids is i64[2,7]: expected I64 or I32"},
      {"i64x.safetensors",
       {{"input_ids", {DT_I64, 2, {2, 7}}, ids64}, {"x", {DT_I64, 2, {2, 4}}, ids64}},
       0,
       "tensor \"x\" has dtype I64, but the plan's input x is f32[2,4]: expected F32"},
  };
  char out[4096];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *path = tu_path(cases[i].name);
    CHECK_OK(dc_st_write(path, cases[i].t, 2));
    int rc = run_diffrun(diffrun, plan, path, NULL, out, sizeof out);
    CHECK((rc == 0) == cases[i].ok);
    if (cases[i].needle) CHECK(strstr(out, cases[i].needle) != NULL);
    if ((rc == 0) != cases[i].ok || (cases[i].needle && !strstr(out, cases[i].needle)))
      fprintf(stderr, "%s: diffrun said:\n%s", cases[i].name, out);
    free(path);
  }
  CHECK(run_diffrun(diffrun, plan, NULL, "--info", out, sizeof out) == 0 && strstr(out, "input  input_ids") &&
        strstr(out, "i64[2,7]"));
  CHECK(run_diffrun(diffrun, plan, NULL, "--random-inputs --backend reference", out, sizeof out) == 0);
  CHECK(run_diffrun(diffrun, plan, NULL, "--random-inputs", out, sizeof out) == 0);
  snprintf(out, sizeof out, "'%s' '%s' --random-inputs --backend reference 2>&1", diffrun, plan);
  FILE *f = popen(out, "r");
  size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[n] = 0;
  if (f) pclose(f);
  CHECK(strstr(out, "input input_ids (i64[2,7]): --random-inputs filled it with uniform integers in [0, 1000)") != NULL);
  printf("diffrun --inputs: I64 and I32 ids bind an i64 input; F32 ids and I64 floats are refused, naming both dtypes\n");
  free(plan);
  free(diffrun);
}

/* A linear with a gated residual (ops.def): parses, prints and serializes
 * with its gate; each wrong shape or flag is one message naming it. */
static dc_status *gated_text(const char *x, const char *r, const char *mod, const char *attrs, const char *out,
                             dc_module **m) {
  char buf[1024];
  snprintf(buf, sizeof buf,
           "%%0 = input \"x\" : f32[%s]  # row, dev0, 4 B, live 0..4\n"
           "%%1 = input \"w\" : f32[5,4]  # row, dev0, 4 B, live 0..4\n"
           "%%2 = input \"r\" : f32[%s]  # row, dev0, 4 B, live 0..4\n"
           "%%3 = input \"mod\" : f32[%s]  # row, dev0, 4 B, live 0..4\n"
           "%%4 = linear(%%0, %%1, %%2, %%3) {%s} : f32[%s]  # row, dev0, 4 B, live 0..4\noutput y = %%4\n",
           x, r, mod, attrs, out);
  *m = NULL;
  return dc_parse(buf, strlen(buf), "t.ir", m);
}

static dc_status *gated_bad(const char *x, const char *r, const char *mod, const char *attrs, const char *out) {
  dc_module *m;
  dc_status *st = gated_text(x, r, mod, attrs, out, &m);
  dc_module_destroy(m);
  return st;
}

static void test_gated_linear(void) {
  const char *ok = "act=gelu_tanh, bias=0, gate=1, gate_at=10, residual=1";
  dc_module *m;
  CHECK_OK(gated_text("2,3,4", "2,3,5", "2,15", ok, "2,3,5", &m));
  if (m) {
    char *text = tu_ir_text(m);
    CHECK(strstr(text, "%4 = linear(%0, %1, %2, %3) {act=gelu_tanh, bias=0, gate=1, gate_at=10, residual=1} : "
                       "f32[2,3,5]") != NULL);
    check_serialize_round_trip(m);
    dc_free(text);
    dc_module_destroy(m);
  }
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "2,15", "act=none, bias=0, gate=1, gate_at=11, residual=1", "2,3,5"),
            "gate chunk at 11 of 5 features lies outside mod f32[2,15]");
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "2,15", "act=none, bias=0, gate=1, gate_at=-1, residual=1", "2,3,5"),
            "gate chunk at -1 of 5 features lies outside mod f32[2,15]");
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "2,15", "act=none, bias=0, gate=1, gate_at=0, residual=0", "2,3,5"),
            "gate=1 gates the residual: it needs residual=1");
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "2,15", "act=none, bias=0, gate=2, gate_at=0, residual=1", "2,3,5"),
            "bias, residual and gate flags must be 0 or 1");
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "3,15", "act=none, bias=0, gate=1, gate_at=0, residual=1", "2,3,5"),
            "gate mod f32[3,15] does not match the batch of the output f32[2,3,5]");
  CHECK_ERR(gated_bad("2,3,4", "5", "2,15", "act=none, bias=0, gate=1, gate_at=0, residual=1", "2,3,5"),
            "gated residual f32[5] must have the output's shape f32[2,3,5]");
  CHECK_ERR(gated_bad("6,4", "6,5", "6,15", "act=none, bias=0, gate=1, gate_at=0, residual=1", "6,5"),
            "a gated residual needs a [B,S,N] output; it is f32[6,5]");
  CHECK_ERR(gated_bad("2,3,4", "2,3,5", "2,3,15", "act=none, bias=0, gate=1, gate_at=0, residual=1", "2,3,5"),
            "input 3 is f32[2,3,15]; expected rank 2..2");
  printf("gated linear: prints, parses and serializes its gate; 8 wrong gates refused with their shapes\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_text_and_binary();
  test_liveness();
  test_constant_forms();
  test_gated_linear();
  test_wide_node();
  test_plan();
  test_diffrun_inputs();
  return tu_finish();
}
