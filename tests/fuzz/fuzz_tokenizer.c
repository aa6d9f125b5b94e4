/* fuzz_tokenizer.c — the CLIP tokenizer (pipeline/tokenizer.h): the input is
 * split at NUL bytes into vocab.json, merges.txt, tokenizer_config.json,
 * special_tokens_map.json, tokenizer.json and a prompt (an empty part leaves
 * that file out, so both layouts and the legacy special-token rules are
 * reached); the files are parsed from memory and the prompt encoded with a
 * report.  Errors are expected; crashes, leaks, undefined behaviour and a
 * broken invariant of the result (abort) are the findings. */
#include "fuzz_common.h"
#include "pipeline/tokenizer.h"

static const char *const part_names[] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                         "special_tokens_map.json", "tokenizer.json"};
#define NFILES 5

/* What any successful encode must satisfy. */
static void check_result(const dc_clip_tokenizer *t, const int64_t *ids, const dc_tokenize_report *rep) {
  int m = dc_clip_tokenizer_max_length(t);
  int kept = rep->ntokens < m - 2 ? rep->ntokens : m - 2;
  if (m < 2 || ids[kept + 1] != dc_clip_tokenizer_eos_id(t)) abort();
  for (int i = kept + 2; i < m; i++)
    if (ids[i] != dc_clip_tokenizer_pad_id(t)) abort();
  if (rep->truncated != (rep->ntokens > m - 2) || (rep->truncated && !rep->removed_text)) abort();
}

static void run(const dc_text_files *fs, const char *prompt) {
  dc_clip_tokenizer *t = NULL;
  dc_status *st = dc_clip_tokenizer_parse(fs, &t);
  if (!st) {
    int64_t *ids = dc_malloc(sizeof *ids * (size_t)dc_clip_tokenizer_max_length(t));
    dc_tokenize_report rep;
    if (ids) {
      st = dc_clip_tokenizer_encode(t, prompt, ids, &rep);
      if (!st) check_result(t, ids, &rep), dc_free(rep.removed_text);
    }
    dc_free(ids);
    dc_clip_tokenizer_free(t);
  }
  fuzz_drop(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dc_text_files fs = {0};
  fs.origin = dc_strdup("fuzz");
  size_t at = 0;
  for (int k = 0; k < NFILES && at <= size; k++) {
    const uint8_t *end = at < size ? memchr(data + at, 0, size - at) : NULL;
    size_t n = (end ? (size_t)(end - data) : size) - at;
    if (n) fuzz_drop(dc_text_files_add(&fs, part_names[k], data + at, n));
    at += n + 1;
  }
  /* the rest, up to a NUL, is the prompt */
  size_t pn = at < size ? strnlen((const char *)data + at, size - at) : 0;
  char *prompt = dc_strndup(at < size ? (const char *)data + at : "", pn);
  if (fs.origin && prompt) run(&fs, prompt);
  dc_free(prompt);
  dc_text_files_free(&fs);
  return 0;
}
