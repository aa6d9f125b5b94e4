/* tokenizer_t5.h — T5's unigram (sentencepiece) tokenizer, giving the ids of
 * transformers 5.24's T5TokenizerFast id for id (checked by
 * tests/test_tokenizer_t5.c on a corpus of awkward prompts).
 *
 * Files (a diffusers pipeline's tokenizer_2 / tokenizer_3 folder):
 * tokenizer.json (model "Unigram"), or spiece.model (a sentencepiece
 * ModelProto) when tokenizer.json is absent; tokenizer_config.json /
 * special_tokens_map.json for pad, eos, unk and extra_ids.
 *
 * transformers 5.24 rebuilds T5's pipeline from the files rather than
 * running tokenizer.json's own: it keeps the vocabulary (with unk at id 2)
 * and the sentencepiece normalization map ("Precompiled"), and always runs
 * WhitespaceSplit + Metaspace("▁", prepend always, split) and appends
 * "</s>".  We do the same; the file's normalizer / pre-tokenizer /
 * post-processor are checked to be of known types (an unknown type is
 * refused by name) but, as in transformers, not otherwise used.
 *
 * Encoding (tokenizer_unigram.c): added tokens (pad, eos, unk,
 * <extra_id_N>, ...) cut out of the raw prompt; each part normalized by the
 * precompiled map (per grapheme cluster, as the tokenizers crate does),
 * split at whitespace, "▁" prepended to each word and the word cut before
 * every "▁"; each piece split by Viterbi over the piece scores (unknown
 * characters scored min - 10 and consecutive ones fused into one unk). */
#ifndef DC_TOKENIZER_T5_H
#define DC_TOKENIZER_T5_H

#include "tokenizer.h" /* dc_tokenize_report */

typedef struct dc_t5_tokenizer dc_t5_tokenizer;

/* The file names a T5 tokenizer folder may hold (those present are read),
 * terminated by NULL: what diffc copies into a pipeline plan. */
extern const char *const dc_t5_tokenizer_file_names[];

/* Parses the files.  Errors name the origin, the file and the key or byte
 * offset: bad JSON, bad base64, a truncated protobuf, a duplicate piece, an
 * unk id other than 2, an unknown model / normalizer / pre-tokenizer type. */
dc_status *dc_t5_tokenizer_parse(const dc_text_files *files, dc_t5_tokenizer **out);
void dc_t5_tokenizer_free(dc_t5_tokenizer *t);

int32_t dc_t5_tokenizer_pad_id(const dc_t5_tokenizer *t);
int32_t dc_t5_tokenizer_eos_id(const dc_t5_tokenizer *t);
int32_t dc_t5_tokenizer_unk_id(const dc_t5_tokenizer *t);

/* Encodes prompt (UTF-8; invalid UTF-8 is an error naming the byte offset)
 * into ids[0..max_length): pieces, eos, pad — as transformers with
 * padding="max_length", truncation=True: the pieces are cut to
 * max_length - 1 and eos kept last.  max_length (>= 1) is the pipeline's
 * max_sequence_length.  rep (may be NULL): ntokens = pieces before the cut;
 * removed_text = the cut pieces decoded as diffusers logs them. */
dc_status *dc_t5_tokenizer_encode(const dc_t5_tokenizer *t, const char *prompt, int max_length, int64_t *ids,
                                  dc_tokenize_report *rep);

#endif
