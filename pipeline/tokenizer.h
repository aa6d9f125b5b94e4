/* tokenizer.h — CLIP's byte-level BPE tokenizer, giving the ids of
 * transformers 5's CLIPTokenizer (its `tokenizers` pipeline; checked id for
 * id against transformers 5.24 by tests/test_tokenizer.c).
 *
 * Files (a tokenizer folder of a diffusers pipeline): vocab.json +
 * merges.txt, or tokenizer.json (its "model" holds vocab and merges; it wins
 * when both are there, as in transformers), with tokenizer_config.json /
 * special_tokens_map.json for bos, eos, pad, unk and model_max_length.
 * Nothing is assumed that the files say: SD1.x pads with <|endoftext|>,
 * SDXL's second tokenizer with "!" — which, being a special token, is then
 * also cut out of prompts as id 0, as transformers does.
 *
 * Encoding (tokenizer.c has the details): special tokens cut out of the raw
 * prompt (or, for those marked "normalized", out of the normalized text);
 * NFC (utf8proc), whitespace runs to one space, lower case; split by CLIP's
 * pre-tokenisation pattern (Unicode letter and number classes from
 * utf8proc) and again by GPT-2's; each word's bytes mapped to GPT-2's
 * byte-to-unicode characters, BPE by merge rank with "</w>" on the word's
 * last symbol; then bos + ids + eos, truncated to model_max_length (the cut
 * text reported) and padded with the pad id. */
#ifndef DC_TOKENIZER_H
#define DC_TOKENIZER_H

#include "text_files.h"

typedef struct dc_clip_tokenizer dc_clip_tokenizer;

/* The file names a tokenizer folder may hold (those present are read),
 * terminated by NULL: what diffc copies into a pipeline plan. */
extern const char *const dc_clip_tokenizer_file_names[];

/* Parses the files.  Errors name the origin, the file and the line or key:
 * "models/sd15/tokenizer/merges.txt:1234: expected two symbols separated
 * by one space, found \"...\"", a merge whose result or parts are not in
 * the vocabulary, a special token missing from the vocabulary. */
dc_status *dc_clip_tokenizer_parse(const dc_text_files *files, dc_clip_tokenizer **out);
void dc_clip_tokenizer_free(dc_clip_tokenizer *t);

/* model_max_length (77 for every SD tokenizer). */
int dc_clip_tokenizer_max_length(const dc_clip_tokenizer *t);
int32_t dc_clip_tokenizer_pad_id(const dc_clip_tokenizer *t);
int32_t dc_clip_tokenizer_eos_id(const dc_clip_tokenizer *t);

typedef struct {
  int ntokens;        /* tokens of the prompt before truncation (without bos/eos) */
  int truncated;      /* 1 when tokens were cut */
  char *removed_text; /* the cut part, decoded back to text as transformers does
                       * (tokens joined, "</w>" -> " ", byte-decoded); NULL when
                       * nothing was cut.  Free with dc_free. */
} dc_tokenize_report;

/* Encodes prompt (UTF-8; invalid UTF-8 is an error naming the byte offset)
 * into ids[0..max_length): bos, tokens, eos, pad.  rep may be NULL. */
dc_status *dc_clip_tokenizer_encode(const dc_clip_tokenizer *t, const char *prompt, int64_t *ids,
                                    dc_tokenize_report *rep);

#endif
