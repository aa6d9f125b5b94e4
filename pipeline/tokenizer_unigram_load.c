/* tokenizer_unigram_load.c — reads a T5 tokenizer's files
 * (tokenizer_t5.h) into the tables of tokenizer_t5_impl.h, the way
 * transformers 5.24's T5TokenizerFast.from_pretrained resolves them:
 *   tokenizer.json: model.vocab ([[piece, score], ...]), the normalizer's
 *     Precompiled map, added_tokens; spiece.model (only when tokenizer.json
 *     is absent): its pieces, then <extra_id_{extra_ids-1}> .. <extra_id_0>
 *     with score 0, and its precompiled map.
 *   tokenizer_config.json / special_tokens_map.json: pad, eos, unk,
 *     extra_ids, additional special tokens — all cut out of prompts.
 * The model's unk id is 2 whatever the files say (transformers fixes it), so
 * a file that says otherwise is refused rather than half obeyed. */
#include "tokenizer_impl.h" /* dc_tok_utf8_invalid_at, dc_tok_quoted */
#include "tokenizer_t5_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

const char *const dc_t5_tokenizer_file_names[] = {
    "tokenizer.json", "spiece.model", "tokenizer_config.json", "special_tokens_map.json", NULL,
};

#define T5_UNK_ID 2 /* transformers' T5Tokenizer builds Unigram(unk_id=2) */

static char *file_path(const dc_text_files *files, const char *name) {
  return dc_path_join(files->origin ? files->origin : "tokenizer", name);
}

#define QB 320

/* ---- pieces ------------------------------------------------------------------ */

static uint32_t piece_hash(const char *s, size_t n) { return (uint32_t)dc_hash64(s, n) | 1u; }

static uint32_t *piece_slot(const dc_t5_tokenizer *t, const char *s, size_t n) {
  for (uint32_t i = piece_hash(s, n) & t->mask;; i = (i + 1) & t->mask) {
    uint32_t k = t->by_str[i];
    if (!k) return &t->by_str[i];
    const dc_t5_piece *p = &t->pieces[k - 1];
    if (p->len == n && memcmp(t->pool + p->off, s, n) == 0) return &t->by_str[i];
  }
}

int32_t dc_t5_find_piece(const dc_t5_tokenizer *t, const char *s, size_t n) {
  if (!t->by_str) return -1;
  uint32_t k = *piece_slot(t, s, n);
  return k ? (int32_t)k - 1 : -1;
}

static int grow_table(dc_t5_tokenizer *t) {
  uint32_t cap = t->by_str ? (t->mask + 1) * 2 : 1024;
  uint32_t *tab = dc_calloc(cap, sizeof *tab);
  if (!tab) return 0;
  dc_free(t->by_str);
  t->by_str = tab;
  t->mask = cap - 1;
  for (int i = 0; i < t->npieces; i++) *piece_slot(t, t->pool + t->pieces[i].off, t->pieces[i].len) = (uint32_t)i + 1;
  return 1;
}

static int grow_storage(dc_t5_tokenizer *t, size_t n) {
  if (t->npieces == t->cap) {
    int cap = t->cap ? t->cap * 2 : 1024;
    dc_t5_piece *p = dc_realloc(t->pieces, sizeof *p * (size_t)cap);
    if (!p) return 0;
    t->pieces = p, t->cap = cap;
  }
  if (t->pool_len + n > t->pool_cap) {
    size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
    while (cap < t->pool_len + n) cap *= 2;
    char *p = dc_realloc(t->pool, cap);
    if (!p) return 0;
    t->pool = p, t->pool_cap = cap;
  }
  return 1;
}

dc_status *dc_t5_add_piece(dc_t5_tokenizer *t, const char *s, size_t n, double score, const char *where) {
  char q[QB];
  if (!n) return dc_error(DC_ERR_FORMAT, "%s: empty piece", where);
  long bad = dc_tok_utf8_invalid_at(s, n);
  if (bad >= 0) return dc_error(DC_ERR_FORMAT, "%s: piece %s is not valid UTF-8 (byte %ld)", where, dc_tok_quoted(s, n, q, QB), bad);
  if (!isfinite(score)) return dc_error(DC_ERR_FORMAT, "%s: piece %s has score %g, expected a finite number", where, dc_tok_quoted(s, n, q, QB), score);
  if (t->npieces >= INT32_MAX / 2 || n > UINT32_MAX / 2 || t->pool_len > UINT32_MAX / 2)
    return dc_error(DC_ERR_FORMAT, "%s: vocabulary too large", where);
  if ((uint32_t)(t->npieces + 1) * 2 > t->mask && !grow_table(t)) return dc_nomem("reading the tokenizer's pieces");
  uint32_t *slot = piece_slot(t, s, n);
  if (*slot)
    return dc_error(DC_ERR_FORMAT, "%s: piece %s appears twice (ids %u and %d)", where, dc_tok_quoted(s, n, q, QB), *slot - 1,
                    t->npieces);
  if (!grow_storage(t, n)) return dc_nomem("reading the tokenizer's pieces");
  memcpy(t->pool + t->pool_len, s, n);
  t->pieces[t->npieces] = (dc_t5_piece){(uint32_t)t->pool_len, (uint32_t)n, score};
  t->pool_len += n;
  *slot = (uint32_t)++t->npieces;
  if (n > t->max_piece_len) t->max_piece_len = n;
  if (t->npieces == 1 || score < t->min_score) t->min_score = score;
  return NULL;
}

/* ---- JSON helpers -------------------------------------------------------------- */

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

static const char *kind(const cJSON *v) { return v ? dc_json_type_name(v) : "nothing"; }

/* A string, or an AddedToken object's "content"; NULL otherwise. */
static const char *token_text(const cJSON *v) {
  if (cJSON_IsString(v)) return v->valuestring;
  const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
  return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int is_true(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

/* ---- base64 ----------------------------------------------------------------------- */

static int b64_value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding, as the tokenizers crate reads it. */
static dc_status *b64_decode(const char *s, const char *where, uint8_t **out, size_t *out_n) {
  size_t n = strlen(s);
  if (n % 4) return dc_error(DC_ERR_FORMAT, "%s: bad base64: %zu characters, not a multiple of 4", where, n);
  uint8_t *o = dc_malloc(n / 4 * 3 + 1);
  if (!o) return dc_nomem("decoding a precompiled charsmap");
  size_t k = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int j = 0; j < 4; j++) {
      int c = (unsigned char)s[i + j];
      if (c == '=' && i + 4 == n && j >= 2 && (j == 3 || s[i + 3] == '=')) v[j] = 0, pad++;
      else if ((v[j] = b64_value(c)) < 0 || pad) {
        dc_free(o);
        return dc_error(DC_ERR_FORMAT, "%s: bad base64: character %s at offset %zu", where,
                        dc_tok_quoted(s + i + j, 1, (char[16]){0}, 16), i + j);
      }
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    o[k++] = (uint8_t)(w >> 16);
    if (pad < 2) o[k++] = (uint8_t)(w >> 8);
    if (pad < 1) o[k++] = (uint8_t)w;
  }
  *out = o, *out_n = k;
  return NULL;
}

/* ---- tokenizer.json ------------------------------------------------------------------ */

static dc_status *set_charsmap(dc_t5_tokenizer *t, const uint8_t *p, size_t n, const char *where) {
  if (t->has_charsmap) return dc_error(DC_ERR_UNSUPPORTED, "%s: a second Precompiled normalizer", where);
  DC_TRY(dc_t5_charsmap_parse(p, n, where, &t->map));
  t->has_charsmap = 1;
  return NULL;
}

static dc_status *json_charsmap(dc_t5_tokenizer *t, const cJSON *norm, const char *path) {
  char where[600];
  snprintf(where, sizeof where, "%s: normalizer Precompiled's \"precompiled_charsmap\"", path);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(norm, "precompiled_charsmap");
  if (!cJSON_IsString(m)) return dc_error(DC_ERR_FORMAT, "%s: expected a base64 string, found %s", where, kind(m));
  uint8_t *bytes = NULL;
  size_t n = 0;
  DC_TRY(b64_decode(m->valuestring, where, &bytes, &n));
  dc_status *st = set_charsmap(t, bytes, n, where);
  dc_free(bytes);
  return st;
}

/* The normalizer: Precompiled (used), Replace and Strip (known; transformers
 * 5.24's T5 ignores them, and whitespace is split away after it anyway), a
 * Sequence of those, or null.  Anything else is refused by name. */
static dc_status *json_normalizer(dc_t5_tokenizer *t, const cJSON *n, const char *path, int depth) {
  if (!n || cJSON_IsNull(n)) return NULL;
  const cJSON *ty = cJSON_IsObject(n) ? cJSON_GetObjectItemCaseSensitive(n, "type") : NULL;
  if (!cJSON_IsString(ty))
    return dc_error(DC_ERR_FORMAT, "%s: \"normalizer\" must be an object with a \"type\", found %s", path, kind(n));
  const char *type = ty->valuestring;
  if (!strcmp(type, "Precompiled")) return json_charsmap(t, n, path);
  if (!strcmp(type, "Replace") || !strcmp(type, "Strip")) return NULL;
  if (!strcmp(type, "Sequence") && depth == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    if (!cJSON_IsArray(list))
      return dc_error(DC_ERR_FORMAT, "%s: normalizer Sequence needs a \"normalizers\" list, found %s", path, kind(list));
    for (const cJSON *c = list->child; c; c = c->next) DC_TRY(json_normalizer(t, c, path, 1));
    return NULL;
  }
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: normalizer type \"%s\" is not supported for a T5 tokenizer (known: Precompiled, Replace, Strip, "
                  "Sequence of those)",
                  path, type);
}

static dc_status *json_pre_tokenizer(const cJSON *p, const char *path, int depth) {
  if (!p || cJSON_IsNull(p)) return NULL;
  const cJSON *ty = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "type") : NULL;
  if (!cJSON_IsString(ty))
    return dc_error(DC_ERR_FORMAT, "%s: \"pre_tokenizer\" must be an object with a \"type\", found %s", path, kind(p));
  const char *type = ty->valuestring;
  if (!strcmp(type, "Metaspace")) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "replacement");
    if (r && !(cJSON_IsString(r) && !strcmp(r->valuestring, "\xe2\x96\x81")))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: Metaspace replacement other than \"\xe2\x96\x81\" is not supported", path);
    return NULL;
  }
  if (!strcmp(type, "WhitespaceSplit")) return NULL;
  if (!strcmp(type, "Sequence") && depth == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!cJSON_IsArray(list))
      return dc_error(DC_ERR_FORMAT, "%s: pre_tokenizer Sequence needs a \"pretokenizers\" list, found %s", path,
                      kind(list));
    for (const cJSON *c = list->child; c; c = c->next) DC_TRY(json_pre_tokenizer(c, path, 1));
    return NULL;
  }
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: pre_tokenizer type \"%s\" is not supported for a T5 tokenizer (known: Metaspace, "
                  "WhitespaceSplit, Sequence of those)",
                  path, type);
}

static dc_status *json_post_processor(const cJSON *p, const char *path) {
  if (!p || cJSON_IsNull(p)) return NULL;
  const cJSON *ty = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "type") : NULL;
  if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "TemplateProcessing")) return NULL;
  return dc_error(DC_ERR_UNSUPPORTED, "%s: post_processor %s%s%s is not supported for a T5 tokenizer (known: "
                  "TemplateProcessing, which transformers replaces by \"$A </s>\")",
                  path, cJSON_IsString(ty) ? "\"" : "", cJSON_IsString(ty) ? ty->valuestring : kind(p),
                  cJSON_IsString(ty) ? "\"" : "");
}

static dc_status *json_vocab(dc_t5_tokenizer *t, const cJSON *model, const char *path) {
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  if (!cJSON_IsArray(vocab) || !vocab->child)
    return dc_error(DC_ERR_FORMAT, "%s: \"model.vocab\" must be a non-empty list of [piece, score], found %s", path,
                    kind(vocab));
  int i = 0;
  char where[600];
  for (const cJSON *e = vocab->child; e; e = e->next, i++) {
    snprintf(where, sizeof where, "%s: model.vocab[%d]", path, i);
    const cJSON *s = cJSON_IsArray(e) ? e->child : NULL, *sc = s ? s->next : NULL;
    if (!cJSON_IsString(s) || !cJSON_IsNumber(sc) || sc->next)
      return dc_error(DC_ERR_FORMAT, "%s: expected [piece, score], found %s", where, kind(e));
    DC_TRY(dc_t5_add_piece(t, s->valuestring, strlen(s->valuestring), sc->valuedouble, where));
  }
  return NULL;
}

static dc_status *json_model(dc_t5_tokenizer *t, const cJSON *model, const char *path) {
  const cJSON *ty = cJSON_IsObject(model) ? cJSON_GetObjectItemCaseSensitive(model, "type") : NULL;
  if (!cJSON_IsString(ty))
    return dc_error(DC_ERR_FORMAT, "%s: \"model\" must be an object with a \"type\", found %s", path, kind(model));
  if (strcmp(ty->valuestring, "Unigram"))
    return dc_error(DC_ERR_UNSUPPORTED, "%s: model type \"%s\" is not a T5 tokenizer's (expected \"Unigram\")", path,
                    ty->valuestring);
  if (is_true(model, "byte_fallback"))
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: model.byte_fallback true is not supported (transformers' T5 tokenizer builds it false)", path);
  DC_TRY(json_vocab(t, model, path));
  const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
  if (!cJSON_IsNumber(unk) || unk->valuedouble != T5_UNK_ID)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: model.unk_id is %s, expected %d (transformers' T5 tokenizer fixes it)",
                    path, cJSON_IsNumber(unk) ? dc_json_show(unk, (char[64]){0}, 64) : kind(unk), T5_UNK_ID);
  return NULL;
}

/* ---- added tokens ------------------------------------------------------------------ */

typedef struct {
  const char **text;
  int n, cap;
} name_list;

static int names_push(name_list *l, const char *s) {
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->text[i], s)) return 1;
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    const char **p = dc_realloc((void *)l->text, sizeof *p * (size_t)cap);
    if (!p) return 0;
    l->text = p, l->cap = cap;
  }
  l->text[l->n++] = s;
  return 1;
}

static dc_status *push_name(name_list *l, const char *s) { return names_push(l, s) ? NULL : dc_nomem("listing added tokens"); }

/* One added token (tokenizer.json's added_tokens[i], or tokenizer_config's
 * added_tokens_decoder["id"]): it must be the piece at its id, and flags that
 * change matching (lstrip, rstrip, single_word, normalized) are refused. */
static dc_status *check_added(const dc_t5_tokenizer *t, const cJSON *a, double id, const char *where,
                              name_list *names) {
  char q[QB];
  const cJSON *c = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "content") : NULL;
  if (!cJSON_IsString(c)) return dc_error(DC_ERR_FORMAT, "%s needs a string \"content\", found %s", where, kind(a));
  int32_t have = dc_t5_find_piece(t, c->valuestring, strlen(c->valuestring));
  if (have < 0 || (double)have != id)
    return dc_error(DC_ERR_FORMAT, "%s %s has id %g but the vocabulary %s", where,
                    dc_tok_quoted(c->valuestring, strlen(c->valuestring), q, QB), id,
                    have < 0 ? "lacks it" : "gives another id");
  static const char *const flags[] = {"lstrip", "rstrip", "single_word", "normalized"};
  for (int f = 0; f < 4; f++)
    if (is_true(a, flags[f]))
      return dc_error(DC_ERR_UNSUPPORTED, "%s has \"%s\": true, which is not supported", where, flags[f]);
  return push_name(names, c->valuestring);
}

static dc_status *json_added(dc_t5_tokenizer *t, const cJSON *list, const char *path, name_list *names) {
  if (!list || cJSON_IsNull(list)) return NULL;
  if (!cJSON_IsArray(list)) return dc_error(DC_ERR_FORMAT, "%s: \"added_tokens\" must be a list, found %s", path, kind(list));
  int i = 0;
  char where[600];
  for (const cJSON *a = list->child; a; a = a->next, i++) {
    snprintf(where, sizeof where, "%s: added_tokens[%d]", path, i);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    if (!cJSON_IsNumber(id)) return dc_error(DC_ERR_FORMAT, "%s needs a number \"id\", found %s", where, kind(id));
    DC_TRY(check_added(t, a, id->valuedouble, where, names));
  }
  return NULL;
}

/* tokenizer_config.json's added_tokens_decoder: {"id": AddedToken}. */
static dc_status *config_added(const dc_t5_tokenizer *t, const cJSON *cfg, const char *path, name_list *names) {
  const cJSON *dec = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL;
  if (!dec || cJSON_IsNull(dec)) return NULL;
  if (!cJSON_IsObject(dec))
    return dc_error(DC_ERR_FORMAT, "%s: \"added_tokens_decoder\" must be an object, found %s", path, kind(dec));
  char where[600], *end;
  for (const cJSON *a = dec->child; a; a = a->next) {
    snprintf(where, sizeof where, "%s: added_tokens_decoder[\"%.40s\"]", path, a->string);
    long id = strtol(a->string, &end, 10);
    if (!a->string[0] || *end || id < 0 || id > INT32_MAX)
      return dc_error(DC_ERR_FORMAT, "%s: the key must be a token id", where);
    DC_TRY(check_added(t, a, (double)id, where, names));
  }
  return NULL;
}

/* Strings (or AddedToken objects) of a config list. */
static dc_status *config_list(const cJSON *cfg, const char *key, const char *path, name_list *names) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!list || cJSON_IsNull(list)) return NULL;
  if (!cJSON_IsArray(list)) return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be a list, found %s", path, key, kind(list));
  int i = 0;
  for (const cJSON *c = list->child; c; c = c->next, i++) {
    const char *s = token_text(c);
    if (!s) return dc_error(DC_ERR_FORMAT, "%s: %s[%d] must be a token string, found %s", path, key, i, kind(c));
    DC_TRY(push_name(names, s));
  }
  return NULL;
}

typedef struct {
  cJSON *cfg, *map; /* tokenizer_config.json, special_tokens_map.json (either may be NULL) */
  char *cfg_path, *map_path;
} config_files;

/* A special token's text: tokenizer_config.json, then special_tokens_map.json,
 * then def; *from names where it was found, for messages. */
static dc_status *special_text(const config_files *c, const char *key, const char *def, const char **out,
                               const char **from) {
  const cJSON *srcs[2] = {c->cfg, c->map};
  const char *paths[2] = {c->cfg_path, c->map_path};
  for (int k = 0; k < 2; k++) {
    const cJSON *v = srcs[k] ? cJSON_GetObjectItemCaseSensitive(srcs[k], key) : NULL;
    if (!v || cJSON_IsNull(v)) continue;
    if (!(*out = token_text(v)))
      return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be a token string, found %s", paths[k], key, kind(v));
    *from = paths[k];
    return NULL;
  }
  *out = def;
  *from = NULL;
  return NULL;
}

static dc_status *special_id(const dc_t5_tokenizer *t, const config_files *c, const char *key, const char *def,
                             int32_t *id, name_list *names) {
  const char *s, *from;
  char q[QB];
  DC_TRY(special_text(c, key, def, &s, &from));
  *id = dc_t5_find_piece(t, s, strlen(s));
  if (*id >= 0) return push_name(names, s);
  if (from) return dc_error(DC_ERR_FORMAT, "%s: %s %s is not in the vocabulary", from, key, dc_tok_quoted(s, strlen(s), q, QB));
  return dc_error(DC_ERR_FORMAT, "%s: %s is not set, and T5's default %s is not in the vocabulary", c->cfg_path, key,
                  dc_tok_quoted(s, strlen(s), q, QB));
}

static dc_status *extra_ids(const config_files *c, int *out) {
  const cJSON *v = c->cfg ? cJSON_GetObjectItemCaseSensitive(c->cfg, "extra_ids") : NULL;
  *out = 100; /* T5Tokenizer's default */
  if (!v || cJSON_IsNull(v)) return NULL;
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 || v->valuedouble != (int)v->valuedouble)
    return dc_error(DC_ERR_FORMAT, "%s: \"extra_ids\" must be a whole number in 0..100000, found %s", c->cfg_path,
                    cJSON_IsNumber(v) ? dc_json_show(v, (char[64]){0}, 64) : kind(v));
  *out = (int)v->valuedouble;
  return NULL;
}

/* clean_up_tokenization_spaces (false when absent, as transformers 5). */
static dc_status *clean_up_flag(const config_files *c, int *out) {
  const cJSON *v = c->cfg ? cJSON_GetObjectItemCaseSensitive(c->cfg, "clean_up_tokenization_spaces") : NULL;
  *out = cJSON_IsTrue(v);
  if (!v || cJSON_IsNull(v) || cJSON_IsBool(v)) return NULL;
  return dc_error(DC_ERR_FORMAT, "%s: \"clean_up_tokenization_spaces\" must be true or false, found %s", c->cfg_path,
                  kind(v));
}

/* The tokens cut out of prompts: tokenizer.json's added_tokens, pad/eos/unk,
 * the configs' additional / extra special tokens and <extra_id_N>; each must
 * be a piece (transformers would otherwise append new ids). */
static dc_status *build_added(dc_t5_tokenizer *t, const config_files *c, int nextra, name_list *names) {
  DC_TRY(special_id(t, c, "pad_token", "<pad>", &t->pad, names));
  DC_TRY(special_id(t, c, "eos_token", "</s>", &t->eos, names));
  int32_t unk;
  DC_TRY(special_id(t, c, "unk_token", "<unk>", &unk, names));
  DC_TRY(config_added(t, c->cfg, c->cfg_path, names));
  const char *keys[] = {"additional_special_tokens", "extra_special_tokens"};
  for (int k = 0; k < 2; k++) {
    if (c->cfg) DC_TRY(config_list(c->cfg, keys[k], c->cfg_path, names));
    if (c->map) DC_TRY(config_list(c->map, keys[k], c->map_path, names));
  }
  char buf[32], q[QB];
  int first_extra = names->n;
  for (int i = 0; i < nextra; i++) {
    snprintf(buf, sizeof buf, "<extra_id_%d>", i);
    if (dc_t5_find_piece(t, buf, strlen(buf)) < 0)
      return dc_error(DC_ERR_FORMAT, "%s: sentinel %s (extra_ids = %d) is not in the vocabulary", c->cfg_path, buf, nextra);
  }
  t->added = dc_calloc((size_t)(names->n + nextra + 1), sizeof *t->added);
  if (!t->added) return dc_nomem("building the added tokens");
  for (int i = 0; i < names->n + nextra; i++) {
    const char *s = i < first_extra ? names->text[i] : NULL;
    if (!s) snprintf(buf, sizeof buf, "<extra_id_%d>", i - first_extra), s = buf;
    int32_t id = dc_t5_find_piece(t, s, strlen(s));
    if (id < 0)
      return dc_error(DC_ERR_FORMAT, "%s: special token %s is not in the vocabulary", c->cfg_path,
                      dc_tok_quoted(s, strlen(s), q, QB));
    int dup = 0;
    for (int j = 0; j < t->nadded; j++) dup |= t->added[j].id == id;
    if (dup) continue;
    dc_t5_added *a = &t->added[t->nadded++];
    a->len = strlen(s);
    a->id = id;
    if (!(a->content = dc_strndup(s, a->len))) return dc_nomem("building the added tokens");
  }
  return NULL;
}

/* ---- the files ------------------------------------------------------------------------ */

static dc_status *load_configs(const dc_text_files *files, config_files *c) {
  const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
  cJSON **dst[2] = {&c->cfg, &c->map};
  char **paths[2] = {&c->cfg_path, &c->map_path};
  for (int k = 0; k < 2; k++) {
    if (!(*paths[k] = file_path(files, names[k]))) return dc_nomem("reading a tokenizer");
    const dc_text_file *f = dc_text_files_find(files, names[k]);
    if (!f) continue;
    DC_TRY(parse_json(f, *paths[k], dst[k]));
    if (!cJSON_IsObject(*dst[k]))
      return dc_error(DC_ERR_FORMAT, "%s: the top level must be an object, found %s", *paths[k], kind(*dst[k]));
  }
  return NULL;
}

static dc_status *load_tokenizer_json(dc_t5_tokenizer *t, const dc_text_file *f, const char *path, name_list *names,
                                      cJSON **root) {
  DC_TRY(parse_json(f, path, root));
  if (!cJSON_IsObject(*root)) return dc_error(DC_ERR_FORMAT, "%s: the top level must be an object, found %s", path, kind(*root));
  DC_TRY(json_model(t, cJSON_GetObjectItemCaseSensitive(*root, "model"), path));
  DC_TRY(json_normalizer(t, cJSON_GetObjectItemCaseSensitive(*root, "normalizer"), path, 0));
  DC_TRY(json_pre_tokenizer(cJSON_GetObjectItemCaseSensitive(*root, "pre_tokenizer"), path, 0));
  DC_TRY(json_post_processor(cJSON_GetObjectItemCaseSensitive(*root, "post_processor"), path));
  return json_added(t, cJSON_GetObjectItemCaseSensitive(*root, "added_tokens"), path, names);
}

static dc_status *load_spm(dc_t5_tokenizer *t, const dc_text_file *f, const char *path, int nextra) {
  dc_spm_info info;
  DC_TRY(dc_spm_read(t, f->data, f->size, path, &info));
  if (info.model_type != 1)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: trainer_spec.model_type is %d, expected 1 (unigram)", path, info.model_type);
  if (info.byte_fallback)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: trainer_spec.byte_fallback is not supported for a T5 tokenizer", path);
  if (info.unk_id != T5_UNK_ID)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: trainer_spec.unk_id is %d, expected %d (transformers' T5 tokenizer fixes it)",
                    path, info.unk_id, T5_UNK_ID);
  char buf[32], where[600];
  snprintf(where, sizeof where, "%s: the sentinels T5 appends", path);
  for (int i = nextra - 1; i >= 0; i--) {
    snprintf(buf, sizeof buf, "<extra_id_%d>", i);
    DC_TRY(dc_t5_add_piece(t, buf, strlen(buf), 0.0, where));
  }
  if (!info.charsmap_len) return NULL; /* transformers: an empty map means no normalizer */
  snprintf(where, sizeof where, "%s: normalizer_spec.precompiled_charsmap", path);
  return set_charsmap(t, info.charsmap, info.charsmap_len, where);
}

static dc_status *load_all(dc_t5_tokenizer *t, const dc_text_files *files, config_files *c, name_list *names,
                           cJSON **root) {
  DC_TRY(load_configs(files, c));
  int nextra;
  DC_TRY(extra_ids(c, &nextra));
  const dc_text_file *json = dc_text_files_find(files, "tokenizer.json");
  const dc_text_file *spm = dc_text_files_find(files, "spiece.model");
  const char *name = json ? "tokenizer.json" : "spiece.model";
  char *path = file_path(files, name);
  if (!path) return dc_nomem("reading a tokenizer");
  dc_status *st = NULL;
  if (json) st = load_tokenizer_json(t, json, path, names, root);
  else if (spm) st = load_spm(t, spm, path, nextra);
  else
    st = dc_error(DC_ERR_IO, "%s: no tokenizer.json or spiece.model: not a T5 tokenizer folder",
                  files->origin ? files->origin : "tokenizer");
  if (!st && t->npieces <= T5_UNK_ID)
    st = dc_error(DC_ERR_FORMAT, "%s: %d pieces; the unk id %d is out of range", path, t->npieces, T5_UNK_ID);
  dc_free(path);
  if (st) return st;
  t->unk = T5_UNK_ID;
  DC_TRY(clean_up_flag(c, &t->clean_up));
  return build_added(t, c, nextra, names);
}

dc_status *dc_t5_tokenizer_parse(const dc_text_files *files, dc_t5_tokenizer **out) {
  *out = NULL;
  dc_t5_tokenizer *t = dc_calloc(1, sizeof *t);
  if (!t) return dc_nomem("reading a tokenizer");
  config_files c = {0};
  name_list names = {0};
  cJSON *root = NULL;
  dc_status *st = load_all(t, files, &c, &names, &root);
  cJSON_Delete(root);
  cJSON_Delete(c.cfg);
  cJSON_Delete(c.map);
  dc_free(c.cfg_path);
  dc_free(c.map_path);
  dc_free((void *)names.text);
  if (st) {
    dc_t5_tokenizer_free(t);
    return st;
  }
  *out = t;
  return NULL;
}

void dc_t5_tokenizer_free(dc_t5_tokenizer *t) {
  if (!t) return;
  for (int i = 0; i < t->nadded; i++) dc_free(t->added[i].content);
  dc_free(t->added);
  dc_t5_charsmap_free(&t->map);
  dc_free(t->pool);
  dc_free(t->pieces);
  dc_free(t->by_str);
  dc_free(t);
}

int32_t dc_t5_tokenizer_pad_id(const dc_t5_tokenizer *t) { return t->pad; }
int32_t dc_t5_tokenizer_eos_id(const dc_t5_tokenizer *t) { return t->eos; }
int32_t dc_t5_tokenizer_unk_id(const dc_t5_tokenizer *t) { return t->unk; }
