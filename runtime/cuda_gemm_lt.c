/* cuda_gemm_lt.c — the CUDA backend's GEMMs through cuBLASLt: which steps
 * go there (the one rule, below), their descriptors made at load, the
 * algorithm chosen at load (heuristic, then timed) and cached on disk, and
 * the matmul a step enqueues in place of its NVRTC kernel.  Everything not
 * eligible, and everything when cuBLASLt is off, missing or fails at load,
 * runs its NVRTC kernel: the plan holds one for every step either way.
 *
 * ELIGIBILITY (dc_cuda_lt_why_not says which clause failed):
 *   - a non-empty linear without a gated residual, or conv2d with a 1x1 kernel, stride 1
 *     and no padding (NHWC: a plain GEMM over N·H·W rows; NCHW: one GEMM per
 *     sample, batched with strides);
 *   - activation and weight of one dtype that cuBLASLt multiplies with f32
 *     accumulation (CUBLAS_COMPUTE_32F): bf16·bf16 or f16·f16.  f32·f32
 *     stays on the NVRTC kernel, so f32 plans keep matching the CPU to 1e-5,
 *     and so do mixed pairs (f32 activations with bf16 weights);
 *   - the output in that dtype or f32; a bias, a residual in the output's
 *     dtype (cuBLASLt reads both as D's type);
 *   - an epilogue cuBLASLt computes as ops.def defines it: none, bias
 *     (EPILOGUE_BIAS, a vector over D's rows, so not for NCHW, whose output
 *     channels are D's columns), act gelu_tanh (EPILOGUE_GELU, the tanh
 *     approximation: never act gelu, the erf one), bias then gelu_tanh
 *     (EPILOGUE_GELU_BIAS), and a residual of exactly the output's shape as
 *     C with beta = 1 (D = A·B + C, C == D allowed when the output overwrites
 *     the residual in place) — but not a residual with an act: cuBLASLt adds
 *     C before the act, ops.def after.  silu, geglu, quick_gelu, gelu (erf),
 *     gated and broadcast residuals stay on the NVRTC kernel.
 *
 * ROW-MAJOR AS COLUMN-MAJOR.  cuBLASLt is column-major; a row-major R×C
 * matrix with row stride C is the column-major C×R matrix with ld C, its
 * transpose, so no copy is needed:
 *   linear / NHWC 1x1: Y[M,N] = X[M,K]·W[N,K]ᵀ is Yᵀ = W·Xᵀ column-major:
 *     A = W as K×N (ld K) with TRANSA = T, B = X as K×M (ld K), N;
 *     C = D = Yᵀ as N×M (ld N); the bias runs over D's N rows.
 *   NCHW 1x1, per sample n: Y[n][O,HW] = W[O,C]·X[n][C,HW] is
 *     Y[n]ᵀ = X[n]ᵀ·Wᵀ: A = X[n] as HW×C (ld HW), B = W as C×O (ld C),
 *     both N; D = HW×O (ld HW); batch N with strides C·HW (A), 0 (B),
 *     O·HW (C, D).
 *
 * ALGORITHMS.  Per distinct problem (sizes, types, epilogue, alignments:
 * the GEMMs that share one share its choice), cublasLtMatmulAlgoGetHeuristic
 * gives up to 8 candidates that fit a 32 MiB workspace; with more than one,
 * each runs a few times between two events on the step's compute stream at load (the arena's
 * bytes are scratch then) and the fastest wins.  The choices are cached in
 * the cache root (support.h: dc_cache_root_dir) as cublaslt/<key>.algos, the
 * key a hash of every GEMM's problem, the GPU's name and SM count and the
 * library's version, written atomically; the next load checks each cached
 * algorithm with cublasLtMatmulAlgoCheck and uses them, and a file that does
 * not parse or check is noted and replaced by a new selection.  Each device
 * gets one workspace of the most its chosen algorithms need, allocated apart
 * from the arena. */
#include "cuda_backend_impl.h"
#include "cublaslt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LT_MAX_WORKSPACE ((size_t)32 << 20)
#define LT_CANDIDATES 8
#define LT_TIMED_REPS 3

typedef struct {
  int32_t node;
  int device;
  uint64_t m, n, k;          /* D is m×n, the sum over k */
  int64_t batch;             /* 1, or N samples for NCHW */
  int a_type, d_type, epilogue, nchw;
  int32_t a_src, b_src, bias_src, c_src; /* value nodes: A, B, bias (-1), C (-1: beta 0, C = D) */
  dc_lt_matmul_desc desc;
  dc_lt_layout la, lb, lcd; /* A, B, and C = D's */
  dc_lt_algo algo;
  size_t workspace;
} lt_gemm;

struct dc_cuda_lt {
  dc_lt_api api;
  dc_lt_handle handle[DC_MAX_DEVICES];
  dc_cu_deviceptr workspace[DC_MAX_DEVICES];
  size_t workspace_bytes[DC_MAX_DEVICES];
  lt_gemm *gemm;
  int ngemm;
  int32_t *gemm_of_node; /* per node: its gemm, -1 for the NVRTC kernel */
};

/* ---- eligibility ------------------------------------------------------------ */
static int lt_type(dc_dtype t) { return t == DT_BF16 ? DC_LT_R_16BF : t == DT_F16 ? DC_LT_R_16F : DC_LT_R_32F; }

static const dc_type *input_type(const dc_module *m, const dc_node *n, int i) { return &m->nodes[n->inputs[i]].type; }

static int same_type(const dc_type *a, const dc_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static const char *conv_shape_why_not(const dc_node *n, const dc_type *w) {
  const char *pads[] = {"pad_t", "pad_b", "pad_l", "pad_r"};
  for (int i = 0; i < 4; i++)
    if (dc_node_int(n, pads[i])) return "a padded conv2d";
  if (dc_node_int(n, "stride") != 1) return "a strided conv2d";
  int nhwc = n->layout == LAYOUT_NHWC;
  if (w->rank != 4 || w->dims[nhwc ? 1 : 2] != 1 || w->dims[nhwc ? 2 : 3] != 1)
    return "a conv2d kernel larger than 1x1";
  if (!nhwc && dc_node_int(n, "bias")) return "an NCHW conv2d with a bias (its channels are D's columns)";
  return NULL;
}

const char *dc_cuda_lt_why_not(const dc_module *m, int32_t s) {
  const dc_node *n = &m->nodes[s];
  if (n->op != OP_LINEAR && n->op != OP_CONV2D) return "not a GEMM";
  if (!dc_type_numel(&n->type) || !dc_type_numel(input_type(m, n, 0))) return "an empty GEMM";
  if (n->op == OP_LINEAR && dc_node_int(n, "gate")) return "a gated residual";
  if (n->op == OP_CONV2D) {
    const char *why = conv_shape_why_not(n, input_type(m, n, 1));
    if (why) return why;
  }
  dc_dtype x = input_type(m, n, 0)->dtype, w = input_type(m, n, 1)->dtype;
  if (x != w) return "activation and weight of different dtypes";
  if (x != DT_BF16 && x != DT_F16) return "not bf16 or f16 operands";
  if (n->type.dtype != x && n->type.dtype != DT_F32) return "an output dtype cuBLASLt does not write";
  int slot = 2, act = (int)dc_node_int(n, "act");
  if (dc_node_int(n, "bias") && input_type(m, n, slot++)->dtype != n->type.dtype) return "a bias of another dtype";
  if (act != ACT_NONE && act != ACT_GELU_TANH) return "an activation cuBLASLt has no epilogue for";
  if (dc_node_int(n, "residual")) {
    if (act != ACT_NONE) return "a residual after an activation (cuBLASLt adds C first)";
    if (!same_type(input_type(m, n, slot), &n->type)) return "a residual not of the output's shape and dtype";
  }
  return NULL;
}

/* ---- the GEMM of a step (the mapping above) -------------------------------------- */
static void describe_gemm(const dc_module *m, int32_t s, lt_gemm *g) {
  const dc_node *n = &m->nodes[s];
  const dc_type *x = input_type(m, n, 0), *w = input_type(m, n, 1);
  int slot = 2, bias = (int)dc_node_int(n, "bias");
  memset(g, 0, sizeof *g);
  g->node = s, g->device = n->device, g->batch = 1;
  g->a_type = lt_type(x->dtype), g->d_type = lt_type(n->type.dtype);
  g->bias_src = bias ? n->inputs[slot++] : -1;
  g->c_src = dc_node_int(n, "residual") ? n->inputs[slot] : -1;
  g->nchw = n->op == OP_CONV2D && n->layout != LAYOUT_NHWC;
  uint64_t out_ch = (uint64_t)w->dims[0];
  if (g->nchw) { /* Y[n]ᵀ = X[n]ᵀ·Wᵀ */
    g->m = (uint64_t)(x->dims[2] * x->dims[3]), g->n = out_ch, g->k = (uint64_t)x->dims[1];
    g->batch = x->dims[0];
    g->a_src = n->inputs[0], g->b_src = n->inputs[1];
  } else { /* Yᵀ = W·Xᵀ */
    g->k = (uint64_t)x->dims[x->rank - 1];
    g->m = out_ch, g->n = g->k ? dc_type_numel(x) / g->k : 0;
    g->a_src = n->inputs[1], g->b_src = n->inputs[0];
  }
  int gelu = (int)dc_node_int(n, "act") == ACT_GELU_TANH;
  g->epilogue = gelu ? (bias ? DC_LT_EPILOGUE_GELU_BIAS : DC_LT_EPILOGUE_GELU)
                     : (bias ? DC_LT_EPILOGUE_BIAS : DC_LT_EPILOGUE_DEFAULT);
}

static dc_status *batched(const dc_lt_api *lt, dc_lt_layout l, int64_t batch, int64_t stride) {
  int32_t count = (int32_t)batch;
  DC_TRY(LT(lt, MatrixLayoutSetAttribute, l, DC_LT_LAYOUT_BATCH_COUNT, &count, sizeof count));
  return LT(lt, MatrixLayoutSetAttribute, l, DC_LT_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
}

static dc_status *make_descriptors(const dc_cuda_backend *b, const dc_lt_api *lt, lt_gemm *g) {
  int ta = g->nchw ? DC_LT_OP_N : DC_LT_OP_T, tb = DC_LT_OP_N;
  DC_TRY(LT(lt, MatmulDescCreate, &g->desc, DC_LT_COMPUTE_32F, DC_LT_R_32F));
  DC_TRY(LT(lt, MatmulDescSetAttribute, g->desc, DC_LT_DESC_TRANSA, &ta, sizeof ta));
  DC_TRY(LT(lt, MatmulDescSetAttribute, g->desc, DC_LT_DESC_TRANSB, &tb, sizeof tb));
  uint32_t epi = (uint32_t)g->epilogue;
  DC_TRY(LT(lt, MatmulDescSetAttribute, g->desc, DC_LT_DESC_EPILOGUE, &epi, sizeof epi));
  if (g->bias_src >= 0) {
    const void *bias = (const void *)(uintptr_t)b->value[g->bias_src];
    int32_t bias_type = g->d_type;
    DC_TRY(LT(lt, MatmulDescSetAttribute, g->desc, DC_LT_DESC_BIAS_POINTER, &bias, sizeof bias));
    DC_TRY(LT(lt, MatmulDescSetAttribute, g->desc, DC_LT_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  }
  if (g->nchw) {
    DC_TRY(LT(lt, MatrixLayoutCreate, &g->la, g->a_type, g->m, g->k, (int64_t)g->m));
    DC_TRY(LT(lt, MatrixLayoutCreate, &g->lb, g->a_type, g->k, g->n, (int64_t)g->k));
  } else {
    DC_TRY(LT(lt, MatrixLayoutCreate, &g->la, g->a_type, g->k, g->m, (int64_t)g->k));
    DC_TRY(LT(lt, MatrixLayoutCreate, &g->lb, g->a_type, g->k, g->n, (int64_t)g->k));
  }
  /* C and D share one layout: in place (C == D) needs them identical */
  DC_TRY(LT(lt, MatrixLayoutCreate, &g->lcd, g->d_type, g->m, g->n, (int64_t)g->m));
  if (g->batch == 1) return NULL;
  int64_t out_stride = (int64_t)(g->m * g->n);
  DC_TRY(batched(lt, g->la, g->batch, (int64_t)(g->m * g->k)));
  DC_TRY(batched(lt, g->lb, g->batch, 0));
  return batched(lt, g->lcd, g->batch, out_stride);
}

static void destroy_descriptors(const dc_lt_api *lt, lt_gemm *g) {
  dc_lt_layout *ls[] = {&g->la, &g->lb, &g->lcd};
  for (int i = 0; i < 3; i++)
    if (*ls[i]) lt->MatrixLayoutDestroy(*ls[i]), *ls[i] = NULL;
  if (g->desc) lt->MatmulDescDestroy(g->desc), g->desc = NULL;
}

/* ---- running one ------------------------------------------------------------------ */
static void *ptr(const dc_cuda_backend *b, int32_t v) { return (void *)(uintptr_t)b->value[v]; }

static dc_status *matmul(dc_cuda_backend *b, const lt_gemm *g, const dc_lt_algo *algo, size_t workspace) {
  const struct dc_cuda_lt *lt = b->lt;
  float alpha = 1.0f, beta = g->c_src >= 0 ? 1.0f : 0.0f;
  void *d = ptr(b, g->node);
  const void *c = g->c_src >= 0 ? ptr(b, g->c_src) : d;
  return LT(&lt->api, Matmul, lt->handle[g->device], g->desc, &alpha, ptr(b, g->a_src), g->la, ptr(b, g->b_src),
            g->lb, &beta, c, g->lcd, d, g->lcd, algo, workspace ? (void *)(uintptr_t)lt->workspace[g->device] : NULL,
            workspace, b->dev[g->device].compute);
}

int dc_cuda_lt_runs(const dc_cuda_backend *b, int32_t s) { return b->lt && b->lt->gemm_of_node[s] >= 0; }

dc_status *dc_cuda_lt_launch(dc_cuda_backend *b, int32_t s) {
  const lt_gemm *g = &b->lt->gemm[b->lt->gemm_of_node[s]];
  return matmul(b, g, &g->algo, g->workspace);
}

/* ---- choosing algorithms ------------------------------------------------------------ */
/* The largest power of two up to 256 dividing the address: what the
 * heuristic may assume of it. */
static uint32_t alignment(dc_cu_deviceptr p) {
  uint32_t a = 256;
  while (a > 1 && p % a) a >>= 1;
  return a;
}

static dc_status *candidates(dc_cuda_backend *b, const lt_gemm *g, dc_lt_heuristic *out, int *count) {
  const dc_lt_api *lt = &b->lt->api;
  dc_lt_preference pref = NULL;
  uint64_t ws = LT_MAX_WORKSPACE;
  uint32_t al[4] = {alignment(b->value[g->a_src]), alignment(b->value[g->b_src]),
                    alignment(b->value[g->c_src >= 0 ? g->c_src : g->node]), alignment(b->value[g->node])};
  *count = 0;
  dc_status *st = LT(lt, MatmulPreferenceCreate, &pref);
  if (!st) st = LT(lt, MatmulPreferenceSetAttribute, pref, DC_LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (int i = 0; i < 4 && !st; i++)
    st = LT(lt, MatmulPreferenceSetAttribute, pref, DC_LT_PREF_MIN_ALIGNMENT_A_BYTES + i, &al[i], sizeof al[i]);
  if (!st)
    st = LT(lt, MatmulAlgoGetHeuristic, b->lt->handle[g->device], g->desc, g->la, g->lb, g->lcd, g->lcd, pref,
            LT_CANDIDATES, out, count);
  if (pref) lt->MatmulPreferenceDestroy(pref);
  if (st && dc_status_code_of(st) != DC_ERR_NOMEM) { /* NOT_SUPPORTED: no algorithm for this problem */
    dc_status_free(st);
    *count = 0;
    return NULL;
  }
  return st;
}

/* Each candidate LT_TIMED_REPS times between two events on the GEMM's
 * compute stream; the fastest (the heuristic's order breaks ties). */
static dc_status *time_candidates(dc_cuda_backend *b, const lt_gemm *g, const dc_lt_heuristic *h, int count,
                                  int *best) {
  cuda_device *dev = &b->dev[g->device];
  dc_cu_event ev[2] = {NULL, NULL};
  dc_status *st = NULL;
  float best_ms = 0;
  *best = 0;
  for (int i = 0; i < 2 && !st; i++) st = CU(b, EventCreate, &ev[i], DC_CU_EVENT_DEFAULT);
  for (int c = 0; c < count && !st; c++) {
    float ms = 0;
    st = CU(b, EventRecord, ev[0], dev->compute);
    for (int r = 0; r < LT_TIMED_REPS && !st; r++) st = matmul(b, g, &h[c].algo, h[c].workspace_size);
    if (!st) st = CU(b, EventRecord, ev[1], dev->compute);
    if (!st) st = CU(b, EventSynchronize, ev[1]);
    if (!st) st = CU(b, EventElapsedTime, &ms, ev[0], ev[1]);
    if (!st && (c == 0 || ms < best_ms)) best_ms = ms, *best = c;
  }
  for (int i = 0; i < 2; i++)
    if (ev[i]) b->api.EventDestroy(ev[i]);
  return st;
}

/* ---- the cache file --------------------------------------------------------------- */
typedef struct {
  char gpu[300];
  char *path; /* NULL: no cache root */
} lt_cache;

static uint64_t problem_key(const dc_cuda_backend *b, const char *gpu) {
  const struct dc_cuda_lt *lt = b->lt;
  dc_buf k = {0};
  dc_buf_printf(&k, "%s|", gpu);
  for (int i = 0; i < lt->ngemm; i++) {
    const lt_gemm *g = &lt->gemm[i];
    dc_buf_printf(&k, "%d:%d:%llu:%llu:%llu:%lld:%d:%d:%d:%d:%d:%u:%u:%u:%u;", (int)g->node, g->device,
                  (unsigned long long)g->m, (unsigned long long)g->n, (unsigned long long)g->k, (long long)g->batch,
                  g->a_type, g->d_type, g->epilogue, g->nchw, g->c_src >= 0, alignment(b->value[g->a_src]),
                  alignment(b->value[g->b_src]), alignment(b->value[g->c_src >= 0 ? g->c_src : g->node]),
                  alignment(b->value[g->node]));
  }
  uint64_t h = dc_hash64(k.data ? (const void *)k.data : "", k.len);
  dc_buf_deinit(&k);
  return h;
}

static dc_status *cache_open(dc_cuda_backend *b, lt_cache *c) {
  int sms = 0;
  memset(c, 0, sizeof *c);
  DC_TRY(CU(b, DeviceGetAttribute, &sms, DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, b->dev[0].dev));
  snprintf(c->gpu, sizeof c->gpu, "%s, %d SMs, cuBLASLt %zu", b->info.dev[0].name, sms, b->lt->api.GetVersion());
  for (int d = 1; d < b->ndevices; d++) /* a --device-map plan: every device's name */
    snprintf(c->gpu + strlen(c->gpu), sizeof c->gpu - strlen(c->gpu), " + %s", b->info.dev[d].name);
  char *root = dc_cache_root_dir();
  if (!root) return NULL;
  c->path = dc_asprintf("%s/cublaslt/%016llx.algos", root, (unsigned long long)problem_key(b, c->gpu));
  dc_free(root);
  return c->path ? NULL : dc_nomem("the cuBLASLt algorithm cache");
}

/* "gemm <node> <workspace> <16 hex digits x 8>" per GEMM after a header
 * line naming the GPU; every algorithm checked against its GEMM. */
static const char *cache_parse(dc_cuda_backend *b, const lt_cache *c, char *text, lt_gemm *chosen) {
  const struct dc_cuda_lt *lt = b->lt;
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  if (!line || strncmp(line, "diffc cublaslt algorithms 1 ", 28) || strcmp(line + 28, c->gpu))
    return "its first line is not \"diffc cublaslt algorithms 1 <this GPU>\"";
  for (int i = 0; i < lt->ngemm; i++) {
    const lt_gemm *g = &lt->gemm[i];
    lt_gemm *o = &chosen[i];
    line = strtok_r(NULL, "\n", &save);
    int node = -1, used = 0;
    unsigned long long ws = 0;
    if (!line || sscanf(line, "gemm %d%n", &node, &used) != 1 || node != g->node)
      return "a line does not name the next GEMM step";
    if (!strcmp(line + used, " none")) { /* cuBLASLt had no algorithm for it */
      o->workspace = SIZE_MAX;
      continue;
    }
    const char *p = line + used;
    int got = 0;
    if (sscanf(p, " %llu%n", &ws, &got) != 1) return "a GEMM's line has no workspace size";
    p += got;
    for (int w = 0; w < 8; w++) {
      char *end;
      errno = 0;
      o->algo.data[w] = strtoull(p, &end, 16);
      if (end == p || errno) return "an algorithm is not 8 hex words";
      p = end;
    }
    if (*p || ws > LT_MAX_WORKSPACE) return "a line has more than an algorithm, or too large a workspace";
    dc_lt_heuristic check;
    memset(&check, 0, sizeof check);
    if (lt->api.MatmulAlgoCheck(lt->handle[g->device], g->desc, g->la, g->lb, g->lcd, g->lcd, &o->algo, &check) !=
            DC_LT_STATUS_SUCCESS ||
        check.workspace_size > ws)
      return "cuBLASLt refuses one of its algorithms for its GEMM (cublasLtMatmulAlgoCheck)";
    o->workspace = (size_t)ws;
  }
  return strtok_r(NULL, "\n", &save) ? "it lists more GEMMs than the plan has" : NULL;
}

/* The whole file, NUL-terminated (about 160 bytes per GEMM; more than
 * 64 MiB is not a cache file of ours); NULL when it cannot be read. */
static char *read_cache_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *text = size >= 0 && size <= (64l << 20) && fseek(f, 0, SEEK_SET) == 0 ? dc_malloc((size_t)size + 1) : NULL;
  if (text && fread(text, 1, (size_t)size, f) != (size_t)size) dc_free(text), text = NULL;
  fclose(f);
  if (text) text[size] = 0;
  return text;
}

/* 1: the cache held a choice for every GEMM (set in gemm[]); 0: select. */
static int cache_read(dc_cuda_backend *b, const lt_cache *c) {
  struct dc_cuda_lt *lt = b->lt;
  char *text = c->path ? read_cache_file(c->path) : NULL;
  if (!text) return 0; /* no file yet: the usual first load */
  lt_gemm *chosen = dc_calloc((size_t)lt->ngemm + 1, sizeof *chosen);
  const char *why = chosen ? cache_parse(b, c, text, chosen) : "out of memory";
  if (!why)
    for (int i = 0; i < lt->ngemm; i++) lt->gemm[i].algo = chosen[i].algo, lt->gemm[i].workspace = chosen[i].workspace;
  else
    snprintf(b->info.lt_cache, sizeof b->info.lt_cache, "ignored %s (%s); chose again and rewrote it", c->path, why);
  dc_free(chosen);
  dc_free(text);
  if (!why) snprintf(b->info.lt_cache, sizeof b->info.lt_cache, "read %s", c->path);
  return !why;
}

static void cache_write(dc_cuda_backend *b, const lt_cache *c) {
  const struct dc_cuda_lt *lt = b->lt;
  if (!c->path) return;
  dc_buf t = {0};
  dc_buf_printf(&t, "diffc cublaslt algorithms 1 %s\n", c->gpu);
  for (int i = 0; i < lt->ngemm; i++) {
    const lt_gemm *g = &lt->gemm[i];
    dc_buf_printf(&t, "gemm %d", (int)g->node);
    if (g->workspace == SIZE_MAX) {
      dc_buf_printf(&t, " none\n");
      continue;
    }
    dc_buf_printf(&t, " %zu", g->workspace);
    for (int w = 0; w < 8; w++) dc_buf_printf(&t, " %016llx", (unsigned long long)g->algo.data[w]);
    dc_buf_printf(&t, "\n");
  }
  char *dir = dc_path_parent(c->path);
  dc_status *st = !dir ? dc_nomem("the cuBLASLt algorithm cache")
                  : dc_make_dirs(dir) ? dc_error(DC_ERR_IO, "cannot make %s", dir)
                                      : dc_atomic_write_file(c->path, t.data, t.len);
  size_t at = strlen(b->info.lt_cache);
  if (st) snprintf(b->info.lt_cache + at, sizeof b->info.lt_cache - at, "%snot cached: %s", at ? "; " : "",
                   dc_status_message(st));
  else if (!at) snprintf(b->info.lt_cache, sizeof b->info.lt_cache, "wrote %s", c->path);
  dc_status_free(st);
  dc_free(dir);
  dc_buf_deinit(&t);
}

/* Device d's workspace of `bytes` (none for 0). */
static dc_status *allocate_workspace(dc_cuda_backend *b, int d, size_t bytes) {
  struct dc_cuda_lt *lt = b->lt;
  lt->workspace_bytes[d] = bytes;
  if (!bytes) return NULL;
  DC_TRY(dc_cuda_use_device(b, d));
  return dc_status_annotate(CU(b, MemAlloc, &lt->workspace[d], bytes),
                            "%s: allocating the cuBLASLt workspace on device %d", b->path, b->dev[d].ordinal);
}

static void free_workspaces(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  for (int d = 0; d < b->ndevices; d++) {
    if (!lt->workspace[d]) continue;
    b->api.CtxSetCurrent(b->dev[d].ctx);
    b->api.MemFree(lt->workspace[d]);
    lt->workspace[d] = 0, lt->workspace_bytes[d] = 0;
  }
  b->current = -1;
}

/* Two GEMMs that are one problem to cuBLASLt: same sizes, types, epilogue
 * and operand alignments (a UNet repeats a few dozen shapes hundreds of
 * times): the heuristic and the timing run once for them. */
static int same_problem(const dc_cuda_backend *b, const lt_gemm *x, const lt_gemm *y) {
  return x->device == y->device && x->m == y->m && x->n == y->n && x->k == y->k && x->batch == y->batch &&
         x->a_type == y->a_type && x->d_type == y->d_type && x->epilogue == y->epilogue && x->nchw == y->nchw &&
         (x->c_src >= 0) == (y->c_src >= 0) && alignment(b->value[x->a_src]) == alignment(b->value[y->a_src]) &&
         alignment(b->value[x->b_src]) == alignment(b->value[y->b_src]) &&
         alignment(b->value[x->c_src >= 0 ? x->c_src : x->node]) ==
             alignment(b->value[y->c_src >= 0 ? y->c_src : y->node]) &&
         alignment(b->value[x->node]) == alignment(b->value[y->node]);
}

/* The first GEMM of gemm i's problem (i itself when it is the first). */
static int first_of_problem(const dc_cuda_backend *b, int i) {
  for (int j = 0; j < i; j++)
    if (same_problem(b, &b->lt->gemm[j], &b->lt->gemm[i])) return j;
  return i;
}

/* Every GEMM's candidates, timed in a workspace as large as the largest
 * any of them needs (freed after: the final one fits the winners). */
static dc_status *time_all(dc_cuda_backend *b, dc_lt_heuristic (*h)[LT_CANDIDATES], const int *count, int *best) {
  struct dc_cuda_lt *lt = b->lt;
  size_t most[DC_MAX_DEVICES] = {0};
  for (int i = 0; i < lt->ngemm; i++)
    for (int c = 0; c < count[i]; c++)
      if (h[i][c].workspace_size > most[lt->gemm[i].device]) most[lt->gemm[i].device] = h[i][c].workspace_size;
  dc_status *st = NULL;
  for (int d = 0; d < b->ndevices && !st; d++) st = allocate_workspace(b, d, most[d]);
  for (int i = 0; i < lt->ngemm && !st; i++) {
    int first = first_of_problem(b, i);
    best[i] = first < i ? best[first] : 0;
    if (count[i] < 2 || first < i) continue;
    st = dc_cuda_use_device(b, lt->gemm[i].device);
    if (!st) st = time_candidates(b, &lt->gemm[i], h[i], count[i], &best[i]);
  }
  free_workspaces(b);
  return st;
}

/* Heuristic, then (with a choice) timing, for each GEMM; a GEMM cuBLASLt
 * has no algorithm for goes back to its NVRTC kernel (workspace SIZE_MAX
 * marks it until drop_unsupported). */
static dc_status *select_algorithms(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  dc_lt_heuristic(*h)[LT_CANDIDATES] = dc_calloc((size_t)lt->ngemm + 1, sizeof *h);
  int *count = dc_calloc((size_t)lt->ngemm + 1, 2 * sizeof *count), *best = count ? count + lt->ngemm + 1 : NULL;
  dc_status *st = h && count ? NULL : dc_nomem("choosing cuBLASLt algorithms");
  for (int i = 0; i < lt->ngemm && !st; i++) {
    int first = first_of_problem(b, i);
    if (first < i) { /* its problem's candidates (an algorithm belongs to the problem, not the pointers) */
      memcpy(h[i], h[first], sizeof h[i]);
      count[i] = count[first];
      continue;
    }
    st = dc_cuda_use_device(b, lt->gemm[i].device);
    if (!st) st = candidates(b, &lt->gemm[i], h[i], &count[i]);
    if (count[i] > LT_CANDIDATES) count[i] = LT_CANDIDATES;
    b->info.lt_problems++;
  }
  if (!st) st = time_all(b, h, count, best);
  for (int i = 0; i < lt->ngemm && !st; i++) {
    lt_gemm *g = &lt->gemm[i];
    g->workspace = count[i] > 0 ? h[i][best[i]].workspace_size : SIZE_MAX;
    if (count[i] > 0) g->algo = h[i][best[i]].algo;
    b->info.lt_candidates += count[i];
  }
  dc_free(h);
  dc_free(count);
  return st;
}

/* The GEMMs without an algorithm leave; gemm_of_node follows. */
static void drop_unsupported(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  int kept = 0;
  for (int i = 0; i < lt->ngemm; i++) {
    lt_gemm *g = &lt->gemm[i];
    lt->gemm_of_node[g->node] = -1;
    if (g->workspace == SIZE_MAX) {
      dc_status_free(dc_cuda_use_device(b, g->device)); /* teardown: nothing to do about a failure */
      destroy_descriptors(&lt->api, g);
      b->info.lt_no_algorithm++;
      continue;
    }
    lt->gemm[kept] = *g;
    lt->gemm_of_node[g->node] = kept++;
  }
  lt->ngemm = kept;
}

/* One workspace per device: the most its GEMMs' algorithms need. */
static dc_status *allocate_workspaces(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  size_t most[DC_MAX_DEVICES] = {0};
  for (int i = 0; i < lt->ngemm; i++)
    if (lt->gemm[i].workspace > most[lt->gemm[i].device]) most[lt->gemm[i].device] = lt->gemm[i].workspace;
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(allocate_workspace(b, d, most[d]));
    b->info.lt_workspace_bytes += most[d];
    b->info.device_bytes += most[d];
  }
  return NULL;
}

/* The eligible steps, and for each its descriptors (after allocate: the
 * bias pointer is an address in the weight block or the arena). */
static dc_status *plan_gemms(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  const dc_module *m = b->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    lt->gemm_of_node[s] = -1;
    if (dc_cuda_lt_why_not(m, s)) continue;
    lt_gemm *g = &lt->gemm[lt->ngemm];
    describe_gemm(m, s, g);
    lt->gemm_of_node[s] = lt->ngemm++;
    DC_TRY(dc_cuda_use_device(b, g->device));
    if (!lt->handle[g->device]) DC_TRY(LT(&lt->api, Create, &lt->handle[g->device]));
    DC_TRY(make_descriptors(b, &lt->api, g));
  }
  return NULL;
}

static int eligible_steps(const dc_module *m) {
  int n = 0;
  for (int32_t s = 0; s < m->nnodes; s++) n += dc_cuda_lt_why_not(m, s) == NULL;
  return n;
}

static int disabled_by_env(void) {
  const char *v = getenv("DIFFC_CUBLASLT");
  return v && !strcmp(v, "0");
}

static dc_status *set_up(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  lt->gemm = dc_calloc((size_t)b->info.lt_eligible + 1, sizeof *lt->gemm);
  lt->gemm_of_node = dc_calloc((size_t)b->m->nnodes + 1, sizeof *lt->gemm_of_node);
  if (!lt->gemm || !lt->gemm_of_node) return dc_nomem("planning the cuBLASLt GEMMs");
  DC_TRY(plan_gemms(b));
  lt_cache c;
  DC_TRY(cache_open(b, &c));
  dc_status *st = NULL;
  if (!cache_read(b, &c)) {
    st = select_algorithms(b);
    if (!st) cache_write(b, &c);
  }
  if (!st) drop_unsupported(b);
  dc_free(c.path);
  if (!st) st = allocate_workspaces(b);
  return st;
}

/* Never fails the load for cuBLASLt's sake: without the library, with it
 * switched off, or when anything fails here (out of memory included: the
 * NVRTC kernels need nothing more), every step runs its NVRTC kernel and
 * info.lt_note says why. */
dc_status *dc_cuda_lt_setup(dc_cuda_backend *b) {
  b->info.lt_eligible = eligible_steps(b->m);
  if (!b->info.lt_eligible) return NULL;
  if (b->opt.no_cublaslt || disabled_by_env()) {
    snprintf(b->info.lt_note, sizeof b->info.lt_note, "cuBLASLt off (%s): %d GEMM step(s) run the NVRTC kernels",
             b->opt.no_cublaslt ? "--no-cublaslt" : "DIFFC_CUBLASLT=0", b->info.lt_eligible);
    return NULL;
  }
  b->lt = dc_calloc(1, sizeof *b->lt);
  if (!b->lt) return dc_nomem("setting up cuBLASLt");
  dc_status *st = dc_lt_api_open(NULL, b->api.lib != NULL, &b->lt->api);
  if (!st) st = set_up(b);
  if (!st && b->lt->ngemm) {
    b->info.lt_steps = b->lt->ngemm;
    return NULL;
  }
  if (st) snprintf(b->info.lt_note, sizeof b->info.lt_note, "%s; the NVRTC kernels run instead", dc_status_message(st));
  else snprintf(b->info.lt_note, sizeof b->info.lt_note,
                "cuBLASLt has no algorithm for any of the %d GEMM step(s); the NVRTC kernels run", b->info.lt_eligible);
  dc_status_free(st);
  dc_cuda_lt_destroy(b);
  b->info.device_bytes -= b->info.lt_workspace_bytes;
  b->info.lt_workspace_bytes = 0;
  b->info.lt_no_algorithm = b->info.lt_candidates = b->info.lt_problems = 0;
  return NULL;
}

/* Descriptors, handles and workspaces, each in its device's context. */
void dc_cuda_lt_destroy(dc_cuda_backend *b) {
  struct dc_cuda_lt *lt = b->lt;
  if (!lt) return;
  for (int i = 0; lt->gemm && i < lt->ngemm; i++) {
    b->api.CtxSetCurrent(b->dev[lt->gemm[i].device].ctx);
    destroy_descriptors(&lt->api, &lt->gemm[i]);
  }
  for (int d = 0; d < b->ndevices; d++) {
    if (!lt->handle[d] && !lt->workspace[d]) continue;
    b->api.CtxSetCurrent(b->dev[d].ctx);
    if (lt->handle[d]) lt->api.Destroy(lt->handle[d]);
    if (lt->workspace[d]) b->api.MemFree(lt->workspace[d]);
  }
  b->current = -1;
  dc_lt_api_unload(&lt->api);
  dc_free(lt->gemm);
  dc_free(lt->gemm_of_node);
  dc_free(lt);
  b->lt = NULL;
}
