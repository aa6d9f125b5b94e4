/* safetensors.c — read and write the safetensors format, checking every rule
 * the reference implementation (huggingface/safetensors, tensor.rs) checks.
 *
 * A weight file is untrusted input that we mmap and later hand to kernels by
 * offset, so a bad header must be caught here, with a message that names the
 * file, the tensor and the byte range: an 8-byte LE header length N <= 1e8
 * within the file, a UTF-8 JSON object header, entries of exactly
 * {dtype, shape, data_offsets}, offsets that tile the data buffer, and
 * 8 + N + buffer size == file size.  Only the float dtypes diffc computes
 * with are accepted. */
#include "frontend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000ull

/* Per-tensor scratch while validating: data_offsets relative to the buffer. */
typedef struct {
  uint64_t begin, end;
  const char *name;
} st_span;

/* ---- the fixed part: length prefix and header bytes ---------------------- */

static dc_status *st_check_length(const char *path, const dc_mapped_file *mf, uint64_t *out_n) {
  if (mf->size < 8)
    return dc_error(DC_ERR_FORMAT,
                    "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)",
                    path, mf->size);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)mf->data[i] << (8 * i);
  if (n > ST_MAX_HEADER)
    return dc_error(DC_ERR_FORMAT,
                    "%s: header length %llu exceeds the 100000000-byte limit (not a safetensors "
                    "file?)",
                    path, (unsigned long long)n);
  if (n > mf->size - 8)
    return dc_error(DC_ERR_FORMAT,
                    "%s: header length %llu runs past the end of the file (%zu bytes; truncated?)",
                    path, (unsigned long long)n, mf->size);
  *out_n = n;
  return NULL;
}

/* Returns the offset of the first byte that is not valid UTF-8, or n. */
static size_t st_utf8_invalid_at(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > (int)(n - i)) return i;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (int k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3fu);
    }
    /* overlong forms, surrogates, and code points past U+10FFFF */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return i;
    i += (size_t)len;
  }
  return n;
}

static dc_status *st_parse_json(const char *path, const uint8_t *text, uint64_t n, cJSON **out) {
  *out = NULL;
  size_t bad = st_utf8_invalid_at(text, (size_t)n);
  if (bad < n)
    return dc_error(DC_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu of the header)", path,
                    bad);
  size_t at;
  char why[64];
  cJSON *root = dc_json_parse_bytes((const char *)text, (size_t)n, &at, why);
  if (!root && !why[0]) return dc_nomem("parsing a safetensors header");
  if (!root)
    return dc_error(DC_ERR_FORMAT,
                    "%s: header is not valid JSON (%s at byte %zu of the %llu-byte header; not a "
                    "safetensors file?)",
                    path, why, at, (unsigned long long)n);
  if (!cJSON_IsObject(root)) {
    dc_status *st = dc_error(DC_ERR_FORMAT, "%s: header must be a JSON object, got a %s", path,
                             dc_json_type_name(root));
    cJSON_Delete(root);
    return st;
  }
  *out = root;
  return NULL;
}

/* ---- one header entry ----------------------------------------------------- */

/* A JSON number that is an exact non-negative integer below 2^53 (beyond
 * that a double no longer says which integer the file meant). */
static int st_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
  *out = (uint64_t)d;
  return 1;
}

static dc_status *st_check_metadata(const char *path, const cJSON *meta) {
  if (!cJSON_IsObject(meta))
    return dc_error(DC_ERR_FORMAT, "%s: \"__metadata__\" must be an object of strings, got a %s",
                    path, dc_json_type_name(meta));
  for (const cJSON *c = meta->child; c; c = c->next)
    if (!cJSON_IsString(c))
      return dc_error(DC_ERR_FORMAT,
                      "%s: \"__metadata__\" must map strings to strings, but \"%s\" is a %s", path,
                      c->string, dc_json_type_name(c));
  return NULL;
}

/* Finds the three keys of an entry; any other key, or a repeated one, is an error. */
static dc_status *st_entry_fields(const char *path, const cJSON *e, const cJSON *f[3]) {
  static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
  f[0] = f[1] = f[2] = NULL;
  if (!cJSON_IsObject(e))
    return dc_error(DC_ERR_FORMAT,
                    "%s: tensor \"%s\": entry must be an object with dtype, shape and "
                    "data_offsets, got a %s",
                    path, e->string, dc_json_type_name(e));
  for (const cJSON *c = e->child; c; c = c->next) {
    int k = 0;
    while (k < 3 && strcmp(c->string, keys[k]) != 0) k++;
    if (k == 3)
      return dc_error(DC_ERR_FORMAT,
                      "%s: tensor \"%s\": unexpected key \"%s\" (expected dtype, shape, "
                      "data_offsets)",
                      path, e->string, c->string);
    if (f[k])
      return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\": key \"%s\" appears twice", path, e->string,
                      keys[k]);
    f[k] = c;
  }
  for (int k = 0; k < 3; k++)
    if (!f[k])
      return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\": missing \"%s\"", path, e->string, keys[k]);
  return NULL;
}

static dc_status *st_entry_dtype(const char *path, const char *name, const cJSON *v,
                                 dc_dtype *out) {
  if (!cJSON_IsString(v))
    return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\": dtype must be a string, got a %s", path,
                    name, dc_json_type_name(v));
  if (dc_dtype_from_safetensors(v->valuestring, out) != 0)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: tensor \"%s\": dtype \"%s\" is not supported (expected one of F32, F16, "
                    "BF16, F8_E4M3, F8_E5M2, I32, I64)",
                    path, name, v->valuestring);
  return NULL;
}

static dc_status *st_entry_shape(const char *path, const char *name, const cJSON *v,
                                 dc_st_tensor *t) {
  if (!cJSON_IsArray(v))
    return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\": shape must be a list, got a %s", path, name,
                    dc_json_type_name(v));
  int rank = cJSON_GetArraySize(v);
  if (rank > DC_MAX_DIMS)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: tensor \"%s\": shape has %d dims; diffc supports at most %d", path, name,
                    rank, DC_MAX_DIMS);
  int i = 0;
  for (const cJSON *c = v->child; c; c = c->next, i++) {
    uint64_t d;
    if (!st_uint(c, &d)) {
      char *txt = cJSON_PrintUnformatted(c);
      dc_status *st = dc_error(DC_ERR_FORMAT,
                               "%s: tensor \"%s\": shape dim %d must be a non-negative integer, "
                               "got %s",
                               path, name, i, txt ? txt : dc_json_type_name(c));
      cJSON_free(txt);
      return st;
    }
    t->dims[i] = (int64_t)d;
  }
  t->rank = rank;
  return NULL;
}

static dc_status *st_entry_offsets(const char *path, const char *name, const cJSON *v,
                                   st_span *out) {
  const cJSON *b = cJSON_IsArray(v) ? v->child : NULL;
  const cJSON *e = b ? b->next : NULL;
  if (!b || !e || e->next || !st_uint(b, &out->begin) || !st_uint(e, &out->end))
    return dc_error(DC_ERR_FORMAT,
                    "%s: tensor \"%s\": data_offsets must be a list of two non-negative "
                    "integers [begin, end]",
                    path, name);
  if (out->begin > out->end)
    return dc_error(DC_ERR_FORMAT,
                    "%s: tensor \"%s\": data_offsets [%llu, %llu) end before they begin", path,
                    name, (unsigned long long)out->begin, (unsigned long long)out->end);
  return NULL;
}

/* The bytes a dtype and shape need, overflow-checked. */
static dc_status *st_entry_bytes(const char *path, const dc_st_tensor *t, uint64_t *out) {
  uint64_t n = (uint64_t)dc_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++)
    if (dc_mul_overflows(n, (uint64_t)t->dims[i], &n)) {
      char dims[160];
      return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\": shape %s with dtype %s overflows 64 bits",
                      path, t->name, dc_dims_str(t->dims, t->rank, dims, sizeof dims),
                      dc_dtype_safetensors_name(t->dtype));
    }
  *out = n;
  return NULL;
}

static dc_status *st_parse_entry(const char *path, const cJSON *e, uint64_t buf_size,
                                 dc_st_tensor *t, st_span *sp) {
  const cJSON *f[3];
  DC_TRY(st_entry_fields(path, e, f));
  DC_TRY(st_entry_dtype(path, e->string, f[0], &t->dtype));
  DC_TRY(st_entry_shape(path, e->string, f[1], t));
  DC_TRY(st_entry_offsets(path, e->string, f[2], sp));
  t->name = dc_strdup(e->string);
  if (!t->name) return dc_nomem("reading a safetensors header");
  sp->name = t->name;
  DC_TRY(st_entry_bytes(path, t, &t->bytes));
  if (sp->end > buf_size)
    return dc_error(DC_ERR_FORMAT,
                    "%s: tensor \"%s\": data_offsets [%llu, %llu) run past the end of the data "
                    "buffer (%llu bytes); truncated download?",
                    path, t->name, (unsigned long long)sp->begin, (unsigned long long)sp->end,
                    (unsigned long long)buf_size);
  if (sp->end - sp->begin != t->bytes) {
    char dims[160];
    return dc_error(DC_ERR_FORMAT,
                    "%s: tensor \"%s\": shape %s with dtype %s needs %llu bytes but data_offsets "
                    "[%llu, %llu) hold %llu",
                    path, t->name, dc_dims_str(t->dims, t->rank, dims, sizeof dims),
                    dc_dtype_safetensors_name(t->dtype), (unsigned long long)t->bytes,
                    (unsigned long long)sp->begin, (unsigned long long)sp->end,
                    (unsigned long long)(sp->end - sp->begin));
  }
  return NULL;
}

/* ---- the buffer layout ------------------------------------------------------ */

static int st_span_cmp(const void *a, const void *b) {
  const st_span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Sorted by offset, the tensors must tile [0, buffer end) exactly, and the
 * buffer end must be where the file ends. */
static dc_status *st_check_tiling(const char *path, st_span *sp, int n, uint64_t header_len,
                                  uint64_t file_size) {
  qsort(sp, (size_t)n, sizeof *sp, st_span_cmp);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (sp[i].begin < at)
      return dc_error(
          DC_ERR_FORMAT, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap", path,
          sp[i - 1].name, (unsigned long long)sp[i - 1].begin, (unsigned long long)sp[i - 1].end,
          sp[i].name, (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
    if (sp[i].begin > at)
      return dc_error(DC_ERR_FORMAT,
                      "%s: data buffer bytes [%llu, %llu) belong to no tensor (the next is \"%s\")",
                      path, (unsigned long long)at, (unsigned long long)sp[i].begin, sp[i].name);
    at = sp[i].end;
  }
  uint64_t described = 8 + header_len + at;
  if (described != file_size)
    return dc_error(DC_ERR_FORMAT,
                    "%s: file is %llu bytes but the header describes %llu (8 + %llu header + %llu "
                    "data); truncated or padded?",
                    path, (unsigned long long)file_size, (unsigned long long)described,
                    (unsigned long long)header_len, (unsigned long long)at);
  return NULL;
}

static int st_name_cmp(const void *a, const void *b) {
  return strcmp(((const dc_st_tensor *)a)->name, ((const dc_st_tensor *)b)->name);
}

/* cJSON keeps repeated keys; the format forbids them.  Sorted by name,
 * repeats are neighbours. */
static dc_status *st_sort_by_name(const char *path, dc_st_file *f) {
  qsort(f->tensors, (size_t)f->ntensors, sizeof *f->tensors, st_name_cmp);
  for (int i = 1; i < f->ntensors; i++)
    if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
      return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\" appears twice in the header", path,
                      f->tensors[i].name);
  return NULL;
}

/* ---- open ------------------------------------------------------------------- */

static dc_status *st_read_entries(const char *path, const cJSON *root, dc_st_file *f) {
  int cap = cJSON_GetArraySize(root);
  f->tensors = dc_calloc((size_t)cap, sizeof *f->tensors);
  st_span *sp = dc_calloc((size_t)cap, sizeof *sp);
  if (!f->tensors || !sp) {
    dc_free(sp);
    return dc_nomem("reading a safetensors header");
  }
  uint64_t buf_size = f->file.size - 8 - f->header_len;
  int metas = 0;
  dc_status *st = NULL;
  for (const cJSON *e = root->child; e && !st; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      st = metas++ ? dc_error(DC_ERR_FORMAT, "%s: \"__metadata__\" appears twice", path)
                   : st_check_metadata(path, e);
      continue;
    }
    dc_st_tensor *t = &f->tensors[f->ntensors];
    st = st_parse_entry(path, e, buf_size, t, &sp[f->ntensors]);
    t->offset = 8 + f->header_len + sp[f->ntensors].begin; /* <= file size: no overflow */
    if (t->name) f->ntensors++; /* owned by f from here on, even on error */
  }
  if (!st) st = st_check_tiling(path, sp, f->ntensors, f->header_len, f->file.size);
  if (!st) st = st_sort_by_name(path, f);
  dc_free(sp);
  return st;
}

dc_status *dc_st_open(const char *path, dc_st_file *out) {
  memset(out, 0, sizeof *out);
  DC_TRY(dc_file_map(path, &out->file));
  dc_status *st = st_check_length(path, &out->file, &out->header_len);
  cJSON *root = NULL;
  if (!st) st = st_parse_json(path, out->file.data + 8, out->header_len, &root);
  if (!st) st = st_read_entries(path, root, out);
  cJSON_Delete(root);
  if (st) {
    dc_st_close(out);
    return st;
  }
  out->header_hash = dc_hash64(out->file.data, (size_t)(8 + out->header_len));
  return NULL;
}

void dc_st_close(dc_st_file *f) {
  for (int i = 0; i < f->ntensors; i++) dc_free(f->tensors[i].name);
  dc_free(f->tensors);
  dc_file_unmap(&f->file);
  memset(f, 0, sizeof *f);
}

const dc_st_tensor *dc_st_find(const dc_st_file *f, const char *name) {
  dc_st_tensor key = {.name = (char *)name};
  if (f->ntensors == 0) return NULL;
  return bsearch(&key, f->tensors, (size_t)f->ntensors, sizeof key, st_name_cmp);
}

/* ---- write ------------------------------------------------------------------ */

static dc_status *st_out_bytes(const dc_st_out *t, uint64_t *out) {
  const dc_type *ty = &t->type;
  if (!t->name || st_utf8_invalid_at((const uint8_t *)t->name, strlen(t->name)) < strlen(t->name))
    return dc_error(DC_ERR_ARGUMENT, "safetensors writer: a tensor name is NULL or not UTF-8");
  if ((unsigned)ty->dtype >= DT_COUNT || ty->rank < 0 || ty->rank > DC_MAX_DIMS)
    return dc_error(DC_ERR_ARGUMENT, "safetensors writer: tensor \"%s\" has a bad dtype or rank",
                    t->name);
  uint64_t n = (uint64_t)dc_dtype_size(ty->dtype);
  for (int i = 0; i < ty->rank; i++)
    if (ty->dims[i] < 0 || dc_mul_overflows(n, (uint64_t)ty->dims[i], &n))
      return dc_error(DC_ERR_ARGUMENT, "safetensors writer: tensor \"%s\" has a bad shape",
                      t->name);
  if (n > 0 && !t->data)
    return dc_error(DC_ERR_ARGUMENT, "safetensors writer: tensor \"%s\" has no data", t->name);
  *out = n;
  return NULL;
}

typedef struct {
  const dc_st_out *t;
  uint64_t bytes;
} st_item;

static int st_item_cmp(const void *a, const void *b) {
  return strcmp(((const st_item *)a)->t->name, ((const st_item *)b)->t->name);
}

/* Header JSON in name order, offsets in the same order, padded with spaces
 * to a multiple of 8 (as the reference writer does). */
static dc_status *st_build_header(const st_item *it, int n, dc_buf *b) {
  uint64_t at = 0;
  dc_buf_printf(b, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int k = 0; k < n; k++) {
    const dc_st_out *o = it[k].t;
    if (k > 0 && strcmp(it[k - 1].t->name, o->name) == 0)
      return dc_error(DC_ERR_ARGUMENT, "safetensors writer: tensor \"%s\" given twice", o->name);
    dc_buf_u8(b, ',');
    dc_buf_json_string(b, o->name);
    dc_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dc_dtype_safetensors_name(o->type.dtype));
    for (int i = 0; i < o->type.rank; i++)
      dc_buf_printf(b, "%s%lld", i ? "," : "", (long long)o->type.dims[i]);
    uint64_t begin = at;
    if (dc_add_overflows(at, it[k].bytes, &at))
      return dc_error(DC_ERR_ARGUMENT, "safetensors writer: total size overflows 64 bits");
    dc_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
                  (unsigned long long)at);
  }
  dc_buf_u8(b, '}');
  while (!b->failed && b->len % 8) dc_buf_u8(b, ' ');
  DC_TRY(dc_buf_status(b, "writing a safetensors header"));
  if (b->len > ST_MAX_HEADER)
    return dc_error(DC_ERR_ARGUMENT, "safetensors writer: header of %zu bytes exceeds the limit",
                    b->len);
  return NULL;
}

static dc_status *st_write_file(const char *path, const dc_buf *hdr, const st_item *it, int n) {
  dc_atomic_file af;
  DC_TRY(dc_atomic_open(path, &af));
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hdr->len >> (8 * i));
  dc_atomic_write(&af, len, 8);
  dc_atomic_write(&af, hdr->data, hdr->len);
  for (int k = 0; k < n; k++)
    if (it[k].bytes) dc_atomic_write(&af, it[k].t->data, (size_t)it[k].bytes);
  return dc_atomic_commit(&af);
}

dc_status *dc_st_write(const char *path, const dc_st_out *tensors, int n) {
  if (n < 0) return dc_error(DC_ERR_ARGUMENT, "safetensors writer: negative tensor count");
  st_item *it = dc_calloc((size_t)n, sizeof *it);
  if (!it) return dc_nomem("writing a safetensors file");
  dc_status *st = NULL;
  for (int i = 0; i < n && !st; i++) {
    it[i].t = &tensors[i];
    st = st_out_bytes(&tensors[i], &it[i].bytes);
  }
  dc_buf hdr;
  dc_buf_init(&hdr);
  if (!st) {
    qsort(it, (size_t)n, sizeof *it, st_item_cmp);
    st = st_build_header(it, n, &hdr);
  }
  if (!st) st = st_write_file(path, &hdr, it, n);
  dc_buf_deinit(&hdr);
  dc_free(it);
  return st;
}
