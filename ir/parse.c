/* parse.c — reads the text dump (ir/print.c) back into a module, so passes
 * can be tested text to text and a dump edited by hand can be checked.
 *
 * Contract: for any verified module m, dc_parse(dc_print(m)) is a module
 * whose dump is byte-identical to dc_print(m) (tests/test_ir_parse.c checks
 * it on every fixture, before and after memory planning).  What the dump
 * does not show is not recovered: the scope of inputs (their name) and of
 * weights (their name up to the last dot) follow the builders' rules.  The
 * result is verified (dc_verify) before it is returned.
 *
 * Grammar, one item per line (comments after "  # " describe the value):
 *   # key = value                                 metadata (before "# weights:")
 *   #   file N: PATH (SIZE bytes, header xxh64 HEX)
 *   %N = input "NAME" : TYPE  # LAYOUT, devD, ...[, TIMESTEP_TAG]
 *   %N = weight @NAME : TYPE  # LAYOUT, devD, BYTES, resident|offloaded, file F @ OFFSET
 *   %N = OP(%a, %b, ...) {k=v, ...} : TYPE  # [absorbed A, ]SCOPE, LAYOUT, devD, BYTES, live a..b[, @off O[ in place over %k]]
 *   %N = constant [v, v, ...] : TYPE  # (as an op's)   values in C order, one per element
 *   output NAME = %N
 *   # peak activations: ... (B bytes) ...         the arena size, when "# arena: ... planned"
 * A constant printed elided ("[... N values, xxh64 H]", more than
 * DC_CONSTANT_PRINT_MAX elements) is refused: its values are not in the
 * text.  Any other "#" line is ignored.  Errors name the source, the line and what
 * was expected.  Dumps of older diffc versions read too: "host" for
 * "offloaded", "random timesteps" for the timestep tag. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* What ir/print.c writes after a timestep input (the same words there). */
#define TIMESTEP_TAG "timestep (--random-inputs: uniform integers 0..999)"

typedef struct {
  const char *what;
  int line;
  dc_module *m;
  dc_status *err;
  int in_header;         /* metadata lines are accepted until "# weights:" */
  uint64_t peak_bytes;   /* from "# peak activations", applied if the arena is planned */
  int arena_planned;
} parser;

/* A cursor over one line. */
typedef struct {
  const char *p, *end;
} cursor;

static void fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(parser *ps, const char *fmt, ...) {
  if (ps->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ps->err = dc_error(DC_ERR_FORMAT, "%s:%d: %s", ps->what, ps->line, msg);
}

static int starts(cursor *c, const char *s) {
  size_t n = strlen(s);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return 0;
  c->p += n;
  return 1;
}

/* What the cursor points at, for messages: up to 24 characters. */
static const char *found(const cursor *c, char *buf, size_t cap) {
  size_t n = (size_t)(c->end - c->p);
  if (n == 0) return "the end of the line";
  if (n > 24) n = 24;
  if (n >= cap) n = cap - 1;
  memcpy(buf, c->p, n);
  buf[n] = 0;
  return buf;
}

static void expect(parser *ps, cursor *c, const char *s) {
  char fb[32];
  if (!ps->err && !starts(c, s)) fail(ps, "expected \"%s\", found \"%s\"", s, found(c, fb, sizeof fb));
}

static int64_t get_int(parser *ps, cursor *c, const char *what) {
  char buf[32], fb[32];
  size_t n = 0;
  while (c->p + n < c->end && n < sizeof buf - 1 && (c->p[n] == '-' || (c->p[n] >= '0' && c->p[n] <= '9'))) n++;
  memcpy(buf, c->p, n);
  buf[n] = 0;
  char *e;
  errno = 0;
  long long v = n ? strtoll(buf, &e, 10) : 0;
  if (!ps->err && (n == 0 || *e || errno)) {
    fail(ps, "expected %s (an integer), found \"%s\"", what, found(c, fb, sizeof fb));
    return 0;
  }
  c->p += n;
  return v;
}

static uint64_t get_u64(parser *ps, cursor *c, int base, const char *what) {
  char buf[32], fb[32];
  size_t n = 0;
  while (c->p + n < c->end && n < sizeof buf - 1 &&
         ((c->p[n] >= '0' && c->p[n] <= '9') || (base == 16 && strchr("abcdefABCDEF", c->p[n]))))
    n++;
  memcpy(buf, c->p, n);
  buf[n] = 0;
  char *e;
  errno = 0;
  unsigned long long v = n ? strtoull(buf, &e, base) : 0;
  if (!ps->err && (n == 0 || *e || errno)) {
    fail(ps, "expected %s, found \"%s\"", what, found(c, fb, sizeof fb));
    return 0;
  }
  c->p += n;
  return v;
}

/* A token up to any character of stop (or the end), copied into the arena. */
static const char *get_token(parser *ps, cursor *c, const char *stop, const char *what) {
  const char *s = c->p;
  while (c->p < c->end && !strchr(stop, *c->p)) c->p++;
  if (ps->err) return NULL;
  if (c->p == s) {
    fail(ps, "expected %s", what);
    return NULL;
  }
  char *t = dc_arena_alloc(ps->m->arena, (size_t)(c->p - s) + 1);
  if (!t) {
    ps->err = dc_nomem("parsing IR text");
    return NULL;
  }
  memcpy(t, s, (size_t)(c->p - s));
  return t;
}

/* "f32[2,4,64,64]" */
static void get_type(parser *ps, cursor *c, dc_type *t) {
  memset(t, 0, sizeof *t);
  const char *s = c->p;
  while (c->p < c->end && *c->p != '[') c->p++;
  char name[16];
  size_t n = (size_t)(c->p - s);
  if (n == 0 || n >= sizeof name) return fail(ps, "expected a type such as f32[1,4]");
  memcpy(name, s, n);
  name[n] = 0;
  if (dc_dtype_from_name(name, &t->dtype) != 0) return fail(ps, "unknown dtype \"%s\"", name);
  expect(ps, c, "[");
  if (starts(c, "]")) return;
  do {
    if (t->rank == DC_MAX_DIMS) return fail(ps, "more than %d dims", DC_MAX_DIMS);
    t->dims[t->rank] = get_int(ps, c, "a dim");
    if (!ps->err && t->dims[t->rank] < 0) return fail(ps, "negative dim %" PRId64, t->dims[t->rank]);
    t->rank++;
  } while (!ps->err && starts(c, ","));
  expect(ps, c, "]");
}

static int32_t get_ref(parser *ps, cursor *c, int32_t before) {
  expect(ps, c, "%");
  int64_t v = get_int(ps, c, "a value number");
  if (!ps->err && (v < 0 || v >= before)) fail(ps, "%%%" PRId64 " is not an earlier value (0..%d)", v, before - 1);
  return (int32_t)v;
}

static void get_attr_value(parser *ps, cursor *c, dc_node *n, int k) {
  const dc_op_info *info = dc_op_get(n->op);
  if (info->attr_kinds[k] == ATTR_INT) {
    n->attrs[k].i = get_int(ps, c, info->attr_names[k]);
  } else if (info->attr_kinds[k] == ATTR_FLOAT) {
    char buf[48], *e; /* the text is not NUL-terminated: strtod reads a bounded copy */
    size_t len = (size_t)(c->end - c->p) < sizeof buf - 1 ? (size_t)(c->end - c->p) : sizeof buf - 1;
    memcpy(buf, c->p, len);
    buf[len] = 0;
    errno = 0;
    n->attrs[k].f = strtod(buf, &e);
    if (e == buf || errno) return fail(ps, "expected a number for %s", info->attr_names[k]);
    c->p += e - buf;
  } else if (info->attr_kinds[k] == ATTR_ACT) {
    /* the longest name that matches: "gelu" is a prefix of "gelu_tanh" */
    int a = ACT_COUNT;
    size_t best = 0, left = (size_t)(c->end - c->p);
    for (int i = 0; i < ACT_COUNT; i++) {
      const char *name = dc_act_name((dc_act)i);
      size_t len = strlen(name);
      if (len > best && len <= left && memcmp(c->p, name, len) == 0) a = i, best = len;
    }
    if (a == ACT_COUNT) return fail(ps, "expected an activation (none, silu, gelu, geglu, quick_gelu, gelu_tanh) for %s", info->attr_names[k]);
    c->p += best;
    n->attrs[k].i = a;
  } else {
    expect(ps, c, "[");
    n->nlist = 0;
    if (starts(c, "]")) return;
    do {
      if (n->nlist == DC_MAX_DIMS) return fail(ps, "%s has more than %d entries", info->attr_names[k], DC_MAX_DIMS);
      n->list[n->nlist++] = get_int(ps, c, info->attr_names[k]);
    } while (!ps->err && starts(c, ","));
    expect(ps, c, "]");
  }
}

/* " {a=1, b=silu}" — every attribute of the op, in table order. */
static void get_attrs(parser *ps, cursor *c, dc_node *n) {
  const dc_op_info *info = dc_op_get(n->op);
  if (info->nattrs == 0) return;
  expect(ps, c, " {");
  for (int k = 0; k < info->nattrs && !ps->err; k++) {
    if (k) expect(ps, c, ", ");
    expect(ps, c, info->attr_names[k]);
    expect(ps, c, "=");
    if (!ps->err) get_attr_value(ps, c, n, k);
  }
  expect(ps, c, "}");
}

/* Splits the comment "a, b, c" into at most cap fields (pointers into the line). */
static int split_fields(cursor c, cursor *f, int cap) {
  int n = 0;
  while (c.p < c.end && n < cap) {
    const char *comma = c.p;
    while (comma + 1 < c.end && !(comma[0] == ',' && comma[1] == ' ')) comma++;
    if (comma + 1 >= c.end) comma = c.end;
    f[n++] = (cursor){c.p, comma};
    c.p = comma == c.end ? c.end : comma + 2;
  }
  return n;
}

static int field_is(const cursor *f, const char *s) {
  return (size_t)(f->end - f->p) == strlen(s) && memcmp(f->p, s, strlen(s)) == 0;
}

/* LAYOUT, devD — the two fields after the scope. */
static void get_placement(parser *ps, cursor *layout, cursor *dev, dc_node *n) {
  int known = 0;
  for (int l = 0; l < LAYOUT_COUNT && !known; l++)
    if (field_is(layout, dc_layout_name((dc_layout)l))) n->layout = (dc_layout)l, known = 1;
  if (!known) return fail(ps, "expected a layout (row, nchw or nhwc) in the comment");
  if (!starts(dev, "dev")) return fail(ps, "expected devN in the comment");
  n->device = (int)get_int(ps, dev, "a device number");
}

/* "@off O[ in place over %k]" */
static void get_offset(parser *ps, cursor *f, dc_node *n) {
  if (!starts(f, "@off ")) return;
  n->offset = (int64_t)get_u64(ps, f, 10, "an arena offset");
  ps->arena_planned = 1;
}

/* The comment of a computed value: [absorbed A, ]SCOPE, LAYOUT, devD, BYTES, live a..b[, @off O...]. */
static void get_value_comment(parser *ps, cursor c, dc_node *n) {
  cursor f[64];
  int nf = split_fields(c, f, 64);
  int tail = nf;
  if (tail > 0 && f[tail - 1].end - f[tail - 1].p > 5 && memcmp(f[tail - 1].p, "@off ", 5) == 0) get_offset(ps, &f[--tail], n);
  if (tail < 4 || !starts(&f[tail - 1], "live ")) return fail(ps, "expected \"LAYOUT, devN, BYTES, live a..b\" in the comment");
  get_placement(ps, &f[tail - 4], &f[tail - 3], n);
  int front = tail - 4; /* absorbed items, then the scope (which has no parenthesis) */
  if (front > 0 && !memchr(f[front - 1].p, '(', (size_t)(f[front - 1].end - f[front - 1].p))) {
    cursor s = f[front - 1];
    n->scope = get_token(ps, &s, "", "a scope");
    front--;
  }
  if (front > 0) {
    cursor a = {f[0].p, f[front - 1].end};
    if (!starts(&a, "absorbed ")) return fail(ps, "expected \"absorbed ...\" or a scope in the comment");
    n->absorbed = get_token(ps, &a, "", "what was absorbed");
  }
}

static void add_node(parser *ps, const dc_node *n) {
  if (!ps->err && dc_module_add_node(ps->m, n) < 0) ps->err = dc_nomem("parsing IR text");
}

/* %N = input "NAME" : TYPE  # LAYOUT, devD, ...[, TIMESTEP_TAG] */
static void parse_input(parser *ps, cursor *c) {
  expect(ps, c, "\"");
  const char *name = get_token(ps, c, "\"", "an input name");
  expect(ps, c, "\" : ");
  dc_type t;
  if (!ps->err) get_type(ps, c, &t);
  expect(ps, c, "  # ");
  if (ps->err) return;
  cursor f[16];
  int nf = split_fields(*c, f, 16);
  int timestep = nf > 0 && (field_is(&f[nf - 1], TIMESTEP_TAG) || field_is(&f[nf - 1], "random timesteps"));
  dc_input_init init = timestep ? INIT_TIMESTEP : INIT_NORMAL;
  int32_t id = dc_module_add_input(ps->m, name, &t, init);
  if (id < 0) return (void)(ps->err = dc_nomem("parsing IR text"));
  dc_node *n = &ps->m->nodes[id];
  if (nf < 2) return fail(ps, "expected \"LAYOUT, devN, ...\" in the comment");
  get_placement(ps, &f[0], &f[1], n);
  for (int i = 2; i < nf && !ps->err; i++) get_offset(ps, &f[i], n);
}

/* %N = weight @NAME : TYPE  # LAYOUT, devD, BYTES, resident|offloaded, file F @ OFFSET
 * (which of the two is recomputed from the readers: an offloaded weight is
 * one only uploads read) */
static void parse_weight(parser *ps, cursor *c) {
  dc_weight w = {0};
  w.name = get_token(ps, c, " ", "a weight name");
  expect(ps, c, " : ");
  if (!ps->err) get_type(ps, c, &w.type);
  expect(ps, c, "  # ");
  if (ps->err) return;
  cursor f[8];
  int nf = split_fields(*c, f, 8);
  if (nf != 5 || !(field_is(&f[3], "resident") || field_is(&f[3], "offloaded") || field_is(&f[3], "host")) ||
      !starts(&f[4], "file "))
    return fail(ps, "expected \"LAYOUT, devN, BYTES, resident|offloaded, file F @ OFFSET\" in the comment");
  int64_t file = get_int(ps, &f[4], "a file index");
  expect(ps, &f[4], " @ ");
  w.offset = get_u64(ps, &f[4], 10, "a file offset");
  if (!ps->err && (file < 0 || file >= ps->m->nfiles)) return fail(ps, "file %" PRId64 " is not listed in the header", file);
  w.file = (int32_t)file;
  w.bytes = dc_type_bytes(&w.type);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.type = w.type;
  get_placement(ps, &f[0], &f[1], &n);
  const char *dot = strrchr(w.name ? w.name : "", '.');
  if (dot) n.scope = dc_arena_printf(ps->m->arena, "%.*s", (int)(dot - w.name), w.name);
  if (ps->err) return;
  n.ref = dc_module_add_weight(ps->m, &w);
  if (n.ref < 0 || (dot && !n.scope)) return (void)(ps->err = dc_nomem("parsing IR text"));
  add_node(ps, &n);
}

/* One number of a constant's values into element k of data. */
static void get_constant_value(parser *ps, cursor *c, dc_dtype t, void *data, uint64_t k) {
  if (dc_dtype_is_int(t)) {
    int64_t v = get_int(ps, c, "an integer value");
    if (t == DT_I32 && !ps->err && (v < INT32_MIN || v > INT32_MAX))
      return fail(ps, "value %" PRId64 " does not fit in i32", v);
    if (t == DT_I32) ((int32_t *)data)[k] = (int32_t)v;
    else ((int64_t *)data)[k] = v;
    return;
  }
  char buf[48], *e; /* the text is not NUL-terminated: strtof reads a bounded copy */
  size_t len = (size_t)(c->end - c->p) < sizeof buf - 1 ? (size_t)(c->end - c->p) : sizeof buf - 1;
  memcpy(buf, c->p, len);
  buf[len] = 0;
  float v = strtof(buf, &e); /* what the printer wrote reads back exactly; out of range is inf or 0 */
  if (e == buf) return fail(ps, "expected a number (value %" PRIu64 " of the constant)", k);
  ((float *)data)[k] = v;
  c->p += e - buf;
}

/* %N = constant [v, ...] : TYPE  # comment — the values are read after the
 * type, which says how many there are and of which dtype. */
static void parse_constant(parser *ps, cursor *c) {
  expect(ps, c, " [");
  if (ps->err) return;
  if (starts(c, "..."))
    return fail(ps, "constant %%%d is printed elided (more than %d values), so this dump cannot be read back", ps->m->nnodes,
                DC_CONSTANT_PRINT_MAX);
  cursor values = *c;
  while (c->p < c->end && *c->p != ']') c->p++;
  values.end = c->p;
  expect(ps, c, "] : ");
  dc_node n = dc_node_make(OP_CONSTANT, 0, NULL);
  if (!ps->err) get_type(ps, c, &n.type);
  expect(ps, c, "  # ");
  if (ps->err) return;
  if (n.type.dtype != DT_F32 && !dc_dtype_is_int(n.type.dtype))
    return fail(ps, "a constant is f32, i32 or i64, not %s", dc_dtype_name(n.type.dtype));
  uint64_t count = dc_type_numel(&n.type);
  if (count > DC_CONSTANT_PRINT_MAX) return fail(ps, "a constant of %" PRIu64 " values is printed elided, not listed", count);
  void *data = dc_arena_alloc(ps->m->arena, (size_t)dc_type_bytes(&n.type) + 1);
  if (!data) return (void)(ps->err = dc_nomem("parsing IR text"));
  char tb[160];
  for (uint64_t k = 0; k < count && !ps->err; k++) {
    if (values.p == values.end)
      return fail(ps, "constant of type %s has %" PRIu64 " values; expected %" PRIu64, dc_type_str(&n.type, tb, sizeof tb), k,
                  count);
    if (k) expect(ps, &values, ", ");
    if (!ps->err) get_constant_value(ps, &values, n.type.dtype, data, k);
    char fb[32];
    if (!ps->err && values.p != values.end && *values.p != ',')
      return fail(ps, "value %" PRIu64 " of the %s constant is followed by \"%s\"", k, dc_dtype_name(n.type.dtype),
                  found(&values, fb, sizeof fb));
  }
  if (!ps->err && values.p != values.end)
    return fail(ps, "constant of type %s has more than %" PRIu64 " values", dc_type_str(&n.type, tb, sizeof tb), count);
  n.data = data;
  get_value_comment(ps, *c, &n);
  add_node(ps, &n);
}

/* %N = OP(%a, ...) {attrs} : TYPE  # comment */
static void parse_op(parser *ps, cursor *c, dc_op op) {
  int32_t id = ps->m->nnodes;
  dc_node n = dc_node_make(op, 0, NULL);
  if (starts(c, "(")) {
    do {
      if (n.ninputs == DC_MAX_INPUTS) return fail(ps, "more than %d inputs", DC_MAX_INPUTS);
      n.inputs[n.ninputs++] = get_ref(ps, c, id);
    } while (!ps->err && starts(c, ", "));
    expect(ps, c, ")");
  }
  if (!ps->err) get_attrs(ps, c, &n);
  expect(ps, c, " : ");
  if (!ps->err) get_type(ps, c, &n.type);
  expect(ps, c, "  # ");
  if (!ps->err) get_value_comment(ps, *c, &n);
  add_node(ps, &n);
}

static void parse_node(parser *ps, cursor *c) {
  ps->in_header = 0;
  int64_t id = get_int(ps, c, "a value number");
  if (!ps->err && id != ps->m->nnodes) return fail(ps, "expected %%%d (values are numbered in order), found %%%" PRId64, ps->m->nnodes, id);
  expect(ps, c, " = ");
  if (ps->err) return;
  char fb[32];
  const char *s = c->p;
  while (c->p < c->end && ((*c->p >= 'a' && *c->p <= 'z') || (*c->p >= '0' && *c->p <= '9') || *c->p == '_')) c->p++;
  char name[40];
  size_t n = (size_t)(c->p - s);
  if (n == 0 || n >= sizeof name) return fail(ps, "expected an op name, found \"%s\"", found(&(cursor){s, c->end}, fb, sizeof fb));
  memcpy(name, s, n);
  name[n] = 0;
  dc_op op = dc_op_from_name(name);
  if (op == OP_COUNT) return fail(ps, "unknown op \"%s\"", name);
  if (op == OP_INPUT) return expect(ps, c, " "), parse_input(ps, c);
  if (op == OP_WEIGHT) return expect(ps, c, " @"), parse_weight(ps, c);
  if (op == OP_CONSTANT) return parse_constant(ps, c);
  parse_op(ps, c, op);
}

/* output NAME = %N */
static void parse_output(parser *ps, cursor *c) {
  const char *name = get_token(ps, c, " ", "an output name");
  expect(ps, c, " = ");
  int32_t v = get_ref(ps, c, ps->m->nnodes);
  if (!ps->err && c->p != c->end) fail(ps, "unexpected text after the output");
  if (!ps->err) ps->err = dc_module_add_output(ps->m, name, v);
}

/* #   file N: PATH (SIZE bytes, header xxh64 HEX) */
static void parse_file(parser *ps, cursor *c) {
  int64_t idx = get_int(ps, c, "a file index");
  if (!ps->err && idx != ps->m->nfiles) return fail(ps, "expected file %d (files are numbered in order)", ps->m->nfiles);
  expect(ps, c, ": ");
  if (ps->err) return;
  const char *close = c->end - 1; /* the last " (" ends the path */
  while (close > c->p && !(close[0] == ' ' && close + 1 < c->end && close[1] == '(')) close--;
  if (close <= c->p) return fail(ps, "expected \"PATH (SIZE bytes, header xxh64 HEX)\"");
  cursor pc = {c->p, close};
  dc_weight_file wf = {0};
  wf.path = get_token(ps, &pc, "", "a file path");
  c->p = close;
  expect(ps, c, " (");
  wf.file_size = get_u64(ps, c, 10, "a file size");
  expect(ps, c, " bytes, header xxh64 ");
  wf.header_hash = get_u64(ps, c, 16, "a header hash");
  expect(ps, c, ")");
  if (!ps->err && dc_module_add_file(ps->m, &wf) < 0) ps->err = dc_nomem("parsing IR text");
}

/* "# key = value" in the header */
static void parse_meta(parser *ps, cursor *c) {
  const char *eq = c->p;
  while (eq + 2 < c->end && !(eq[0] == ' ' && eq[1] == '=' && eq[2] == ' ')) eq++;
  if (eq + 2 >= c->end) return;
  char *key = dc_strndup(c->p, (size_t)(eq - c->p));
  char *value = dc_strndup(eq + 3, (size_t)(c->end - eq - 3));
  if (!key || !value) ps->err = dc_nomem("parsing IR text");
  else ps->err = dc_module_set_meta(ps->m, key, value);
  dc_free(key);
  dc_free(value);
}

static void parse_comment(parser *ps, cursor *c) {
  if (starts(c, "#   file ")) return parse_file(ps, c);
  if (starts(c, "# weights: ")) return (void)(ps->in_header = 0);
  if (starts(c, "# peak activations: ")) {
    while (c->p < c->end && *c->p != '(') c->p++;
    expect(ps, c, "(");
    ps->peak_bytes = get_u64(ps, c, 10, "the peak in bytes");
    return;
  }
  if (starts(c, "# arena: ")) {
    const char *s = c->p;
    while (c->p < c->end && *c->p != '(') c->p++;
    ps->arena_planned |= !starts(&(cursor){s, c->end}, "not planned") && c->p - s > 8 && memcmp(c->p - 8, "planned ", 8) == 0;
    return;
  }
  if (ps->in_header && starts(c, "# ") && !starts(c, "diffc IR") && !starts(c, "input ")) parse_meta(ps, c);
}

static void parse_line(parser *ps, cursor c) {
  if (c.p == c.end) return;
  if (*c.p == '#') return parse_comment(ps, &c);
  if (starts(&c, "%")) return parse_node(ps, &c);
  if (starts(&c, "output ")) return parse_output(ps, &c);
  char fb[32];
  fail(ps, "expected a value (%%N = ...), an output or a comment, found \"%s\"", found(&c, fb, sizeof fb));
}

/* Offsets from text are untrusted: every activation must have one, and the
 * plan must pass the same check the runtime makes before it runs a plan. */
static dc_status *check_memory_plan(const dc_module *m) {
  for (int32_t i = 0; i < m->nnodes; i++)
    if (dc_node_is_activation(&m->nodes[i]) && m->nodes[i].offset < 0)
      return dc_error(DC_ERR_FORMAT, "%%%d has no arena offset while others have one", (int)i);
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_status *st = dc_memplan_check(m, &l);
  dc_liveness_deinit(&l);
  return st;
}

dc_status *dc_parse(const char *text, size_t len, const char *what, dc_module **out) {
  *out = NULL;
  parser ps = {.what = what, .in_header = 1, .m = dc_module_create()};
  if (!ps.m) return dc_nomem("parsing IR text");
  const char *p = text, *end = text + len;
  while (p < end && !ps.err) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) nl = end;
    ps.line++;
    if (memchr(p, 0, (size_t)(nl - p))) fail(&ps, "a NUL byte in the text");
    else parse_line(&ps, (cursor){p, nl});
    p = nl + 1;
  }
  if (!ps.err) {
    if (ps.arena_planned) ps.m->arena_bytes = ps.peak_bytes;
    ps.err = dc_phases_from_meta(ps.m);
    if (!ps.err) ps.err = dc_verify(ps.m, "parsing");
    if (!ps.err && ps.arena_planned) ps.err = check_memory_plan(ps.m);
    if (ps.err) ps.err = dc_status_annotate(ps.err, "%s", what);
  }
  if (ps.err) {
    dc_module_destroy(ps.m);
    return ps.err;
  }
  *out = ps.m;
  return NULL;
}
