/* tokenizer_unigram.c — encodes a prompt with T5's unigram tokenizer
 * (tokenizer_t5.h), step for step as transformers 5.24's T5TokenizerFast
 * (the tokenizers crate) does:
 *   1. added tokens cut out of the raw prompt, leftmost-longest;
 *   2. each other part normalized by the precompiled map;
 *   3. split at Unicode White_Space (Rust's char::is_whitespace), each word
 *      given a leading "▁" unless it has one, and cut before every "▁";
 *   4. each piece split by Viterbi: best total score; an unknown character
 *      costs min_score - 10; ties keep the candidate seen first (the longest
 *      last piece, then a vocabulary piece before unk); unks next to each
 *      other fused into one;
 *   5. pieces cut to max_length - 1, eos, pad. */
#include "tokenizer_impl.h" /* dc_tok_utf8_invalid_at */
#include "tokenizer_t5_impl.h"

#include <string.h>
#include <utf8proc.h>

#define UNK_PENALTY 10.0 /* the tokenizers crate's K_UNK_PENALTY */
static const char META[] = "\xe2\x96\x81"; /* U+2581, "▁" */
#define META_LEN 3

typedef struct {
  int32_t *v;
  size_t n, cap;
  int failed;
} id_list;

static void ids_push(id_list *l, int32_t id) {
  if (l->failed) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    int32_t *p = dc_realloc(l->v, sizeof *p * cap);
    if (!p) {
      l->failed = 1;
      return;
    }
    l->v = p, l->cap = cap;
  }
  l->v[l->n++] = id;
}

static size_t char_len(const char *s, size_t n) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)s, (utf8proc_ssize_t)n, &cp);
  return k > 0 ? (size_t)k : 1;
}

static int is_char_start(const char *s, size_t i) { return ((uint8_t)s[i] & 0xc0) != 0x80; }

/* ---- Viterbi ------------------------------------------------------------------------ */

typedef struct {
  double score;
  size_t start;
  int32_t id;
  int set;
} best_node;

typedef struct {
  best_node *nodes;
  size_t cap;
} lattice;

static void best_offer(best_node *b, double score, size_t start, int32_t id) {
  if (b->set && !(score > b->score)) return; /* ties keep the first offer, as the crate does */
  *b = (best_node){score, start, id, 1};
}

static dc_status *viterbi(const dc_t5_tokenizer *t, const char *s, size_t n, lattice *lt, id_list *out) {
  if (n + 1 > lt->cap) {
    best_node *p = dc_realloc(lt->nodes, sizeof *p * (n + 1));
    if (!p) return dc_nomem("encoding a prompt");
    lt->nodes = p, lt->cap = n + 1;
  }
  memset(lt->nodes, 0, sizeof *lt->nodes * (n + 1));
  best_node *b = lt->nodes;
  b[0].set = 1;
  double unk_score = t->min_score - UNK_PENALTY;
  for (size_t at = 0; at < n;) {
    size_t mb = char_len(s + at, n - at);
    int single = 0;
    for (size_t len = 1; len <= t->max_piece_len && at + len <= n; len++) {
      if (at + len < n && !is_char_start(s, at + len)) continue;
      int32_t id = dc_t5_find_piece(t, s + at, len);
      if (id < 0) continue;
      best_offer(&b[at + len], t->pieces[id].score + b[at].score, at, id);
      single |= len == mb;
    }
    if (!single) best_offer(&b[at + mb], unk_score + b[at].score, at, t->unk);
    at += mb;
  }
  /* back from the end; the pieces come out reversed, so are pushed then flipped */
  size_t first = out->n;
  for (size_t end = n; end > 0;) {
    size_t start = b[end].start;
    if (b[end].id == t->unk) {
      while (start > 0 && b[start].id == t->unk) start = b[start].start; /* fuse the unks */
      int32_t id = dc_t5_find_piece(t, s + start, end - start);
      ids_push(out, id >= 0 ? id : t->unk);
    } else {
      ids_push(out, b[end].id);
    }
    end = start;
  }
  if (out->failed) return dc_nomem("encoding a prompt");
  for (size_t i = first, j = out->n; i + 1 < j; i++, j--) {
    int32_t x = out->v[i];
    out->v[i] = out->v[j - 1];
    out->v[j - 1] = x;
  }
  return NULL;
}

/* ---- pre-tokenization ------------------------------------------------------------------ */

static int is_white_space(utf8proc_int32_t c) { /* Unicode White_Space, as Rust's char::is_whitespace */
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* One whitespace-free word: "▁" prepended unless there, cut before every "▁". */
static dc_status *encode_word(const dc_t5_tokenizer *t, const char *w, size_t n, dc_buf *tmp, lattice *lt,
                              id_list *out) {
  tmp->len = 0;
  if (!(n >= META_LEN && !memcmp(w, META, META_LEN))) dc_buf_append(tmp, META, META_LEN);
  dc_buf_append(tmp, w, n);
  DC_TRY(dc_buf_status(tmp, "encoding a prompt"));
  const char *s = (const char *)tmp->data;
  size_t len = tmp->len, start = 0;
  for (size_t i = META_LEN; i + META_LEN <= len; i++) {
    if (memcmp(s + i, META, META_LEN)) continue;
    DC_TRY(viterbi(t, s + start, i - start, lt, out));
    start = i;
    i += META_LEN - 1;
  }
  return viterbi(t, s + start, len - start, lt, out);
}

static dc_status *encode_text(const dc_t5_tokenizer *t, const char *s, size_t n, dc_buf *norm, dc_buf *tmp,
                              lattice *lt, id_list *out) {
  norm->len = 0;
  if (t->has_charsmap) DC_TRY(dc_t5_charsmap_normalize(&t->map, s, n, norm));
  else dc_buf_append(norm, s, n);
  DC_TRY(dc_buf_status(norm, "normalizing a prompt"));
  const char *p = (const char *)norm->data;
  size_t len = norm->len, word = 0;
  utf8proc_int32_t cp;
  for (size_t i = 0; i < len;) {
    utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)p + i, (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0) return dc_error(DC_ERR_INTERNAL, "the normalized prompt is not valid UTF-8");
    if (is_white_space(cp)) {
      if (i > word) DC_TRY(encode_word(t, p + word, i - word, tmp, lt, out));
      word = i + (size_t)k;
    }
    i += (size_t)k;
  }
  if (len > word) DC_TRY(encode_word(t, p + word, len - word, tmp, lt, out));
  return NULL;
}

/* ---- added tokens ------------------------------------------------------------------ */

/* The longest added token starting at s[0..n), or NULL. */
static const dc_t5_added *added_at(const dc_t5_tokenizer *t, const char *s, size_t n) {
  const dc_t5_added *best = NULL;
  for (int i = 0; i < t->nadded; i++) {
    const dc_t5_added *a = &t->added[i];
    if (a->len && a->len <= n && (!best || a->len > best->len) && !memcmp(s, a->content, a->len)) best = a;
  }
  return best;
}

static dc_status *encode_pieces(const dc_t5_tokenizer *t, const char *s, size_t n, id_list *out) {
  dc_buf norm, tmp;
  dc_buf_init(&norm);
  dc_buf_init(&tmp);
  lattice lt = {0};
  dc_status *st = NULL;
  size_t part = 0;
  for (size_t i = 0; i < n && !st;) {
    const dc_t5_added *a = added_at(t, s + i, n - i);
    if (!a) {
      i++;
      continue;
    }
    if (i > part) st = encode_text(t, s + part, i - part, &norm, &tmp, &lt, out);
    ids_push(out, a->id);
    i += a->len;
    part = i;
  }
  if (!st && n > part) st = encode_text(t, s + part, n - part, &norm, &tmp, &lt, out);
  if (!st && out->failed) st = dc_nomem("encoding a prompt");
  dc_buf_deinit(&norm);
  dc_buf_deinit(&tmp);
  dc_free(lt.nodes);
  return st;
}

/* ---- decoding the cut text ------------------------------------------------------------------ */

/* transformers' clean_up_tokenization: each replacement over the whole text
 * in turn, as Python's str.replace; in place (every one shortens). */
static void clean_up(char *s) {
  static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
  static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
  for (size_t k = 0; k < sizeof from / sizeof *from; k++) {
    size_t fl = strlen(from[k]), tl = strlen(to[k]), o = 0;
    for (size_t i = 0; s[i];) {
      if (!strncmp(s + i, from[k], fl)) {
        memcpy(s + o, to[k], tl);
        o += tl, i += fl;
      } else {
        s[o++] = s[i++];
      }
    }
    s[o] = 0;
  }
}

/* As tokenizers' Metaspace decoder: every "▁" of the first token dropped,
 * every other "▁" a space; then transformers' clean-up when configured. */
static char *decode(const dc_t5_tokenizer *t, const int32_t *ids, size_t n) {
  dc_buf b;
  dc_buf_init(&b);
  for (size_t i = 0; i < n; i++) {
    const dc_t5_piece *p = &t->pieces[ids[i]];
    const char *s = t->pool + p->off;
    for (size_t k = 0; k < p->len;) {
      if (k + META_LEN <= p->len && !memcmp(s + k, META, META_LEN)) {
        if (i) dc_buf_append(&b, " ", 1);
        k += META_LEN;
      } else {
        dc_buf_append(&b, s + k, 1);
        k++;
      }
    }
  }
  dc_buf_append(&b, "", 1);
  if (b.failed) {
    dc_buf_deinit(&b);
    return NULL;
  }
  if (t->clean_up) clean_up((char *)b.data);
  return (char *)b.data;
}

dc_status *dc_t5_tokenizer_encode(const dc_t5_tokenizer *t, const char *prompt, int max_length, int64_t *ids,
                                  dc_tokenize_report *rep) {
  if (rep) memset(rep, 0, sizeof *rep);
  if (max_length < 1) return dc_error(DC_ERR_ARGUMENT, "T5 tokenizer: max_length %d, expected at least 1", max_length);
  size_t n = strlen(prompt);
  long bad = dc_tok_utf8_invalid_at(prompt, n);
  if (bad >= 0) return dc_error(DC_ERR_ARGUMENT, "prompt: not valid UTF-8 at byte %ld", bad);
  id_list pieces = {0};
  dc_status *st = encode_pieces(t, prompt, n, &pieces);
  if (st) {
    dc_free(pieces.v);
    return st;
  }
  size_t keep = pieces.n < (size_t)max_length - 1 ? pieces.n : (size_t)max_length - 1;
  for (size_t i = 0; i < keep; i++) ids[i] = pieces.v[i];
  ids[keep] = t->eos;
  for (size_t i = keep + 1; i < (size_t)max_length; i++) ids[i] = t->pad;
  if (rep) {
    rep->ntokens = pieces.n > INT32_MAX ? INT32_MAX : (int)pieces.n;
    rep->truncated = keep < pieces.n;
    if (rep->truncated && !(rep->removed_text = decode(t, pieces.v + keep, pieces.n - keep)))
      st = dc_nomem("decoding the cut text");
  }
  dc_free(pieces.v);
  return st;
}
