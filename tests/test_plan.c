/* test_plan.c — the IR core, the plan file and the runtime on a graph built
 * by hand: verifier catches, deterministic dump, dead-code elimination,
 * serialize round trip, plan corruption cases, weights changed since
 * compile, and a run whose output and memory peak are checked exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"
#include "testutil.h"

static float W[6] = {1, 2, 3, -1, 0.5f, 0.25f}; /* linear 3 -> 2 */
static float B[2] = {0.1f, -0.2f};

static void write_weights(const char *path) {
  dc_st_out t[3] = {
      {"lin.weight", {DT_F32, 2, {2, 3}}, W},
      {"lin.bias", {DT_F32, 1, {2}}, B},
      {"unused.weight", {DT_F32, 1, {2}}, B},
  };
  CHECK_OK(dc_st_write(path, t, 3));
}

static int32_t add_weight(dc_module *m, const dc_st_file *f, int32_t file, const char *name) {
  const dc_st_tensor *t = dc_st_find(f, name);
  dc_weight w = {.name = name, .file = file, .offset = t->offset, .bytes = t->bytes, .type = {t->dtype, t->rank, {0}}};
  memcpy(w.type.dims, t->dims, sizeof t->dims);
  int32_t wi = dc_module_add_weight(m, &w);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = wi;
  n.type = w.type;
  n.scope = "lin";
  return dc_module_add_node(m, &n);
}

/* x[4,3] -> silu(linear(x)) -> y[4,2], plus a dead branch. */
static dc_module *build(const char *wpath) {
  dc_st_file f;
  CHECK_OK(dc_st_open(wpath, &f));
  dc_module *m = dc_module_create();
  dc_weight_file wf = {wpath, f.header_hash, f.file.size};
  int32_t file = dc_module_add_file(m, &wf);
  dc_type xt = {DT_F32, 2, {4, 3}};
  int32_t x = dc_module_add_input(m, "x", &xt, INIT_NORMAL);
  int32_t w = add_weight(m, &f, file, "lin.weight");
  int32_t b = add_weight(m, &f, file, "lin.bias");
  int32_t u = add_weight(m, &f, file, "unused.weight");
  dc_node lin = dc_node_make(OP_LINEAR, 3, (int32_t[]){x, w, b});
  lin.scope = "lin";
  dc_node_set_int(&lin, "bias", 1);
  CHECK_OK(dc_infer_type(m, &lin, &lin.type));
  int32_t l = dc_module_add_node(m, &lin);
  dc_node dead = dc_node_make(OP_ADD, 2, (int32_t[]){l, u});
  CHECK_OK(dc_infer_type(m, &dead, &dead.type));
  dc_module_add_node(m, &dead);
  dc_node act = dc_node_make(OP_SILU, 1, &l);
  CHECK_OK(dc_infer_type(m, &act, &act.type));
  int32_t y = dc_module_add_node(m, &act);
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_module_set_meta(m, "class", "Test"));
  dc_st_close(&f);
  return m;
}

static void test_verifier(dc_module *m) {
  dc_type saved = m->nodes[4].type;
  m->nodes[4].type.dims[1] = 7;
  CHECK_ERR(dc_verify(m, "test"), "IR verifier (after test): %4: stored type f32[4,7] but the inputs imply f32[4,2]");
  m->nodes[4].type = saved;
  m->nodes[4].inputs[0] = 6;
  CHECK_ERR(dc_verify(m, "test"), "input 0 refers to %6, not an earlier node");
  m->nodes[4].inputs[0] = 0;
  CHECK_OK(dc_verify(m, "test"));
  printf("verifier: catches a wrong stored type and a forward reference\n");
}

static void test_dump_and_dce(dc_module *m) {
  char *before = tu_ir_text(m), *again = tu_ir_text(m);
  CHECK(strcmp(before, again) == 0);
  CHECK(strstr(before, "%4 = linear(%0, %1, %2) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[4,2]  # lin, row, dev0, 32 B, live 4..6") != NULL);
  CHECK(strstr(before, "%0 = input \"x\" : f32[4,3]  # row, dev0, 48 B, live 0..4") != NULL);
  CHECK(strstr(before, "# peak activations: 80 B (80 bytes) while %4 runs") != NULL);
  CHECK_OK(dc_pipeline_run(m, NULL));
  char *after = tu_ir_text(m);
  CHECK(m->nnodes == 5 && m->nweights == 2);
  CHECK(strstr(after, "unused") == NULL);
  CHECK(strstr(after, "%4 = silu(%3) : f32[4,2]") != NULL);
  /* Planned: x [0, 48), the linear at 64 (aligned), silu in place over it. */
  CHECK(strstr(after, "# peak activations: 96 B (96 bytes) while %3 runs") != NULL);
  CHECK(strstr(after, "# arena: 96 B planned (live bytes at most 80 B: 83% packed)") != NULL);
  printf("dump: deterministic, with bytes and live ranges; dce removed the dead add and its weight\n");
  dc_free(before);
  dc_free(again);
  dc_free(after);
}

static void test_roundtrip(const dc_module *m, const char *plan_path) {
  char *text = tu_ir_text(m);
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = text, .module = (dc_module *)m};
  CHECK_OK(dc_plan_write(plan_path, &plan));
  dc_plan back;
  CHECK_OK(dc_plan_read(plan_path, &back));
  char *text2 = back.module ? tu_ir_text(back.module) : NULL;
  CHECK(text2 && strcmp(text, text2) == 0);
  CHECK(back.ir_text && strcmp(back.ir_text, text) == 0);
  printf("plan: write/read round trip reproduces the IR exactly\n");
  dc_free(text);
  dc_free(text2);
  dc_plan_deinit(&back);
}

static size_t read_file(const char *path, unsigned char **out) {
  char *d;
  size_t n;
  CHECK_OK(dc_file_read_all(path, &d, &n));
  *out = (unsigned char *)d;
  return n;
}

static void test_corruption(const char *plan_path) {
  unsigned char *d;
  size_t n = read_file(plan_path, &d);
  char *bad = tu_path("bad.dplan");
  tu_write_file(bad, d, n / 2);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "bytes but the file has");
  tu_write_file(bad, d, 10);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "too short for a diffc plan header (truncated?)");
  d[n - 100] ^= 0x40;
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "checksum mismatch (the file is corrupted)");
  d[n - 100] ^= 0x40;
  d[8] = 9;
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "plan format version 9, but this diffrun reads version 7");
  d[8] = 3; /* before weight content hashes: the message says what changed */
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "plan format version 3, written by an older diffc; this diffrun reads version 7");
  d[8] = 6; /* before the gated residual: linear's attributes differ */
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "plan format version 6, written by an older diffc; this diffrun reads version 7 "
                                               "(since version 7 a linear may gate its residual;");
  d[8] = 4; /* before integer dtypes and constants */
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "plan format version 4, written by an older diffc; this diffrun reads version 7 "
                                               "(since version 7 a linear may gate its residual; since version 6 a plan may "
                                               "be a whole pipeline in phases; since version 5 "
                                               "it may hold integer inputs and constants");
  d[0] = 'X';
  tu_write_file(bad, d, n);
  CHECK_ERR(dc_plan_read(bad, &(dc_plan){0}), "not a diffc plan");
  printf("plan: truncated, corrupted, wrong version and wrong magic are refused\n");
  free(bad);
  dc_free(d);
}

static void test_run(const char *plan_path, const char *wpath) {
  drt_plan *p;
  CHECK_OK(drt_load(plan_path, NULL, &p));
  float x[12] = {1, 0, -1, 2, 1, 0, 0, 0, 0, -3, 2, 1};
  CHECK_ERR(drt_set_input(p, "x", x, 11), "input \"x\" needs 12 values, got 11");
  CHECK_ERR(drt_set_input(p, "nope", x, 12), "has no input \"nope\"");
  CHECK_OK(drt_set_input(p, "x", x, 12));
  drt_stats s;
  CHECK_OK(drt_run(p, &s));
  size_t numel;
  const float *y = drt_output(p, "y", &numel);
  CHECK(numel == 8);
  double maxerr = 0;
  for (int r = 0; r < 4; r++)
    for (int o = 0; o < 2; o++) {
      double z = B[o];
      for (int k = 0; k < 3; k++) z += (double)x[r * 3 + k] * W[o * 3 + k];
      double want = z / (1 + exp(-z));
      maxerr = fmax(maxerr, fabs(want - y[r * 2 + o]));
    }
  CHECK(maxerr < 1e-6);
  CHECK(s.device_peak_bytes == s.device_predicted_bytes && s.device_peak_bytes == 96);
  printf("run: output matches silu(x W^T + b) (max err %.2g); device peak %llu bytes = predicted\n", maxerr,
         (unsigned long long)s.device_peak_bytes);
  drt_destroy(p);

  /* --check-finite names the first step that overflows. */
  drt_options fin = {.check_finite = 1};
  CHECK_OK(drt_load(plan_path, &fin, &p));
  float huge[12] = {3e38f, 3e38f, 3e38f, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_OK(drt_set_input(p, "x", huge, 12));
  CHECK_ERR(drt_run(p, &s), "step %3 (linear, lin) produced Inf at element 0 of f32[4,2]");
  drt_destroy(p);
  printf("run: --check-finite names the first step with a NaN/Inf output\n");

  /* Rewrite the weights with a different header: the plan must refuse them. */
  dc_st_out t[1] = {{"lin.weight", {DT_F32, 2, {3, 2}}, W}};
  CHECK_OK(dc_st_write(wpath, t, 1));
  CHECK_ERR(drt_load(plan_path, NULL, &p), "changed since compile");
  printf("run: a plan whose weight file changed is refused\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *wpath = tu_path("w.safetensors"), *plan_path = tu_path("t.dplan");
  write_weights(wpath);
  dc_module *m = build(wpath);
  test_verifier(m);
  test_dump_and_dce(m);
  test_roundtrip(m, plan_path);
  test_corruption(plan_path);
  test_run(plan_path, wpath);
  dc_module_destroy(m);
  free(wpath);
  free(plan_path);
  return tu_finish();
}
