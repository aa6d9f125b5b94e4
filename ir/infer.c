/* infer.c — the type rule of every op, in one place.  The builders call it
 * as they add nodes and the verifier calls it again after every pass, so a
 * pass that breaks a shape is caught at the pass, not at run time. */
#include <string.h>

#include "ir.h"

typedef struct {
  const dc_module *m;
  const dc_node *n;
  const dc_type *in[DC_MAX_INPUTS];
} ctx;

static dc_status *fail(const ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dc_status *fail(const ctx *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dc_error(DC_ERR_MISMATCH, "%s (%s): %s", dc_op_get(c->n->op)->name,
                  c->n->scope ? c->n->scope : "?", msg);
}

static const char *ts(const dc_type *t, char *buf) { return dc_type_str(t, buf, 160); }

static dc_status *want_rank(const ctx *c, int i, int lo, int hi) {
  char b[160];
  if (c->in[i]->rank < lo || c->in[i]->rank > hi)
    return fail(c, "input %d is %s; expected rank %d..%d", i, ts(c->in[i], b), lo, hi);
  return NULL;
}

/* The input of an op that reads token ids: embedding's input 0,
 * eos_pool's input 1. */
static int reads_ids(const dc_node *n, int i) {
  return (n->op == OP_EMBEDDING && i == 0) || (n->op == OP_EOS_POOL && i == 1);
}

/* Activations are f32, or f32 and the module's activation dtype
 * (dc_module_activation_dtype: bf16/f16 values between CUDA kernels, which
 * load any of them and compute in f32).  The weight and bias of conv2d,
 * conv3d and linear may be stored in any float dtype (layerwise casting: the
 * kernel upcasts as it loads).  Integer values (token ids, index constants) reach
 * only the inputs that read ids (reads_ids), and those take nothing else. */
static dc_status *want_f32(const ctx *c) {
  char b[160];
  int weighted = c->n->op == OP_CONV2D || c->n->op == OP_CONV3D || c->n->op == OP_LINEAR;
  int params = weighted ? 2 + (int)dc_node_int(c->n, "bias") : 1;
  dc_dtype act = dc_module_activation_dtype(c->m);
  for (int i = 0; i < c->n->ninputs; i++) {
    int is_int = dc_dtype_is_int(c->in[i]->dtype);
    if (reads_ids(c->n, i) && !is_int) return fail(c, "input %d is %s; expected token ids (i32 or i64)", i, ts(c->in[i], b));
    if (reads_ids(c->n, i)) continue;
    if (c->n->op == OP_EMBEDDING && i == 1 && !is_int) continue; /* the table: any float dtype */
    if (c->in[i]->dtype == act) continue;
    if (c->in[i]->dtype != DT_F32 && !(i >= 1 && i < params && !is_int)) {
      if (act != DT_F32) return fail(c, "input %d is %s; expected f32 or %s", i, ts(c->in[i], b), dc_dtype_name(act));
      return fail(c, "input %d is %s; expected f32", i, ts(c->in[i], b));
    }
  }
  return NULL;
}

/* A 1-D parameter (bias, gamma, beta) of length len. */
static dc_status *want_vec(const ctx *c, int i, int64_t len) {
  char b[160];
  if (c->in[i]->rank != 1 || c->in[i]->dims[0] != len)
    return fail(c, "input %d is %s; expected [%lld]", i, ts(c->in[i], b), (long long)len);
  return NULL;
}

/* b broadcasts onto a (numpy rules, b's rank <= a's). */
static int broadcasts(const dc_type *b, const dc_type *a) {
  if (b->rank > a->rank) return 0;
  for (int i = 0; i < b->rank; i++) {
    int64_t db = b->dims[b->rank - 1 - i], da = a->dims[a->rank - 1 - i];
    if (db != da && db != 1) return 0;
  }
  return 1;
}

/* The epilogue of conv2d/linear: input count, bias length, act, and the
 * residual's broadcast onto the output type *o (adjusted for geglu). */
static dc_status *check_gate(const ctx *c, int slot, const dc_type *o);

static dc_status *check_epilogue(const ctx *c, int64_t out_channels, dc_type *o) {
  char b1[160], b2[160];
  int64_t bias = dc_node_int(c->n, "bias"), res = dc_node_int(c->n, "residual"), act = dc_node_int(c->n, "act");
  int64_t gate = c->n->op == OP_LINEAR ? dc_node_int(c->n, "gate") : 0;
  if ((bias != 0 && bias != 1) || (res != 0 && res != 1) || (gate != 0 && gate != 1))
    return fail(c, "bias, residual and gate flags must be 0 or 1");
  if (gate && !res) return fail(c, "gate=1 gates the residual: it needs residual=1");
  if (c->n->ninputs != 2 + bias + res + gate)
    return fail(c, "has %d inputs but bias=%lld, residual=%lld and gate=%lld need %lld", c->n->ninputs,
                (long long)bias, (long long)res, (long long)gate, (long long)(2 + bias + res + gate));
  if (bias) DC_TRY(want_vec(c, 2, out_channels));
  if (act < 0 || act >= ACT_COUNT ||
      ((act == ACT_GEGLU || act == ACT_QUICK_GELU || act == ACT_GELU_TANH) && c->n->op != OP_LINEAR))
    return fail(c, "act %lld is not valid here", (long long)act);
  if (act == ACT_GEGLU) {
    if (o->dims[o->rank - 1] % 2) return fail(c, "geglu needs an even number of features");
    o->dims[o->rank - 1] /= 2;
  }
  if (res && !broadcasts(c->in[2 + bias], o))
    return fail(c, "residual %s does not broadcast onto %s", ts(c->in[2 + bias], b1), ts(o, b2));
  return gate ? check_gate(c, (int)(3 + bias), o) : NULL;
}

/* A gated residual (ops.def): output [B,S,N], the residual exactly that
 * shape (the gate's row is found from the output row), mod [B,M] holding
 * the N-wide chunk at gate_at. */
static dc_status *check_gate(const ctx *c, int slot, const dc_type *o) {
  char b1[160], b2[160];
  const dc_type *mod = c->in[slot];
  int64_t at = dc_node_int(c->n, "gate_at");
  if (o->rank != 3) return fail(c, "a gated residual needs a [B,S,N] output; it is %s", ts(o, b1));
  if (!dc_type_equal(c->in[slot - 1], o))
    return fail(c, "gated residual %s must have the output's shape %s", ts(c->in[slot - 1], b1), ts(o, b2));
  DC_TRY(want_rank(c, slot, 2, 2));
  if (mod->dims[0] != o->dims[0])
    return fail(c, "gate mod %s does not match the batch of the output %s", ts(mod, b1), ts(o, b2));
  if (at < 0 || at > mod->dims[1] - o->dims[2])
    return fail(c, "gate chunk at %lld of %lld features lies outside mod %s", (long long)at, (long long)o->dims[2],
                ts(mod, b1));
  return NULL;
}

/* Where conv2d, group_norm and upsample find the channel and the two spatial
 * dims of their input: NCHW [N,C,H,W] or NHWC [N,H,W,C] by the node's layout. */
typedef struct {
  int c, h, w;
} axes4;
static axes4 layout_axes(const dc_node *n) {
  return n->layout == LAYOUT_NHWC ? (axes4){3, 1, 2} : (axes4){1, 2, 3};
}

static dc_status *infer_conv(const ctx *c, dc_type *o) {
  const dc_type *x = c->in[0], *w = c->in[1];
  char b1[160], b2[160];
  DC_TRY(want_rank(c, 0, 4, 4));
  DC_TRY(want_rank(c, 1, 4, 4));
  /* x and w in the same order: [N,C,H,W] with [O,C,kh,kw], or [N,H,W,C] with [O,kh,kw,C]. */
  axes4 a = layout_axes(c->n);
  if (w->dims[a.c] != x->dims[a.c])
    return fail(c, "weight %s does not match input %s channels (%s)", ts(w, b1), ts(x, b2),
                dc_layout_name(c->n->layout));
  int64_t s = dc_node_int(c->n, "stride");
  int64_t pt = dc_node_int(c->n, "pad_t"), pb = dc_node_int(c->n, "pad_b");
  int64_t pl = dc_node_int(c->n, "pad_l"), pr = dc_node_int(c->n, "pad_r");
  if (s < 1 || pt < 0 || pb < 0 || pl < 0 || pr < 0) return fail(c, "bad stride or padding");
  int64_t h = x->dims[a.h] + pt + pb - w->dims[a.h], wd = x->dims[a.w] + pl + pr - w->dims[a.w];
  if (h < 0 || wd < 0) return fail(c, "kernel %s larger than padded input %s", ts(w, b1), ts(x, b2));
  *o = (dc_type){DT_F32, 4, {x->dims[0], 0, 0, 0}};
  o->dims[a.c] = w->dims[0];
  o->dims[a.h] = h / s + 1;
  o->dims[a.w] = wd / s + 1;
  return check_epilogue(c, w->dims[0], o);
}

/* conv3d (ops.def): x [B,C,T,H,W], w [O,C,kt,kh,kw], bias [O] when bias=1;
 * padding in H and W only, none in time. */
static dc_status *infer_conv3d(const ctx *c, dc_type *o) {
  const dc_type *x = c->in[0], *w = c->in[1];
  char b1[160], b2[160];
  DC_TRY(want_rank(c, 0, 5, 5));
  DC_TRY(want_rank(c, 1, 5, 5));
  int64_t bias = dc_node_int(c->n, "bias");
  if (bias != 0 && bias != 1) return fail(c, "bias flag must be 0 or 1");
  if (c->n->ninputs != 2 + bias)
    return fail(c, "has %d inputs but bias=%lld needs %lld", c->n->ninputs, (long long)bias, (long long)(2 + bias));
  if (bias) DC_TRY(want_vec(c, 2, w->dims[0]));
  if (w->dims[1] != x->dims[1]) return fail(c, "weight %s does not match input %s channels", ts(w, b1), ts(x, b2));
  int64_t st = dc_node_int(c->n, "stride_t"), sh = dc_node_int(c->n, "stride_h"), sw = dc_node_int(c->n, "stride_w");
  int64_t ph = dc_node_int(c->n, "pad_h"), pw = dc_node_int(c->n, "pad_w");
  if (st < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0) return fail(c, "bad stride or padding");
  int64_t t = x->dims[2] - w->dims[2], h = x->dims[3] + 2 * ph - w->dims[3], wd = x->dims[4] + 2 * pw - w->dims[4];
  if (t < 0 || h < 0 || wd < 0) return fail(c, "kernel %s larger than padded input %s", ts(w, b1), ts(x, b2));
  *o = (dc_type){DT_F32, 5, {x->dims[0], w->dims[0], t / st + 1, h / sh + 1, wd / sw + 1}};
  return NULL;
}

static dc_status *infer_linear(const ctx *c, dc_type *o) {
  const dc_type *x = c->in[0], *w = c->in[1];
  char b1[160], b2[160];
  DC_TRY(want_rank(c, 0, 1, DC_MAX_DIMS));
  DC_TRY(want_rank(c, 1, 2, 2));
  if (w->dims[1] != x->dims[x->rank - 1])
    return fail(c, "weight %s does not match input %s", ts(w, b1), ts(x, b2));
  *o = *x;
  o->dims[x->rank - 1] = w->dims[0];
  return check_epilogue(c, w->dims[0], o);
}

static dc_status *infer_norm(const ctx *c, dc_type *o, int channel_axis) {
  DC_TRY(want_rank(c, 0, channel_axis + 1, DC_MAX_DIMS));
  int64_t ch = c->in[0]->dims[channel_axis < 0 ? c->in[0]->rank - 1 : channel_axis];
  DC_TRY(want_vec(c, 1, ch));
  DC_TRY(want_vec(c, 2, ch));
  if (c->n->op == OP_GROUP_NORM) {
    int64_t g = dc_node_int(c->n, "groups"), act = dc_node_int(c->n, "act");
    if (g < 1 || ch % g) return fail(c, "%lld channels do not split into %lld groups", (long long)ch, (long long)g);
    if (act != ACT_NONE && act != ACT_SILU && act != ACT_GELU) return fail(c, "act %lld is not valid here", (long long)act);
  }
  *o = *c->in[0];
  return NULL;
}

static dc_status *infer_broadcast(const ctx *c, dc_type *o) {
  const dc_type *a = c->in[0], *b = c->in[1];
  char b1[160], b2[160];
  if (!broadcasts(b, a)) return fail(c, "%s does not broadcast onto %s", ts(b, b1), ts(a, b2));
  *o = *a;
  return NULL;
}

static dc_status *infer_attention(const ctx *c, dc_type *o) {
  const dc_type *q = c->in[0], *k = c->in[1], *v = c->in[2];
  char b1[160], b2[160], b3[160];
  for (int i = 0; i < 3; i++) DC_TRY(want_rank(c, i, 3, 3));
  int64_t h = dc_node_int(c->n, "heads");
  if (k->dims[0] != q->dims[0] || !dc_type_equal(k, v) || k->dims[2] != q->dims[2] || h < 1 ||
      q->dims[2] % h)
    return fail(c, "q %s, k %s, v %s with %lld heads are not compatible", ts(q, b1), ts(k, b2),
                ts(v, b3), (long long)h);
  *o = *q;
  return NULL;
}

/* Self-attention only: the causal mask pairs query i with keys 0..i. */
static dc_status *infer_causal_attention(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  DC_TRY(infer_attention(c, o));
  if (c->in[0]->dims[1] != c->in[1]->dims[1])
    return fail(c, "q %s and k %s: causal attention needs as many queries as keys", ts(c->in[0], b1),
                ts(c->in[1], b2));
  return NULL;
}

/* ids [...] and a table [V, D] give [..., D]. */
static dc_status *infer_embedding(const ctx *c, dc_type *o) {
  char b[160];
  DC_TRY(want_rank(c, 1, 2, 2));
  if (c->in[0]->rank >= DC_MAX_DIMS) return fail(c, "ids %s have too many dims for one more", ts(c->in[0], b));
  *o = (dc_type){DT_F32, c->in[0]->rank + 1, {0}};
  memcpy(o->dims, c->in[0]->dims, sizeof(int64_t) * (size_t)c->in[0]->rank);
  o->dims[o->rank - 1] = c->in[1]->dims[1];
  return NULL;
}

/* x [B,S,D] and ids [B,S] give [B,D]. */
static dc_status *infer_eos_pool(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  DC_TRY(want_rank(c, 0, 3, 3));
  DC_TRY(want_rank(c, 1, 2, 2));
  int64_t argmax = dc_node_int(c->n, "argmax");
  if (c->in[1]->dims[0] != c->in[0]->dims[0] || c->in[1]->dims[1] != c->in[0]->dims[1])
    return fail(c, "ids %s do not match the positions of %s", ts(c->in[1], b1), ts(c->in[0], b2));
  if (argmax != 0 && argmax != 1) return fail(c, "argmax must be 0 or 1");
  if (c->in[0]->dims[1] < 1) return fail(c, "no positions to pool from");
  *o = (dc_type){DT_F32, 2, {c->in[0]->dims[0], c->in[0]->dims[2]}};
  return NULL;
}

/* ---- the DiT ops ------------------------------------------------------- */
static dc_status *infer_rms_norm(const ctx *c, dc_type *o) {
  DC_TRY(want_rank(c, 0, 1, DC_MAX_DIMS));
  if (c->n->ninputs == 2) DC_TRY(want_vec(c, 1, c->in[0]->dims[c->in[0]->rank - 1]));
  if (!(dc_node_float(c->n, "eps") >= 0)) return fail(c, "eps must be >= 0");
  *o = *c->in[0];
  return NULL;
}

/* A modulation chunk mod[b, at .. at+C) of a [B,M] mod for x [B,S,C]. */
static dc_status *want_chunk(const ctx *c, int mod_input, int64_t at, const char *what) {
  char b1[160], b2[160];
  const dc_type *x = c->in[0], *mod = c->in[mod_input];
  DC_TRY(want_rank(c, mod_input, 2, 2));
  if (mod->dims[0] != x->dims[0])
    return fail(c, "mod %s does not match the batch of %s", ts(mod, b1), ts(x, b2));
  if (at < 0 || at + x->dims[2] > mod->dims[1])
    return fail(c, "%s chunk at %lld of %lld features lies outside mod %s", what, (long long)at,
                (long long)x->dims[2], ts(mod, b1));
  return NULL;
}

static dc_status *infer_mod_layer_norm(const ctx *c, dc_type *o) {
  DC_TRY(want_rank(c, 0, 3, 3));
  if (c->n->ninputs == 3) return fail(c, "takes gamma and beta together (4 inputs) or neither (2)");
  if (c->n->ninputs == 4) {
    DC_TRY(want_vec(c, 2, c->in[0]->dims[2]));
    DC_TRY(want_vec(c, 3, c->in[0]->dims[2]));
  }
  DC_TRY(want_chunk(c, 1, dc_node_int(c->n, "scale_at"), "scale"));
  DC_TRY(want_chunk(c, 1, dc_node_int(c->n, "shift_at"), "shift"));
  *o = *c->in[0];
  return NULL;
}

static dc_status *infer_gated_add(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  DC_TRY(want_rank(c, 0, 3, 3));
  if (!dc_type_equal(c->in[0], c->in[1])) return fail(c, "x %s and y %s differ", ts(c->in[0], b1), ts(c->in[1], b2));
  DC_TRY(want_chunk(c, 2, dc_node_int(c->n, "at"), "gate"));
  *o = *c->in[0];
  return NULL;
}

static dc_status *infer_rope_freqs(const ctx *c, dc_type *o) {
  char b[160];
  int64_t d = 0;
  DC_TRY(want_rank(c, 0, 2, 2));
  if (c->n->nlist != c->in[0]->dims[1])
    return fail(c, "axes has %d entries for positions %s", c->n->nlist, ts(c->in[0], b));
  for (int i = 0; i < c->n->nlist; i++) {
    if (c->n->list[i] < 2 || c->n->list[i] % 2) return fail(c, "axis %d has %lld dims; expected an even number >= 2", i, (long long)c->n->list[i]);
    d += c->n->list[i];
  }
  if (!(dc_node_float(c->n, "theta") > 0)) return fail(c, "theta must be > 0");
  *o = (dc_type){DT_F32, 3, {c->in[0]->dims[0], 2, d}};
  return NULL;
}

static dc_status *infer_rope(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  const dc_type *x = c->in[0], *f = c->in[1];
  int64_t h = dc_node_int(c->n, "heads"), start = dc_node_int(c->n, "start");
  DC_TRY(want_rank(c, 0, 3, 3));
  DC_TRY(want_rank(c, 1, 3, 3));
  if (h < 1 || x->dims[2] % h || (x->dims[2] / h) % 2)
    return fail(c, "%s does not split into %lld heads of an even size", ts(x, b1), (long long)h);
  if (start < 0 || start > x->dims[1] || f->dims[0] != x->dims[1] - start || f->dims[1] != 2 ||
      f->dims[2] != x->dims[2] / h)
    return fail(c, "freqs %s do not fit tokens %lld.. of %s with %lld heads", ts(f, b1), (long long)start,
                ts(x, b2), (long long)h);
  *o = *x;
  return NULL;
}

static dc_status *infer_attention_bias(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  const dc_type *q = c->in[0], *k = c->in[1], *bias = c->in[3];
  DC_TRY(infer_attention(c, o));
  DC_TRY(want_rank(c, 3, 3, 3));
  if (bias->dims[0] != dc_node_int(c->n, "heads") || bias->dims[1] != q->dims[1] || bias->dims[2] != k->dims[1])
    return fail(c, "bias %s is not [heads, queries, keys] for q %s", ts(bias, b1), ts(q, b2));
  return NULL;
}

static dc_status *infer_permute(const ctx *c, dc_type *o) {
  const dc_type *x = c->in[0];
  int seen[DC_MAX_DIMS] = {0};
  if (c->n->nlist != x->rank) return fail(c, "perm has %d entries for a rank-%d input", c->n->nlist, x->rank);
  *o = *x;
  for (int i = 0; i < x->rank; i++) {
    int64_t p = c->n->list[i];
    if (p < 0 || p >= x->rank || seen[p]++) return fail(c, "perm is not a permutation");
    o->dims[i] = x->dims[p];
  }
  return NULL;
}

static dc_status *axis_ok(const ctx *c, int64_t axis, int rank) {
  if (axis < 0 || axis >= rank) return fail(c, "axis %lld out of range for rank %d", (long long)axis, rank);
  return NULL;
}

static dc_status *infer_concat(const ctx *c, dc_type *o) {
  const dc_type *a = c->in[0], *b = c->in[1];
  char b1[160], b2[160];
  int64_t axis = dc_node_int(c->n, "axis");
  DC_TRY(axis_ok(c, axis, a->rank));
  int ok = a->rank == b->rank;
  for (int i = 0; ok && i < a->rank; i++) ok = i == axis || a->dims[i] == b->dims[i];
  if (!ok) return fail(c, "cannot concatenate %s and %s on axis %lld", ts(a, b1), ts(b, b2), (long long)axis);
  *o = *a;
  o->dims[axis] += b->dims[axis];
  return NULL;
}

static dc_status *infer_slice(const ctx *c, dc_type *o) {
  int64_t axis = dc_node_int(c->n, "axis"), s = dc_node_int(c->n, "start"), e = dc_node_int(c->n, "end");
  DC_TRY(axis_ok(c, axis, c->in[0]->rank));
  if (s < 0 || e <= s || e > c->in[0]->dims[axis]) return fail(c, "bad slice [%lld, %lld)", (long long)s, (long long)e);
  *o = *c->in[0];
  o->dims[axis] = e - s;
  return NULL;
}

static dc_status *infer_blend(const ctx *c, dc_type *o) {
  const dc_type *x = c->in[0], *p = c->in[1];
  char b1[160], b2[160];
  int64_t axis = dc_node_int(c->n, "axis");
  DC_TRY(axis_ok(c, axis, x->rank));
  if (dc_node_int(c->n, "extent") < 1) return fail(c, "blend extent must be >= 1");
  int ok = x->rank == p->rank;
  for (int i = 0; ok && i < x->rank; i++) ok = i == axis || x->dims[i] == p->dims[i];
  if (!ok) return fail(c, "cannot blend %s with %s along axis %lld", ts(x, b1), ts(p, b2), (long long)axis);
  *o = *x;
  return NULL;
}

/* A constant is f32 or an integer, and holds its bytes. */
static dc_status *check_constant(const ctx *c, dc_type *o) {
  char b[160];
  const dc_type *t = &c->n->type;
  if (t->dtype != DT_F32 && !dc_dtype_is_int(t->dtype))
    return fail(c, "a constant is f32, i32 or i64, not %s", ts(t, b));
  if (!c->n->data) return fail(c, "constant %s holds no data", ts(t, b));
  *o = *t;
  return NULL;
}

/* Ops whose type the builder states: check it against the input. */
static dc_status *check_given(const ctx *c, dc_type *o) {
  char b1[160], b2[160];
  const dc_type *t = &c->n->type;
  if (t->rank < 0 || t->rank > DC_MAX_DIMS || t->dtype >= DT_COUNT) return fail(c, "bad type");
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return fail(c, "negative dimension in %s", ts(t, b1));
  if (c->n->op == OP_RESHAPE) {
    if (dc_type_numel(t) != dc_type_numel(c->in[0]) || t->dtype != c->in[0]->dtype)
      return fail(c, "cannot reshape %s to %s", ts(c->in[0], b1), ts(t, b2));
  } else if (c->n->op == OP_UPLOAD) {
    if (c->m->nodes[c->n->inputs[0]].op != OP_WEIGHT) return fail(c, "upload reads a weight, not a computed value");
    if (!dc_type_equal(t, c->in[0])) return fail(c, "upload changes the type: %s to %s", ts(c->in[0], b1), ts(t, b2));
  } else if (c->n->op == OP_TRANSFER) {
    if (!dc_type_equal(t, c->in[0])) return fail(c, "transfer changes the type: %s to %s", ts(c->in[0], b1), ts(t, b2));
  } else if (c->n->op == OP_REL_POS_BIAS) {
    const dc_type *tab = c->in[0];
    int float_out = t->dtype == DT_F32 || t->dtype == dc_module_activation_dtype(c->m);
    if (tab->rank != 2 || dc_dtype_is_int(tab->dtype) || t->rank != 3 || !float_out || t->dims[0] != tab->dims[1])
      return fail(c, "table %s cannot give %s: expected a float table [buckets, heads] and f32 [heads, queries, keys]",
                  ts(tab, b1), ts(t, b2));
    /* the exact buckets (half of a side's) must exist and end before max_distance: the log-spaced
     * buckets divide by their count and by log(max_distance / count) */
    int64_t side = dc_node_int(c->n, "bidirectional") ? tab->dims[0] / 2 : tab->dims[0];
    if (side / 2 < 1 || dc_node_int(c->n, "max_distance") <= side / 2 || (dc_node_int(c->n, "bidirectional") & ~1))
      return fail(c, "%lld buckets with max_distance %lld and bidirectional %lld: expected an exact bucket per side "
                  "at least (4 buckets bidirectional, 2 one-sided), max_distance above the exact ones, and "
                  "bidirectional 0 or 1",
                  (long long)tab->dims[0], (long long)dc_node_int(c->n, "max_distance"),
                  (long long)dc_node_int(c->n, "bidirectional"));
  } else if (c->n->op == OP_CAST) {
    if (dc_dtype_is_int(t->dtype) || dc_dtype_is_int(c->in[0]->dtype))
      return fail(c, "cast %s to %s: no kernel casts integers (float dtypes only)", ts(c->in[0], b1), ts(t, b2));
    dc_type same = *c->in[0];
    same.dtype = t->dtype;
    if (!dc_type_equal(&same, t)) return fail(c, "cast changes the shape: %s to %s", ts(c->in[0], b1), ts(t, b2));
  }
  *o = *t;
  return NULL;
}

static dc_status *infer_computed(const ctx *c, dc_type *o);

dc_status *dc_infer_type(const dc_module *m, const dc_node *n, dc_type *o) {
  ctx c = {m, n, {0}};
  const dc_op_info *info = dc_op_get(n->op);
  if (n->ninputs < info->min_inputs || n->ninputs > info->max_inputs)
    return fail(&c, "has %d inputs; expected %d..%d", n->ninputs, info->min_inputs, info->max_inputs);
  for (int i = 0; i < n->ninputs; i++) c.in[i] = &m->nodes[n->inputs[i]].type;
  if (info->flags & OPF_TYPE_GIVEN) {
    if (n->op == OP_INPUT || n->op == OP_WEIGHT || n->op == OP_PROBE) return *o = n->type, NULL;
    if (n->op == OP_CONSTANT) return check_constant(&c, o);
    return check_given(&c, o);
  }
  DC_TRY(want_f32(&c));
  DC_TRY(infer_computed(&c, o));
  /* A float value a node computes is stored in f32 or in the module's
   * activation dtype, as the node says (the kernels round once, on store). */
  dc_dtype act = dc_module_activation_dtype(m);
  int o_float = o->dtype == DT_F32 || o->dtype == act, n_float = n->type.dtype == DT_F32 || n->type.dtype == act;
  if (act != DT_F32 && o_float && n_float) o->dtype = n->type.dtype;
  return NULL;
}

static dc_status *infer_computed(const ctx *cp, dc_type *o) {
  ctx c = *cp;
  const dc_node *n = c.n;
  switch (n->op) {
    case OP_CONV2D: return infer_conv(&c, o);
    case OP_CONV3D: return infer_conv3d(&c, o);
    case OP_LINEAR: return infer_linear(&c, o);
    case OP_GROUP_NORM:
      if (n->layout == LAYOUT_NHWC) DC_TRY(want_rank(&c, 0, 2, DC_MAX_DIMS)); /* [N, spatial..., C] */
      return infer_norm(&c, o, n->layout == LAYOUT_NHWC ? -1 : 1);
    case OP_LAYER_NORM: return infer_norm(&c, o, -1);
    case OP_ADD:
    case OP_MUL: return infer_broadcast(&c, o);
    case OP_SILU:
    case OP_GELU:
    case OP_QUICK_GELU:
    case OP_GELU_TANH:
    case OP_SCALE:
    case OP_CLAMP: return *o = *c.in[0], NULL;
    case OP_RMS_NORM: return infer_rms_norm(&c, o);
    case OP_MOD_LAYER_NORM: return infer_mod_layer_norm(&c, o);
    case OP_GATED_ADD: return infer_gated_add(&c, o);
    case OP_ROPE_FREQS: return infer_rope_freqs(&c, o);
    case OP_ROPE: return infer_rope(&c, o);
    case OP_ATTENTION_BIAS: return infer_attention_bias(&c, o);
    case OP_GEGLU:
      if (c.in[0]->rank < 1 || c.in[0]->dims[c.in[0]->rank - 1] % 2) return fail(&c, "last dim must be even");
      *o = *c.in[0];
      o->dims[o->rank - 1] /= 2;
      return NULL;
    case OP_ATTENTION: return infer_attention(&c, o);
    case OP_CAUSAL_ATTENTION: return infer_causal_attention(&c, o);
    case OP_EMBEDDING: return infer_embedding(&c, o);
    case OP_EOS_POOL: return infer_eos_pool(&c, o);
    case OP_PERMUTE: return infer_permute(&c, o);
    case OP_UPSAMPLE: {
      int64_t f = dc_node_int(n, "factor");
      /* NCHW: the last two dims; NHWC [N,H,W,C]: dims 1 and 2. */
      int nhwc = n->layout == LAYOUT_NHWC;
      DC_TRY(want_rank(&c, 0, nhwc ? 4 : 3, nhwc ? 4 : DC_MAX_DIMS));
      if (f < 1) return fail(&c, "factor must be >= 1");
      *o = *c.in[0];
      o->dims[o->rank - 1 - nhwc] *= f;
      o->dims[o->rank - 2 - nhwc] *= f;
      return NULL;
    }
    case OP_CONCAT: return infer_concat(&c, o);
    case OP_SLICE: return infer_slice(&c, o);
    case OP_BLEND: return infer_blend(&c, o);
    case OP_TIME_EMBED: {
      DC_TRY(want_rank(&c, 0, 1, 1));
      int64_t dim = dc_node_int(n, "dim");
      if (dim < 2) return fail(&c, "dim must be >= 2");
      *o = (dc_type){DT_F32, 2, {c.in[0]->dims[0], dim}};
      return NULL;
    }
    default: return fail(&c, "no type rule");
  }
}
