/* serialize.c — the module as bytes: the plan's schedule section.  The
 * reader trusts nothing: every count is bounded by the bytes that remain,
 * every enum and index is range-checked, and the result goes through the
 * verifier (so shapes are re-derived, not believed).
 *
 * A node: op u32, ninputs u8 (at most DC_MAX_INPUTS), the inputs u32 each,
 * its op's attributes in table order (i64, f64, or u8 count + i64s for the
 * list), ref u32, type (dtype u8, rank u8, dims i64), layout u8, device
 * u32, scope and absorbed strings, arena offset i64; an OP_CONSTANT then
 * its value's bytes (as many as its type says). */
#include <string.h>

#include "ir.h"

#define MAX_NAME 4096

static void put_type(dc_buf *b, const dc_type *t) {
  dc_buf_u8(b, (uint8_t)t->dtype);
  dc_buf_u8(b, (uint8_t)t->rank);
  for (int i = 0; i < t->rank; i++) dc_buf_i64(b, t->dims[i]);
}

static void put_node(dc_buf *b, const dc_node *n) {
  const dc_op_info *info = dc_op_get(n->op);
  dc_buf_u32(b, (uint32_t)n->op);
  dc_buf_u8(b, (uint8_t)n->ninputs);
  for (int i = 0; i < n->ninputs; i++) dc_buf_u32(b, (uint32_t)n->inputs[i]);
  for (int i = 0; i < info->nattrs; i++) {
    if (info->attr_kinds[i] == ATTR_INT || info->attr_kinds[i] == ATTR_ACT) dc_buf_i64(b, n->attrs[i].i);
    else if (info->attr_kinds[i] == ATTR_FLOAT) dc_buf_f64(b, n->attrs[i].f);
    else {
      dc_buf_u8(b, (uint8_t)n->nlist);
      for (int k = 0; k < n->nlist; k++) dc_buf_i64(b, n->list[k]);
    }
  }
  dc_buf_u32(b, (uint32_t)n->ref);
  put_type(b, &n->type);
  dc_buf_u8(b, (uint8_t)n->layout);
  dc_buf_u32(b, (uint32_t)n->device);
  dc_buf_str(b, n->scope ? n->scope : "");
  dc_buf_str(b, n->absorbed ? n->absorbed : "");
  dc_buf_i64(b, n->offset);
  if (n->op == OP_CONSTANT) dc_buf_append(b, n->data, (size_t)dc_type_bytes(&n->type));
}

dc_status *dc_serialize_weights(const dc_module *m, dc_buf *b) {
  for (int32_t w = 0; w < m->nweights; w++)
    if (dc_weight_pending(&m->weights[w]))
      return dc_error(DC_ERR_INTERNAL, "weight %s still has its storage-dtype conversion or repack pending",
                      m->weights[w].name);
  dc_buf_u32(b, (uint32_t)m->nfiles);
  for (int i = 0; i < m->nfiles; i++) {
    dc_buf_str(b, m->files[i].path);
    dc_buf_u64(b, m->files[i].header_hash);
    dc_buf_u64(b, m->files[i].file_size);
  }
  dc_buf_u32(b, (uint32_t)m->nweights);
  for (int i = 0; i < m->nweights; i++) {
    const dc_weight *w = &m->weights[i];
    dc_buf_str(b, w->name);
    dc_buf_u32(b, (uint32_t)w->file);
    dc_buf_u64(b, w->offset);
    dc_buf_u64(b, w->bytes);
    dc_buf_u64(b, w->content_hash);
    put_type(b, &w->type);
  }
  return dc_buf_status(b, "serializing the weight references");
}

dc_status *dc_serialize(const dc_module *m, dc_buf *b) {
  dc_buf_u32(b, (uint32_t)m->nmeta);
  for (int i = 0; i < m->nmeta; i++) {
    dc_buf_str(b, m->meta[i].key);
    dc_buf_str(b, m->meta[i].value);
  }
  dc_buf_u32(b, (uint32_t)m->ninputs);
  for (int i = 0; i < m->ninputs; i++) {
    dc_buf_str(b, m->inputs[i].name);
    dc_buf_u32(b, (uint32_t)m->inputs[i].node);
    dc_buf_u8(b, (uint8_t)m->inputs[i].init);
  }
  dc_buf_u32(b, (uint32_t)m->noutputs);
  for (int i = 0; i < m->noutputs; i++) {
    dc_buf_str(b, m->outputs[i].name);
    dc_buf_u32(b, (uint32_t)m->outputs[i].node);
  }
  dc_buf_u32(b, (uint32_t)m->nnodes);
  for (int i = 0; i < m->nnodes; i++) put_node(b, &m->nodes[i]);
  dc_buf_u64(b, m->arena_bytes); /* the memory plan: the nodes carry the offsets */
  return dc_buf_status(b, "serializing the IR");
}

/* ---- reading ---- */

/* A count of records of at least min_bytes each must fit in what remains. */
static int32_t get_count(dc_reader *r, size_t min_bytes, const char *what) {
  uint32_t n = dc_read_u32(r);
  if (!r->err && (uint64_t)n * min_bytes > r->size - r->pos) {
    dc_reader_fail(r, "%s count %u does not fit in the remaining %zu bytes", what, n, r->size - r->pos);
    return 0;
  }
  return r->err ? 0 : (int32_t)n;
}

static void get_type(dc_reader *r, dc_type *t) {
  uint8_t dt = dc_read_u8(r), rank = dc_read_u8(r);
  if (r->err) return;
  if (dt >= DT_COUNT || rank > DC_MAX_DIMS) return dc_reader_fail(r, "bad type (dtype %u, rank %u)", dt, rank);
  t->dtype = (dc_dtype)dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) {
    t->dims[i] = dc_read_i64(r);
    if (t->dims[i] < 0 || t->dims[i] > ((int64_t)1 << 40)) return dc_reader_fail(r, "bad dimension %lld", (long long)t->dims[i]);
  }
  /* Bound the element count so byte sizes cannot overflow later. */
  uint64_t numel = 1;
  for (int i = 0; i < rank; i++)
    if (dc_mul_overflows(numel, (uint64_t)t->dims[i], &numel) || numel > ((uint64_t)1 << 40))
      return dc_reader_fail(r, "tensor too large");
}

/* A constant's bytes, into the module's arena (the type, already read and
 * bounded, says how many; they must be in what remains). */
static void get_constant_data(dc_reader *r, dc_module *m, dc_node *n) {
  uint64_t bytes = dc_type_bytes(&n->type);
  if (bytes > r->size - r->pos)
    return dc_reader_fail(r, "constant of %llu bytes runs past the end (%zu remain)", (unsigned long long)bytes,
                          r->size - r->pos);
  const void *src = dc_read_bytes(r, (size_t)bytes);
  void *copy = dc_arena_alloc(m->arena, (size_t)bytes + 1);
  if (!copy) return (void)(r->err = dc_nomem("loading the IR"));
  if (src) memcpy(copy, src, (size_t)bytes);
  n->data = copy;
}

static void get_node(dc_reader *r, dc_module *m, dc_node *n) {
  uint32_t op = dc_read_u32(r);
  if (r->err) return;
  if (op >= OP_COUNT) return dc_reader_fail(r, "unknown op %u", op);
  n->op = (dc_op)op;
  const dc_op_info *info = dc_op_get(n->op);
  n->ninputs = dc_read_u8(r);
  if (n->ninputs > DC_MAX_INPUTS) return dc_reader_fail(r, "%d inputs (at most %d)", n->ninputs, DC_MAX_INPUTS);
  for (int i = 0; i < n->ninputs; i++) n->inputs[i] = (int32_t)dc_read_u32(r);
  for (int i = 0; i < info->nattrs; i++) {
    if (info->attr_kinds[i] == ATTR_INT || info->attr_kinds[i] == ATTR_ACT) n->attrs[i].i = dc_read_i64(r);
    else if (info->attr_kinds[i] == ATTR_FLOAT) n->attrs[i].f = dc_read_f64(r);
    else {
      n->nlist = dc_read_u8(r);
      if (n->nlist > DC_MAX_DIMS) return dc_reader_fail(r, "list of %d entries", n->nlist);
      for (int k = 0; k < n->nlist; k++) n->list[k] = dc_read_i64(r);
    }
  }
  n->ref = (int32_t)dc_read_u32(r);
  get_type(r, &n->type);
  uint8_t layout = dc_read_u8(r);
  if (!r->err && layout >= LAYOUT_COUNT) return dc_reader_fail(r, "bad layout %u", layout);
  n->layout = (dc_layout)layout;
  n->device = (int)dc_read_u32(r);
  char *scope = dc_read_str(r, m->arena, MAX_NAME);
  n->scope = scope && scope[0] ? scope : NULL;
  char *absorbed = dc_read_str(r, m->arena, MAX_NAME);
  n->absorbed = absorbed && absorbed[0] ? absorbed : NULL;
  n->offset = dc_read_i64(r);
  if (!r->err && n->offset < -1) return dc_reader_fail(r, "bad arena offset %lld", (long long)n->offset);
  if (n->op == OP_CONSTANT && !r->err) get_constant_data(r, m, n);
}

static void *alloc_array(dc_reader *r, int32_t n, size_t elem) {
  if (r->err) return NULL;
  void *p = dc_calloc((size_t)n + 1, elem);
  if (!p && !r->err) r->err = dc_nomem("loading the IR");
  return p;
}

static void get_weights(dc_reader *r, dc_module *m) {
  m->nfiles = m->cap_files = get_count(r, 20, "file");
  m->files = alloc_array(r, m->nfiles, sizeof *m->files);
  for (int i = 0; i < m->nfiles && !r->err; i++) {
    m->files[i].path = dc_read_str(r, m->arena, MAX_NAME);
    m->files[i].header_hash = dc_read_u64(r);
    m->files[i].file_size = dc_read_u64(r);
  }
  m->nweights = m->cap_weights = get_count(r, 34, "weight");
  m->weights = alloc_array(r, m->nweights, sizeof *m->weights);
  for (int i = 0; i < m->nweights && !r->err; i++) {
    dc_weight *w = &m->weights[i];
    w->name = dc_read_str(r, m->arena, MAX_NAME);
    w->file = (int32_t)dc_read_u32(r);
    w->offset = dc_read_u64(r);
    w->bytes = dc_read_u64(r);
    w->content_hash = dc_read_u64(r);
    get_type(r, &w->type);
  }
  if (!r->err && r->pos != r->size) dc_reader_fail(r, "%zu trailing bytes", r->size - r->pos);
}

static void get_schedule(dc_reader *r, dc_module *m) {
  m->nmeta = m->cap_meta = get_count(r, 8, "metadata");
  m->meta = alloc_array(r, m->nmeta, sizeof *m->meta);
  for (int i = 0; i < m->nmeta && !r->err; i++) {
    m->meta[i].key = dc_read_str(r, m->arena, MAX_NAME);
    m->meta[i].value = dc_read_str(r, m->arena, 1 << 20);
  }
  m->ninputs = m->cap_inputs = get_count(r, 9, "input");
  m->inputs = alloc_array(r, m->ninputs, sizeof *m->inputs);
  for (int i = 0; i < m->ninputs && !r->err; i++) {
    m->inputs[i].name = dc_read_str(r, m->arena, MAX_NAME);
    m->inputs[i].node = (int32_t)dc_read_u32(r);
    uint8_t init = dc_read_u8(r);
    if (!r->err && init > INIT_TIMESTEP) dc_reader_fail(r, "bad input init %u", init);
    m->inputs[i].init = (dc_input_init)init;
  }
  m->noutputs = m->cap_outputs = get_count(r, 8, "output");
  m->outputs = alloc_array(r, m->noutputs, sizeof *m->outputs);
  for (int i = 0; i < m->noutputs && !r->err; i++) {
    m->outputs[i].name = dc_read_str(r, m->arena, MAX_NAME);
    m->outputs[i].node = (int32_t)dc_read_u32(r);
  }
  m->nnodes = m->cap_nodes = get_count(r, 24, "node");
  m->nodes = alloc_array(r, m->nnodes, sizeof *m->nodes);
  for (int i = 0; i < m->nnodes && !r->err; i++) get_node(r, m, &m->nodes[i]);
  m->arena_bytes = dc_read_u64(r); /* checked against the offsets by dc_memplan_check */
  if (!r->err && r->pos != r->size) dc_reader_fail(r, "%zu trailing bytes", r->size - r->pos);
}

dc_status *dc_deserialize(const void *weights, size_t weights_size, const char *weights_what,
                          const void *schedule, size_t schedule_size, const char *schedule_what,
                          dc_module **out) {
  *out = NULL;
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("loading the IR");
  dc_reader r;
  dc_reader_init(&r, weights, weights_size, weights_what);
  get_weights(&r, m);
  dc_status *st = r.err;
  const char *what = schedule_what;
  if (!st) {
    dc_reader_init(&r, schedule, schedule_size, schedule_what);
    get_schedule(&r, m);
    st = r.err;
  }
  if (!st) st = dc_status_annotate(dc_phases_from_meta(m), "%s", what);
  if (!st) {
    st = dc_verify(m, "loading");
    if (st) st = dc_status_annotate(st, "%s", what);
  }
  if (st) {
    dc_module_destroy(m);
    return st;
  }
  *out = m;
  return NULL;
}
