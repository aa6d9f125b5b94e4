/* fuzz_tokenizer_t5.c — T5's unigram tokenizer (pipeline/tokenizer_t5.h):
 * the input is cut at each "\n#--#\n" (spiece.model is binary, so a NUL
 * cannot separate) into tokenizer.json, spiece.model, tokenizer_config.json,
 * a prompt and a max length (the next part's first byte, 1..256); an empty
 * part leaves that file out, so both readers (JSON and the protobuf reader)
 * and the precompiled charsmap are reached.  The files are parsed from
 * memory and the prompt encoded with a report.  Errors are expected;
 * crashes, leaks, undefined behaviour and a broken invariant of the result
 * (abort) are the findings. */
#include "fuzz_common.h"
#include "pipeline/tokenizer_t5.h"

static const char *const part_names[] = {"tokenizer.json", "spiece.model", "tokenizer_config.json"};
#define NFILES 3
static const char sep[] = "\n#--#\n";
#define SEP_LEN (sizeof sep - 1)

/* What any successful encode must satisfy. */
static void check_result(const dc_t5_tokenizer *t, const int64_t *ids, int m, const dc_tokenize_report *rep) {
  int kept = rep->ntokens < m - 1 ? rep->ntokens : m - 1;
  if (ids[kept] != dc_t5_tokenizer_eos_id(t)) abort();
  for (int i = kept + 1; i < m; i++)
    if (ids[i] != dc_t5_tokenizer_pad_id(t)) abort();
  if (rep->truncated != (rep->ntokens > m - 1) || (rep->truncated && !rep->removed_text)) abort();
}

static void run(const dc_text_files *fs, const char *prompt, int max_length) {
  dc_t5_tokenizer *t = NULL;
  dc_status *st = dc_t5_tokenizer_parse(fs, &t);
  if (!st) {
    int64_t ids[256];
    dc_tokenize_report rep;
    st = dc_t5_tokenizer_encode(t, prompt, max_length, ids, &rep);
    if (!st) check_result(t, ids, max_length, &rep), dc_free(rep.removed_text);
    dc_t5_tokenizer_free(t);
  }
  fuzz_drop(st);
}

/* The part starting at *at, up to the next separator or the end. */
static size_t next_part(const uint8_t *data, size_t size, size_t *at, const uint8_t **p) {
  *p = data + *at;
  size_t i = *at;
  while (i < size && !(size - i >= SEP_LEN && !memcmp(data + i, sep, SEP_LEN))) i++;
  size_t n = i - *at;
  *at = i < size ? i + SEP_LEN : size + 1;
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dc_text_files fs = {0};
  fs.origin = dc_strdup("fuzz");
  size_t at = 0, n = 0;
  const uint8_t *p = data;
  for (int k = 0; k < NFILES && at <= size; k++) {
    n = next_part(data, size, &at, &p);
    if (n) fuzz_drop(dc_text_files_add(&fs, part_names[k], p, n));
  }
  n = at <= size ? next_part(data, size, &at, &p) : 0;
  char *prompt = dc_strndup(n ? (const char *)p : "", n ? strnlen((const char *)p, n) : 0);
  int max_length = at < size ? 1 + data[at] : 77;
  if (fs.origin && prompt) run(&fs, prompt, max_length);
  dc_free(prompt);
  dc_text_files_free(&fs);
  return 0;
}
