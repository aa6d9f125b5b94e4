/* cuda_fake_lt.h — a fake cuBLASLt table (runtime/cublaslt.h) beside the fake
 * driver (cuda_fake_driver.h, which must be included first), header-only.
 * Descriptors and layouts keep the attributes they were given; every call
 * is logged; cublasLtMatmul computes on the CPU from those descriptors
 * alone, as cuBLASLt defines it (column-major, op(A) by TRANSA/TRANSB, ld
 * and batch strides from the layouts, D = act(alpha·op(A)·op(B) + beta·C +
 * bias) with the epilogue's bias over D's rows and its GELU the tanh one),
 * reading and writing device memory through the fake driver's blocks, so
 * a wrong transpose, ld, stride, bias or beta gives wrong numbers or an
 * out-of-bounds refusal (and C == D with another layout for C, a refusal).
 * The heuristic offers fl.ncands candidates (algo ids 1.., workspace
 * fl.ws[i]); a matmul with candidate i logs fl.cost[i]
 * extra driver calls, which the fake driver's clock (1 ms per call) turns
 * into time, so a timed choice has something to find. */
#ifndef DC_CUDA_FAKE_LT_H
#define DC_CUDA_FAKE_LT_H

#include "runtime/cublaslt.h"
#include "runtime/kernels_ref_internal.h"
#include "support/dtype_convert.h"

enum {
  L_CREATE, L_DESTROY, L_DESC, L_DESC_DESTROY, L_LAYOUT, L_LAYOUT_DESTROY, L_PREF, L_HEURISTIC, L_CHECK, L_MATMUL
};
#define C_LT_WORK 100 /* a fake driver call kind: a matmul's simulated work */
#define FL_MAX 256

typedef struct {
  int alive, transa, transb, epilogue, bias_type, compute, scale;
  const void *bias;
} fl_desc;
typedef struct {
  int alive, type;
  uint64_t rows, cols;
  int64_t ld, stride;
  int32_t batch;
} fl_layout;
typedef struct {
  int kind;
  const fl_desc *desc;
  uint64_t ws_asked;          /* heuristic: the preference's workspace limit */
  uint32_t align[4];          /* heuristic: the preference's alignments */
  uint64_t algo;              /* matmul / check: data[0] */
  uint64_t workspace, workspace_bytes;
  float beta;
  uint64_t a, b, c, d;
  int stream;
} fl_call;

static struct {
  int handles, ncands, fail_matmul, matmuls;
  size_t ws[8];
  int cost[8];
  fl_desc descs[FL_MAX];
  fl_layout layouts[FL_MAX];
  int ndescs, nlayouts, prefs;
  uint64_t pref_ws;
  uint32_t pref_align[4];
  fl_call calls[1024];
  int ncalls;
} fl;

static void fl_reset(void) {
  memset(&fl, 0, sizeof fl);
  fl.ncands = 3;
  for (int i = 0; i < 8; i++) fl.ws[i] = (size_t)(i + 1) << 12, fl.cost[i] = 2;
}
static fl_call *fl_log(int kind) {
  if (fl.ncalls == 1024) abort();
  fl_call *c = &fl.calls[fl.ncalls++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  return c;
}
static int fl_live(void) {
  int n = fl.handles + fl.prefs;
  for (int i = 0; i < fl.ndescs; i++) n += fl.descs[i].alive;
  for (int i = 0; i < fl.nlayouts; i++) n += fl.layouts[i].alive;
  return n;
}

static dc_lt_status l_Create(dc_lt_handle *h) {
  fl_log(L_CREATE);
  fl.handles++;
  *h = (dc_lt_handle)&fl;
  return 0;
}
static dc_lt_status l_Destroy(dc_lt_handle h) {
  fl_log(L_DESTROY);
  return h && fl.handles-- > 0 ? 0 : DC_LT_STATUS_NOT_INITIALIZED;
}
static size_t l_GetVersion(void) { return 130100; }
static const char *l_GetStatusName(dc_lt_status s) {
  if (s == DC_LT_STATUS_NOT_SUPPORTED) return "CUBLAS_STATUS_NOT_SUPPORTED";
  return s == DC_LT_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE" : NULL;
}
static dc_lt_status l_MatmulDescCreate(dc_lt_matmul_desc *d, int compute, int scale) {
  if (fl.ndescs == FL_MAX) abort();
  fl_desc *x = &fl.descs[fl.ndescs++];
  *x = (fl_desc){1, DC_LT_OP_N, DC_LT_OP_N, DC_LT_EPILOGUE_DEFAULT, -1, compute, scale, NULL};
  fl_log(L_DESC)->desc = x;
  *d = (dc_lt_matmul_desc)x;
  return 0;
}
static dc_lt_status l_MatmulDescDestroy(dc_lt_matmul_desc d) {
  fl_desc *x = (fl_desc *)d;
  fl_log(L_DESC_DESTROY)->desc = x;
  if (!x || !x->alive) return DC_LT_STATUS_INVALID_VALUE;
  x->alive = 0;
  return 0;
}
static dc_lt_status l_MatmulDescSetAttribute(dc_lt_matmul_desc d, int attr, const void *buf, size_t size) {
  fl_desc *x = (fl_desc *)d;
  switch (attr) {
    case DC_LT_DESC_TRANSA: if (size != 4) break; memcpy(&x->transa, buf, 4); return 0;
    case DC_LT_DESC_TRANSB: if (size != 4) break; memcpy(&x->transb, buf, 4); return 0;
    case DC_LT_DESC_EPILOGUE: if (size != 4) break; memcpy(&x->epilogue, buf, 4); return 0;
    case DC_LT_DESC_BIAS_POINTER: if (size != sizeof(void *)) break; memcpy(&x->bias, buf, size); return 0;
    case DC_LT_DESC_BIAS_DATA_TYPE: if (size != 4) break; memcpy(&x->bias_type, buf, 4); return 0;
  }
  return DC_LT_STATUS_INVALID_VALUE;
}
static dc_lt_status l_MatrixLayoutCreate(dc_lt_layout *l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (fl.nlayouts == FL_MAX) abort();
  if (ld < (int64_t)rows || ld < 1) return DC_LT_STATUS_INVALID_VALUE; /* column-major: ld >= rows */
  fl_layout *x = &fl.layouts[fl.nlayouts++];
  *x = (fl_layout){1, type, rows, cols, ld, 0, 1};
  fl_log(L_LAYOUT);
  *l = (dc_lt_layout)x;
  return 0;
}
static dc_lt_status l_MatrixLayoutDestroy(dc_lt_layout l) {
  fl_layout *x = (fl_layout *)l;
  fl_log(L_LAYOUT_DESTROY);
  if (!x || !x->alive) return DC_LT_STATUS_INVALID_VALUE;
  x->alive = 0;
  return 0;
}
static dc_lt_status l_MatrixLayoutSetAttribute(dc_lt_layout l, int attr, const void *buf, size_t size) {
  fl_layout *x = (fl_layout *)l;
  if (attr == DC_LT_LAYOUT_BATCH_COUNT && size == 4) return memcpy(&x->batch, buf, 4), 0;
  if (attr == DC_LT_LAYOUT_STRIDED_BATCH_OFFSET && size == 8) return memcpy(&x->stride, buf, 8), 0;
  return DC_LT_STATUS_INVALID_VALUE;
}
static dc_lt_status l_MatmulPreferenceCreate(dc_lt_preference *p) {
  fl.prefs++;
  fl.pref_ws = 0;
  memset(fl.pref_align, 0, sizeof fl.pref_align);
  *p = (dc_lt_preference)&fl.prefs;
  return fl_log(L_PREF), 0;
}
static dc_lt_status l_MatmulPreferenceDestroy(dc_lt_preference p) {
  return fl.prefs-- > 0 ? 0 : DC_LT_STATUS_INVALID_VALUE;
}
static dc_lt_status l_MatmulPreferenceSetAttribute(dc_lt_preference p, int attr, const void *buf, size_t size) {
  if (attr == DC_LT_PREF_MAX_WORKSPACE_BYTES && size == 8) return memcpy(&fl.pref_ws, buf, 8), 0;
  if (attr >= DC_LT_PREF_MIN_ALIGNMENT_A_BYTES && attr <= DC_LT_PREF_MIN_ALIGNMENT_D_BYTES && size == 4)
    return memcpy(&fl.pref_align[attr - DC_LT_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4), 0;
  return DC_LT_STATUS_INVALID_VALUE;
}
static dc_lt_status l_MatmulAlgoGetHeuristic(dc_lt_handle h, dc_lt_matmul_desc d, dc_lt_layout a, dc_lt_layout b,
                                             dc_lt_layout c, dc_lt_layout dd, dc_lt_preference p, int requested,
                                             dc_lt_heuristic *out, int *returned) {
  fl_call *call = fl_log(L_HEURISTIC);
  call->desc = (const fl_desc *)d, call->ws_asked = fl.pref_ws;
  memcpy(call->align, fl.pref_align, sizeof call->align);
  *returned = 0;
  if (!fl.ncands) return DC_LT_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < fl.ncands && i < requested; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].algo.data[0] = (uint64_t)i + 1;
    out[i].workspace_size = fl.ws[i];
    ++*returned;
  }
  return 0;
}
static int fl_algo_id(const dc_lt_algo *a) {
  for (int w = 1; w < 8; w++)
    if (a->data[w]) return 0;
  return a->data[0] >= 1 && a->data[0] <= (uint64_t)fl.ncands ? (int)a->data[0] : 0;
}
static dc_lt_status l_MatmulAlgoCheck(dc_lt_handle h, dc_lt_matmul_desc d, dc_lt_layout a, dc_lt_layout b,
                                      dc_lt_layout c, dc_lt_layout dd, const dc_lt_algo *algo, dc_lt_heuristic *r) {
  fl_log(L_CHECK)->algo = algo->data[0];
  int id = fl_algo_id(algo);
  if (!id) return DC_LT_STATUS_INVALID_VALUE;
  r->workspace_size = fl.ws[id - 1];
  return 0;
}

/* ---- the matmul ------------------------------------------------------------------ */
static float fl_get(int type, const void *p, int64_t i) {
  if (type == DC_LT_R_16BF) return dc_bf16_to_f32(((const uint16_t *)p)[i]);
  if (type == DC_LT_R_16F) return dc_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}
static void fl_put(int type, void *p, int64_t i, float v) {
  if (type == DC_LT_R_16BF) ((uint16_t *)p)[i] = dc_f32_to_bf16(v);
  else if (type == DC_LT_R_16F) ((uint16_t *)p)[i] = dc_f32_to_f16(v);
  else ((float *)p)[i] = v;
}
static int fl_size(int type) { return type == DC_LT_R_32F ? 4 : 2; }
/* The bytes a batched column-major layout spans lie in one device block. */
static int fl_in_device(const void *p, const fl_layout *l) {
  int64_t last = (int64_t)(l->batch - 1) * l->stride + (int64_t)(l->cols - 1) * l->ld + (int64_t)l->rows;
  return p && inside_device((uintptr_t)p, (size_t)last * (size_t)fl_size(l->type), fk.current);
}

static dc_lt_status l_Matmul(dc_lt_handle h, dc_lt_matmul_desc dsc, const void *alpha, const void *a, dc_lt_layout la,
                             const void *b, dc_lt_layout lb, const void *beta, const void *c, dc_lt_layout lc, void *d,
                             dc_lt_layout ldd, const dc_lt_algo *algo, void *ws, size_t ws_bytes, dc_cu_stream s) {
  const fl_desc *x = (const fl_desc *)dsc;
  const fl_layout *A = (const fl_layout *)la, *B = (const fl_layout *)lb, *C = (const fl_layout *)lc,
                  *D = (const fl_layout *)ldd;
  fl_call *call = fl_log(L_MATMUL);
  float al, be;
  memcpy(&al, alpha, 4), memcpy(&be, beta, 4);
  call->desc = x, call->algo = algo->data[0], call->workspace = (uintptr_t)ws, call->workspace_bytes = ws_bytes;
  call->beta = be, call->a = (uintptr_t)a, call->b = (uintptr_t)b, call->c = (uintptr_t)c, call->d = (uintptr_t)d;
  call->stream = obj_id(s);
  int id = fl_algo_id(algo);
  if (!h || !x->alive || !A->alive || !B->alive || !C->alive || !D->alive || !id || !current_obj(s, O_STREAM))
    return DC_LT_STATUS_INVALID_VALUE;
  if (fl.ws[id - 1] > ws_bytes || (ws_bytes && !inside_device((uintptr_t)ws, ws_bytes, fk.current)))
    return DC_LT_STATUS_INVALID_VALUE;
  uint64_t m = x->transa ? A->cols : A->rows, k = x->transa ? A->rows : A->cols;
  uint64_t n = x->transb ? B->rows : B->cols, kb = x->transb ? B->cols : B->rows;
  int batch = D->batch;
  if (k != kb || D->rows != m || D->cols != n || C->rows != m || C->cols != n || C->type != D->type ||
      A->batch != batch || B->batch != batch || C->batch != batch || A->type != B->type)
    return DC_LT_STATUS_INVALID_VALUE;
  if (c == d && lc != ldd) return DC_LT_STATUS_INVALID_VALUE; /* in place: C's layout must be D's */
  if (!fl_in_device(a, A) || !fl_in_device(b, B) || !fl_in_device(d, D) || (be != 0 && !fl_in_device(c, C)))
    return DC_LT_STATUS_INVALID_VALUE;
  int bias = x->epilogue & DC_LT_EPILOGUE_BIAS, gelu = x->epilogue & DC_LT_EPILOGUE_GELU;
  if (bias && (x->bias_type != D->type || !inside_device((uintptr_t)x->bias, m * (size_t)fl_size(D->type), fk.current)))
    return DC_LT_STATUS_INVALID_VALUE;
  if (++fl.matmuls == fl.fail_matmul) return DC_LT_STATUS_EXECUTION_FAILED;
  for (int i = 0; i < fl.cost[id - 1]; i++) log_call(C_LT_WORK);
  float *out = malloc((m * n + 1) * sizeof *out); /* C may be D: read all of C before writing */
  for (int q = 0; q < batch; q++) {
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t i = 0; i < m; i++) {
        float acc = 0;
        for (uint64_t t = 0; t < k; t++) {
          int64_t ai = x->transa ? (int64_t)(t + i * A->ld) : (int64_t)(i + t * A->ld);
          int64_t bi = x->transb ? (int64_t)(j + t * B->ld) : (int64_t)(t + j * B->ld);
          acc += fl_get(A->type, a, q * A->stride + ai) * fl_get(B->type, b, q * B->stride + bi);
        }
        float v = al * acc;
        if (be != 0) v += be * fl_get(C->type, c, q * C->stride + (int64_t)(i + j * C->ld));
        if (bias) v += fl_get(D->type, x->bias, (int64_t)i);
        out[i + j * m] = gelu ? act_gelu_tanh(v) : v;
      }
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t i = 0; i < m; i++) fl_put(D->type, d, q * D->stride + (int64_t)(i + j * D->ld), out[i + j * m]);
  }
  free(out);
  return 0;
}

static dc_lt_api fake_lt_api(void) {
  dc_lt_api a = {0};
#define FAKE_LT_ENTRY(ret, name, params) a.name = l_##name;
  DC_LT_API_ENTRIES(FAKE_LT_ENTRY)
#undef FAKE_LT_ENTRY
  return a;
}

static int fl_count(int kind) {
  int n = 0;
  for (int i = 0; i < fl.ncalls; i++) n += fl.calls[i].kind == kind;
  return n;
}

#endif
