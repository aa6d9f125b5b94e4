/* tokenizer.c — encoding a prompt as transformers 5's CLIPTokenizer does
 * (its `tokenizers` pipeline, which tokenizer.json spells out):
 *
 *   1. added tokens (bos, eos, pad, ...; tokenizer_load.c decides which) are
 *      cut out of the raw prompt, leftmost-longest, when not "normalized";
 *   2. each piece between is normalized: NFC, every run of whitespace to one
 *      space, lower case (Rust's char::to_lowercase: utf8proc's simple mapping
 *      plus SpecialCasing's one unconditional expansion, U+0130);
 *   3. "normalized" added tokens are cut out of the normalized text;
 *   4. CLIP's Split: <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|
 *      [\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+, the whitespace between dropped;
 *   5. ByteLevel with use_regex: GPT-2's pattern splits each piece again —
 *      it only changes the <|startoftext|> / <|endoftext|> pieces (step 4
 *      keeps them whole, GPT-2 splits them into "<|", letters, "|>"), since
 *      the other pieces already are single runs of one class;
 *   6. BPE on each word's bytes (GPT-2's byte characters), "</w>" joined to
 *      the last byte, the lowest-ranked merge first, leftmost on ties (a heap
 *      as tokenizers' Word::merge_all); a byte character missing from the
 *      vocabulary becomes unk;
 *   7. bos + the first max_length - 2 ids + eos, then pad.
 *
 * Classes as Oniguruma (which tokenizers' regexes run on) defines them, from
 * utf8proc: \p{L} = Lu Ll Lt Lm Lo, \p{N} = Nd Nl No, \s = Zs Zl Zp and
 * U+0009..U+000D, U+0085. */
#include "tokenizer_impl.h"

#include <string.h>
#include <utf8proc.h>

/* ---- UTF-8 --------------------------------------------------------------------- */

/* The valid UTF-8 sequence at p (n > 0 bytes left): returns its length and
 * sets *cp; or returns 0 and sets *bad to the length of its maximal prefix
 * that could start a valid sequence (what one U+FFFD replaces, as Rust's and
 * Python's decoders count it). */
static int utf8_next(const uint8_t *p, size_t n, int32_t *cp, int *bad) {
  uint8_t c = p[0];
  int need;
  uint8_t lo = 0x80, hi = 0xbf;
  *bad = 1;
  if (c < 0x80) return *cp = c, 1;
  if (c >= 0xc2 && c <= 0xdf) need = 1;
  else if (c >= 0xe0 && c <= 0xef) need = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) need = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  int32_t v = c & (0x3f >> need);
  for (int k = 1; k <= need; k++) {
    if ((size_t)k >= n || p[k] < (k == 1 ? lo : 0x80) || p[k] > (k == 1 ? hi : 0xbf)) return *bad = k, 0;
    v = v << 6 | (p[k] & 0x3f);
  }
  *cp = v;
  return need + 1;
}

long dc_tok_utf8_invalid_at(const char *s, size_t n) {
  const uint8_t *p = (const uint8_t *)s;
  int32_t cp;
  int bad;
  for (size_t i = 0; i < n;) {
    int k = utf8_next(p + i, n - i, &cp, &bad);
    if (!k) return (long)i;
    i += (size_t)k;
  }
  return -1;
}

/* The code point at s[i] of valid UTF-8; *len its bytes. */
static int32_t cp_at(const char *s, size_t n, size_t i, size_t *len) {
  int32_t cp = 0xfffd;
  int bad, k = utf8_next((const uint8_t *)s + i, n - i, &cp, &bad);
  *len = k ? (size_t)k : 1;
  return cp;
}

static void put_cp(dc_buf *b, int32_t cp) {
  uint8_t u[4];
  utf8proc_ssize_t k = utf8proc_encode_char(cp, u);
  dc_buf_append(b, u, (size_t)k);
}

/* ---- normalizer ---------------------------------------------------------------- */

static int is_space(int32_t c) {
  if ((c >= 9 && c <= 13) || c == 0x85) return 1;
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* Whitespace runs become one space, then each character is lower-cased. */
static void collapse_and_lower(const int32_t *cps, size_t n, dc_buf *out) {
  for (size_t i = 0; i < n; i++) {
    if (is_space(cps[i])) {
      while (i + 1 < n && is_space(cps[i + 1])) i++;
      dc_buf_u8(out, ' ');
    } else if (cps[i] == 0x130) { /* İ: SpecialCasing.txt's "0069 0307", which Rust applies */
      put_cp(out, 0x69);
      put_cp(out, 0x307);
    } else {
      put_cp(out, utf8proc_tolower(cps[i]));
    }
  }
}

dc_status *dc_tok_normalize(const char *s, size_t n, dc_buf *out) {
  if (!n) return NULL;
  utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  utf8proc_ssize_t need = utf8proc_decompose((const uint8_t *)s, (utf8proc_ssize_t)n, NULL, 0, opt);
  if (need < 0) return dc_error(DC_ERR_INTERNAL, "NFC of a prompt: %s", utf8proc_errmsg(need));
  int32_t *cps = dc_malloc(sizeof *cps * (size_t)(need + 1));
  if (!cps) return dc_nomem("normalizing a prompt");
  utf8proc_ssize_t got = utf8proc_decompose((const uint8_t *)s, (utf8proc_ssize_t)n, cps, need, opt);
  if (got == need) got = utf8proc_normalize_utf32(cps, got, opt);
  dc_status *st = NULL;
  if (got < 0) st = dc_error(DC_ERR_INTERNAL, "NFC of a prompt: %s", utf8proc_errmsg(got));
  else collapse_and_lower(cps, (size_t)got, out);
  dc_free(cps);
  return st;
}

/* ---- pre-tokenizer ------------------------------------------------------------- */

typedef enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER } char_class;

static char_class class_of(int32_t c) {
  if (is_space(c)) return C_SPACE;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return C_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return C_NUMBER;
    default:
      return C_OTHER;
  }
}

static size_t prefix_at(const char *s, size_t n, size_t i, const char *lit) {
  size_t k = strlen(lit);
  return n - i >= k && memcmp(s + i, lit, k) == 0 ? k : 0;
}

/* Bytes of the contraction starting at s[i] ('s 't 're 've 'm 'll 'd), or 0. */
static size_t contraction_at(const char *s, size_t n, size_t i) {
  static const char *const forms[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  for (int k = 0; k < 7; k++) {
    size_t len = prefix_at(s, n, i, forms[k]);
    if (len) return len;
  }
  return 0;
}

/* End of the run from i of characters of class c; for C_OTHER, of every
 * character that is neither space, letter nor number. */
static size_t run_end(const char *s, size_t n, size_t i, char_class c) {
  while (i < n) {
    size_t len;
    if (class_of(cp_at(s, n, i, &len)) != c) break;
    i += len;
  }
  return i;
}

/* The next piece at or after *i of the CLIP pattern (clip = 1) or of GPT-2's
 * on a piece without whitespace (clip = 0); whitespace between is skipped.
 * Returns 0 at the end. */
static int next_piece(const char *s, size_t n, size_t *i, int clip, size_t *start, size_t *end) {
  while (*i < n) {
    size_t at = *i, len, k = 0;
    char_class c = class_of(cp_at(s, n, at, &len));
    if (clip) k = prefix_at(s, n, at, "<|startoftext|>");
    if (clip && !k) k = prefix_at(s, n, at, "<|endoftext|>");
    if (!k) k = contraction_at(s, n, at);
    if (k) *end = at + k;
    else if (c == C_SPACE) {
      *i = run_end(s, n, at, C_SPACE);
      if (clip) continue; /* CLIP's Split drops it; GPT-2 would keep it (never reached: no spaces left) */
      *end = *i;
    } else if (c == C_NUMBER && clip) *end = at + len;
    else *end = run_end(s, n, at, c);
    *start = at;
    *i = *end;
    return 1;
  }
  return 0;
}

/* ---- BPE --------------------------------------------------------------------- */

typedef struct {
  int32_t rank, pos, new_id;
} heap_item;

typedef struct {
  int32_t *id, *prev, *next;
  uint8_t *alive;
  heap_item *heap;
  size_t cap, nheap;
} bpe_scratch;

static void scratch_free(bpe_scratch *w) {
  dc_free(w->id);
  dc_free(w->prev);
  dc_free(w->next);
  dc_free(w->alive);
  dc_free(w->heap);
}

static int scratch_reserve(bpe_scratch *w, size_t n) {
  if (n <= w->cap) return 1;
  scratch_free(w);
  memset(w, 0, sizeof *w);
  w->id = dc_malloc(n * sizeof *w->id);
  w->prev = dc_malloc(n * sizeof *w->prev);
  w->next = dc_malloc(n * sizeof *w->next);
  w->alive = dc_malloc(n);
  w->heap = dc_malloc(3 * n * sizeof *w->heap); /* n - 1 pairs, then at most 2 new ones per merge */
  if (!w->id || !w->prev || !w->next || !w->alive || !w->heap) return 0;
  w->cap = n;
  return 1;
}

static int heap_less(heap_item a, heap_item b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(bpe_scratch *w, heap_item x) {
  size_t i = w->nheap++;
  while (i && heap_less(x, w->heap[(i - 1) / 2])) {
    w->heap[i] = w->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->heap[i] = x;
}

static heap_item heap_pop(bpe_scratch *w) {
  heap_item top = w->heap[0], x = w->heap[--w->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= w->nheap) break;
    if (c + 1 < w->nheap && heap_less(w->heap[c + 1], w->heap[c])) c++;
    if (!heap_less(w->heap[c], x)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  w->heap[i] = x;
  return top;
}

/* Queues the merge of the symbol at pos with its right neighbour, if any. */
static void queue_pair(const dc_clip_tokenizer *t, bpe_scratch *w, int32_t pos) {
  if (pos < 0 || w->next[pos] < 0) return;
  const dc_tok_merge *m = dc_tok_merge_find(t, w->id[pos], w->id[w->next[pos]]);
  if (m) heap_push(w, (heap_item){m->rank, pos, m->new_id});
}

/* Merges until no pair of neighbours has a merge.  An entry is stale when its
 * symbol is gone or the pair now merges into another token (tokenizers'
 * check). */
static void merge_all(const dc_clip_tokenizer *t, bpe_scratch *w, size_t n) {
  w->nheap = 0;
  for (size_t i = 0; i + 1 < n; i++) queue_pair(t, w, (int32_t)i);
  while (w->nheap) {
    heap_item top = heap_pop(w);
    int32_t p = top.pos, q = w->next[p];
    if (!w->alive[p] || q < 0) continue;
    const dc_tok_merge *m = dc_tok_merge_find(t, w->id[p], w->id[q]);
    if (!m || m->new_id != top.new_id) continue;
    w->id[p] = top.new_id;
    w->alive[q] = 0;
    w->next[p] = w->next[q];
    if (w->next[q] >= 0) w->prev[w->next[q]] = p;
    queue_pair(t, w, w->prev[p]);
    queue_pair(t, w, p);
  }
}

typedef struct {
  int32_t *v;
  size_t n, cap;
} id_list;

static int ids_push(id_list *l, int32_t id) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 128;
    int32_t *v = dc_realloc(l->v, cap * sizeof *v);
    if (!v) return 0;
    l->v = v, l->cap = cap;
  }
  l->v[l->n++] = id;
  return 1;
}

/* One word: its bytes as GPT-2's byte characters, "</w>" on the last. */
static dc_status *bpe_word(const dc_clip_tokenizer *t, const uint8_t *s, size_t n, bpe_scratch *w, id_list *out) {
  if (!n) return NULL;
  if (!scratch_reserve(w, n)) return dc_nomem("encoding a prompt");
  for (size_t i = 0; i < n; i++) {
    int32_t id = i + 1 == n ? t->byte_eow_id[s[i]] : t->byte_id[s[i]];
    w->id[i] = id >= 0 ? id : t->unk;
    w->prev[i] = (int32_t)i - 1;
    w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    w->alive[i] = 1;
  }
  merge_all(t, w, n);
  for (int32_t p = 0; p >= 0; p = w->next[p])
    if (!ids_push(out, w->id[p])) return dc_nomem("encoding a prompt");
  return NULL;
}

/* Steps 4-6 on normalized text. */
static dc_status *encode_words(const dc_clip_tokenizer *t, const char *s, size_t n, bpe_scratch *w, id_list *out) {
  size_t i = 0, a, b;
  while (next_piece(s, n, &i, 1, &a, &b)) {
    size_t j = a, c, d;
    while (next_piece(s, b, &j, 0, &c, &d)) DC_TRY(bpe_word(t, (const uint8_t *)s + c, d - c, w, out));
  }
  return NULL;
}

/* ---- added tokens --------------------------------------------------------------- */

/* The longest added token (raw ones, or normalized ones) at s[0..n). */
static const dc_tok_added *added_at(const dc_clip_tokenizer *t, const char *s, size_t n, int normalized) {
  const dc_tok_added *best = NULL;
  for (int k = 0; k < t->nadded; k++) {
    const dc_tok_added *a = &t->added[k];
    if (a->normalized != normalized) continue;
    const char *c = normalized ? a->norm : a->content;
    size_t len = normalized ? a->norm_len : a->len;
    if (len && len <= n && (!best || len > (normalized ? best->norm_len : best->len)) && memcmp(s, c, len) == 0)
      best = a;
  }
  return best;
}

typedef dc_status *(*part_fn)(const dc_clip_tokenizer *t, const char *s, size_t n, bpe_scratch *w, id_list *out);

/* Cuts s at the added tokens of one kind (leftmost, then longest), encoding
 * the parts between with `part`. */
static dc_status *split_added(const dc_clip_tokenizer *t, const char *s, size_t n, int normalized, part_fn part,
                              bpe_scratch *w, id_list *out) {
  size_t start = 0;
  for (size_t i = 0; i < n;) {
    const dc_tok_added *a = added_at(t, s + i, n - i, normalized);
    if (!a) {
      i++;
      continue;
    }
    DC_TRY(part(t, s + start, i - start, w, out));
    if (!ids_push(out, a->id)) return dc_nomem("encoding a prompt");
    i += normalized ? a->norm_len : a->len;
    start = i;
  }
  return part(t, s + start, n - start, w, out);
}

static dc_status *encode_normalized(const dc_clip_tokenizer *t, const char *s, size_t n, bpe_scratch *w,
                                    id_list *out) {
  return split_added(t, s, n, 1, encode_words, w, out);
}

/* Steps 2-6 on one part of the raw prompt. */
static dc_status *encode_raw_part(const dc_clip_tokenizer *t, const char *s, size_t n, bpe_scratch *w,
                                  id_list *out) {
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_tok_normalize(s, n, &b);
  if (!st) st = dc_buf_status(&b, "normalizing a prompt");
  if (!st && b.len) st = encode_normalized(t, (const char *)b.data, b.len, w, out); /* empty: data is NULL */
  dc_buf_deinit(&b);
  return st;
}

/* ---- decoding what truncation cut -------------------------------------------------- */

/* One token's bytes: its characters mapped back through bytes_to_unicode, or
 * its own UTF-8 when one is not a byte character (tokenizers' ByteLevel). */
static void token_bytes(const dc_clip_tokenizer *t, const int16_t *byte_of, const char *s, size_t n, dc_buf *out) {
  size_t start = out->len;
  for (size_t i = 0, len; i < n; i += len) {
    int32_t cp = cp_at(s, n, i, &len);
    if (cp >= 512 || byte_of[cp] < 0) {
      out->len = start;
      dc_buf_append(out, s, n);
      return;
    }
    dc_buf_u8(out, (uint8_t)byte_of[cp]);
  }
}

/* Rust's String::from_utf8_lossy, with "</w>" replaced by " " as CLIP's decode does. */
static void lossy_text(const uint8_t *p, size_t n, dc_buf *out) {
  for (size_t i = 0; i < n;) {
    int32_t cp;
    int bad, k = utf8_next(p + i, n - i, &cp, &bad);
    if (k && n - i >= 4 && memcmp(p + i, "</w>", 4) == 0) {
      dc_buf_u8(out, ' ');
      i += 4;
    } else if (k) {
      dc_buf_append(out, p + i, (size_t)k);
      i += (size_t)k;
    } else {
      dc_buf_append(out, "\xef\xbf\xbd", 3);
      i += (size_t)bad;
    }
  }
}

/* Python's str.isspace: category Zs or bidirectional class WS, B or S. */
static int py_isspace(int32_t c) {
  const utf8proc_property_t *p = utf8proc_get_property(c);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

/* s[0..n) (valid UTF-8) without leading and trailing whitespace, dc_malloc'd. */
static char *py_strip(const char *s, size_t n) {
  size_t first = n, last = 0;
  for (size_t i = 0, len; i < n; i += len) {
    if (py_isspace(cp_at(s, n, i, &len))) continue;
    if (first == n) first = i;
    last = i + len;
  }
  return first == n ? dc_strdup("") : dc_strndup(s + first, last - first);
}

/* The text of ids[0..n) as transformers' CLIPTokenizer.decode gives it. */
static dc_status *decode_ids(const dc_clip_tokenizer *t, const int32_t *ids, size_t n, char **out) {
  int16_t byte_of[512];
  memset(byte_of, 0xff, sizeof byte_of);
  for (int b = 0; b < 256; b++) byte_of[t->byte_cp[b]] = (int16_t)b;
  dc_buf raw, text;
  dc_buf_init(&raw);
  dc_buf_init(&text);
  for (size_t i = 0; i < n; i++) {
    const dc_tok_entry *e = dc_tok_vocab_by_id(&t->vocab, ids[i]);
    if (e) token_bytes(t, byte_of, t->vocab.pool + e->off, e->len, &raw);
  }
  if (!raw.failed) lossy_text(raw.data, raw.len, &text);
  dc_status *st = dc_buf_status(&raw, "decoding tokens");
  if (!st) st = dc_buf_status(&text, "decoding tokens");
  if (!st && !(*out = py_strip((const char *)text.data, text.len))) st = dc_nomem("decoding tokens");
  dc_buf_deinit(&raw);
  dc_buf_deinit(&text);
  return st;
}

/* ---- encode ------------------------------------------------------------------------ */

static void fill_ids(const dc_clip_tokenizer *t, const id_list *toks, size_t keep, int64_t *ids) {
  int m = t->max_length, k = 0;
  ids[k++] = t->bos;
  for (size_t i = 0; i < keep; i++) ids[k++] = toks->v[i];
  ids[k++] = t->eos;
  while (k < m) ids[k++] = t->pad;
}

dc_status *dc_clip_tokenizer_encode(const dc_clip_tokenizer *t, const char *prompt, int64_t *ids,
                                    dc_tokenize_report *rep) {
  if (rep) memset(rep, 0, sizeof *rep);
  size_t n = strlen(prompt);
  long bad = dc_tok_utf8_invalid_at(prompt, n);
  if (bad >= 0)
    return dc_error(DC_ERR_ARGUMENT, "prompt: not valid UTF-8 at byte offset %ld (byte 0x%02x)", bad,
                    (unsigned)(unsigned char)prompt[bad]);
  id_list toks = {0};
  bpe_scratch w = {0};
  dc_status *st = split_added(t, prompt, n, 0, encode_raw_part, &w, &toks);
  scratch_free(&w);
  size_t room = (size_t)t->max_length - 2, keep = toks.n < room ? toks.n : room;
  if (!st) fill_ids(t, &toks, keep, ids);
  if (!st && rep) {
    rep->ntokens = toks.n > INT32_MAX ? INT32_MAX : (int)toks.n;
    rep->truncated = toks.n > keep;
    if (rep->truncated) st = decode_ids(t, toks.v + keep, toks.n - keep, &rep->removed_text);
  }
  dc_free(toks.v);
  return st;
}
