/* kernel_harness.c — see kernel_harness.h. */
#include "kernel_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/llvm_codegen.h"
#include "runtime/cpu_kernels.h"
#include "runtime/kernels.h"
#include "runtime/threadpool.h"

int32_t kh_input(dc_module *m, int rank, const int64_t *dims) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

int32_t kh_node(dc_module *m, dc_node n) {
  dc_status *st = dc_infer_type(m, &n, &n.type);
  if (st) {
    fprintf(stderr, "kh_node: %s\n", dc_status_message(st));
    dc_status_free(st);
    return -1;
  }
  n.layout = n.type.rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  return dc_module_add_node(m, &n);
}

static float *random_data(size_t n, uint64_t *s, double scale) {
  float *d = malloc(n * sizeof *d + 64);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    d[i] = (float)(scale * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
  }
  return d;
}

typedef struct {
  dc_cpu_kernel_fn fn;
  void **bufs;
  uint8_t *scratch;
  uint64_t scratch_bytes;
  int nbufs;
} launch;

static void run_kernel(void *ctx, int64_t tid, int64_t nt) {
  launch *l = ctx;
  void *bufs[8];
  memcpy(bufs, l->bufs, sizeof(void *) * (size_t)l->nbufs);
  bufs[l->nbufs] = l->scratch + (size_t)tid * l->scratch_bytes;
  l->fn(bufs, tid, nt);
}

static dc_status *compile_node(const dc_module *m, int32_t id, dc_plan_kernels *k) {
  dc_cpu_target t;
  DC_TRY(dc_cpu_target_host(&t));
  dc_llvm *g = NULL;
  dc_cpu_kernel ck;
  int has = 0;
  dc_buf obj;
  dc_buf_init(&obj);
  dc_status *st = dc_llvm_create(&t, &g);
  if (!st) st = dc_llvm_emit_node(g, m, id, &ck, &has);
  if (!st && !has) st = dc_error(DC_ERR_UNSUPPORTED, "op %s has no LLVM kernel", dc_op_get(m->nodes[id].op)->name);
  if (!st) st = dc_llvm_finish(g, &obj);
  dc_llvm_destroy(g);
  if (st) {
    dc_buf_deinit(&obj);
    dc_cpu_target_deinit(&t);
    return st;
  }
  k->triple = t.triple;
  k->cpu = t.cpu;
  k->features = t.features;
  k->object = obj.data;
  k->object_size = obj.len;
  k->entries = calloc(1, sizeof *k->entries);
  k->entries[0] = (dc_plan_kernel){id, ck.symbol, ck.scratch_bytes};
  k->nentries = 1;
  return NULL;
}

static void free_kernels(dc_plan_kernels *k) {
  if (k->entries) dc_free(k->entries[0].symbol);
  free(k->entries);
  dc_free(k->object);
  dc_free(k->triple);
  dc_free(k->cpu);
  dc_free(k->features);
}

dc_status *kh_compare(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale, kh_result *out) {
  const dc_node *n = &m->nodes[id];
  uint64_t s = seed;
  void *bufs[8] = {0};
  const void *in[DC_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) {
    bufs[i + 1] = random_data(dc_type_numel(&m->nodes[n->inputs[i]].type), &s, scale);
    in[i] = bufs[i + 1];
  }
  size_t numel = dc_type_numel(&n->type);
  float *want = malloc(numel * sizeof(float) + 64), *got = malloc(numel * sizeof(float) + 64);
  for (size_t i = 0; i < numel; i++) got[i] = NAN;
  bufs[0] = got;
  dc_plan_kernels k = {0};
  dc_cpu_code *code = NULL;
  dc_cpu_kernel_fn *fns = calloc((size_t)m->nnodes, sizeof *fns);
  dc_pool *pool = NULL;
  dc_status *st = dc_ref_kernel_for(n->op)(m, n, in, want);
  if (!st) st = compile_node(m, id, &k);
  if (!st) st = dc_cpu_code_load("kernel test", &k, m->nnodes, &code, fns);
  if (!st) st = dc_pool_create(nthreads, &pool);
  if (!st) {
    launch l = {fns[id], bufs, NULL, k.entries[0].scratch_bytes, n->ninputs + 1};
    posix_memalign((void **)&l.scratch, 64, l.scratch_bytes * (size_t)nthreads + 64);
    dc_pool_run(pool, run_kernel, &l);
    free(l.scratch);
    double d2 = 0, r2 = 0, maxabs = 0;
    int exact = 1;
    for (size_t i = 0; i < numel; i++) {
      double d = (double)got[i] - want[i];
      d2 += d * d;
      r2 += (double)want[i] * want[i];
      if (!(fabs(d) <= maxabs)) maxabs = fabs(d);
      exact &= memcmp(&got[i], &want[i], 4) == 0;
    }
    out->max_abs = maxabs;
    out->rel_l2 = sqrt(d2 / (r2 > 0 ? r2 : 1));
    out->bit_exact = exact;
  }
  dc_pool_destroy(pool);
  dc_cpu_code_destroy(code);
  free_kernels(&k);
  free(fns);
  for (int i = 0; i <= n->ninputs; i++)
    if (i > 0) free(bufs[i]);
  free(want);
  free(got);
  return st;
}
