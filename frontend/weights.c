/* weights.c — bind checkpoint tensors to the IR a builder is making.
 *
 * A builder asks for each weight by its diffusers name with the shape its
 * config implies; a missing weight or a different shape means the config
 * and the checkpoint disagree, and the message says both shapes.  The weight
 * stays in its file: the IR gets a (file, offset, bytes, type) reference and
 * an OP_WEIGHT node, plus an OP_CAST to f32 when the stored dtype is not f32
 * or the data is not 4-byte aligned in the file, and a [1,0] permute when
 * the entry holds the transpose of the weight (a single-file checkpoint's
 * OpenCLIP text_projection: the bytes stay as stored).  Tensors no builder asked
 * for are reported at the end, because a checkpoint with extra weights is a
 * sign that the graph is not the model.
 *
 * Record mode (a folder with `record` set, made by dc_frontend_weight_list
 * from a config alone) turns the lookup around: every weight asked for is
 * appended to the list with the shape the config implies and bound to a
 * placeholder f32 reference, so the builder runs to the end and the list is
 * the checkpoint the config needs (tools/make_model fills one with random
 * values). */
#include "frontend.h"
#include "registry.h"

#include <stdlib.h>
#include <string.h>

dc_status *dc_weights_init(dc_weights *w, dc_module *m, const dc_folder *folder) {
  memset(w, 0, sizeof *w);
  w->m = m;
  w->folder = folder;
  w->file_of_shard =
      dc_malloc(sizeof *w->file_of_shard * (size_t)(folder->nshards ? folder->nshards : 1));
  w->used = dc_calloc((size_t)folder->nentries, 1);
  w->halves_asked = dc_calloc((size_t)folder->nentries, 1);
  if (!w->file_of_shard || !w->used || !w->halves_asked) {
    dc_weights_deinit(w);
    return dc_nomem("binding weights");
  }
  /* Slot 0 also serves record mode's placeholder file (no shards). */
  for (int s = 0; s < (folder->nshards ? folder->nshards : 1); s++) w->file_of_shard[s] = -1;
  return NULL;
}

void dc_weights_deinit(dc_weights *w) {
  dc_free(w->file_of_shard);
  dc_free(w->used);
  dc_free(w->halves_asked);
  memset(w, 0, sizeof *w);
}

/* The shape the entry has under its diffusers name: the stored one, or its
 * transpose for a transposed entry (always rank 2). */
static int weights_entry_shape(const struct dc_folder_entry *e, int64_t *dims) {
  const dc_st_tensor *t = e->tensor;
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
  if (e->transposed) dims[0] = t->dims[1], dims[1] = t->dims[0];
  return t->rank;
}

static int weights_same_shape(const struct dc_folder_entry *e, int rank, const int64_t *dims) {
  int64_t have[DC_MAX_DIMS];
  if (weights_entry_shape(e, have) != rank) return 0;
  return memcmp(have, dims, sizeof(int64_t) * (size_t)rank) == 0;
}

/* The node after `i` if it reads `i` and has op `op`; else i. */
static int32_t weights_follow(const dc_module *m, int32_t i, dc_op op) {
  const dc_node *next = i + 1 < m->nnodes ? &m->nodes[i + 1] : NULL;
  return next && next->op == op && next->inputs[0] == i ? i + 1 : i;
}

/* The node a previous get returned for this tensor: its OP_WEIGHT node, then
 * the cast right after it if there is one, then (for a transposed entry) the
 * permute after that.  Repeated gets are rare (shared weights), so a scan is
 * fine. */
static int32_t weights_find_node(const dc_module *m, const char *name, int transposed) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_WEIGHT || strcmp(m->weights[n->ref].name, name) != 0) continue;
    int32_t id = weights_follow(m, i, OP_CAST);
    return transposed ? weights_follow(m, id, OP_PERMUTE) : id;
  }
  return -1;
}

/* A transposed entry: the [1,0] permute of the bound weight, in its scope. */
static dc_status *weights_transpose(dc_weights *w, int32_t id, int32_t *out) {
  dc_node p = dc_node_make(OP_PERMUTE, 1, &id);
  p.nlist = 2;
  p.list[0] = 1, p.list[1] = 0;
  p.layout = LAYOUT_ROWMAJOR;
  p.scope = w->m->nodes[id].scope;
  DC_TRY(dc_infer_type(w->m, &p, &p.type));
  *out = dc_module_add_node(w->m, &p);
  return *out < 0 ? dc_nomem("binding weights") : NULL;
}

/* "conv_in.weight" -> "conv_in", in the module's arena; NULL scope if the
 * name has no dot. */
static dc_status *weights_scope(dc_module *m, const char *name, const char **out) {
  const char *dot = strrchr(name, '.');
  *out = NULL;
  if (!dot) return NULL;
  size_t n = (size_t)(dot - name);
  char *s = dc_arena_alloc(m->arena, n + 1);
  if (!s) return dc_nomem("binding weights");
  memcpy(s, name, n);
  s[n] = 0;
  *out = s;
  return NULL;
}

static dc_status *weights_file_index(dc_weights *w, int shard, int32_t *out) {
  if (w->file_of_shard[shard] < 0) {
    const dc_st_file *f = &w->folder->shards[shard];
    char *abs = dc_path_absolute(f->file.path); /* the plan runs from any folder */
    if (!abs) return dc_nomem("binding weights");
    dc_weight_file wf = {abs, f->header_hash, (uint64_t)f->file.size};
    w->file_of_shard[shard] = dc_module_add_file(w->m, &wf);
    dc_free(abs);
    if (w->file_of_shard[shard] < 0) return dc_nomem("binding weights");
  }
  *out = w->file_of_shard[shard];
  return NULL;
}

/* Adds the weight, its OP_WEIGHT node and (if needed) the cast to f32. */
static dc_status *weights_bind(dc_weights *w, const dc_weight *wt, int32_t *out) {
  int32_t wi = dc_module_add_weight(w->m, wt);
  if (wi < 0) return dc_nomem("binding weights");
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = wi;
  n.type = wt->type;
  n.layout = LAYOUT_ROWMAJOR;
  DC_TRY(weights_scope(w->m, wt->name, &n.scope));
  int32_t id = dc_module_add_node(w->m, &n);
  if (id < 0) return dc_nomem("binding weights");
  if (wt->type.dtype != DT_F32 || wt->offset % 4 != 0) {
    dc_node c = dc_node_make(OP_CAST, 1, &id);
    c.type = wt->type;
    c.type.dtype = DT_F32;
    c.layout = LAYOUT_ROWMAJOR;
    c.scope = n.scope;
    id = dc_module_add_node(w->m, &c);
    if (id < 0) return dc_nomem("binding weights");
  }
  *out = id;
  return NULL;
}

static dc_status *weights_add(dc_weights *w, const struct dc_folder_entry *e, int32_t *out) {
  const dc_st_tensor *t = e->tensor;
  if (dc_dtype_is_int(t->dtype)) /* every weight a builder asks for is a float parameter, cast to f32 */
    return dc_error(DC_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s, but the model reads it as a float parameter",
                    w->folder->shards[e->shard].file.path, t->name, dc_dtype_safetensors_name(t->dtype));
  dc_weight wt = {.name = t->name, .offset = t->offset, .bytes = t->bytes};
  DC_TRY(weights_file_index(w, e->shard, &wt.file));
  wt.type.dtype = t->dtype;
  wt.type.rank = t->rank;
  memcpy(wt.type.dims, t->dims, sizeof wt.type.dims);
  DC_TRY(weights_bind(w, &wt, out));
  return e->transposed ? weights_transpose(w, *out, out) : NULL;
}

/* ---- record mode ------------------------------------------------------- */

/* Record mode's placeholder: one file no tensor is read from, as large as
 * any offset, so the verifier's range checks hold.  The module it lives in
 * is thrown away; no plan is ever written from it. */
static dc_status *weights_placeholder_file(dc_weights *w, int32_t *out) {
  if (w->file_of_shard[0] < 0) {
    dc_weight_file wf = {"(no weights: recording the weights a config implies)", 0, UINT64_MAX};
    w->file_of_shard[0] = dc_module_add_file(w->m, &wf);
    if (w->file_of_shard[0] < 0) return dc_nomem("recording weights");
  }
  *out = w->file_of_shard[0];
  return NULL;
}

static const dc_weight_spec *weights_list_scan(const dc_weight_list *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->items[i].name, name) == 0) return &l->items[i];
  return NULL;
}

static dc_status *weights_list_append(dc_weight_list *l, const char *name, int rank,
                                      const int64_t *dims) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    dc_weight_spec *items = dc_realloc(l->items, sizeof *items * (size_t)cap);
    if (!items) return dc_nomem("recording weights");
    l->items = items, l->cap = cap;
  }
  dc_weight_spec *s = &l->items[l->n];
  memset(s, 0, sizeof *s);
  s->name = dc_strdup(name);
  if (!s->name) return dc_nomem("recording weights");
  s->rank = rank;
  memcpy(s->dims, dims, sizeof(int64_t) * (size_t)rank);
  l->n++;
  return NULL;
}

/* Appends (name, shape) to the list unless it is there already (a shared
 * weight, or the VAE's second half built into another module: the shapes
 * must agree), then returns this module's node for it, adding a placeholder
 * f32 weight the first time this module asks. */
static dc_status *weights_record(dc_weights *w, const char *name, int rank, const int64_t *dims,
                                 int32_t *out) {
  dc_weight_list *l = w->folder->record;
  const dc_weight_spec *s = weights_list_scan(l, name);
  if (s && (s->rank != rank || memcmp(s->dims, dims, sizeof(int64_t) * (size_t)rank) != 0)) {
    char a[160], b[160];
    return dc_error(DC_ERR_INTERNAL, "%s: weight \"%s\" was asked for with shape %s and with %s",
                    w->folder->dir, name, dc_dims_str(s->dims, s->rank, a, sizeof a),
                    dc_dims_str(dims, rank, b, sizeof b));
  }
  if (!s) DC_TRY(weights_list_append(l, name, rank, dims));
  /* A name new to the list is new to this module too: skip the scan. */
  if (s && (*out = weights_find_node(w->m, name, 0)) >= 0) return NULL;
  dc_weight wt = {.name = name, .offset = 0};
  wt.type.dtype = DT_F32;
  wt.type.rank = rank;
  memcpy(wt.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  wt.bytes = dc_type_bytes(&wt.type);
  DC_TRY(weights_placeholder_file(w, &wt.file));
  return weights_bind(w, &wt, out);
}

dc_status *dc_weights_get(dc_weights *w, const char *name, int rank, const int64_t *dims,
                          int32_t *out) {
  char want[160], have[160];
  *out = -1;
  if (rank < 0 || rank > DC_MAX_DIMS)
    return dc_error(DC_ERR_INTERNAL, "weight \"%s\": a builder asked for rank %d", name, rank);
  if (w->folder->record) return weights_record(w, name, rank, dims, out);
  const struct dc_folder_entry *e = dc_folder_find(w->folder, name);
  if (!e)
    return dc_error(DC_ERR_MISMATCH, "%s: weight \"%s\" is missing (the config implies %s)",
                    w->folder->dir, name, dc_dims_str(dims, rank, want, sizeof want));
  const dc_st_tensor *t = e->tensor;
  if (!weights_same_shape(e, rank, dims)) {
    int64_t shape[DC_MAX_DIMS];
    int r = weights_entry_shape(e, shape);
    return dc_error(DC_ERR_MISMATCH, "%s: weight \"%s\" has shape %s but the config implies %s",
                    w->folder->dir, name, dc_dims_str(shape, r, have, sizeof have),
                    dc_dims_str(dims, rank, want, sizeof want));
  }
  size_t ei = (size_t)(e - w->folder->entries);
  if (e->halves_swapped && !w->halves_asked[ei])
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: weight \"%s\" is stored with its two halves in the other order (the original checkpoint's "
                    "shift, scale), and the %s builder does not read it that way",
                    w->folder->dir, name, w->folder->class_name);
  if (w->used[ei]) {
    *out = weights_find_node(w->m, t->name, e->transposed);
    if (*out < 0)
      return dc_error(DC_ERR_INTERNAL, "weight \"%s\" was bound but its node is gone", name);
    return NULL;
  }
  DC_TRY(weights_add(w, e, out));
  w->used[ei] = 1;
  return NULL;
}

dc_status *dc_weights_halves_swapped(dc_weights *w, const char *name, int *swapped) {
  *swapped = 0;
  if (w->folder->record) return NULL;
  const struct dc_folder_entry *e = dc_folder_find(w->folder, name);
  if (!e) return NULL; /* dc_weights_get reports it */
  if (e->halves_swapped && (e->tensor->rank < 1 || e->tensor->dims[0] % 2 != 0))
    return dc_error(DC_ERR_INTERNAL, "%s: weight \"%s\" has halves swapped but an odd first dim", w->folder->dir,
                    name);
  w->halves_asked[e - w->folder->entries] = 1;
  *swapped = e->halves_swapped;
  return NULL;
}

dc_status *dc_weights_check_all_used(const dc_weights *w) {
  const dc_folder *f = w->folder;
  int unused = 0;
  for (int i = 0; i < f->nentries; i++) unused += !w->used[i];
  if (unused == 0) return NULL;
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "%s: %d weight%s in the checkpoint %s not used by the %s graph: ", f->dir,
                unused, unused == 1 ? "" : "s", unused == 1 ? "is" : "are", f->class_name);
  int shown = 0;
  for (int i = 0; i < f->nentries && shown < 5; i++)
    if (!w->used[i]) dc_buf_printf(&b, "%s\"%s\"", shown++ ? ", " : "", f->entries[i].name);
  if (unused > shown) dc_buf_printf(&b, " and %d more", unused - shown);
  dc_buf_printf(&b, " (a config that does not match the weights?)");
  dc_buf_u8(&b, 0);
  dc_status *st = dc_buf_status(&b, "reporting unused weights");
  if (!st) st = dc_error(DC_ERR_MISMATCH, "%s", (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

/* ---- the weights a config implies ---------------------------------------- */

void dc_weight_list_deinit(dc_weight_list *l) {
  for (int i = 0; i < l->n; i++) dc_free(l->items[i].name);
  dc_free(l->items);
  memset(l, 0, sizeof *l);
}

static int weights_spec_cmp(const void *a, const void *b) {
  return strcmp(((const dc_weight_spec *)a)->name, ((const dc_weight_spec *)b)->name);
}

const dc_weight_spec *dc_weight_list_find(const dc_weight_list *l, const char *name) {
  dc_weight_spec key = {.name = (char *)name};
  if (l->n == 0) return NULL;
  return bsearch(&key, l->items, (size_t)l->n, sizeof key, weights_spec_cmp);
}

/* A folder with the config and no weight files: the builders read only
 * dir, config and class_name, and find no tensors in it. */
static dc_status *weights_config_folder(const char *config_path, dc_weight_list *l, dc_folder *f) {
  memset(f, 0, sizeof *f);
  f->record = l;
  const char *slash = strrchr(config_path, '/');
  f->dir = !slash ? dc_strdup(".")
           : slash == config_path ? dc_strdup("/")
                                  : dc_strndup(config_path, (size_t)(slash - config_path));
  if (!f->dir) return dc_nomem("reading a config");
  if (!dc_file_exists(config_path)) return dc_error(DC_ERR_IO, "%s: no such file", config_path);
  DC_TRY(dc_json_load(config_path, &f->config));
  return dc_class_of_config(&f->config, &f->class_name, &f->desc);
}

dc_status *dc_frontend_weight_list(const char *config_path, const char *entry,
                                   dc_weight_list *out) {
  memset(out, 0, sizeof *out);
  dc_folder f;
  dc_module *m = NULL;
  dc_build_options opt = {.entry = entry, .clip_hidden_index = -1};
  dc_status *st = weights_config_folder(config_path, out, &f);
  if (!st) st = dc_frontend_build(&f, &opt, &m);
  dc_module_destroy(m);
  dc_folder_close(&f);
  if (st) {
    dc_weight_list_deinit(out);
    return st;
  }
  qsort(out->items, (size_t)out->n, sizeof *out->items, weights_spec_cmp);
  return NULL;
}
