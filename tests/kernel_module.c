/* kernel_module.c — the half of kernel_harness.h and kernel_runner.h that
 * needs no LLVM: one-node modules (kh_input, kh_node, add_conv, add_linear)
 * and comparing a kernel's output with the reference (kh_compare_out).  The
 * CUDA kernel tests use these too, so every test links this file, also in a
 * -DDIFFC_LLVM=OFF build, where kernel_harness.c and kernel_runner.c (which
 * compile and link LLVM kernels) are left out. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_harness.h"
#include "support/dtype_convert.h"
#include "kernel_runner.h"

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
  if (n.layout != LAYOUT_NHWC) n.layout = n.type.rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  return dc_module_add_node(m, &n);
}

static void compare_f32(size_t numel, const float *got, const float *want, kh_result *out) {
  double d2 = 0, r2 = 0, maxabs = 0, maxrel = 0;
  for (size_t i = 0; i < numel; i++) {
    if (isnan(got[i]) && isnan(want[i])) continue;
    double d = (double)got[i] - want[i];
    if (isnan(got[i]) || isnan(want[i]) || isinf(d)) d = INFINITY;
    else if (isinf(want[i])) d = 0; /* equal infinities */
    d2 += d * d;
    if (isfinite(want[i])) r2 += (double)want[i] * want[i];
    if (!(fabs(d) <= maxabs)) maxabs = fabs(d);
    if (fabs(want[i]) >= 1e-30 && !(fabs(d) / fabs(want[i]) <= maxrel)) maxrel = fabs(d) / fabs(want[i]);
  }
  out->max_abs = maxabs;
  out->max_rel = maxrel;
  out->rel_l2 = sqrt(d2 / (r2 > 0 ? r2 : 1));
}

/* bf16 / f16 outputs (activations) are compared as the f32 values they hold. */
static void compare_widened(const dc_type *t, const void *got_, const void *want_, kh_result *out) {
  size_t numel = dc_type_numel(t);
  float *got = malloc(numel * sizeof *got + 4), *want = malloc(numel * sizeof *want + 4);
  if (got && want) {
    const uint16_t *g16 = got_, *w16 = want_;
    for (size_t i = 0; i < numel; i++) {
      got[i] = t->dtype == DT_BF16 ? dc_bf16_to_f32(g16[i]) : dc_f16_to_f32(g16[i]);
      want[i] = t->dtype == DT_BF16 ? dc_bf16_to_f32(w16[i]) : dc_f16_to_f32(w16[i]);
    }
    compare_f32(numel, got, want, out);
  }
  free(got), free(want);
}

void kh_compare_out(const dc_type *t, const void *got_, const void *want_, kh_result *out) {
  size_t numel = dc_type_numel(t);
  out->bit_exact = memcmp(got_, want_, (size_t)dc_type_bytes(t)) == 0;
  out->max_abs = out->rel_l2 = out->max_rel = out->bit_exact ? 0 : INFINITY;
  if (out->bit_exact) return;
  if (t->dtype == DT_BF16 || t->dtype == DT_F16) compare_widened(t, got_, want_, out);
  if (t->dtype == DT_F32) compare_f32(numel, got_, want_, out);
}

int32_t add_conv(dc_module *m, const conv_shape *s, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->c, s->h, s->w});
  in[nin++] = kh_input(m, 4, (int64_t[]){s->o, s->c, s->kh, s->kw});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){s->o});
  int64_t ho = (s->h + s->pt + s->pb - s->kh) / s->stride + 1, wo = (s->w + s->pl + s->pr - s->kw) / s->stride + 1;
  if (res == RES_FULL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, ho, wo});
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, 1, 1});
  dc_node n = dc_node_make(OP_CONV2D, nin, in);
  dc_node_set_int(&n, "stride", s->stride);
  dc_node_set_int(&n, "pad_t", s->pt);
  dc_node_set_int(&n, "pad_b", s->pb);
  dc_node_set_int(&n, "pad_l", s->pl);
  dc_node_set_int(&n, "pad_r", s->pr);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "act", act);
  dc_node_set_int(&n, "residual", res != RES_NONE);
  return kh_node(m, n);
}

/* x [lead..., k] · w[n, k]ᵀ; res: RES_FULL (output-shaped) or RES_CHANNEL ([nout]). */
int32_t add_linear(dc_module *m, int rank, const int64_t *xdims, int64_t n, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  int64_t k = xdims[rank - 1], odims[DC_MAX_DIMS];
  in[nin++] = kh_input(m, rank, xdims);
  in[nin++] = kh_input(m, 2, (int64_t[]){n, k});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){n});
  memcpy(odims, xdims, sizeof(int64_t) * (size_t)rank);
  odims[rank - 1] = act == ACT_GEGLU ? n / 2 : n;
  if (res == RES_FULL) in[nin++] = kh_input(m, rank, odims);
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 1, &odims[rank - 1]);
  dc_node nd = dc_node_make(OP_LINEAR, nin, in);
  dc_node_set_int(&nd, "bias", bias);
  dc_node_set_int(&nd, "act", act);
  dc_node_set_int(&nd, "residual", res != RES_NONE);
  return kh_node(m, nd);
}
