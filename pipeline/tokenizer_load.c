/* tokenizer_load.c — reads a CLIP tokenizer's files (tokenizer.h) into the
 * tables of tokenizer_impl.h: the vocabulary (vocab.json, or tokenizer.json's
 * model.vocab), the merges (merges.txt, or model.merges), and the tokens
 * matched before BPE with bos/eos/pad/unk and model_max_length
 * (tokenizer_config.json, special_tokens_map.json, tokenizer.json's
 * added_tokens), the way transformers 5's CLIPTokenizer.from_pretrained
 * resolves them.  Every message names the file and the line or key. */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

const char *const dc_clip_tokenizer_file_names[] = {
    "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", NULL,
};

/* ---- small helpers ---------------------------------------------------------- */

/* See tokenizer_impl.h. */
const char *dc_tok_quoted(const char *s, size_t n, char *buf, size_t cap) {
  size_t o = 0;
  buf[o++] = '"';
  for (size_t i = 0; i < n && o + 8 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i == 60) {
      o += (size_t)snprintf(buf + o, cap - o, "...");
      break;
    }
    if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    else if (c == '"' || c == '\\') o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
    else buf[o++] = (char)c;
  }
  buf[o++] = '"';
  buf[o] = 0;
  return buf;
}
#define QBUF 320
#define Q(s, n, b) dc_tok_quoted((s), (n), (b), sizeof(b))

/* What a message says was found: numbers by value, anything else by kind. */
static const char *found(const cJSON *v, char *buf, size_t cap) {
  if (!v) return "nothing";
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
  if (cJSON_IsNumber(v)) {
    for (int prec = 1; prec <= 17; prec++) { /* the shortest text that reads back the same */
      snprintf(buf, cap, "%.*g", prec, v->valuedouble);
      if (strtod(buf, NULL) == v->valuedouble) break;
    }
    return buf;
  }
  const char *t = dc_json_type_name(v);
  snprintf(buf, cap, "%s %s", t[0] == 'o' || t[0] == 'i' ? "an" : "a", t);
  return buf;
}
#define FOUND(v) found((v), (char[64]){0}, 64) /* the buffer lives to the end of the enclosing block */

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser: spreads (a, b) pairs over the table */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint32_t table_size(int n) { /* a power of two with at most half the slots used */
  uint32_t cap = 16;
  while (cap < 2u * (uint32_t)n + 2) cap <<= 1;
  return cap;
}

/* "origin/name": the path messages give. */
static char *file_path(const dc_text_files *files, const char *name) {
  return dc_path_join(files->origin ? files->origin : "tokenizer", name);
}

/* Parses the file as JSON; syntax errors give "path:line:col". */
static dc_status *parse_json(const dc_text_file *f, const char *path, cJSON **out) {
  size_t at = 0;
  char why[64];
  *out = dc_json_parse_bytes((const char *)f->data, f->size, &at, why);
  if (*out) return NULL;
  if (!why[0]) return dc_nomem("parsing a tokenizer file");
  int line = 1, col = 1;
  for (size_t i = 0; i < at; i++) {
    if (f->data[i] == '\n') line++, col = 1;
    else col++;
  }
  return dc_error(DC_ERR_FORMAT, "%s:%d:%d: not valid JSON (%s)", path, line, col, why);
}

/* ---- vocabulary --------------------------------------------------------------- */

static dc_status *vocab_init(dc_tok_vocab *v, int n) {
  uint32_t cap = table_size(n);
  v->mask = cap - 1;
  v->cap = n;
  v->e = dc_malloc(sizeof *v->e * (size_t)(n ? n : 1));
  v->by_str = dc_calloc(cap, sizeof *v->by_str);
  v->by_id = dc_calloc(cap, sizeof *v->by_id);
  v->pool_cap = 1 << 16;
  v->pool = dc_malloc(v->pool_cap); /* never NULL once built: "" may be a token, and pool + 0 must be valid */
  if (!v->e || !v->by_str || !v->by_id || !v->pool) return dc_nomem("building the tokenizer's vocabulary");
  return NULL;
}

static void vocab_free(dc_tok_vocab *v) {
  dc_free(v->pool);
  dc_free(v->e);
  dc_free(v->by_str);
  dc_free(v->by_id);
  memset(v, 0, sizeof *v);
}

static uint32_t str_hash(const char *s, size_t n) { return (uint32_t)dc_hash64(s, n); }

/* The by_str slot holding s (hash h), or the empty slot where it would go. */
static uint64_t *str_slot(const dc_tok_vocab *v, const char *s, size_t n, uint32_t h) {
  for (uint32_t i = h & v->mask;; i = (i + 1) & v->mask) {
    uint64_t k = v->by_str[i];
    if (!k) return &v->by_str[i];
    if ((uint32_t)(k >> 32) != h) continue;
    const dc_tok_entry *e = &v->e[(uint32_t)k - 1];
    if (e->len == n && memcmp(v->pool + e->off, s, n) == 0) return &v->by_str[i];
  }
}

static uint32_t *id_slot(const dc_tok_vocab *v, int32_t id) {
  for (uint32_t h = (uint32_t)mix64((uint64_t)id) & v->mask;; h = (h + 1) & v->mask) {
    uint32_t k = v->by_id[h];
    if (!k || v->e[k - 1].id == id) return &v->by_id[h];
  }
}

int32_t dc_tok_vocab_find(const dc_tok_vocab *v, const char *s, size_t n) {
  if (!v->by_str) return -1;
  uint64_t k = *str_slot(v, s, n, str_hash(s, n));
  return k ? v->e[(uint32_t)k - 1].id : -1;
}

const dc_tok_entry *dc_tok_vocab_by_id(const dc_tok_vocab *v, int32_t id) {
  if (!v->by_id) return NULL;
  uint32_t k = *id_slot(v, id);
  return k ? &v->e[k - 1] : NULL;
}

static int pool_append(dc_tok_vocab *v, const char *s, size_t n) {
  if (v->pool_len + n > v->pool_cap) {
    size_t cap = v->pool_cap * 2;
    while (cap < v->pool_len + n) cap *= 2;
    char *p = dc_realloc(v->pool, cap);
    if (!p) return 0;
    v->pool = p;
    v->pool_cap = cap;
  }
  memcpy(v->pool + v->pool_len, s, n);
  v->pool_len += n;
  return 1;
}

/* Adds token s[0..n) with id; `where` names the file for messages. */
static dc_status *vocab_add(dc_tok_vocab *v, const char *s, size_t n, int32_t id, const char *where) {
  char b1[QBUF], b2[QBUF];
  uint32_t h = str_hash(s, n), *is = id_slot(v, id);
  uint64_t *ss = str_slot(v, s, n, h);
  if (*ss) return dc_error(DC_ERR_FORMAT, "%s: token %s appears twice", where, Q(s, n, b1));
  if (*is) {
    const dc_tok_entry *o = &v->e[*is - 1];
    return dc_error(DC_ERR_FORMAT, "%s: tokens %s and %s both have id %d", where, Q(v->pool + o->off, o->len, b1),
                    Q(s, n, b2), (int)id);
  }
  if (v->n >= v->cap || n > UINT32_MAX || v->pool_len > UINT32_MAX - n)
    return dc_error(DC_ERR_INTERNAL, "%s: vocabulary larger than counted", where);
  if (!pool_append(v, s, n)) return dc_nomem("building the tokenizer's vocabulary");
  v->e[v->n] = (dc_tok_entry){(uint32_t)(v->pool_len - n), (uint32_t)n, id};
  *is = (uint32_t)++v->n;
  *ss = (uint64_t)h << 32 | (uint32_t)v->n;
  return NULL;
}

/* A JSON object of token -> id: vocab.json, or tokenizer.json's model.vocab
 * (in_model: messages then say model.vocab["token"]). */
static dc_status *load_vocab_object(dc_tok_vocab *v, const cJSON *obj, const char *path, int in_model) {
  if (!cJSON_IsObject(obj))
    return dc_error(DC_ERR_FORMAT, "%s: %s must be an object of token -> id, found %s", path,
                    in_model ? "\"model.vocab\"" : "the top level", FOUND(obj));
  DC_TRY(vocab_init(v, cJSON_GetArraySize(obj)));
  const char *pre = in_model ? "model.vocab[" : "", *post = in_model ? "]" : "";
  char b[QBUF];
  for (const cJSON *c = obj->child; c; c = c->next) {
    size_t n = strlen(c->string);
    long bad = dc_tok_utf8_invalid_at(c->string, n);
    if (bad >= 0)
      return dc_error(DC_ERR_FORMAT, "%s: key %s%s%s is not valid UTF-8 (byte %ld)", path, pre, Q(c->string, n, b),
                      post, bad);
    double d = cJSON_IsNumber(c) ? c->valuedouble : -1;
    if (!(d >= 0 && d <= INT32_MAX && d == (double)(int32_t)d))
      return dc_error(DC_ERR_FORMAT, "%s: %s%s%s: expected an integer id from 0 to %d, found %s", path, pre,
                      Q(c->string, n, b), post, INT32_MAX, FOUND(c));
    DC_TRY(vocab_add(v, c->string, n, (int32_t)d, path));
  }
  return NULL;
}

/* ---- merges --------------------------------------------------------------------- */

static dc_status *merges_init(dc_clip_tokenizer *t, int n) {
  uint32_t cap = table_size(n);
  t->merge_mask = cap - 1;
  t->merges = dc_malloc(sizeof *t->merges * cap);
  if (!t->merges) return dc_nomem("building the tokenizer's merge table");
  for (uint32_t i = 0; i < cap; i++) t->merges[i].rank = -1;
  return NULL;
}

static uint64_t merge_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static dc_tok_merge *merge_slot(const dc_clip_tokenizer *t, uint64_t key) {
  for (uint32_t h = (uint32_t)mix64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask)
    if (t->merges[h].rank < 0 || t->merges[h].key == key) return &t->merges[h];
}

const dc_tok_merge *dc_tok_merge_find(const dc_clip_tokenizer *t, int32_t a, int32_t b) {
  if (!t->merges) return NULL;
  const dc_tok_merge *m = merge_slot(t, merge_key(a, b));
  return m->rank < 0 ? NULL : m;
}

/* Where a merge comes from, formatted only for a message: "path:line" (merges.txt)
 * or "path: model.merges[index]" (tokenizer.json). */
typedef struct {
  const char *path, *vocab_file;
  int line, index;
} merge_src;

static const char *merge_where(const merge_src *m, char *buf, size_t cap) {
  if (m->line) snprintf(buf, cap, "%s:%d", m->path, m->line);
  else snprintf(buf, cap, "%s: model.merges[%d]", m->path, m->index);
  return buf;
}

static dc_status *merge_unknown(const merge_src *src, const char *what, const char *s, size_t n) {
  char where[600], q[QBUF];
  return dc_error(DC_ERR_FORMAT, "%s: %s%s is not in the vocabulary (%s)", merge_where(src, where, sizeof where),
                  what, Q(s, n, q), src->vocab_file);
}

/* The merge a + b of rank `rank`.  A pair listed twice keeps its later rank,
 * as tokenizers' merge map does. */
static dc_status *add_merge(dc_clip_tokenizer *t, const char *a, size_t an, const char *b, size_t bn, int rank,
                            const merge_src *src) {
  int32_t ia = dc_tok_vocab_find(&t->vocab, a, an), ib = dc_tok_vocab_find(&t->vocab, b, bn);
  if (ia < 0) return merge_unknown(src, "", a, an);
  if (ib < 0) return merge_unknown(src, "", b, bn);
  char small[256], *joined = an + bn <= sizeof small ? small : dc_malloc(an + bn);
  if (!joined) return dc_nomem("reading the tokenizer's merges");
  memcpy(joined, a, an);
  memcpy(joined + an, b, bn);
  int32_t id = dc_tok_vocab_find(&t->vocab, joined, an + bn);
  dc_status *st = id < 0 ? merge_unknown(src, "the merged token ", joined, an + bn) : NULL;
  if (joined != small) dc_free(joined);
  if (st) return st;
  dc_tok_merge *m = merge_slot(t, merge_key(ia, ib));
  if (m->rank < 0) t->nmerges++;
  *m = (dc_tok_merge){merge_key(ia, ib), rank, id};
  return NULL;
}

static int count_lines(const uint8_t *p, size_t n) {
  int lines = 1;
  for (size_t i = 0; i < n; i++) lines += p[i] == '\n';
  return lines;
}

/* One line of merges.txt (without its newline). */
static dc_status *merges_line(dc_clip_tokenizer *t, const char *s, size_t n, int *rank, const merge_src *src) {
  char where[600], q[QBUF];
  long bad = dc_tok_utf8_invalid_at(s, n);
  if (bad >= 0)
    return dc_error(DC_ERR_FORMAT, "%s: not valid UTF-8 (byte %ld of the line)",
                    merge_where(src, where, sizeof where), bad);
  if (n >= 8 && memcmp(s, "#version", 8) == 0) return NULL; /* skipped wherever it is, as tokenizers does */
  const char *sp = memchr(s, ' ', n);
  if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
    return dc_error(DC_ERR_FORMAT, "%s: expected two symbols separated by one space, found %s",
                    merge_where(src, where, sizeof where), Q(s, n, q));
  return add_merge(t, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp + 1 - s), (*rank)++, src);
}

/* merges.txt: one "a b" per line, ranked by order; "#version" lines skipped;
 * lines end with \n or \r\n; an empty line is an error, as in tokenizers. */
static dc_status *load_merges_txt(dc_clip_tokenizer *t, const dc_text_file *f, const char *path) {
  const char *p = (const char *)f->data, *end = p + f->size;
  DC_TRY(merges_init(t, count_lines(f->data, f->size)));
  int rank = 0;
  merge_src src = {path, "vocab.json", 0, 0};
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    size_t n = (size_t)(stop - p);
    if (nl && n && p[n - 1] == '\r') n--;
    src.line++;
    DC_TRY(merges_line(t, p, n, &rank, &src));
    p = nl ? nl + 1 : end;
  }
  return NULL;
}

/* One entry of tokenizer.json's model.merges: "a b" or ["a", "b"]; 0 when it is neither. */
static int merge_pair(const cJSON *m, const char **a, size_t *an, const char **b, size_t *bn) {
  if (cJSON_IsString(m)) {
    const char *s = m->valuestring, *sp = strchr(s, ' ');
    if (!sp || strchr(sp + 1, ' ')) return 0;
    *a = s, *an = (size_t)(sp - s), *b = sp + 1, *bn = strlen(sp + 1);
    return 1;
  }
  if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !cJSON_IsString(m->child) ||
      !cJSON_IsString(m->child->next))
    return 0;
  *a = m->child->valuestring, *an = strlen(*a), *b = m->child->next->valuestring, *bn = strlen(*b);
  return 1;
}

/* tokenizer.json's model.merges, ranked by order. */
static dc_status *load_merges_list(dc_clip_tokenizer *t, const cJSON *list, const char *path) {
  if (!cJSON_IsArray(list))
    return dc_error(DC_ERR_FORMAT, "%s: \"model.merges\" must be a list, found %s", path,
                    FOUND(list));
  DC_TRY(merges_init(t, cJSON_GetArraySize(list)));
  merge_src src = {path, "model.vocab", 0, 0};
  for (const cJSON *m = list->child; m; m = m->next, src.index++) {
    const char *a, *b;
    size_t an, bn;
    if (!merge_pair(m, &a, &an, &b, &bn)) {
      char where[600], q[QBUF];
      merge_where(&src, where, sizeof where);
      if (cJSON_IsString(m))
        return dc_error(DC_ERR_FORMAT, "%s: expected two symbols separated by one space, found %s", where,
                        Q(m->valuestring, strlen(m->valuestring), q));
      return dc_error(DC_ERR_FORMAT, "%s: expected \"a b\" or [\"a\", \"b\"], found %s", where,
                      FOUND(m));
    }
    DC_TRY(add_merge(t, a, an, b, bn, src.index, &src));
  }
  return NULL;
}

/* ---- the model: vocabulary and merges from either layout -------------------------- */

static dc_status *load_split_files(dc_clip_tokenizer *t, const dc_text_files *files) {
  const dc_text_file *vf = dc_text_files_find(files, "vocab.json"), *mf = dc_text_files_find(files, "merges.txt");
  if (!vf || !mf)
    return dc_error(DC_ERR_IO, "%s: no %s (a CLIP tokenizer needs vocab.json and merges.txt, or tokenizer.json)",
                    files->origin ? files->origin : "tokenizer", vf ? "merges.txt" : "vocab.json");
  char *vpath = file_path(files, "vocab.json"), *mpath = file_path(files, "merges.txt");
  cJSON *root = NULL;
  dc_status *st = !vpath || !mpath ? dc_nomem("reading a tokenizer") : parse_json(vf, vpath, &root);
  if (!st) st = load_vocab_object(&t->vocab, root, vpath, 0);
  cJSON_Delete(root);
  if (!st) st = load_merges_txt(t, mf, mpath);
  dc_free(vpath);
  dc_free(mpath);
  return st;
}

static dc_status *load_tokenizer_json_model(dc_clip_tokenizer *t, const cJSON *root, const char *path) {
  const cJSON *model = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
  if (!cJSON_IsObject(model)) return dc_error(DC_ERR_FORMAT, "%s: expected an object \"model\"", path);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
  if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"model.type\" is %s, not \"BPE\"",
                    path, cJSON_IsString(type) ? type->valuestring : FOUND(type));
  DC_TRY(load_vocab_object(&t->vocab, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path, 1));
  return load_merges_list(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path);
}

/* The bytes_to_unicode characters (GPT-2's algorithm: printable Latin-1 maps
 * to itself, the other bytes to 256 + n in order) and their token ids. */
static void load_byte_tables(dc_clip_tokenizer *t) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    t->byte_cp[b] = printable ? b : 256 + n++;
  }
  for (int b = 0; b < 256; b++) {
    char s[16];
    int len = 0;
    uint32_t c = (uint32_t)t->byte_cp[b];
    if (c < 0x80) s[len++] = (char)c;
    else s[len++] = (char)(0xc0 | c >> 6), s[len++] = (char)(0x80 | (c & 0x3f));
    t->byte_id[b] = dc_tok_vocab_find(&t->vocab, s, (size_t)len);
    memcpy(s + len, "</w>", 4);
    t->byte_eow_id[b] = dc_tok_vocab_find(&t->vocab, s, (size_t)len + 4);
  }
}

/* ---- special and added tokens -------------------------------------------------------- */
/* transformers 5 (from_pretrained, TokenizersBackend.__init__, _post_init):
 * the tokens of tokenizer_config.json's added_tokens_decoder (or, when it has
 * none, tokenizer.json's added_tokens) are added in id order; then bos, eos,
 * unk, sep, pad, cls, mask and the additional special tokens, each replaced by
 * the added token of the same content when there is one, a plain string
 * becoming a token matched in the raw text (normalized=False).  Adding a
 * content again replaces its flags, so the last one wins.  Without
 * added_tokens_decoder ("legacy"), special_tokens_map.json's keys override
 * tokenizer_config.json's.  CLIPTokenizer's defaults fill bos, eos, unk, pad. */

typedef struct {
  const char *content; /* belongs to a cJSON tree */
  int normalized, lstrip, rstrip, single_word;
  int32_t id;        /* added_tokens_decoder / added_tokens: the id they state; else -1 */
  int order;         /* position in the list: ties in id keep file order (qsort is not stable) */
  char where[200];   /* "tokenizer_config.json: \"pad_token\"" */
} tok_spec;

typedef struct {
  const char *origin;
  cJSON *config, *map, *tjson; /* tokenizer_config.json, special_tokens_map.json, tokenizer.json (or NULL) */
  tok_spec *v;
  int n, cap;
} spec_list;

static const char *const named_tokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

static dc_status *spec_push(spec_list *l, tok_spec s) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    tok_spec *v = dc_realloc(l->v, sizeof *v * (size_t)cap);
    if (!v) return dc_nomem("reading the tokenizer's special tokens");
    l->v = v, l->cap = cap;
  }
  s.order = l->n;
  l->v[l->n++] = s;
  return NULL;
}

static int json_flag(const cJSON *o, const char *key, int def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A token value: a string, or an object with "content" and the AddedToken
 * flags; normalized defaults to not special, as AddedToken's does.
 * map_entry: special_tokens_map.json's objects, which transformers reads as
 * AddedToken(**value, special=True), whatever their "special" says. */
static dc_status *spec_parse(const cJSON *v, int map_entry, const char *where, tok_spec *out) {
  memset(out, 0, sizeof *out);
  out->id = -1;
  snprintf(out->where, sizeof out->where, "%s", where);
  if (cJSON_IsString(v)) {
    out->content = v->valuestring;
    return NULL;
  }
  const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
  if (!cJSON_IsString(c))
    return dc_error(DC_ERR_FORMAT, "%s: expected a string or an object with a string \"content\", found %s", where,
                    cJSON_IsObject(v) ? "an object without one" : FOUND(v));
  out->content = c->valuestring;
  int special = map_entry ? 1 : json_flag(v, "special", 0);
  out->normalized = json_flag(v, "normalized", !special);
  out->lstrip = json_flag(v, "lstrip", 0);
  out->rstrip = json_flag(v, "rstrip", 0);
  out->single_word = json_flag(v, "single_word", 0);
  return NULL;
}

static int parse_id_key(const char *s, int32_t *id) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 0 || v > INT32_MAX) return 0;
  *id = (int32_t)v;
  return 1;
}

static int spec_cmp_id(const void *a, const void *b) {
  const tok_spec *x = a, *y = b;
  if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
  return (x->order > y->order) - (x->order < y->order);
}

/* tokenizer_config.json's added_tokens_decoder: {"49407": {"content": ...}, ...}. */
static dc_status *specs_from_decoder(spec_list *l, const cJSON *dec) {
  if (!cJSON_IsObject(dec))
    return dc_error(DC_ERR_FORMAT, "%s/tokenizer_config.json: \"added_tokens_decoder\" must be an object, found %s",
                    l->origin, FOUND(dec));
  for (const cJSON *c = dec->child; c; c = c->next) {
    char where[200];
    snprintf(where, sizeof where, "%s/tokenizer_config.json: \"added_tokens_decoder\" key \"%.40s\"", l->origin,
             c->string);
    tok_spec s;
    if (!parse_id_key(c->string, &s.id))
      return dc_error(DC_ERR_FORMAT, "%s: expected a token id (a non-negative integer)", where);
    int32_t id = s.id;
    DC_TRY(spec_parse(c, 0, where, &s));
    s.id = id;
    DC_TRY(spec_push(l, s));
  }
  return NULL;
}

/* tokenizer.json's added_tokens: [{"id": 49406, "content": ..., flags}, ...]. */
static dc_status *specs_from_tokenizer_json(spec_list *l, const cJSON *list) {
  if (!list) return NULL;
  if (!cJSON_IsArray(list))
    return dc_error(DC_ERR_FORMAT, "%s/tokenizer.json: \"added_tokens\" must be a list, found %s", l->origin,
                    FOUND(list));
  int i = 0;
  for (const cJSON *c = list->child; c; c = c->next, i++) {
    char where[200];
    snprintf(where, sizeof where, "%s/tokenizer.json: added_tokens[%d]", l->origin, i);
    const cJSON *id = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "id") : NULL;
    double d = cJSON_IsNumber(id) ? id->valuedouble : -1;
    if (!(d >= 0 && d <= INT32_MAX && d == (double)(int32_t)d))
      return dc_error(DC_ERR_FORMAT, "%s: expected an object with an integer \"id\"", where);
    tok_spec s;
    DC_TRY(spec_parse(c, 0, where, &s));
    s.id = (int32_t)d;
    DC_TRY(spec_push(l, s));
  }
  return NULL;
}

/* The value of a named token: special_tokens_map.json's in legacy mode when it
 * has the key, else tokenizer_config.json's; NULL when neither has it. */
static const cJSON *named_value(const spec_list *l, const char *key, int legacy, const char **file) {
  const cJSON *v = legacy && l->map ? cJSON_GetObjectItemCaseSensitive(l->map, key) : NULL;
  *file = "special_tokens_map.json";
  if (!v && l->config) {
    v = cJSON_GetObjectItemCaseSensitive(l->config, key);
    *file = "tokenizer_config.json";
  }
  return v;
}

/* The added token of the same content (added_tokens_decoder / added_tokens), if any. */
static const tok_spec *added_with_content(const spec_list *l, int nadded, const char *content) {
  for (int i = nadded - 1; i >= 0; i--)
    if (strcmp(l->v[i].content, content) == 0) return &l->v[i];
  return NULL;
}

/* Appends bos..mask (defaults from CLIPTokenizer) and returns each one's content. */
static dc_status *specs_named(spec_list *l, int legacy, const char *content[7]) {
  static const char *const defaults[7] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>", NULL,
                                          "<|endoftext|>", NULL, NULL};
  int nadded = l->n;
  for (int k = 0; k < 7; k++) {
    const char *file;
    const cJSON *v = named_value(l, named_tokens[k], legacy, &file);
    content[k] = NULL;
    if ((!v || cJSON_IsNull(v)) && !defaults[k]) continue; /* no sep/cls/mask: nothing to add */
    char where[200];
    snprintf(where, sizeof where, "%s/%s: \"%s\"", l->origin, v ? file : "(CLIPTokenizer's default)",
             named_tokens[k]);
    tok_spec s = {.content = defaults[k], .id = -1};
    snprintf(s.where, sizeof s.where, "%s", where);
    if (v) DC_TRY(spec_parse(v, strcmp(file, "special_tokens_map.json") == 0, where, &s));
    const tok_spec *same = added_with_content(l, nadded, s.content);
    if (same) {
      s = *same;
      snprintf(s.where, sizeof s.where, "%s", where);
    }
    s.id = -1;
    content[k] = s.content;
    DC_TRY(spec_push(l, s));
  }
  return NULL;
}

/* additional_special_tokens (or extra_special_tokens) as a list. */
static dc_status *specs_extra(spec_list *l, int legacy) {
  static const char *const keys[] = {"additional_special_tokens", "extra_special_tokens"};
  for (int k = 0; k < 2; k++) {
    const char *file;
    const cJSON *v = named_value(l, keys[k], legacy, &file);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsArray(v))
      return dc_error(DC_ERR_UNSUPPORTED, "%s/%s: \"%s\" is %s; diffc reads it as a list of tokens only", l->origin,
                      file, keys[k], FOUND(v));
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
      char where[200];
      snprintf(where, sizeof where, "%s/%s: \"%s\"[%d]", l->origin, file, keys[k], i);
      tok_spec s;
      DC_TRY(spec_parse(c, strcmp(file, "special_tokens_map.json") == 0, where, &s));
      DC_TRY(spec_push(l, s));
    }
  }
  return NULL;
}

/* Keys ending in "_token" other than the seven: model-specific special tokens,
 * which transformers adds too; diffc does not guess what they do. */
static dc_status *specs_refuse_other(const spec_list *l) {
  const cJSON *objs[2] = {l->config, l->map};
  const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
  for (int f = 0; f < 2; f++) {
    for (const cJSON *c = objs[f] ? objs[f]->child : NULL; c; c = c->next) {
      size_t n = strlen(c->string);
      if (n < 6 || strcmp(c->string + n - 6, "_token") != 0 || cJSON_IsNull(c)) continue;
      int known = 0;
      for (int k = 0; k < 7; k++) known |= strcmp(c->string, named_tokens[k]) == 0;
      if (!known)
        return dc_error(DC_ERR_UNSUPPORTED, "%s/%s: \"%s\" is a model-specific special token, which a CLIP "
                        "tokenizer does not have", l->origin, names[f], c->string);
    }
  }
  return NULL;
}

/* The final added tokens: one per content, the last spec's flags. */
static dc_status *build_added(dc_clip_tokenizer *t, const spec_list *l) {
  t->added = dc_calloc((size_t)(l->n ? l->n : 1), sizeof *t->added);
  if (!t->added) return dc_nomem("reading the tokenizer's special tokens");
  char q[QBUF];
  for (int i = 0; i < l->n; i++) {
    const tok_spec *s = &l->v[i];
    int later = 0;
    for (int j = i + 1; j < l->n && !later; j++) later = strcmp(l->v[j].content, s->content) == 0;
    if (later) continue;
    size_t len = strlen(s->content);
    if (!len) return dc_error(DC_ERR_FORMAT, "%s: the token is empty", s->where);
    int32_t id = dc_tok_vocab_find(&t->vocab, s->content, len);
    if (id < 0) return dc_error(DC_ERR_FORMAT, "%s: %s is not in the vocabulary", s->where, Q(s->content, len, q));
    if (s->id >= 0 && s->id != id)
      return dc_error(DC_ERR_MISMATCH, "%s: %s has id %d, but the vocabulary gives it %d", s->where,
                      Q(s->content, len, q), (int)s->id, (int)id);
    if (s->lstrip || s->rstrip || s->single_word)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: %s sets lstrip, rstrip or single_word, which diffc does not handle",
                      s->where, Q(s->content, len, q));
    dc_tok_added *a = &t->added[t->nadded++];
    a->content = dc_strdup(s->content);
    if (!a->content) return dc_nomem("reading the tokenizer's special tokens");
    a->len = len, a->normalized = s->normalized, a->id = id;
    if (a->normalized) {
      dc_buf b;
      dc_buf_init(&b);
      dc_status *st = dc_tok_normalize(s->content, len, &b);
      if (!st) st = dc_buf_status(&b, "normalizing a special token");
      if (st) {
        dc_buf_deinit(&b);
        return st;
      }
      a->norm = (char *)b.data, a->norm_len = b.len;
    }
  }
  return NULL;
}

/* model_max_length: a positive integer with room for bos and eos. */
static dc_status *load_max_length(dc_clip_tokenizer *t, const spec_list *l) {
  const cJSON *v = l->config ? cJSON_GetObjectItemCaseSensitive(l->config, "model_max_length") : NULL;
  if (!l->config)
    return dc_error(DC_ERR_IO, "%s: no tokenizer_config.json (needed for model_max_length)", l->origin);
  if (!v) return dc_error(DC_ERR_FORMAT, "%s/tokenizer_config.json: no \"model_max_length\"", l->origin);
  double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
  if (!(d >= 1 && d <= 1e18 && d == (double)(int64_t)d)) /* range first: the cast of a larger one is undefined */
    return dc_error(DC_ERR_FORMAT, "%s/tokenizer_config.json: \"model_max_length\" must be a positive integer, found %s",
                    l->origin, FOUND(v));
  if (d < 2 || d > 65536)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s/tokenizer_config.json: \"model_max_length\" is %.0f; diffc pads to 2 .. 65536 tokens",
                    l->origin, d);
  t->max_length = (int)d;
  return NULL;
}

static dc_status *load_config_json(spec_list *l, const dc_text_files *files, const char *name, cJSON **out) {
  const dc_text_file *f = dc_text_files_find(files, name);
  if (!f) return NULL;
  char *path = file_path(files, name);
  if (!path) return dc_nomem("reading a tokenizer");
  dc_status *st = parse_json(f, path, out);
  if (!st && !cJSON_IsObject(*out))
    st = dc_error(DC_ERR_FORMAT, "%s: expected a JSON object at the top level, found %s", path,
                  FOUND(*out));
  dc_free(path);
  return st;
}

static dc_status *load_specials(dc_clip_tokenizer *t, spec_list *l, const dc_text_files *files) {
  DC_TRY(load_config_json(l, files, "tokenizer_config.json", &l->config));
  DC_TRY(load_config_json(l, files, "special_tokens_map.json", &l->map));
  DC_TRY(load_max_length(t, l));
  DC_TRY(specs_refuse_other(l));
  const cJSON *dec = cJSON_GetObjectItemCaseSensitive(l->config, "added_tokens_decoder");
  int legacy = dec == NULL;
  if (!legacy) DC_TRY(specs_from_decoder(l, dec));
  else if (l->tjson) DC_TRY(specs_from_tokenizer_json(l, cJSON_GetObjectItemCaseSensitive(l->tjson, "added_tokens")));
  if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof *l->v, spec_cmp_id); /* qsort(NULL, 0) is undefined */
  const char *content[7];
  DC_TRY(specs_named(l, legacy, content));
  DC_TRY(specs_extra(l, legacy));
  DC_TRY(build_added(t, l));
  const char *need[4] = {content[0], content[1], content[4], content[2]};
  int32_t *ids[4] = {&t->bos, &t->eos, &t->pad, &t->unk};
  for (int k = 0; k < 4; k++) *ids[k] = dc_tok_vocab_find(&t->vocab, need[k], strlen(need[k]));
  return NULL; /* build_added checked that each is in the vocabulary */
}

/* ---- the whole ------------------------------------------------------------------------------ */

static dc_status *load_all(dc_clip_tokenizer *t, const dc_text_files *files, spec_list *l) {
  const dc_text_file *tj = dc_text_files_find(files, "tokenizer.json");
  if (tj) {
    char *path = file_path(files, "tokenizer.json");
    if (!path) return dc_nomem("reading a tokenizer");
    dc_status *st = parse_json(tj, path, &l->tjson);
    if (!st) st = load_tokenizer_json_model(t, l->tjson, path);
    dc_free(path);
    DC_TRY(st);
  } else {
    DC_TRY(load_split_files(t, files));
  }
  load_byte_tables(t);
  return load_specials(t, l, files);
}

dc_status *dc_clip_tokenizer_parse(const dc_text_files *files, dc_clip_tokenizer **out) {
  *out = NULL;
  dc_clip_tokenizer *t = dc_calloc(1, sizeof *t);
  if (!t) return dc_nomem("reading a tokenizer");
  spec_list l = {.origin = files->origin ? files->origin : "tokenizer"};
  dc_status *st = load_all(t, files, &l);
  cJSON_Delete(l.config);
  cJSON_Delete(l.map);
  cJSON_Delete(l.tjson);
  dc_free(l.v);
  if (st) {
    dc_clip_tokenizer_free(t);
    return st;
  }
  *out = t;
  return NULL;
}

void dc_clip_tokenizer_free(dc_clip_tokenizer *t) {
  if (!t) return;
  vocab_free(&t->vocab);
  dc_free(t->merges);
  for (int i = 0; i < t->nadded; i++) {
    dc_free(t->added[i].content);
    dc_free(t->added[i].norm);
  }
  dc_free(t->added);
  dc_free(t);
}

int dc_clip_tokenizer_max_length(const dc_clip_tokenizer *t) { return t->max_length; }
int32_t dc_clip_tokenizer_pad_id(const dc_clip_tokenizer *t) { return t->pad; }
int32_t dc_clip_tokenizer_eos_id(const dc_clip_tokenizer *t) { return t->eos; }
