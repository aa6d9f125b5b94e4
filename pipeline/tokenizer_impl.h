/* tokenizer_impl.h — what tokenizer_load.c (reading the files) and
 * tokenizer.c (encoding) share: the tokenizer's tables.  Not for other
 * modules; they use tokenizer.h. */
#ifndef DC_TOKENIZER_IMPL_H
#define DC_TOKENIZER_IMPL_H

#include "tokenizer.h"

/* One vocabulary token: its bytes (UTF-8, at pool + off) and its id. */
typedef struct {
  uint32_t off, len;
  int32_t id;
} dc_tok_entry;

/* The vocabulary, looked up by string and by id through two open-addressing
 * tables of entry index + 1 (0: empty slot); by_str keeps the string's hash
 * in the high half, so a probe rarely has to read the entry and its bytes. */
typedef struct {
  char *pool;
  size_t pool_len, pool_cap;
  dc_tok_entry *e;
  int n, cap;
  uint64_t *by_str;
  uint32_t *by_id;
  uint32_t mask;
} dc_tok_vocab;

/* Merge (left id, right id) -> (rank, merged id); rank -1 marks an empty slot. */
typedef struct {
  uint64_t key;
  int32_t rank, new_id;
} dc_tok_merge;

/* A token matched in the prompt before BPE (transformers' added tokens:
 * bos, eos, unk, pad, ...).  normalized: matched in the normalized text
 * (norm holds the content normalized); else in the raw prompt. */
typedef struct {
  char *content, *norm;
  size_t len, norm_len;
  int normalized;
  int32_t id;
} dc_tok_added;

struct dc_clip_tokenizer {
  dc_tok_vocab vocab;
  dc_tok_merge *merges;
  uint32_t merge_mask;
  int nmerges;
  dc_tok_added *added;
  int nadded;
  int32_t bos, eos, pad, unk;
  int max_length;
  /* GPT-2's bytes_to_unicode: byte b is the character byte_cp[b]; its token
   * id alone (-1 when the vocabulary lacks it) and with "</w>" after it. */
  int32_t byte_cp[256], byte_id[256], byte_eow_id[256];
};

/* ---- vocabulary (tokenizer_load.c) ---- */
/* The id of the token s[0..n), or -1. */
int32_t dc_tok_vocab_find(const dc_tok_vocab *v, const char *s, size_t n);
/* The entry with this id, or NULL. */
const dc_tok_entry *dc_tok_vocab_by_id(const dc_tok_vocab *v, int32_t id);
/* The merge of (a, b), or NULL. */
const dc_tok_merge *dc_tok_merge_find(const dc_clip_tokenizer *t, int32_t a, int32_t b);
/* s[0..n) for an error message (also T5's, tokenizer_unigram_load.c), in
 * buf: quoted, control bytes as \xNN, quotes and backslashes escaped, cut
 * after 60 bytes with "...".  Returns buf. */
const char *dc_tok_quoted(const char *s, size_t n, char *buf, size_t cap);

/* ---- text (tokenizer.c) ---- */
/* transformers' CLIP normalizer on s[0..n) (valid UTF-8): NFC, runs of
 * whitespace to one space, lower case; appended to out. */
dc_status *dc_tok_normalize(const char *s, size_t n, dc_buf *out);
/* The byte offset of the first invalid UTF-8 sequence in s[0..n), or -1. */
long dc_tok_utf8_invalid_at(const char *s, size_t n);

#endif
