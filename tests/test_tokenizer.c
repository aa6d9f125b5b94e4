/* test_tokenizer.c — the CLIP tokenizer (pipeline/tokenizer.h) against
 * transformers' CLIPTokenizer: every prompt of fixtures/tokenizer/corpus.json
 * id for id on the four folders (vocab.json + merges.txt with either pad,
 * tokenizer.json alone, the SD 1.x legacy config), the text truncation cut,
 * the special-token variants of variants.json, every error a broken file
 * gives (files written to a temp dir, messages pinned), an allocation
 * failure sweep, and the parse time (printed, not asserted). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/tokenizer.h"
#include "testutil.h"

#define MAXLEN_CAP 128

static char *fixture_path(const char *rel) {
  char *p = malloc(strlen(tu_source_dir) + strlen(rel) + 32);
  sprintf(p, "%s/fixtures/tokenizer/%s", tu_source_dir, rel);
  return p;
}

/* Parses the folder's files; NULL (a failed check) on error. */
static dc_clip_tokenizer *load_dir(const char *dir, double *seconds) {
  dc_text_files fs;
  dc_clip_tokenizer *t = NULL;
  double t0 = dc_now_seconds();
  dc_status *st = dc_text_files_read_dir(dir, dc_clip_tokenizer_file_names, &fs);
  if (!st) {
    st = dc_clip_tokenizer_parse(&fs, &t);
    dc_text_files_free(&fs);
  }
  if (seconds) *seconds = dc_now_seconds() - t0;
  CHECK_OK(st);
  return t;
}

/* A JSON file whose top level is a list (dc_json_load wants an object). */
static cJSON *load_json_list(const char *rel) {
  char *path = fixture_path(rel), *text = NULL, why[64];
  size_t n = 0, at = 0;
  CHECK_OK(dc_file_read_all(path, &text, &n));
  cJSON *root = text ? dc_json_parse_bytes(text, n, &at, why) : NULL;
  CHECK(cJSON_IsArray(root));
  free(path);
  dc_free(text);
  return root;
}

static const char *show(const char *s) { /* a prompt for a message: escapes, cut */
  static char buf[200];
  size_t o = 0;
  for (; *s && o < sizeof buf - 8; s++)
    o += (size_t)((unsigned char)*s < 0x20 ? snprintf(buf + o, 8, "\\x%02x", (unsigned char)*s)
                                           : snprintf(buf + o, 8, "%c", *s));
  buf[o] = 0;
  return buf;
}

/* Encodes prompt and compares with the expected ids (a JSON list) and cut text
 * (a JSON string, or NULL when nothing should be cut). */
static int check_case(const dc_clip_tokenizer *t, const char *what, const char *prompt, const cJSON *want,
                      const cJSON *want_cut) {
  int64_t ids[MAXLEN_CAP];
  int m = dc_clip_tokenizer_max_length(t), ok = 1;
  dc_tokenize_report rep;
  dc_status *st = dc_clip_tokenizer_encode(t, prompt, ids, &rep);
  if (st) {
    fprintf(stderr, "%s \"%s\": %s\n", what, show(prompt), dc_status_message(st));
    dc_status_free(st);
    return 0;
  }
  if (cJSON_GetArraySize(want) != m) ok = 0;
  for (int i = 0; i < m && ok; i++) {
    const cJSON *w = cJSON_GetArrayItem(want, i);
    if (!w || ids[i] != (int64_t)w->valuedouble) {
      fprintf(stderr, "%s \"%s\": id %d is %lld, transformers gives %.0f\n", what, show(prompt), i,
              (long long)ids[i], w ? w->valuedouble : -1.0);
      ok = 0;
    }
  }
  const char *cut = want_cut ? want_cut->valuestring : NULL;
  if (rep.truncated != (cut != NULL) || (cut && strcmp(cut, rep.removed_text) != 0)) {
    fprintf(stderr, "%s \"%s\": cut text \"%s\", transformers gives \"%s\"\n", what, show(prompt),
            rep.removed_text ? rep.removed_text : "(none)", cut ? cut : "(none)");
    ok = 0;
  }
  if (rep.truncated && rep.ntokens <= m - 2) ok = 0;
  dc_free(rep.removed_text);
  return ok;
}

static void test_corpus(void) {
  printf("corpus.json on clip, clip_pad_bang, clip_json, clip_legacy\n");
  static const char *const dirs[4] = {"clip", "clip_pad_bang", "clip_json", "clip_legacy"};
  static const char *const ids_key[4] = {"ids", "ids_pad_bang", "ids", "ids_legacy"};
  static const char *const cut_key[4] = {"truncated_text", "truncated_text_pad_bang", "truncated_text",
                                         "truncated_text_legacy"};
  dc_clip_tokenizer *t[4];
  for (int k = 0; k < 4; k++) {
    char *dir = fixture_path(dirs[k]);
    double secs;
    t[k] = load_dir(dir, &secs);
    printf("  parsed %s in %.1f ms\n", dirs[k], secs * 1e3);
    free(dir);
  }
  cJSON *corpus = load_json_list("corpus.json");
  int ncases = 0, ntrunc = 0;
  double t0 = dc_now_seconds();
  for (const cJSON *c = corpus && t[0] && t[1] && t[2] && t[3] ? corpus->child : NULL; c; c = c->next, ncases++) {
    const char *prompt = cJSON_GetObjectItemCaseSensitive(c, "prompt")->valuestring;
    ntrunc += cJSON_GetObjectItemCaseSensitive(c, "truncated_text") != NULL;
    for (int k = 0; k < 4; k++)
      CHECK(check_case(t[k], dirs[k], prompt, cJSON_GetObjectItemCaseSensitive(c, ids_key[k]),
                       cJSON_GetObjectItemCaseSensitive(c, cut_key[k])));
  }
  double secs = dc_now_seconds() - t0;
  printf("  %d prompts (%d truncated) x 4 folders, encoded in %.2f ms (%.1f us a prompt)\n", ncases, ntrunc,
         secs * 1e3, secs * 1e6 / (4.0 * ncases));
  CHECK(ncases >= 60 && ntrunc >= 3);
  CHECK(dc_clip_tokenizer_max_length(t[0]) == 77 && dc_clip_tokenizer_pad_id(t[0]) == 49407 &&
        dc_clip_tokenizer_eos_id(t[0]) == 49407 && dc_clip_tokenizer_pad_id(t[1]) == 0);
  cJSON_Delete(corpus);
  for (int k = 0; k < 4; k++) dc_clip_tokenizer_free(t[k]);
}

/* ---- in-memory file sets ---- */

static void files_init(dc_text_files *fs, const char *origin) {
  memset(fs, 0, sizeof *fs);
  fs->origin = dc_strdup(origin);
}

static void files_add(dc_text_files *fs, const char *name, const char *text) {
  CHECK_OK(dc_text_files_add(fs, name, text, strlen(text)));
}

static dc_status *parse_files(const dc_text_files *fs, dc_clip_tokenizer **t) {
  return dc_clip_tokenizer_parse(fs, t);
}

static void test_variants(void) {
  printf("variants.json: special and added tokens as transformers resolves them\n");
  char *dir = fixture_path("clip");
  dc_text_files clip;
  CHECK_OK(dc_text_files_read_dir(dir, dc_clip_tokenizer_file_names, &clip));
  free(dir);
  cJSON *variants = load_json_list("variants.json");
  int nvariants = 0;
  for (const cJSON *v = variants ? variants->child : NULL; v; v = v->next, nvariants++) {
    const char *name = cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring;
    dc_text_files fs;
    files_init(&fs, name);
    for (int i = 0; i < clip.nfiles; i++)
      if (strcmp(clip.files[i].name, "tokenizer_config.json") != 0)
        CHECK_OK(dc_text_files_add(&fs, clip.files[i].name, clip.files[i].data, clip.files[i].size));
    for (const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "files")->child; f; f = f->next)
      files_add(&fs, f->string, f->valuestring);
    dc_clip_tokenizer *t = NULL;
    CHECK_OK(parse_files(&fs, &t));
    int ok = t != NULL;
    for (const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "cases")->child; c && t; c = c->next)
      ok &= check_case(t, name, cJSON_GetObjectItemCaseSensitive(c, "prompt")->valuestring,
                       cJSON_GetObjectItemCaseSensitive(c, "ids"),
                       cJSON_GetObjectItemCaseSensitive(c, "truncated_text"));
    CHECK(ok);
    printf("  %s: %s\n", name, ok ? "equal" : "DIFFERENT");
    dc_clip_tokenizer_free(t);
    dc_text_files_free(&fs);
  }
  CHECK(nvariants >= 5);
  cJSON_Delete(variants);
  dc_text_files_free(&clip);
}

/* ---- truncation report ---- */

static char *repeat(const char *s, int n) {
  size_t k = strlen(s);
  char *r = malloc(k * (size_t)n + 1);
  for (int i = 0; i < n; i++) memcpy(r + k * (size_t)i, s, k);
  r[k * (size_t)n] = 0;
  return r;
}

static void test_truncation(void) {
  printf("truncation: bos + 75 + eos, the cut part reported\n");
  char *dir = fixture_path("clip");
  dc_clip_tokenizer *t = load_dir(dir, NULL);
  free(dir);
  if (!t) return;
  int64_t ids[77];
  dc_tokenize_report rep;
  char *p75 = repeat("a ", 75), *p80 = repeat("cat ", 80);
  CHECK_OK(dc_clip_tokenizer_encode(t, p75, ids, &rep));
  CHECK(rep.ntokens == 75 && !rep.truncated && !rep.removed_text && ids[75] == 320 && ids[76] == 49407);
  CHECK_OK(dc_clip_tokenizer_encode(t, p80, ids, &rep));
  CHECK(rep.ntokens == 80 && rep.truncated && ids[0] == 49406 && ids[75] == 2368 && ids[76] == 49407);
  CHECK(rep.removed_text && strcmp(rep.removed_text, "cat cat cat cat cat") == 0);
  dc_free(rep.removed_text);
  CHECK_OK(dc_clip_tokenizer_encode(t, p80, ids, NULL)); /* no report asked */
  CHECK(ids[76] == 49407);
  free(p75);
  free(p80);
  dc_clip_tokenizer_free(t);
}

/* ---- errors ---- */

/* A copy of the clip folder in tmp/name with `file` replaced by text (NULL: left out). */
static char *broken_copy(const char *name, const char *file, const char *text, size_t n) {
  char *src = fixture_path("clip"), *dst = tu_path(name);
  mkdir(dst, 0755);
  static const char *const names[] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
  for (int i = 0; i < 3; i++) {
    char *to = dc_path_join(dst, names[i]);
    if (strcmp(names[i], file) == 0) {
      if (text) tu_write_file(to, text, n);
    } else {
      char *from = dc_path_join(src, names[i]), *data;
      size_t size;
      CHECK_OK(dc_file_read_all(from, &data, &size));
      tu_write_file(to, data, size);
      dc_free(data);
      dc_free(from);
    }
    dc_free(to);
  }
  free(src);
  return dst;
}

/* Parses dir and expects an error containing "<dir><want>" (want starts with
 * "/file..." or ": ..."). */
static void expect_dir_error(const char *dir, const char *want) {
  dc_text_files fs;
  dc_clip_tokenizer *t = NULL;
  dc_status *st = dc_text_files_read_dir(dir, dc_clip_tokenizer_file_names, &fs);
  CHECK_OK(st);
  char *needle = dc_asprintf("%s%s", dir, want);
  CHECK_ERR(dc_clip_tokenizer_parse(&fs, &t), needle);
  CHECK(t == NULL);
  dc_free(needle);
  dc_text_files_free(&fs);
}

/* The fixture's merges.txt with line `lineno` replaced by `line`. */
static char *merges_with_line(int lineno, const char *line, size_t *n) {
  char *src = fixture_path("clip/merges.txt"), *data;
  size_t size;
  CHECK_OK(dc_file_read_all(src, &data, &size));
  free(src);
  dc_buf b;
  dc_buf_init(&b);
  const char *p = data;
  for (int ln = 1; p < data + size; ln++) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
    if (ln == lineno) dc_buf_printf(&b, "%s\n", line);
    else dc_buf_append(&b, p, len);
    p += len;
  }
  dc_free(data);
  dc_buf_u8(&b, 0);
  *n = b.len - 1;
  return (char *)b.data;
}

static void test_file_errors(void) {
  printf("broken folders\n");
  size_t n;
  char *m = merges_with_line(5000, "a b c", &n), *dir = broken_copy("three_symbols", "merges.txt", m, n);
  expect_dir_error(dir, "/merges.txt:5000: expected two symbols separated by one space, found \"a b c\"");
  dc_free(m), free(dir);
  m = merges_with_line(7, "", &n), dir = broken_copy("empty_line", "merges.txt", m, n);
  expect_dir_error(dir, "/merges.txt:7: expected two symbols separated by one space, found \"\"");
  dc_free(m), free(dir);
  m = merges_with_line(3, "q\xc3 x", &n), dir = broken_copy("bad_utf8", "merges.txt", m, n);
  expect_dir_error(dir, "/merges.txt:3: not valid UTF-8 (byte 1 of the line)");
  dc_free(m), free(dir);
  m = merges_with_line(12, "zq xv", &n), dir = broken_copy("unknown_part", "merges.txt", m, n);
  expect_dir_error(dir, "/merges.txt:12: \"zq\" is not in the vocabulary (vocab.json)");
  dc_free(m), free(dir);
  m = merges_with_line(12, "z q</w>", &n), dir = broken_copy("unknown_result", "merges.txt", m, n);
  expect_dir_error(dir, "/merges.txt:12: the merged token \"zq</w>\" is not in the vocabulary (vocab.json)");
  dc_free(m), free(dir);

  dir = broken_copy("no_vocab", "vocab.json", NULL, 0);
  expect_dir_error(dir, ": no vocab.json (a CLIP tokenizer needs vocab.json and merges.txt, or tokenizer.json)");
  free(dir);
  dir = broken_copy("no_merges", "merges.txt", NULL, 0);
  expect_dir_error(dir, ": no merges.txt");
  free(dir);
  const char *trunc = "{\"a\": 1, \"b\": ";
  dir = broken_copy("bad_json", "vocab.json", trunc, strlen(trunc));
  expect_dir_error(dir, "/vocab.json:1:15: not valid JSON");
  free(dir);
  const char *cfg = "{\n  \"model_max_length\": 77,\n  \"pad_token\": \"<|endoftext|>\"\n  \"x\": 1\n}\n";
  dir = broken_copy("bad_config", "tokenizer_config.json", cfg, strlen(cfg));
  expect_dir_error(dir, "/tokenizer_config.json:4:3: not valid JSON");
  free(dir);
}

/* The real vocabulary without one token, as JSON text (cJSON_free it). */
static char *vocab_without(const char *token) {
  char *src = fixture_path("clip/vocab.json");
  dc_json_doc d;
  CHECK_OK(dc_json_load(src, &d));
  free(src);
  cJSON_DeleteItemFromObjectCaseSensitive(d.root, token);
  char *text = cJSON_PrintUnformatted(d.root);
  dc_json_free(&d);
  return text;
}

/* Merges that make ("i n" -> "in") or use ("t h") a token the vocabulary lacks. */
static void test_vocab_missing_merge_token(void) {
  printf("vocab.json without a token a merge makes or uses\n");
  char *text = vocab_without("in"), *dir = broken_copy("missing_in", "vocab.json", text, strlen(text));
  expect_dir_error(dir, "/merges.txt:2: the merged token \"in\" is not in the vocabulary (vocab.json)");
  cJSON_free(text);
  free(dir);
  text = vocab_without("t"), dir = broken_copy("missing_t", "vocab.json", text, strlen(text));
  expect_dir_error(dir, "/merges.txt:3: \"t\" is not in the vocabulary (vocab.json)");
  cJSON_free(text);
  free(dir);
}

/* A tiny tokenizer: bytes a, b (plain and </w>), two merges, the specials. */
static const char *tiny_vocab =
    "{\"a\": 0, \"b\": 1, \"a</w>\": 2, \"b</w>\": 3, \"ab</w>\": 4, \"ab\": 5, \"!\": 6, "
    "\"<|startoftext|>\": 7, \"<|endoftext|>\": 8}";
static const char *tiny_merges = "#version: 0.2\na b</w>\na b\n";
static const char *tiny_config = "{\"model_max_length\": 6}";

/* Parses the tiny tokenizer with one file replaced; expects an error with `want`. */
static void expect_tiny_error(const char *file, const char *text, const char *want) {
  dc_text_files fs;
  files_init(&fs, "tiny");
  files_add(&fs, "vocab.json", strcmp(file, "vocab.json") ? tiny_vocab : text);
  files_add(&fs, "merges.txt", strcmp(file, "merges.txt") ? tiny_merges : text);
  files_add(&fs, "tokenizer_config.json", strcmp(file, "tokenizer_config.json") ? tiny_config : text);
  if (strcmp(file, "special_tokens_map.json") == 0) files_add(&fs, file, text);
  dc_clip_tokenizer *t = NULL;
  CHECK_ERR(parse_files(&fs, &t), want);
  CHECK(t == NULL);
  dc_text_files_free(&fs);
}

static void test_value_errors(void) {
  printf("bad values\n");
  expect_tiny_error("vocab.json", "{\"a\": 0, \"b\": 0}", "tiny/vocab.json: tokens \"a\" and \"b\" both have id 0");
  expect_tiny_error("vocab.json", "{\"a\": 0, \"a\": 1}", "tiny/vocab.json: token \"a\" appears twice");
  expect_tiny_error("vocab.json", "{\"a\": 1.5}", "tiny/vocab.json: \"a\": expected an integer id from 0 to 2147483647, found 1.5");
  expect_tiny_error("vocab.json", "{\"a\": \"x\"}", "\"a\": expected an integer id from 0 to 2147483647, found a string");
  expect_tiny_error("vocab.json", "[1, 2]", "tiny/vocab.json: the top level must be an object of token -> id");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 77.5}",
                    "tiny/tokenizer_config.json: \"model_max_length\" must be a positive integer, found 77.5");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": -3}", "must be a positive integer, found -3");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": \"77\"}", "positive integer, found a string");
  expect_tiny_error("tokenizer_config.json", "{}", "tiny/tokenizer_config.json: no \"model_max_length\"");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 1e30}", "must be a positive integer, found 1e+30");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 1}", "\"model_max_length\" is 1; diffc pads to 2 .. 65536 tokens");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 6, \"pad_token\": \"<pad>\"}",
                    "tiny/tokenizer_config.json: \"pad_token\": \"<pad>\" is not in the vocabulary");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 6, \"bos_token\": {\"normalized\": true}}",
                    "\"bos_token\": expected a string or an object with a string \"content\"");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 6, \"pad_token\": null}",
                    "\"pad_token\": expected a string or an object");
  expect_tiny_error("tokenizer_config.json",
                    "{\"model_max_length\": 6, \"eos_token\": {\"content\": \"!\", \"lstrip\": true}}",
                    "\"eos_token\": \"!\" sets lstrip, rstrip or single_word");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 6, \"added_tokens_decoder\": "
                    "{\"3\": {\"content\": \"!\", \"special\": true}}}", "\"!\" has id 3, but the vocabulary gives it 6");
  expect_tiny_error("tokenizer_config.json", "{\"model_max_length\": 6, \"image_token\": \"!\"}",
                    "\"image_token\" is a model-specific special token");
  expect_tiny_error("special_tokens_map.json", "{\"pad_token\": \"<pad>\"}",
                    "tiny/special_tokens_map.json: \"pad_token\": \"<pad>\" is not in the vocabulary");
  expect_tiny_error("merges.txt", "#version: 0.2\nb a\n", "tiny/merges.txt:2: the merged token \"ba\"");

  dc_text_files fs;
  files_init(&fs, "tjson");
  files_add(&fs, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                                   " \"merges\": [\"a b\", [\"a\", \"b\"], \"a b c\"]}}");
  files_add(&fs, "tokenizer_config.json", tiny_config);
  dc_clip_tokenizer *t = NULL;
  CHECK_ERR(parse_files(&fs, &t), "tjson/tokenizer.json: model.merges[2]: expected two symbols separated by one space");
  dc_text_files_free(&fs);
  files_init(&fs, "tjson");
  files_add(&fs, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  CHECK_ERR(parse_files(&fs, &t), "tjson/tokenizer.json: \"model.type\" is WordPiece, not \"BPE\"");
  dc_text_files_free(&fs);
  files_init(&fs, "tjson");
  files_add(&fs, "tokenizer.json", "{\"model\": {\"vocab\": {\"a\": 0, \"b\": -1}, \"merges\": []}}");
  CHECK_ERR(parse_files(&fs, &t), "tjson/tokenizer.json: model.vocab[\"b\"]: expected an integer id from 0 to 2147483647, found -1");
  dc_text_files_free(&fs);
}

static dc_clip_tokenizer *tiny(void) {
  dc_text_files fs;
  files_init(&fs, "tiny");
  files_add(&fs, "vocab.json", tiny_vocab);
  files_add(&fs, "merges.txt", tiny_merges);
  files_add(&fs, "tokenizer_config.json", tiny_config);
  dc_clip_tokenizer *t = NULL;
  CHECK_OK(parse_files(&fs, &t));
  dc_text_files_free(&fs);
  return t;
}

static void test_tiny_and_prompt_errors(void) {
  printf("a tiny vocabulary (unknown bytes become unk), invalid UTF-8 prompts\n");
  dc_clip_tokenizer *t = tiny();
  if (!t) return;
  int64_t ids[6];
  dc_tokenize_report rep;
  /* "ab" -> ab</w>; "ba" -> b a</w>; "z" is no token: unk (<|endoftext|>, 8); room for 4 */
  CHECK_OK(dc_clip_tokenizer_encode(t, "AB ba z", ids, &rep));
  int64_t want[6] = {7, 4, 1, 2, 8, 8};
  CHECK(memcmp(ids, want, sizeof want) == 0 && rep.ntokens == 4 && !rep.truncated && !rep.removed_text);
  CHECK_OK(dc_clip_tokenizer_encode(t, "AB ba z ab b", ids, &rep));
  CHECK(memcmp(ids, want, sizeof want) == 0 && rep.ntokens == 6 && rep.truncated);
  CHECK(rep.removed_text && strcmp(rep.removed_text, "ab b") == 0);
  dc_free(rep.removed_text);
  CHECK_ERR(dc_clip_tokenizer_encode(t, "abc\xff", ids, &rep), "prompt: not valid UTF-8 at byte offset 3 (byte 0xff)");
  CHECK(!rep.removed_text);
  CHECK_ERR(dc_clip_tokenizer_encode(t, "caf\xc3", ids, NULL), "byte offset 3 (byte 0xc3)");
  CHECK_ERR(dc_clip_tokenizer_encode(t, "\xed\xa0\x80 surrogate", ids, NULL), "byte offset 0 (byte 0xed)");
  CHECK_ERR(dc_clip_tokenizer_encode(t, "x\xc0\xaf overlong", ids, NULL), "byte offset 1 (byte 0xc0)");
  dc_clip_tokenizer_free(t);
}

/* Every allocation of parse and encode made to fail in turn: a clean
 * out-of-memory error each time, nothing leaked (LeakSanitizer's part). */
static void test_alloc_failures(void) {
  printf("allocation failure sweep\n");
  dc_text_files fs;
  files_init(&fs, "tiny");
  files_add(&fs, "vocab.json", tiny_vocab);
  files_add(&fs, "merges.txt", tiny_merges);
  files_add(&fs, "tokenizer_config.json", "{\"model_max_length\": 6, \"bos_token\": {\"content\": "
                                          "\"<|startoftext|>\", \"normalized\": true}}");
  int fails = 0, done = 0;
  for (long k = 0; k < 2000 && !done; k++) {
    dc_clip_tokenizer *t = NULL;
    int64_t ids[6];
    dc_tokenize_report rep;
    dc_alloc_fail_after(k);
    dc_status *st = parse_files(&fs, &t);
    if (!st) st = dc_clip_tokenizer_encode(t, "ab! Ba <|startoftext|> zz ab ab", ids, &rep);
    dc_alloc_fail_after(-1);
    if (st) {
      fails += dc_status_code_of(st) == DC_ERR_NOMEM;
      CHECK(dc_status_code_of(st) == DC_ERR_NOMEM);
      dc_status_free(st);
    } else {
      done = 1;
      CHECK(rep.truncated && rep.removed_text);
      dc_free(rep.removed_text);
    }
    dc_clip_tokenizer_free(t);
  }
  printf("  %d failures, then success\n", fails);
  CHECK(done && fails > 10);
  dc_text_files_free(&fs);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_corpus();
  test_variants();
  test_truncation();
  test_file_errors();
  test_vocab_missing_merge_token();
  test_value_errors();
  test_tiny_and_prompt_errors();
  test_alloc_failures();
  return tu_finish();
}
