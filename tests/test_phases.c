/* test_phases — a module in phases (ir.h, "phases"): the verifier's rules,
 * the metadata round trip, liveness around a loop, the hoist pass (with and
 * without --no-hoist, and held uploads under --offload model), and the
 * runtime running one phase at a time on the reference backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "runtime/diffrun.h"
#include "testutil.h"

enum { D = 8, S = 4 };

static float wq[D * D], wk[D * D], wd[D * D];

static void write_weights(const char *path) {
  for (int i = 0; i < D * D; i++) {
    wq[i] = (float)sin(i * 0.37) * 0.3f;
    wk[i] = (float)cos(i * 0.21) * 0.3f;
    wd[i] = (float)sin(i * 0.11 + 1) * 0.3f;
  }
  dc_st_out t[3] = {{"wd", {DT_F32, 2, {D, D}}, wd}, {"wk", {DT_F32, 2, {D, D}}, wk}, {"wq", {DT_F32, 2, {D, D}}, wq}};
  CHECK_OK(dc_st_write(path, t, 3));
}

typedef struct {
  dc_module *m;
  dc_st_file f;
  int32_t file;
} builder;

static int32_t weight(builder *b, const char *name, int32_t phase) {
  const dc_st_tensor *t = dc_st_find(&b->f, name);
  dc_weight w = {.name = name, .file = b->file, .offset = t->offset, .bytes = t->bytes, .type = {DT_F32, 2, {D, D}}};
  int32_t wi = dc_module_add_weight(b->m, &w);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = wi, n.type = w.type, n.scope = name, n.phase = phase;
  return dc_module_add_node(b->m, &n);
}

static int32_t input(builder *b, const char *name, int32_t phase) {
  dc_type t = {DT_F32, 3, {1, S, D}};
  int32_t id = dc_module_add_input(b->m, name, &t, INIT_NORMAL);
  b->m->nodes[id].phase = phase;
  return id;
}

static int32_t op2(builder *b, dc_op op, int32_t x, int32_t y, const char *scope) {
  dc_node n = dc_node_make(op, 2, (int32_t[]){x, y});
  n.scope = scope;
  CHECK_OK(dc_infer_type(b->m, &n, &n.type));
  return dc_module_add_node(b->m, &n);
}

/* text: ctx = emb·wqᵀ; loop a: ya = xa·wqᵀ + ctx·wkᵀ; loop b: the same with
 * xb; out: o = z·wdᵀ.  ctx·wkᵀ is the same in every iteration. */
static dc_module *build_with(const char *wpath, int cast_q) {
  builder b = {.m = dc_module_create()};
  CHECK_OK(dc_st_open(wpath, &b.f));
  dc_weight_file wf = {wpath, b.f.header_hash, b.f.file.size};
  b.file = dc_module_add_file(b.m, &wf);
  const char *names[5] = {"text", "prologue", "loop.a", "loop.b", "out"};
  for (int i = 0; i < 5; i++) CHECK(dc_module_add_phase(b.m, names[i], i == 2 || i == 3) == i);
  int32_t emb = input(&b, "emb", 0), q = weight(&b, "wq", 0);
  int32_t ctx = op2(&b, OP_LINEAR, emb, q, "text.proj");
  int32_t k = weight(&b, "wk", 2);
  const char *xin[2] = {"xa", "xb"}, *yout[2] = {"ya", "yb"};
  for (int h = 0; h < 2; h++) {
    int32_t x = input(&b, xin[h], 2 + h);
    int32_t kv = op2(&b, OP_LINEAR, ctx, k, "attn.to_k");
    int32_t qw = q;
    if (cast_q) { /* a stored weight's conversion, as a 16-bit checkpoint's weights get */
      dc_node c = dc_node_make(OP_CAST, 1, &q);
      c.type = b.m->nodes[q].type, c.scope = "attn.to_q.cast", c.phase = 2 + h;
      qw = dc_module_add_node(b.m, &c);
    }
    int32_t qx = op2(&b, OP_LINEAR, x, qw, "attn.to_q");
    CHECK_OK(dc_module_add_output(b.m, yout[h], op2(&b, OP_ADD, qx, kv, "attn.sum")));
  }
  int32_t z = input(&b, "z", 4), d = weight(&b, "wd", 4);
  CHECK_OK(dc_module_add_output(b.m, "o", op2(&b, OP_LINEAR, z, d, "out.proj")));
  CHECK_OK(dc_module_set_meta(b.m, "class", "PhaseTest"));
  CHECK_OK(dc_phases_sync_meta(b.m));
  dc_st_close(&b.f);
  return b.m;
}

static dc_module *build(const char *wpath) { return build_with(wpath, 0); }

static int32_t find_op_scope(const dc_module *m, dc_op op, const char *scope, int nth) {
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == op && m->nodes[i].scope && !strcmp(m->nodes[i].scope, scope) && nth-- == 0) return i;
  return -1;
}

static void test_verifier(const char *wpath) {
  dc_module *m = build(wpath);
  CHECK_OK(dc_verify(m, "test"));
  CHECK(!strcmp(dc_module_get_meta(m, "phases"), "text@0 prologue@3 loop.a*@3 loop.b*@8 out@12"));
  /* loop b reading loop a's value: lost when a is skipped */
  int32_t sum_b = find_op_scope(m, OP_ADD, "attn.sum", 1), qx_a = find_op_scope(m, OP_LINEAR, "attn.to_q", 0);
  int32_t saved = m->nodes[sum_b].inputs[0];
  m->nodes[sum_b].inputs[0] = qx_a;
  CHECK_ERR(dc_verify(m, "test"), "reads a value of loop phase loop.a from phase loop.b");
  m->nodes[sum_b].inputs[0] = saved;
  m->nodes[5].phase = 0; /* a node of the text phase after the loop began */
  CHECK_ERR(dc_verify(m, "test"), "comes after a node of a later phase");
  m->nodes[5].phase = 2;
  CHECK_OK(dc_module_set_meta(m, "phases", "text@0 prologue@3 loop.a*@4 loop.b*@8 out@12"));
  CHECK_ERR(dc_verify(m, "test"), "metadata \"phases\" is");
  dc_module_destroy(m);
}

/* The dump carries the phases and parses back to the same table. */
static void test_round_trip(const char *wpath) {
  dc_module *m = build(wpath);
  char *text = tu_ir_text(m);
  dc_module *back = NULL;
  CHECK_OK(dc_parse(text, strlen(text), "dump", &back));
  CHECK(back && back->nphases == 5 && back->phases[3].loop && !strcmp(back->phases[4].name, "out"));
  for (int32_t i = 0; back && i < m->nnodes; i++) CHECK(back->nodes[i].phase == m->nodes[i].phase);
  dc_module_set_meta(back, "phases", "text@0 loop*@x");
  CHECK_ERR(dc_phases_from_meta(back), "a phase's first node is not a node index");
  dc_module_destroy(back);
  free(text);
  dc_module_destroy(m);
}

/* The hoist pass moves ctx·wkᵀ (both halves) to the prologue; the values
 * it holds live to the loop's end; --no-hoist leaves them. */
static void test_hoist(const char *wpath) {
  for (int off = 0; off < 2; off++) {
    dc_module *m = build(wpath);
    dc_memory_options mo = {.no_hoist = off};
    CHECK_OK(dc_pipeline_run(m, &(dc_pipeline_options){.memory = &mo}));
    int32_t k0 = find_op_scope(m, OP_LINEAR, "attn.to_k", 0), k1 = find_op_scope(m, OP_LINEAR, "attn.to_k", 1);
    CHECK(k0 >= 0 && k1 >= 0);
    int want = off ? 2 : 1;
    CHECK(m->nodes[k0].phase == want && m->nodes[k1].phase == (off ? 3 : 1));
    const char *h = dc_module_get_meta(m, "hoist");
    CHECK(h && strstr(h, off ? "off (--no-hoist" : "2 values hold 256 B"));
    dc_liveness l;
    CHECK_OK(dc_liveness_compute(m, &l));
    int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
    dc_phase_spans(m, first, end);
    int32_t ctx = find_op_scope(m, OP_LINEAR, "text.proj", 0);
    CHECK(l.last_use[ctx] == (off ? end[3] - 1 : first[2] - 1) || (!off && l.last_use[ctx] < first[2]));
    if (!off) CHECK(l.last_use[k0] == end[3] - 1 && l.last_use[k1] == end[3] - 1);
    int32_t z = m->inputs[3].node; /* "z": from its phase's first step */
    CHECK(dc_value_first_step(m, z) == first[4]);
    CHECK_OK(dc_memplan_check(m, &l));
    dc_liveness_deinit(&l);
    dc_module_destroy(m);
  }
}

/* --offload model: each weight uploaded once and held for the phase (or
 * loop) that reads it; the loop's uploads before the loop. */
static void test_offload_model(const char *wpath) {
  dc_module *m = build(wpath);
  dc_memory_options mo = {.offload = DC_OFFLOAD_MODEL, .no_hoist = 1};
  CHECK_OK(dc_pipeline_run(m, &(dc_pipeline_options){.memory = &mo}));
  int uploads = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (m->nodes[i].op != OP_UPLOAD) continue;
    uploads++;
    const char *w = m->weights[m->nodes[m->nodes[i].inputs[0]].ref].name;
    int want = !strcmp(w, "wq") ? 0 : !strcmp(w, "wk") ? 1 : 4;
    CHECK(m->nodes[i].phase == want);
  }
  CHECK(uploads == 3);
  dc_module_destroy(m);
}

/* --offload model with hoisting: a loop node that converts a held upload (a
 * weight's cast) reads nothing computed before the loop, so it stays in the
 * loop rather than holding a converted copy of the weight through it (a
 * full-size Flux pipeline held 44 GiB of f32 casts so). */
static void test_offload_model_casts(const char *wpath) {
  dc_module *m = build_with(wpath, 1);
  dc_memory_options mo = {.offload = DC_OFFLOAD_MODEL};
  CHECK_OK(dc_pipeline_run(m, &(dc_pipeline_options){.memory = &mo}));
  int casts = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_CAST) {
      casts++;
      CHECK(m->nodes[i].phase == 2 || m->nodes[i].phase == 3);
    }
  CHECK(casts == 2);
  const char *h = dc_module_get_meta(m, "hoist");
  CHECK(h && strstr(h, "2 values hold 256 B")); /* ctx·wkᵀ of both halves, as without offload */
  dc_module_destroy(m);
}

/* Phases run one at a time; a loop phase twice with new inputs; each
 * output as computed by hand. */
static void matvec(const float *x, const float *w, float *y) {
  for (int s = 0; s < S; s++)
    for (int o = 0; o < D; o++) {
      float acc = 0;
      for (int i = 0; i < D; i++) acc += x[s * D + i] * w[o * D + i];
      y[s * D + o] = acc;
    }
}

static void test_run(const char *wpath, const char *plan_path, dc_offload_kind offload) {
  printf("phases one at a time, --offload %s\n", dc_offload_name(offload));
  dc_module *m = build(wpath);
  dc_memory_options mo = {.offload = offload, .no_hoist = offload != DC_OFFLOAD_NONE}; /* wk: no reader in the prologue */
  CHECK_OK(dc_pipeline_run(m, &(dc_pipeline_options){.memory = &mo}));
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = "", .module = m, .pipeline_json = "{}"};
  if (getenv("PHASES_DUMP")) { char *t = tu_ir_text(m); fputs(t, stderr); free(t); }
  CHECK_OK(dc_plan_write(plan_path, &plan));
  dc_module_destroy(m);
  drt_plan *p = NULL;
  CHECK_OK(drt_load(plan_path, &(drt_options){.backend = "reference"}, &p));
  if (!p) return;
  CHECK(drt_phase_count(p) == 5 && drt_phase_find(p, "loop.b") == 3 && drt_pipeline_json(p));
  float emb[S * D], x[S * D], z[S * D], ctx[S * D], kv[S * D], want[S * D];
  for (int i = 0; i < S * D; i++) emb[i] = (float)cos(i * 0.3), z[i] = (float)sin(i * 0.7);
  matvec(emb, wq, ctx);
  matvec(ctx, wk, kv);
  /* --offload model: the prologue uploads wk for the loop and reads it in no
   * step of its own; its run must still end with the copy made (each time:
   * the copy stream's thread may not have started when the phase ends) */
  for (int again = 0; again < (offload ? 40 : 1); again++) {
  CHECK_OK(drt_set_input(p, "emb", emb, S * D));
  CHECK_OK(drt_run_phase(p, 0, NULL));
  CHECK_OK(drt_run_phase(p, 1, NULL));
  for (int iter = 0; iter < 3; iter++)
    for (int h = 0; h < 2; h++) {
      for (int i = 0; i < S * D; i++) x[i] = (float)(iter + 1) * 0.1f * (float)(i % 5) - (float)h;
      CHECK_OK(drt_set_input(p, h ? "xb" : "xa", x, S * D));
      if (iter == 1 && h == 0) continue; /* a skipped half (guidance <= 1) leaves the other intact */
      CHECK_OK(drt_run_phase(p, 2 + h, NULL));
      matvec(x, wq, want);
      for (int i = 0; i < S * D; i++) want[i] += kv[i];
      size_t n = 0;
      const float *y = drt_output(p, h ? "yb" : "ya", &n);
      double err = n == S * D ? tu_rel_l2(y, want, n) : 1;
      if (err >= 1e-6) printf("iteration %d half %d: rel L2 %g\n", iter, h, err);
      CHECK(err < 1e-6);
    }
  }
  CHECK_OK(drt_set_input(p, "z", z, S * D));
  drt_stats st;
  CHECK_OK(drt_run_phase(p, 4, &st));
  matvec(z, wd, want);
  CHECK(tu_rel_l2(drt_output(p, "o", NULL), want, S * D) < 1e-6);
  CHECK(st.device_peak_bytes <= st.device_predicted_bytes);
  CHECK_ERR(drt_run_phase(p, 5, NULL), "no phase 5 (the plan has 5)");
  CHECK_OK(drt_run(p, &st)); /* every phase once */
  CHECK(st.device_peak_bytes == st.device_predicted_bytes);
  drt_destroy(p);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *wpath = tu_path("w.safetensors"), *plan = tu_path("phases.dplan");
  write_weights(wpath);
  test_verifier(wpath);
  test_round_trip(wpath);
  test_hoist(wpath);
  test_offload_model_casts(wpath);
  test_offload_model(wpath);
  test_run(wpath, plan, DC_OFFLOAD_NONE);
  test_run(wpath, plan, DC_OFFLOAD_MODEL);
  free(wpath);
  free(plan);
  return tu_finish();
}
