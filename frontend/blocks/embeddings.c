/* embeddings.c — diffusers' embeddings.py (blocks.h): Timesteps and
 * TimestepEmbedding; the DiTs' conditioning embeddings, Flux's rotary
 * table, SD3's patch embedding, and CogVideoX's patch embedding with its
 * position tables (the 3D sincos table; the 3D rotary table the pipeline
 * computes), which are computed here at compile time from the shapes. */
#include <math.h>

#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

dc_status *blk_timesteps(dc_gb *g, const char *scope, int32_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                         int32_t *out) {
  dc_node n = dc_node_make(OP_TIME_EMBED, 1, &t);
  dc_node_set_int(&n, "dim", dim);
  dc_node_set_int(&n, "flip_sin_to_cos", flip_sin_to_cos);
  dc_node_set_float(&n, "freq_shift", freq_shift);
  return gb_add(g, &n, scope, out);
}

dc_status *blk_timestep_embedding(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int32_t *out) {
  char s[256];
  DC_TRY(gb_linear(g, P("%s.linear_1", p), x, in, dim, 1, &x));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.act", p), x, &x));
  return gb_linear(g, P("%s.linear_2", p), x, dim, dim, 1, out);
}

dc_status *blk_pixart_text_projection(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t hidden, dc_op act,
                                      int32_t *out) {
  char s[256];
  DC_TRY(gb_linear(g, P("%s.linear_1", p), x, in, hidden, 1, &x));
  DC_TRY(gb_unary(g, act, P("%s.act_1", p), x, &x));
  return gb_linear(g, P("%s.linear_2", p), x, hidden, hidden, 1, out);
}

/* Timesteps(256, flip_sin_to_cos=True, shift 0) then a TimestepEmbedding. */
static dc_status *timestep_branch(dc_gb *g, const char *p, const char *embedder, int32_t t, int64_t dim, int32_t *out) {
  char s[256];
  DC_TRY(blk_timesteps(g, P("%s.time_proj", p), t, 256, 1, 0.0, &t));
  return blk_timestep_embedding(g, P("%s.%s", p, embedder), t, 256, dim, out);
}

dc_status *blk_combined_timestep_text_proj(dc_gb *g, const char *p, int32_t t, int32_t guidance, int32_t pooled,
                                           int64_t pooled_dim, int64_t dim, int32_t *out) {
  char s[256];
  int32_t emb, other;
  DC_TRY(timestep_branch(g, p, "timestep_embedder", t, dim, &emb));
  if (guidance >= 0) {
    DC_TRY(timestep_branch(g, p, "guidance_embedder", guidance, dim, &other));
    DC_TRY(gb_binary(g, OP_ADD, p, emb, other, &emb));
  }
  DC_TRY(blk_pixart_text_projection(g, P("%s.text_embedder", p), pooled, pooled_dim, dim, OP_SILU, &other));
  return gb_binary(g, OP_ADD, p, emb, other, out);
}

dc_status *blk_flux_pos_embed(dc_gb *g, const char *scope, int32_t ids, const int64_t *axes, int naxes, double theta,
                              int32_t *out) {
  dc_node n = dc_node_make(OP_ROPE_FREQS, 1, &ids);
  if (naxes < 1 || naxes > DC_MAX_DIMS)
    return dc_error(DC_ERR_INTERNAL, "%s: %d rotary axes (the builder allows 1 to %d)", scope, naxes, DC_MAX_DIMS);
  for (int i = 0; i < naxes; i++) n.list[i] = axes[i];
  n.nlist = naxes;
  dc_node_set_float(&n, "theta", theta);
  return gb_add(g, &n, scope, out);
}

/* The table's rows of the centred h x w window: top = (max - h) // 2,
 * left = (max - w) // 2, as [1, h*w, dim] in row-major order.  The h table
 * rows the window spans are sliced out first, so only they (not the whole
 * max^2 table) are copied on the way. */
static dc_status *cropped_table(dc_gb *g, const char *p, int64_t dim, int64_t max_size, int64_t h, int64_t w,
                                int32_t *out) {
  char s[256];
  int32_t t;
  int64_t top = (max_size - h) / 2, left = (max_size - w) / 2;
  DC_TRY(gb_param(g, p, "pos_embed", 3, (int64_t[]){1, max_size * max_size, dim}, &t));
  DC_TRY(gb_slice(g, P("%s.pos_embed", p), t, 1, top * max_size, (top + h) * max_size, &t));
  DC_TRY(gb_reshape(g, P("%s.pos_embed", p), t, 3, (int64_t[]){h, max_size, dim}, &t));
  DC_TRY(gb_slice(g, P("%s.pos_embed", p), t, 1, left, left + w, &t));
  return gb_reshape(g, P("%s.pos_embed", p), t, 3, (int64_t[]){1, h * w, dim}, out);
}

dc_status *blk_patch_embed_cropped(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                   int64_t max_size, int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t h = t->dims[2] / patch, w = t->dims[3] / patch;
  int32_t pos;
  DC_TRY(gb_conv2d(g, P("%s.proj", p), x, in, dim, patch, patch, (int64_t[]){0, 0, 0, 0}, &x));
  DC_TRY(gb_to_tokens(g, p, x, &x));
  DC_TRY(cropped_table(g, p, dim, max_size, h, w, &pos));
  return gb_binary(g, OP_ADD, p, x, pos, out);
}

/* ---- CogVideoX ------------------------------------------------------------ */

/* CogVideoX 1.5's blocks of patch_t x patch x patch, each flattened as
 * (channel, frame, row, column) -- diffusers' 8-d permute, done here in
 * two steps of at most 5 dims: the rows and columns of each patch first,
 * then the frames and channels -- and projected by p.proj. */
static dc_status *patch_video_linear(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                     int64_t patch_t, int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], f = t->dims[1] / patch_t, h = t->dims[3] / patch, w = t->dims[4] / patch;
  DC_TRY(gb_reshape(g, p, x, 5, (int64_t[]){b * t->dims[1] * in, h, patch, w, patch}, &x));
  DC_TRY(gb_permute(g, p, x, 5, (int64_t[]){0, 1, 3, 2, 4}, &x)); /* [.., h, w, p, p] */
  DC_TRY(gb_reshape(g, p, x, 5, (int64_t[]){b * f, patch_t, in, h * w, patch * patch}, &x));
  DC_TRY(gb_permute(g, p, x, 5, (int64_t[]){0, 3, 2, 1, 4}, &x)); /* [.., h*w, in, p_t, p*p] */
  DC_TRY(gb_reshape(g, p, x, 3, (int64_t[]){b, f * h * w, in * patch_t * patch * patch}, &x));
  return gb_linear(g, P("%s.proj", p), x, in * patch_t * patch * patch, dim, 1, out);
}

dc_status *blk_cogvideox_patch_video(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                     int64_t patch_t, int32_t *out) {
  char s[256];
  if (patch_t) return patch_video_linear(g, p, x, in, dim, patch, patch_t, out);
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], f = t->dims[1], h = t->dims[3] / patch, w = t->dims[4] / patch;
  DC_TRY(gb_reshape(g, P("%s.proj", p), x, 4, (int64_t[]){b * f, in, t->dims[3], t->dims[4]}, &x));
  DC_TRY(gb_conv2d(g, P("%s.proj", p), x, in, dim, patch, patch, (int64_t[]){0, 0, 0, 0}, &x));
  DC_TRY(gb_to_tokens(g, p, x, &x));
  return gb_reshape(g, p, x, 3, (int64_t[]){b, f * h * w, dim}, out);
}

/* get_1d_sincos_pos_embed_from_grid for one position: [sin(pos * o_k),
 * cos(pos * o_k)] with o_k = 1 / 10000^(k / (n/2)), k < n/2, in double (the
 * frequencies are float64 there), stored as f32. */
static void sincos_row(double pos, int64_t n, float *out) {
  int64_t half = n / 2;
  for (int64_t k = 0; k < half; k++) {
    double a = pos * (1.0 / pow(10000.0, (double)k / ((double)n / 2.0)));
    out[k] = (float)sin(a);
    out[half + k] = (float)cos(a);
  }
}

/* diffusers' grids are torch.arange(n, float32) / scale: an f32 quotient. */
static double grid_pos(int64_t i, double scale) {
  return (double)((float)i / (float)scale);
}

/* get_3d_sincos_pos_embed's two parts: temporal [frames, dim/4] and spatial
 * [h*w, 3*dim/4], the latter [emb(column), emb(row)] per patch (the "xy"
 * meshgrid puts the width coordinate first). */
static dc_status *sincos_tables(dc_gb *g, const char *scope, int64_t dim, int64_t frames, int64_t h, int64_t w,
                                double spatial_scale, double temporal_scale, int32_t *temporal, int32_t *spatial) {
  int64_t dt = dim / 4, ds = dim - dt, half = ds / 2;
  float *tt = dc_malloc(sizeof(float) * (size_t)(frames * dt)), *st = dc_malloc(sizeof(float) * (size_t)(h * w * ds));
  if (!tt || !st) {
    dc_free(tt), dc_free(st);
    return dc_nomem("computing CogVideoX's sincos position table");
  }
  for (int64_t f = 0; f < frames; f++) sincos_row(grid_pos(f, temporal_scale), dt, tt + f * dt);
  for (int64_t i = 0; i < h; i++)
    for (int64_t j = 0; j < w; j++) {
      sincos_row(grid_pos(j, spatial_scale), half, st + (i * w + j) * ds);
      sincos_row(grid_pos(i, spatial_scale), half, st + (i * w + j) * ds + half);
    }
  dc_type ttype = {DT_F32, 3, {frames, 1, dt}}, stype = {DT_F32, 2, {h * w, ds}};
  *temporal = dc_module_add_constant(g->m, scope, &ttype, tt);
  *spatial = dc_module_add_constant(g->m, scope, &stype, st);
  dc_free(tt), dc_free(st);
  return *temporal < 0 || *spatial < 0 ? dc_nomem("adding CogVideoX's sincos position table") : NULL;
}

/* x viewed [B, F, h*w, dim]: its first dim/4 channels plus the temporal
 * part (broadcast over the patches), the rest plus the spatial part
 * (broadcast over batch and frames), joined again: each element gets the
 * one addition diffusers' embeds + pos_embedding gives it. */
dc_status *blk_cogvideox_sincos_pos(dc_gb *g, const char *scope, int32_t x, int64_t frames, int64_t h, int64_t w,
                                    double spatial_scale, double temporal_scale, int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], dim = t->dims[2], dt = dim / 4;
  int32_t temporal = -1, spatial = -1, xt, xs;
  DC_TRY(sincos_tables(g, scope, dim, frames, h, w, spatial_scale, temporal_scale, &temporal, &spatial));
  DC_TRY(gb_reshape(g, scope, x, 4, (int64_t[]){b, frames, h * w, dim}, &x));
  DC_TRY(gb_slice(g, scope, x, 3, 0, dt, &xt));
  DC_TRY(gb_binary(g, OP_ADD, scope, xt, temporal, &xt));
  DC_TRY(gb_slice(g, scope, x, 3, dt, dim, &xs));
  DC_TRY(gb_binary(g, OP_ADD, scope, xs, spatial, &xs));
  DC_TRY(gb_concat(g, scope, xt, xs, 3, &x));
  return gb_reshape(g, scope, x, 3, (int64_t[]){b, frames * h * w, dim}, out);
}

/* get_resize_crop_region_for_grid((h, w), base_w, base_h): the grid
 * resized to fit the base grid and centred, as (top, left, bottom, right),
 * in double with Python's round (half to even: rint). */
static void crop_region(int64_t h, int64_t w, int64_t base_h, int64_t base_w, double box[4]) {
  double th = (double)base_h, tw = (double)base_w, rh, rw;
  if ((double)h / (double)w > th / tw) rh = th, rw = rint(th / (double)h * (double)w);
  else rw = tw, rh = rint(tw / (double)w * (double)h);
  box[0] = rint((th - rh) / 2.0), box[1] = rint((tw - rw) / 2.0);
  box[2] = box[0] + rh, box[3] = box[1] + rw;
}

/* torch.linspace(start, end, n, dtype=float32) element i: the f32 step,
 * counted from the start in the first half and from the end in the second,
 * as torch's CPU kernel does. */
static float linspace_at(double start, double end, int64_t n, int64_t i) {
  float s = (float)start, e = (float)end;
  if (n == 1) return s;
  float step = (e - s) / (float)(n - 1);
  return i < n / 2 ? s + step * (float)i : e - step * (float)(n - 1 - i);
}

dc_status *blk_cogvideox_rotary_table(dc_gb *g, const char *scope, int64_t head_dim, int64_t frames, int64_t h,
                                      int64_t w, int64_t base_h, int64_t base_w, int slice, int32_t *out) {
  double box[4];
  crop_region(h, w, base_h, base_w, box);
  int64_t n = frames * h * w;
  float *pos = dc_malloc(sizeof(float) * (size_t)(n * 3));
  if (!pos) return dc_nomem("computing CogVideoX's rotary positions");
  /* grid_t = linspace(0, F*(F-1)/F, F): 0 .. F-1 */
  for (int64_t f = 0, k = 0; f < frames; f++)
    for (int64_t i = 0; i < h; i++)
      for (int64_t j = 0; j < w; j++, k++) {
        if (slice) { /* arange(max)[:n] */
          pos[k * 3] = (float)f, pos[k * 3 + 1] = (float)i, pos[k * 3 + 2] = (float)j;
          continue;
        }
        pos[k * 3] = linspace_at(0.0, (double)(frames * (frames - 1)) / (double)frames, frames, f);
        pos[k * 3 + 1] = linspace_at(box[0], box[2] * (double)(h - 1) / (double)h, h, i);
        pos[k * 3 + 2] = linspace_at(box[1], box[3] * (double)(w - 1) / (double)w, w, j);
      }
  dc_type pt = {DT_F32, 2, {n, 3}};
  int32_t ids = dc_module_add_constant(g->m, scope, &pt, pos);
  dc_free(pos);
  if (ids < 0) return dc_nomem("adding CogVideoX's rotary positions");
  int64_t axes[3] = {head_dim / 4, head_dim / 8 * 3, head_dim / 8 * 3};
  return blk_flux_pos_embed(g, scope, ids, axes, 3, 10000.0, out);
}
