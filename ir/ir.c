/* ir.c — dtypes, the op table (built from ops.def), and the module: the
 * arrays of nodes, weight files, weights, inputs and outputs it owns, and
 * the bytes of its constants (in its arena). */
#include "ir.h"

#include <assert.h>
#include <string.h>

/* ---- dtypes ---- */
static const struct {
  const char *name, *st_name;
  int size;
} dtype_info[DT_COUNT] = {
    [DT_F32] = {"f32", "F32", 4},          [DT_F16] = {"f16", "F16", 2},
    [DT_BF16] = {"bf16", "BF16", 2},       [DT_F8_E4M3] = {"f8e4m3", "F8_E4M3", 1},
    [DT_F8_E5M2] = {"f8e5m2", "F8_E5M2", 1}, [DT_I32] = {"i32", "I32", 4},
    [DT_I64] = {"i64", "I64", 8},
};

const char *dc_dtype_name(dc_dtype t) { return t < DT_COUNT ? dtype_info[t].name : "?"; }
const char *dc_dtype_safetensors_name(dc_dtype t) {
  return t < DT_COUNT ? dtype_info[t].st_name : "?";
}
int dc_dtype_size(dc_dtype t) { return t < DT_COUNT ? dtype_info[t].size : 0; }
int dc_dtype_is_int(dc_dtype t) { return t == DT_I32 || t == DT_I64; }

int dc_dtype_from_name(const char *name, dc_dtype *out) {
  for (int i = 0; i < DT_COUNT; i++)
    if (strcmp(name, dtype_info[i].name) == 0) return *out = (dc_dtype)i, 0;
  return -1;
}
int dc_dtype_from_safetensors(const char *name, dc_dtype *out) {
  for (int i = 0; i < DT_COUNT; i++)
    if (strcmp(name, dtype_info[i].st_name) == 0) return *out = (dc_dtype)i, 0;
  return -1;
}

uint64_t dc_type_numel(const dc_type *t) {
  uint64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (uint64_t)t->dims[i];
  return n;
}
uint64_t dc_type_bytes(const dc_type *t) { return dc_type_numel(t) * (uint64_t)dc_dtype_size(t->dtype); }

int dc_type_equal(const dc_type *a, const dc_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

const char *dc_dims_str(const int64_t *dims, int rank, char *buf, size_t cap) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

const char *dc_type_str(const dc_type *t, char *buf, size_t cap) {
  char dims[160];
  snprintf(buf, cap, "%s%s", dc_dtype_name(t->dtype), dc_dims_str(t->dims, t->rank, dims, sizeof dims));
  return buf;
}

/* ---- op table ---- */
static const struct {
  const char *name;
  int mi, ma;
  unsigned flags;
  const char *attrs;
} op_src[OP_COUNT] = {
#define OP(e, nm, mi, ma, fl, at) [OP_##e] = {nm, mi, ma, fl, at},
#include "ops.def"
#undef OP
};

static dc_op_info op_table[OP_COUNT];
static char attr_storage[OP_COUNT][DC_MAX_ATTRS * 16];
static int op_table_ready;

/* Splits "a:i b:f" into names and kinds once; the table is static data. */
static void op_table_init(void) {
  for (int op = 0; op < OP_COUNT; op++) {
    dc_op_info *info = &op_table[op];
    info->name = op_src[op].name;
    info->min_inputs = op_src[op].mi;
    info->max_inputs = op_src[op].ma;
    info->flags = op_src[op].flags;
    char *s = attr_storage[op];
    assert(strlen(op_src[op].attrs) < sizeof attr_storage[op]);
    strcpy(s, op_src[op].attrs);
    for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) {
      char *colon = strchr(tok, ':');
      assert(colon && info->nattrs < DC_MAX_ATTRS);
      *colon = 0;
      info->attr_names[info->nattrs] = tok;
      info->attr_kinds[info->nattrs] = colon[1] == 'i'   ? ATTR_INT
                                       : colon[1] == 'f' ? ATTR_FLOAT
                                       : colon[1] == 'a' ? ATTR_ACT
                                                         : ATTR_LIST;
      info->nattrs++;
    }
  }
  op_table_ready = 1;
}

const dc_op_info *dc_op_get(dc_op op) {
  if (!op_table_ready) op_table_init();
  assert(op < OP_COUNT);
  return &op_table[op];
}

dc_op dc_op_from_name(const char *name) {
  for (int op = 0; op < OP_COUNT; op++)
    if (strcmp(dc_op_get((dc_op)op)->name, name) == 0) return (dc_op)op;
  return OP_COUNT;
}

int dc_op_attr_index(dc_op op, const char *attr) {
  const dc_op_info *info = dc_op_get(op);
  for (int i = 0; i < info->nattrs; i++)
    if (strcmp(info->attr_names[i], attr) == 0) return i;
  return -1;
}

/* ---- nodes ---- */
dc_node dc_node_make(dc_op op, int ninputs, const int32_t *inputs) {
  dc_node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.ninputs = ninputs;
  assert(ninputs >= 0 && ninputs <= DC_MAX_INPUTS);
  for (int i = 0; i < ninputs; i++) n.inputs[i] = inputs[i];
  n.ref = -1;
  n.offset = -1;
  n.type.dtype = DT_F32;
  n.phase = DC_PHASE_INHERIT;
  return n;
}

const char *dc_act_name(dc_act a) {
  static const char *names[ACT_COUNT] = {"none", "silu", "gelu", "geglu", "quick_gelu", "gelu_tanh"};
  return (unsigned)a < ACT_COUNT ? names[a] : "?";
}

int dc_op_is_copy(dc_op op) { return op == OP_UPLOAD || op == OP_TRANSFER; }

int dc_weight_pending(const dc_weight *w) { return w->cast_pending || w->repack_pending || w->inline_bytes; }

const char *dc_layout_name(dc_layout l) {
  static const char *names[LAYOUT_COUNT] = {"row", "nchw", "nhwc"};
  return (unsigned)l < LAYOUT_COUNT ? names[l] : "?";
}

static int has_epilogue(const dc_node *n) { return n->op == OP_CONV2D || n->op == OP_LINEAR; }

int32_t dc_node_bias(const dc_node *n) {
  return has_epilogue(n) && dc_node_int(n, "bias") ? n->inputs[2] : -1;
}

int32_t dc_node_residual(const dc_node *n) {
  if (!has_epilogue(n) || !dc_node_int(n, "residual")) return -1;
  return n->inputs[dc_node_int(n, "bias") ? 3 : 2];
}

int dc_node_gate_slot(const dc_node *n) {
  if (n->op != OP_LINEAR || !dc_node_int(n, "gate")) return -1;
  return 3 + (dc_node_int(n, "bias") != 0);
}

/* The attribute's slot; asserts it exists and is read as the kind it has
 * (dc_attr is a union: reading f of an int would read its bits). */
static int attr_slot(const dc_node *n, const char *attr, int want_float) {
  int i = dc_op_attr_index(n->op, attr);
  assert(i >= 0 && "attribute not in the op table");
  dc_attr_kind k = dc_op_get(n->op)->attr_kinds[i];
  assert((want_float ? k == ATTR_FLOAT : k == ATTR_INT || k == ATTR_ACT) && "attribute read as the wrong kind");
  (void)k;
  return i;
}
void dc_node_set_int(dc_node *n, const char *attr, int64_t v) { n->attrs[attr_slot(n, attr, 0)].i = v; }
void dc_node_set_float(dc_node *n, const char *attr, double v) { n->attrs[attr_slot(n, attr, 1)].f = v; }
int64_t dc_node_int(const dc_node *n, const char *attr) { return n->attrs[attr_slot(n, attr, 0)].i; }
double dc_node_float(const dc_node *n, const char *attr) { return n->attrs[attr_slot(n, attr, 1)].f; }

int dc_node_is_activation(const dc_node *n) { return n->op != OP_WEIGHT; }

/* ---- module ---- */
dc_module *dc_module_create(void) {
  dc_module *m = dc_calloc(1, sizeof *m);
  if (!m) return NULL;
  m->arena = dc_arena_create();
  if (!m->arena) {
    dc_free(m);
    return NULL;
  }
  return m;
}

void dc_module_destroy(dc_module *m) {
  if (!m) return;
  dc_free(m->nodes);
  dc_free(m->files);
  dc_free(m->weights);
  dc_free(m->inputs);
  dc_free(m->outputs);
  dc_free(m->meta);
  dc_arena_destroy(m->arena);
  dc_free(m);
}

/* Copies n items of size elem into a fresh array with room for cap; 0 on success. */
static int copy_array(void **dst, int32_t *cap, const void *src, int32_t n, size_t elem) {
  *cap = n > 0 ? n : 1;
  *dst = dc_malloc((size_t)*cap * elem);
  if (!*dst) return -1;
  if (n) memcpy(*dst, src, (size_t)n * elem);
  return 0;
}

dc_status *dc_module_clone_borrowing(const dc_module *src, dc_module **out) {
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("copying a module");
  int fail = copy_array((void **)&m->nodes, &m->cap_nodes, src->nodes, src->nnodes, sizeof *src->nodes) ||
             copy_array((void **)&m->files, &m->cap_files, src->files, src->nfiles, sizeof *src->files) ||
             copy_array((void **)&m->weights, &m->cap_weights, src->weights, src->nweights, sizeof *src->weights) ||
             copy_array((void **)&m->inputs, &m->cap_inputs, src->inputs, src->ninputs, sizeof *src->inputs) ||
             copy_array((void **)&m->outputs, &m->cap_outputs, src->outputs, src->noutputs, sizeof *src->outputs) ||
             copy_array((void **)&m->meta, &m->cap_meta, src->meta, src->nmeta, sizeof *src->meta);
  if (fail) {
    dc_module_destroy(m);
    return dc_nomem("copying a module");
  }
  m->nnodes = src->nnodes, m->nfiles = src->nfiles, m->nweights = src->nweights;
  m->ninputs = src->ninputs, m->noutputs = src->noutputs, m->nmeta = src->nmeta;
  m->arena_bytes = src->arena_bytes;
  m->facts = src->facts;
  memcpy(m->phases, src->phases, sizeof m->phases);
  m->nphases = src->nphases;
  *out = m;
  return NULL;
}

/* Grows an array of elem-sized items to hold one more; 0 on success. */
static int grow(void **arr, int32_t *cap, int32_t count, size_t elem) {
  if (count < *cap) return 0;
  int32_t ncap = *cap ? *cap * 2 : 16;
  void *p = dc_realloc(*arr, (size_t)ncap * elem);
  if (!p) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}

int32_t dc_module_add_node(dc_module *m, const dc_node *n) {
  if (grow((void **)&m->nodes, &m->cap_nodes, m->nnodes, sizeof *n)) return -1;
  dc_node c = *n;
  if (c.phase == DC_PHASE_INHERIT) { /* the latest of its neighbour's and its inputs' phases */
    c.phase = m->nnodes > 0 ? m->nodes[m->nnodes - 1].phase : 0;
    for (int i = 0; i < c.ninputs; i++)
      if (c.inputs[i] >= 0 && c.inputs[i] < m->nnodes && m->nodes[c.inputs[i]].phase > c.phase)
        c.phase = m->nodes[c.inputs[i]].phase;
  }
  m->nodes[m->nnodes] = c;
  return m->nnodes++;
}

int32_t dc_module_add_file(dc_module *m, const dc_weight_file *f) {
  if (grow((void **)&m->files, &m->cap_files, m->nfiles, sizeof *f)) return -1;
  dc_weight_file c = *f;
  c.path = dc_arena_strdup(m->arena, f->path);
  if (!c.path) return -1;
  m->files[m->nfiles] = c;
  return m->nfiles++;
}

int32_t dc_module_add_weight(dc_module *m, const dc_weight *w) {
  if (grow((void **)&m->weights, &m->cap_weights, m->nweights, sizeof *w)) return -1;
  dc_weight c = *w;
  c.name = dc_arena_strdup(m->arena, w->name);
  if (!c.name) return -1;
  m->weights[m->nweights] = c;
  return m->nweights++;
}

int32_t dc_module_add_input(dc_module *m, const char *name, const dc_type *t, dc_input_init init) {
  if (grow((void **)&m->inputs, &m->cap_inputs, m->ninputs, sizeof(dc_io))) return -1;
  dc_node n = dc_node_make(OP_INPUT, 0, NULL);
  n.type = *t;
  n.layout = t->rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  n.ref = m->ninputs;
  n.scope = dc_arena_strdup(m->arena, name);
  const char *nm = dc_arena_strdup(m->arena, name);
  if (!n.scope || !nm) return -1;
  int32_t id = dc_module_add_node(m, &n);
  if (id < 0) return -1;
  m->inputs[m->ninputs++] = (dc_io){nm, id, init};
  return id;
}

int32_t dc_module_add_constant(dc_module *m, const char *scope, const dc_type *t, const void *data) {
  dc_node n = dc_node_make(OP_CONSTANT, 0, NULL);
  n.type = *t;
  n.layout = t->rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  size_t bytes = (size_t)dc_type_bytes(t);
  void *copy = dc_arena_alloc(m->arena, bytes ? bytes : 1);
  if (!copy) return -1;
  memcpy(copy, data, bytes);
  n.data = copy;
  if (scope && !(n.scope = dc_arena_strdup(m->arena, scope))) return -1;
  return dc_module_add_node(m, &n);
}

dc_status *dc_module_add_output(dc_module *m, const char *name, int32_t node) {
  for (int i = 0; i < m->noutputs; i++)
    if (strcmp(m->outputs[i].name, name) == 0)
      return dc_error(DC_ERR_INTERNAL, "output \"%s\" added twice", name);
  if (grow((void **)&m->outputs, &m->cap_outputs, m->noutputs, sizeof(dc_io)))
    return dc_nomem("adding an output");
  const char *nm = dc_arena_strdup(m->arena, name);
  if (!nm) return dc_nomem("adding an output");
  m->outputs[m->noutputs++] = (dc_io){nm, node, INIT_NORMAL};
  return NULL;
}

dc_status *dc_module_set_meta(dc_module *m, const char *key, const char *value) {
  const char *v = dc_arena_strdup(m->arena, value);
  if (!v) return dc_nomem("setting module metadata");
  for (int i = 0; i < m->nmeta; i++)
    if (strcmp(m->meta[i].key, key) == 0) {
      m->meta[i].value = v;
      return NULL;
    }
  const char *k = dc_arena_strdup(m->arena, key);
  if (!k || grow((void **)&m->meta, &m->cap_meta, m->nmeta, sizeof(dc_meta)))
    return dc_nomem("setting module metadata");
  m->meta[m->nmeta++] = (dc_meta){k, v};
  return NULL;
}

const char *dc_module_get_meta(const dc_module *m, const char *key) {
  for (int i = 0; i < m->nmeta; i++)
    if (strcmp(m->meta[i].key, key) == 0) return m->meta[i].value;
  return NULL;
}

dc_dtype dc_module_activation_dtype(const dc_module *m) {
  const char *v = dc_module_get_meta(m, "activation_dtype");
  if (v && strcmp(v, "bf16") == 0) return DT_BF16;
  if (v && strcmp(v, "f16") == 0) return DT_F16;
  return DT_F32;
}
