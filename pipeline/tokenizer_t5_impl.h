/* tokenizer_t5_impl.h — what the T5 tokenizer's files share: the tables
 * (tokenizer_unigram_load.c fills them, tokenizer_unigram.c encodes), the
 * sentencepiece protobuf reader (tokenizer_spm_proto.c) and the precompiled
 * normalization map (tokenizer_precompiled.c).  Not for other modules. */
#ifndef DC_TOKENIZER_T5_IMPL_H
#define DC_TOKENIZER_T5_IMPL_H

#include "tokenizer_t5.h"

/* One piece: its bytes (pool + off) and score; the id is its index. */
typedef struct {
  uint32_t off, len;
  double score;
} dc_t5_piece;

/* The precompiled map: a darts-clone double array over UTF-8 keys whose
 * values index NUL-terminated replacements in `norm`. */
typedef struct {
  uint32_t *units;
  size_t nunits;
  char *norm;
  size_t norm_len;
  char *where; /* the file and key, for an error found while encoding */
} dc_t5_charsmap;

/* A token cut out of the raw prompt before normalization. */
typedef struct {
  char *content;
  size_t len;
  int32_t id;
} dc_t5_added;

struct dc_t5_tokenizer {
  char *pool;
  size_t pool_len, pool_cap;
  dc_t5_piece *pieces;
  int npieces, cap;
  uint32_t *by_str; /* open addressing: piece index + 1, 0 = empty */
  uint32_t mask;
  size_t max_piece_len;
  double min_score;
  int has_charsmap;
  dc_t5_charsmap map;
  dc_t5_added *added;
  int nadded;
  int32_t pad, eos, unk;
  int clean_up; /* tokenizer_config's clean_up_tokenization_spaces: for the cut text only */
};

/* ---- pieces (tokenizer_unigram_load.c) ---- */
dc_status *dc_t5_add_piece(dc_t5_tokenizer *t, const char *s, size_t n, double score, const char *where);
/* The id of the piece s[0..n), or -1. */
int32_t dc_t5_find_piece(const dc_t5_tokenizer *t, const char *s, size_t n);

/* ---- spiece.model (tokenizer_spm_proto.c) ---- */
typedef struct {
  int unk_id, model_type; /* trainer_spec, with sentencepiece's defaults (0, unigram = 1) */
  int byte_fallback;
  const uint8_t *charsmap; /* normalizer_spec.precompiled_charsmap, inside the file's bytes */
  size_t charsmap_len;
} dc_spm_info;
/* Reads the ModelProto in data[0..n): every piece added to t (in order), the
 * rest into *info.  path names the file in messages. */
dc_status *dc_spm_read(dc_t5_tokenizer *t, const uint8_t *data, size_t n, const char *path, dc_spm_info *info);

/* ---- precompiled map (tokenizer_precompiled.c) ---- */
/* Parses the map's bytes (u32 trie size, trie, replacements); `where` names
 * the file and key. */
dc_status *dc_t5_charsmap_parse(const uint8_t *data, size_t n, const char *where, dc_t5_charsmap *out);
void dc_t5_charsmap_free(dc_t5_charsmap *m);
/* Appends s[0..n) (valid UTF-8) normalized as the tokenizers crate's
 * Precompiled normalizer does. */
dc_status *dc_t5_charsmap_normalize(const dc_t5_charsmap *m, const char *s, size_t n, dc_buf *out);

#endif
