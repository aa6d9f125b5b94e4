/* weights.c — bind checkpoint tensors to the IR a builder is making.
 *
 * A builder asks for each weight by its diffusers name with the shape its
 * config implies; a missing weight or a different shape means the config
 * and the checkpoint disagree, and the message says both shapes.  The weight
 * stays in its file: the IR gets a (file, offset, bytes, type) reference and
 * an OP_WEIGHT node, plus an OP_CAST to f32 when the stored dtype is not f32
 * or the data is not 4-byte aligned in the file.  Tensors no builder asked
 * for are reported at the end, because a checkpoint with extra weights is a
 * sign that the graph is not the model. */
#include "frontend.h"

#include <string.h>

dc_status *dc_weights_init(dc_weights *w, dc_module *m, const dc_folder *folder) {
  memset(w, 0, sizeof *w);
  w->m = m;
  w->folder = folder;
  w->file_of_shard =
      dc_malloc(sizeof *w->file_of_shard * (size_t)(folder->nshards ? folder->nshards : 1));
  w->used = dc_calloc((size_t)folder->nentries, 1);
  if (!w->file_of_shard || !w->used) {
    dc_weights_deinit(w);
    return dc_nomem("binding weights");
  }
  for (int s = 0; s < folder->nshards; s++) w->file_of_shard[s] = -1;
  return NULL;
}

void dc_weights_deinit(dc_weights *w) {
  dc_free(w->file_of_shard);
  dc_free(w->used);
  memset(w, 0, sizeof *w);
}

static int weights_same_shape(const dc_st_tensor *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return 0;
  return 1;
}

/* The node a previous get returned for this tensor: the cast right after
 * its OP_WEIGHT node if there is one, else the OP_WEIGHT node.  Repeated
 * gets are rare (shared weights), so a scan is fine. */
static int32_t weights_find_node(const dc_module *m, const char *name) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_WEIGHT || strcmp(m->weights[n->ref].name, name) != 0) continue;
    const dc_node *next = i + 1 < m->nnodes ? &m->nodes[i + 1] : NULL;
    return next && next->op == OP_CAST && next->inputs[0] == i ? i + 1 : i;
  }
  return -1;
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
    dc_weight_file wf = {f->file.path, f->header_hash, (uint64_t)f->file.size};
    w->file_of_shard[shard] = dc_module_add_file(w->m, &wf);
    if (w->file_of_shard[shard] < 0) return dc_nomem("binding weights");
  }
  *out = w->file_of_shard[shard];
  return NULL;
}

/* Adds the weight, its OP_WEIGHT node and (if needed) the cast to f32. */
static dc_status *weights_add(dc_weights *w, const struct dc_folder_entry *e, int32_t *out) {
  const dc_st_tensor *t = e->tensor;
  dc_weight wt = {.name = t->name, .offset = t->offset, .bytes = t->bytes};
  DC_TRY(weights_file_index(w, e->shard, &wt.file));
  wt.type.dtype = t->dtype;
  wt.type.rank = t->rank;
  memcpy(wt.type.dims, t->dims, sizeof wt.type.dims);
  int32_t wi = dc_module_add_weight(w->m, &wt);
  if (wi < 0) return dc_nomem("binding weights");
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = wi;
  n.type = wt.type;
  n.layout = LAYOUT_ROWMAJOR;
  DC_TRY(weights_scope(w->m, t->name, &n.scope));
  int32_t id = dc_module_add_node(w->m, &n);
  if (id < 0) return dc_nomem("binding weights");
  if (t->dtype != DT_F32 || t->offset % 4 != 0) {
    dc_node c = dc_node_make(OP_CAST, 1, &id);
    c.type = wt.type;
    c.type.dtype = DT_F32;
    c.layout = LAYOUT_ROWMAJOR;
    c.scope = n.scope;
    id = dc_module_add_node(w->m, &c);
    if (id < 0) return dc_nomem("binding weights");
  }
  *out = id;
  return NULL;
}

dc_status *dc_weights_get(dc_weights *w, const char *name, int rank, const int64_t *dims,
                          int32_t *out) {
  char want[160], have[160];
  *out = -1;
  if (rank < 0 || rank > DC_MAX_DIMS)
    return dc_error(DC_ERR_INTERNAL, "weight \"%s\": a builder asked for rank %d", name, rank);
  const struct dc_folder_entry *e = dc_folder_find(w->folder, name);
  if (!e)
    return dc_error(DC_ERR_MISMATCH, "%s: weight \"%s\" is missing (the config implies %s)",
                    w->folder->dir, name, dc_dims_str(dims, rank, want, sizeof want));
  const dc_st_tensor *t = e->tensor;
  if (!weights_same_shape(t, rank, dims))
    return dc_error(DC_ERR_MISMATCH, "%s: weight \"%s\" has shape %s but the config implies %s",
                    w->folder->dir, name, dc_dims_str(t->dims, t->rank, have, sizeof have),
                    dc_dims_str(dims, rank, want, sizeof want));
  size_t ei = (size_t)(e - w->folder->entries);
  if (w->used[ei]) {
    *out = weights_find_node(w->m, t->name);
    if (*out < 0)
      return dc_error(DC_ERR_INTERNAL, "weight \"%s\" was bound but its node is gone", name);
    return NULL;
  }
  DC_TRY(weights_add(w, e, out));
  w->used[ei] = 1;
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
