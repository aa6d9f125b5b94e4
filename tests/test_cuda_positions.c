/* test_cuda_positions.c — what the op case table (op_cases.h) cannot say
 * about the CUDA kernels of the position encodings (rope, rope_freqs,
 * relative_position_bias, codegen/cuda/g_position.c) and of attention_bias
 * (g_attention.c).  The table runs them in the emulator against the
 * reference; here, from the same rows' generated sources:
 *   - every distinct source compiles under NVRTC for sm_80 and sm_90 with no
 *     warning, when NVRTC is installed (else reported as not run): no
 *     fixture uses these ops yet, so test_cuda_compile does not see them;
 *   - rope turns its pairs with __fmul_rn/__fadd_rn (no FMA contraction:
 *     the bit-for-bit claim holds on a GPU, not only in the emulator);
 *   - rope_freqs carries its frequencies as exact double literals, and
 *     relative_position_bias one bucket per offset (Sq + Sk - 1 of them),
 *     the reference's own buckets;
 *   - plain attention has no bias in it (ATT_BIAS 0, four parameters);
 *   - the limits and refusals: a bucket table past 2^20 offsets, bucket
 *     counts whose log-spaced buckets would divide by zero (the type rule). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cgen.h" /* dc_cuda_ctype */
#include "codegen/cuda/nvrtc.h"
#include "cuda_harness.h"
#include "op_cases.h"
#include "runtime/kernels.h"
#include "testutil.h"

/* ---- NVRTC: each distinct source once, sm_80 and sm_90 ------------------ */
enum { MAX_SOURCES = 256 };
static dc_nvrtc *nv;
static dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
static int narchs, nvrtc_compiles;
static uint64_t compiled[MAX_SOURCES];
static int ncompiled;

static void nvrtc_init(void) {
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("NVRTC not found (%s): the sources are not compiled here\n", dc_status_message(st));
    dc_status_free(st);
    nv = NULL;
    return;
  }
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_80,sm_90", archs, &narchs));
  printf("NVRTC %s: every distinct source compiled for sm_80 and sm_90, warnings fail\n", dc_nvrtc_version(nv));
}

static void nvrtc_check(const dc_cuda_kernel *k) {
  if (!nv) return;
  uint64_t h = dc_hash64(k->source, strlen(k->source));
  for (int i = 0; i < ncompiled; i++)
    if (compiled[i] == h) return;
  if (ncompiled < MAX_SOURCES) compiled[ncompiled++] = h;
  for (int a = 0; a < narchs; a++) {
    dc_nvrtc_output out;
    memset(&out, 0, sizeof out);
    dc_status *st = dc_nvrtc_compile(nv, k->name, k->source, &archs[a], &out);
    CHECK_OK(st);
    CHECK(!st && !out.log);
    if (!st && out.log) fprintf(stderr, "NVRTC warnings for %s on %s:\n%s\n", k->name, archs[a].name, out.log);
    nvrtc_compiles++;
    dc_nvrtc_output_deinit(&out);
  }
}

/* ---- what the sources say ------------------------------------------------ */
/* The numbers of a source's brace-enclosed table after `decl`; -1 if none. */
static int table_length(const char *source, const char *decl) {
  const char *p = strstr(source, decl);
  if (!p || !(p = strchr(p, '{'))) return -1;
  int n = 0;
  for (const char *e = strchr(p, '}'); e && p < e; p++) n += *p == ',';
  return n + 1;
}

static void check_rope_freqs(const dc_module *m, const dc_node *n, const char *src) {
  int64_t d = n->type.dims[2];
  CHECK(table_length(src, "rf_freq[") == (int)(d / 2));
  /* the frequencies as the reference computes them, printed exactly: each
   * literal reads back to the same double */
  const char *p = strchr(strstr(src, "rf_freq["), '{') + 1;
  int ok = 1;
  for (int a = 0, k = 0; a < n->nlist; a++)
    for (int64_t i = 0; i < n->list[a] / 2; i++, k++) {
      char *end;
      double v = strtod(p, &end), want = 1.0 / pow(dc_node_float(n, "theta"), (double)(2 * i) / (double)n->list[a]);
      ok = ok && end != p && v == want;
      p = end + strspn(end, ", \n");
    }
  CHECK(ok);
  (void)m;
}

static void check_rel_bias(const dc_module *m, const dc_node *n, const char *src) {
  const dc_type *tab = &m->nodes[n->inputs[0]].type;
  int64_t sq = n->type.dims[1], sk = n->type.dims[2];
  CHECK(table_length(src, "rpb_bucket[") == (int)(sq + sk - 1));
  const char *p = strchr(strstr(src, "rpb_bucket["), '{') + 1;
  int ok = 1;
  for (int64_t r = 0; r < sq + sk - 1; r++) {
    char *end;
    long v = strtol(p, &end, 10);
    ok = ok && end != p &&
         v == (long)dc_t5_position_bucket(r - (sq - 1), tab->dims[0], (int)dc_node_int(n, "bidirectional"),
                                          dc_node_int(n, "max_distance"));
    p = end + strspn(end, ", \n");
  }
  CHECK(ok);
}

static void check_source(const dc_module *m, const dc_node *n, const dc_cuda_kernel *k) {
  if (n->op == OP_ROPE) CHECK(strstr(k->source, "__fmul_rn") && strstr(k->source, "__fadd_rn"));
  if (n->op == OP_ROPE_FREQS) check_rope_freqs(m, n, k->source);
  if (n->op == OP_REL_POS_BIAS) check_rel_bias(m, n, k->source);
  /* The kernel's fifth parameter and its bias switch, in whichever of the
   * two attention generators took the node (g_attention.c, or g_flash.c
   * at bf16/f16, whose parameters carry the operands' own types). */
  if (n->op != OP_ATTENTION_BIAS && n->op != OP_ATTENTION) return;
  char flash_five[96];
  int flash = strstr(k->source, "#define FL_BIAS") != NULL, bias = n->op == OP_ATTENTION_BIAS;
  snprintf(flash_five, sizeof flash_five, "const %s *v, const %s *bias)",
           dc_cuda_ctype(m->nodes[n->inputs[2]].type.dtype), dc_cuda_ctype(m->nodes[n->inputs[bias ? 3 : 2]].type.dtype));
  const char *five = flash ? flash_five : "const att_in_t *v, const att_b_t *bias)";
  const char *on = flash ? "#define FL_BIAS 1" : "#define ATT_BIAS 1", *off = flash ? "#define FL_BIAS 0" : "#define ATT_BIAS 0";
  if (bias) CHECK(strstr(k->source, on) && strstr(k->source, five));
  else CHECK(strstr(k->source, off) && !strstr(k->source, flash ? "*v, const" : five));
}

static int is_mine(dc_op op) {
  return op == OP_ROPE || op == OP_ROPE_FREQS || op == OP_REL_POS_BIAS || op == OP_ATTENTION_BIAS;
}

/* The table's rows of these ops that run on CUDA, each precision they run
 * at, and one plain attention row. */
static void row_sources(void) {
  int n = 0, rows = 0, plain = 0;
  const op_case *t = oc_table(&n);
  for (int i = 0; i < n; i++) {
    const op_case *c = &t[i];
    int want_plain = c->op == OP_ATTENTION && !plain;
    if (!(is_mine(c->op) || want_plain) || !((c->where ? c->where : OC_ALL) & OC_CUDA)) continue;
    int cc = c->cuda_computes ? c->cuda_computes : OC_CC_F32;
    for (int p = 0; p < 3; p++) {
      if (!(cc & (1 << p))) continue;
      static const dc_cuda_compute computes[3] = {DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16, DC_CUDA_COMPUTE_F16};
      dc_module *m = dc_module_create();
      int32_t y = oc_build(c, m);
      dc_cuda_options o = {.compute = computes[p]};
      dc_cuda_kernel k;
      dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_pos", &k) : dc_error(DC_ERR_MISMATCH, "oc_build");
      CHECK_OK(st);
      if (!st) {
        nvrtc_check(&k);
        check_source(m, &m->nodes[y], &k);
        rows += !want_plain;
        plain += want_plain;
        dc_cuda_kernel_deinit(&k);
      }
      dc_module_destroy(m);
    }
  }
  CHECK(rows >= 40 && plain > 0);
  printf("%d sources of rope, rope_freqs, relative_position_bias and attention_bias rows generated and checked\n", rows);
}

/* ---- limits and refusals ------------------------------------------------------ */
static int32_t rel_bias_node(dc_module *m, int64_t buckets, int bidir, int64_t maxd, int64_t sq, int64_t sk,
                             dc_status **st) {
  dc_type tab = {DT_F32, 2, {buckets, 4}};
  dc_node n = dc_node_make(OP_REL_POS_BIAS, 1, (int32_t[]){dc_module_add_input(m, "table", &tab, INIT_NORMAL)});
  dc_node_set_int(&n, "bidirectional", bidir);
  dc_node_set_int(&n, "max_distance", maxd);
  n.type = (dc_type){DT_F32, 3, {4, sq, sk}};
  n.layout = LAYOUT_ROWMAJOR;
  dc_type t;
  *st = dc_infer_type(m, &n, &t);
  return dc_module_add_node(m, &n);
}

static void limits(void) {
  dc_module *m = dc_module_create();
  dc_status *st;
  /* 2 buckets bidirectional: one a side, no exact one; max_distance at the exact ones' end */
  rel_bias_node(m, 2, 1, 128, 4, 4, &st);
  CHECK_ERR(st, "expected an exact bucket per side");
  rel_bias_node(m, 32, 1, 8, 4, 4, &st);
  CHECK_ERR(st, "max_distance above the exact ones");
  rel_bias_node(m, 2, 0, 2, 4, 4, &st);
  CHECK_OK(st);
  /* T5-XXL's 512 tokens: 1023 buckets in the source; past 2^20 offsets refused */
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  int32_t y = rel_bias_node(m, 32, 1, 128, 512, 512, &st);
  CHECK_OK(st);
  CHECK_OK(dc_cuda_gen_node(m, y, &o, "k", &k));
  CHECK(table_length(k.source, "rpb_bucket[") == 1023);
  nvrtc_check(&k);
  dc_cuda_kernel_deinit(&k);
  y = rel_bias_node(m, 32, 1, 128, 1 << 19, (1 << 19) + 2, &st);
  CHECK_OK(st);
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "at most 2^20 offsets");
  dc_module_destroy(m);
  printf("bucket counts without exact buckets refused; T5-XXL's table generated; 2^20 offsets the limit\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  nvrtc_init();
  limits();
  row_sources();
  if (nv) printf("NVRTC: %d distinct sources, %d compiles, no warnings expected\n", ncompiled, nvrtc_compiles);
  else printf("NVRTC: not run\n");
  if (nv) dc_nvrtc_unload(nv);
  return tu_finish();
}
