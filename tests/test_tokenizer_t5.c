/* test_tokenizer_t5.c — T5's unigram tokenizer (pipeline/tokenizer_t5.h)
 * against transformers 5.24's T5TokenizerFast: every prompt of
 * fixtures/tokenizer_t5/corpus.json id for id at max lengths 77 and 16, from
 * the folder (tokenizer.json) and from spiece.model alone; the cut text and
 * token count of the report; the errors broken files give (messages
 * pinned); an allocation failure sweep. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/tokenizer_t5.h"
#include "testutil.h"

#define MAXLEN_CAP 128

static char *fixture_path(const char *rel) {
  char *p = malloc(strlen(tu_source_dir) + strlen(rel) + 40);
  sprintf(p, "%s/fixtures/tokenizer_t5/%s", tu_source_dir, rel);
  return p;
}

static void files_init(dc_text_files *fs, const char *origin) {
  memset(fs, 0, sizeof *fs);
  fs->origin = dc_strdup(origin);
}
static void files_add(dc_text_files *fs, const char *name, const char *text) {
  CHECK_OK(dc_text_files_add(fs, name, text, strlen(text)));
}

/* The fixture folder's files; without_json leaves tokenizer.json out, so
 * spiece.model is read. */
static void fixture_files(dc_text_files *out, int without_json) {
  dc_text_files all;
  char *dir = fixture_path("t5");
  CHECK_OK(dc_text_files_read_dir(dir, dc_t5_tokenizer_file_names, &all));
  files_init(out, without_json ? "t5-spm" : "t5");
  for (int i = 0; i < all.nfiles; i++)
    if (!(without_json && !strcmp(all.files[i].name, "tokenizer.json")))
      CHECK_OK(dc_text_files_add(out, all.files[i].name, all.files[i].data, all.files[i].size));
  dc_text_files_free(&all);
  free(dir);
}

static dc_t5_tokenizer *load_fixture(int without_json) {
  dc_text_files fs;
  fixture_files(&fs, without_json);
  dc_t5_tokenizer *t = NULL;
  double t0 = dc_now_seconds();
  CHECK_OK(dc_t5_tokenizer_parse(&fs, &t));
  printf("  parsed %s in %.1f ms\n", without_json ? "spiece.model" : "tokenizer.json", 1e3 * (dc_now_seconds() - t0));
  dc_text_files_free(&fs);
  return t;
}

static cJSON *load_corpus(void) {
  char *path = fixture_path("corpus.json"), *text = NULL, why[64];
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

/* One prompt at one length against transformers' ids, token count and cut text. */
static int check_case(const dc_t5_tokenizer *t, const char *what, const cJSON *c, int len) {
  const char *prompt = cJSON_GetObjectItem(c, "prompt")->valuestring;
  int spm = !strcmp(what, "spm");
  char key[64];
  snprintf(key, sizeof key, "ids%s_%d", spm ? "_spm" : "", len);
  const cJSON *want = cJSON_GetObjectItem(c, key);
  /* the spiece.model side has its own cut text and count only where they differ */
  int hub = !strcmp(what, "hub");
  snprintf(key, sizeof key, "removed_%s_%d", hub ? "hub" : "spm", len);
  const cJSON *cut = spm || hub ? cJSON_GetObjectItem(c, key) : NULL;
  snprintf(key, sizeof key, "removed_%d", len);
  if (!cut) cut = cJSON_GetObjectItem(c, key);
  const cJSON *ntok = spm ? cJSON_GetObjectItem(c, "ntokens_spm") : NULL;
  if (!ntok) ntok = cJSON_GetObjectItem(c, "ntokens");
  int64_t ids[MAXLEN_CAP];
  dc_tokenize_report rep;
  dc_status *st = dc_t5_tokenizer_encode(t, prompt, len, ids, &rep);
  if (st) {
    fprintf(stderr, "%s \"%s\": %s\n", what, show(prompt), dc_status_message(st));
    dc_status_free(st);
    return 0;
  }
  int ok = cJSON_GetArraySize(want) == len;
  for (int i = 0; i < len && ok; i++)
    if (ids[i] != (int64_t)cJSON_GetArrayItem(want, i)->valuedouble) {
      fprintf(stderr, "%s/%d \"%s\": id %d is %lld, transformers gives %.0f\n", what, len, show(prompt), i,
              (long long)ids[i], cJSON_GetArrayItem(want, i)->valuedouble);
      ok = 0;
    }
  if (rep.ntokens != (int)ntok->valuedouble) {
    fprintf(stderr, "%s \"%s\": %d tokens, transformers %.0f\n", what, show(prompt), rep.ntokens, ntok->valuedouble);
    ok = 0;
  }
  if (rep.truncated != (cut != NULL) || (cut && strcmp(rep.removed_text, cut->valuestring))) {
    fprintf(stderr, "%s/%d \"%s\": cut text \"%s\", diffusers logs \"%s\"\n", what, len, show(prompt),
            rep.removed_text ? show(rep.removed_text) : "(none)", cut ? cut->valuestring : "(none)");
    ok = 0;
  }
  dc_free(rep.removed_text);
  return ok;
}

static void test_corpus(void) {
  printf("corpus: tokenizer.json and spiece.model alone, lengths 77 and 16\n");
  cJSON *corpus = load_corpus();
  dc_t5_tokenizer *json = load_fixture(0), *spm = load_fixture(1);
  if (!json || !spm || !corpus) return;
  CHECK(dc_t5_tokenizer_pad_id(json) == 0 && dc_t5_tokenizer_eos_id(json) == 1 && dc_t5_tokenizer_unk_id(json) == 2);
  CHECK(dc_t5_tokenizer_eos_id(spm) == 1);
  int n = 0, good = 0;
  for (const cJSON *c = corpus->child; c; c = c->next)
    for (int k = 0; k < 2; k++) {
      int len = k ? 16 : 77;
      good += check_case(json, "json", c, len) + check_case(spm, "spm", c, len);
      n += 2;
    }
  printf("  %d of %d cases id for id (%d prompts)\n", good, n, cJSON_GetArraySize(corpus));
  CHECK(n >= 280 && good == n);
  dc_t5_tokenizer_free(json);
  dc_t5_tokenizer_free(spm);
  cJSON_Delete(corpus);
}

/* A JSON file's root (NULL and a failed check on error). */
static cJSON *load_json(const char *rel) {
  char *path = fixture_path(rel), *text = NULL, why[64];
  size_t n = 0, at = 0;
  CHECK_OK(dc_file_read_all(path, &text, &n));
  cJSON *root = text ? dc_json_parse_bytes(text, n, &at, why) : NULL;
  CHECK(root != NULL);
  free(path);
  dc_free(text);
  return root;
}

/* t5/tokenizer.json with the normalizer and pre-tokenizer that released T5
 * files declare, and their configs (hub_style.json): transformers ignores
 * the first two, and so must we; the configs ask for the cut text cleaned up. */
static void test_hub_style(void) {
  printf("tokenizer.json in the released files' style\n");
  cJSON *tok = load_json("t5/tokenizer.json"), *hub = load_json("hub_style.json"), *corpus = load_corpus();
  if (!tok || !hub || !corpus) return;
  const cJSON *map = cJSON_GetObjectItem(cJSON_GetObjectItem(tok, "normalizer"), "precompiled_charsmap");
  cJSON *norm = cJSON_DetachItemFromObject(hub, "normalizer");
  cJSON *pre = cJSON_DetachItemFromObject(hub, "pre_tokenizer");
  cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(norm, "normalizers"), 0);
  cJSON_ReplaceItemInObject(first, "precompiled_charsmap", cJSON_CreateString(map->valuestring));
  cJSON_ReplaceItemInObject(tok, "normalizer", norm);
  cJSON_ReplaceItemInObject(tok, "pre_tokenizer", pre);
  char *text = cJSON_PrintUnformatted(tok);
  dc_text_files fs;
  files_init(&fs, "hub");
  files_add(&fs, "tokenizer.json", text);
  const char *configs[] = {"tokenizer_config.json", "special_tokens_map.json"};
  for (int k = 0; k < 2; k++) {
    char *cfg = cJSON_PrintUnformatted(cJSON_GetObjectItem(hub, configs[k]));
    files_add(&fs, configs[k], cfg);
    cJSON_free(cfg);
  }
  dc_t5_tokenizer *t = NULL;
  CHECK_OK(dc_t5_tokenizer_parse(&fs, &t));
  int n = 0, good = 0;
  for (const cJSON *c = corpus->child; c && t; c = c->next, n += 2)
    good += check_case(t, "hub", c, 77) + check_case(t, "hub", c, 16);
  printf("  %d of %d cases id for id\n", good, n);
  CHECK(n >= 120 && good == n);
  dc_t5_tokenizer_free(t);
  dc_text_files_free(&fs);
  cJSON_free(text);
  cJSON_Delete(tok);
  cJSON_Delete(hub);
  cJSON_Delete(corpus);
}

/* max_length 1 keeps only eos; the report still counts every piece. */
static void test_truncation_edges(void) {
  printf("truncation edges\n");
  dc_t5_tokenizer *t = load_fixture(0);
  if (!t) return;
  int64_t ids[4];
  dc_tokenize_report rep;
  CHECK_OK(dc_t5_tokenizer_encode(t, "a photo", 1, ids, &rep));
  CHECK(ids[0] == 1 && rep.truncated && rep.ntokens > 1 && rep.removed_text && !strcmp(rep.removed_text, "a photo"));
  dc_free(rep.removed_text);
  CHECK_OK(dc_t5_tokenizer_encode(t, "", 3, ids, NULL));
  CHECK(ids[0] == 1 && ids[1] == 0 && ids[2] == 0);
  CHECK_ERR(dc_t5_tokenizer_encode(t, "x", 0, ids, &rep), "max_length 0, expected at least 1");
  CHECK_ERR(dc_t5_tokenizer_encode(t, "ab\xff", 4, ids, &rep), "prompt: not valid UTF-8 at byte 2");
  dc_t5_tokenizer_free(t);
}

/* A tiny tokenizer.json: pieces chosen to exercise Viterbi (ties, unk fusing). */
static const char *tiny_json(const char *model, const char *normalizer, const char *pre) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "{\"added_tokens\": [{\"id\": 1, \"content\": \"</s>\", \"special\": true}],"
           " \"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": null, \"model\": %s}",
           normalizer, pre, model);
  return buf;
}
#define TINY_MODEL                                                                                                \
  "{\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": [[\"<pad>\", 0], [\"</s>\", 0], [\"<unk>\", 0],"           \
  " [\"\\u2581\", -1], [\"a\", -2], [\"b\", -2], [\"ab\", -4], [\"\\u2581ab\", -3], [\"c\", -3]]}"

static dc_status *parse_tiny(const char *json, const char *config, dc_t5_tokenizer **t) {
  dc_text_files fs;
  files_init(&fs, "tiny");
  files_add(&fs, "tokenizer.json", json);
  files_add(&fs, "tokenizer_config.json", config ? config : "{\"extra_ids\": 0}");
  dc_status *st = dc_t5_tokenizer_parse(&fs, t);
  dc_text_files_free(&fs);
  return st;
}

static void test_tiny_viterbi(void) {
  printf("tiny vocabulary: ties, unknowns fused\n");
  dc_t5_tokenizer *t = NULL;
  CHECK_OK(parse_tiny(tiny_json(TINY_MODEL, "null", "{\"type\": \"Metaspace\"}"), NULL, &t));
  if (!t) return;
  int64_t ids[8];
  /* "▁ab": ▁ab (-3) beats ▁+ab (-5) and ▁+a+b (-5); "ab" alone after "▁" is cut off
   * by nothing; "xyz" unknown: one unk for three characters; "</s>" cut out. */
  CHECK_OK(dc_t5_tokenizer_encode(t, "ab xyzc</s>b", 8, ids, NULL));
  int64_t want[8] = {7, 3, 2, 8, 1, 3, 5, 1};
  int same = 1;
  for (int i = 0; i < 8; i++) same &= ids[i] == want[i];
  if (!same)
    fprintf(stderr, "got %lld %lld %lld %lld %lld %lld %lld %lld\n", (long long)ids[0], (long long)ids[1],
            (long long)ids[2], (long long)ids[3], (long long)ids[4], (long long)ids[5], (long long)ids[6],
            (long long)ids[7]);
  CHECK(same);
  dc_t5_tokenizer_free(t);
}

static void test_errors(void) {
  printf("errors\n");
  dc_t5_tokenizer *t = NULL;
  const char *meta = "{\"type\": \"Metaspace\"}";
  CHECK_ERR(parse_tiny("{\"model\": ", NULL, &t), "tiny/tokenizer.json:1:11: not valid JSON");
  CHECK_ERR(parse_tiny(tiny_json("{\"type\": \"BPE\", \"vocab\": {}}", "null", meta), NULL, &t),
            "tiny/tokenizer.json: model type \"BPE\" is not a T5 tokenizer's (expected \"Unigram\")");
  CHECK_ERR(parse_tiny(tiny_json("{\"type\": \"Unigram\", \"unk_id\": 2}", "null", meta), NULL, &t),
            "tiny/tokenizer.json: \"model.vocab\" must be a non-empty list of [piece, score], found nothing");
  CHECK_ERR(parse_tiny(tiny_json("{\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": [[\"a\", 0], [\"b\", 0], "
                                 "[\"a\", -1]]}", "null", meta), NULL, &t),
            "tiny/tokenizer.json: model.vocab[2]: piece \"a\" appears twice (ids 0 and 2)");
  CHECK_ERR(parse_tiny(tiny_json("{\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": [[\"a\", 0], [\"b\"]]}", "null",
                                 meta), NULL, &t),
            "tiny/tokenizer.json: model.vocab[1]: expected [piece, score], found list");
  CHECK_ERR(parse_tiny("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": [[\"a\", 0], [\"b\", 0]]}}",
                       NULL, &t),
            "tiny/tokenizer.json: 2 pieces; the unk id 2 is out of range");
  CHECK_ERR(parse_tiny(tiny_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"a\", 0], [\"b\", 0]]}",
                                 "null", meta), NULL, &t),
            "model.unk_id is 0, expected 2");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "{\"type\": \"Lowercase\"}", meta), NULL, &t),
            "normalizer type \"Lowercase\" is not supported for a T5 tokenizer");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", "{\"type\": \"ByteLevel\"}"), NULL, &t),
            "pre_tokenizer type \"ByteLevel\" is not supported");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AB*=\"}", meta),
                       NULL, &t),
            "tiny/tokenizer.json: normalizer Precompiled's \"precompiled_charsmap\": bad base64: character \"*\" at offset 2");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"/////w==\"}",
                                 meta), NULL, &t),
            "precompiled charsmap says its trie has 4294967295 bytes, only 0 follow");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", meta), "{\"pad_token\": \"<nope>\", \"extra_ids\": 0}", &t),
            "tiny/tokenizer_config.json: pad_token \"<nope>\" is not in the vocabulary");
  CHECK_ERR(parse_tiny("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 2, \"vocab\": [[\"a\", 0], [\"b\", 0], [\"c\", 0]]}}",
                       NULL, &t),
            "tiny/tokenizer_config.json: pad_token is not set, and T5's default \"<pad>\" is not in the vocabulary");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", meta), "{}", &t),
            "tiny/tokenizer_config.json: sentinel <extra_id_0> (extra_ids = 100) is not in the vocabulary");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", meta),
                       "{\"extra_ids\": 0, \"added_tokens_decoder\": {\"9\": {\"content\": \"<new>\"}}}", &t),
            "tiny/tokenizer_config.json: added_tokens_decoder[\"9\"] \"<new>\" has id 9 but the vocabulary lacks it");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", meta),
                       "{\"extra_ids\": 0, \"added_tokens_decoder\": {\"4\": {\"content\": \"a\", \"lstrip\": true}}}",
                       &t),
            "tiny/tokenizer_config.json: added_tokens_decoder[\"4\"] has \"lstrip\": true, which is not supported");
  CHECK_ERR(parse_tiny(tiny_json(TINY_MODEL, "null", meta), "{\"extra_ids\": -1}", &t),
            "\"extra_ids\" must be a whole number in 0..100000, found -1");
  /* a one-unit trie whose offset points far outside: found when a prompt walks it */
  CHECK_OK(parse_tiny(tiny_json(TINY_MODEL, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"BAAAAAD8//8=\"}",
                                meta), "{\"extra_ids\": 0}", &t));
  int64_t ids[4];
  if (t)
    CHECK_ERR(dc_t5_tokenizer_encode(t, "a", 4, ids, NULL),
              "tiny/tokenizer.json: normalizer Precompiled's \"precompiled_charsmap\": corrupt: its trie points "
              "outside the map");
  dc_t5_tokenizer_free(t);
  t = NULL;
  dc_text_files fs;
  files_init(&fs, "empty");
  CHECK_ERR(dc_t5_tokenizer_parse(&fs, &t), "empty: no tokenizer.json or spiece.model: not a T5 tokenizer folder");
  dc_text_files_free(&fs);
  CHECK(t == NULL);
}

/* spiece.model cut short, changed, or with a wrong unk id. */
static void test_proto_errors(void) {
  printf("spiece.model errors\n");
  char *path = fixture_path("t5/spiece.model"), *data = NULL;
  size_t n = 0;
  CHECK_OK(dc_file_read_all(path, &data, &n));
  free(path);
  if (!data) return;
  dc_t5_tokenizer *t = NULL;
  struct {
    size_t len;
    const char *want;
  } cuts[] = {{n / 2, "t5-spm/spiece.model: truncated protobuf:"}, {1, "truncated protobuf: a varint at byte 1"},
              {0, "t5-spm/spiece.model: no pieces: not a sentencepiece model"}};
  for (int k = 0; k < 3; k++) {
    dc_text_files fs;
    files_init(&fs, "t5-spm");
    CHECK_OK(dc_text_files_add(&fs, "spiece.model", data, cuts[k].len));
    CHECK_ERR(dc_t5_tokenizer_parse(&fs, &t), cuts[k].want);
    dc_text_files_free(&fs);
  }
  /* a group wire type as the first field; a piece without text */
  const char group[] = {0x0b, 0x0c};
  const char no_text[] = {0x0a, 0x05, 0x15, 0x00, 0x00, 0x80, 0x3f};
  const char *wants[] = {"t5-spm/spiece.model: bad protobuf: field 1 at byte 0 has wire type 3",
                         "t5-spm/spiece.model: piece 0 (byte 2) has no text"};
  const char *bytes[] = {group, no_text};
  size_t sizes[] = {sizeof group, sizeof no_text};
  for (int k = 0; k < 2; k++) {
    dc_text_files fs;
    files_init(&fs, "t5-spm");
    CHECK_OK(dc_text_files_add(&fs, "spiece.model", bytes[k], sizes[k]));
    CHECK_ERR(dc_t5_tokenizer_parse(&fs, &t), wants[k]);
    dc_text_files_free(&fs);
  }
  /* three pieces and trainer_spec.unk_id = 0 (field 40, varint 0) */
  const char unk0[] = {0x0a, 0x03, 0x0a, 0x01, 'a', 0x0a, 0x03, 0x0a, 0x01, 'b', 0x0a, 0x03, 0x0a, 0x01, 'c',
                       0x12, 0x03, (char)0xc0, 0x02, 0x00};
  dc_text_files fs;
  files_init(&fs, "t5-spm");
  CHECK_OK(dc_text_files_add(&fs, "spiece.model", unk0, sizeof unk0));
  files_add(&fs, "tokenizer_config.json", "{\"extra_ids\": 0}");
  CHECK_ERR(dc_t5_tokenizer_parse(&fs, &t), "t5-spm/spiece.model: trainer_spec.unk_id is 0, expected 2");
  dc_text_files_free(&fs);
  dc_free(data);
}

static void test_alloc_failures(void) {
  printf("allocation failure sweep\n");
  dc_text_files fs;
  files_init(&fs, "tiny");
  files_add(&fs, "tokenizer.json", tiny_json(TINY_MODEL, "null", "{\"type\": \"Metaspace\"}"));
  files_add(&fs, "tokenizer_config.json", "{\"extra_ids\": 0}");
  int fails = 0, done = 0;
  for (long k = 0; k < 2000 && !done; k++) {
    dc_t5_tokenizer *t = NULL;
    int64_t ids[4];
    dc_tokenize_report rep;
    dc_alloc_fail_after(k);
    dc_status *st = dc_t5_tokenizer_parse(&fs, &t);
    if (!st) st = dc_t5_tokenizer_encode(t, "ab xyz </s> ab ab c", 4, ids, &rep);
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
    dc_t5_tokenizer_free(t);
  }
  printf("  %d failures, then success\n", fails);
  CHECK(done && fails > 5);
  dc_text_files_free(&fs);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_corpus();
  test_hub_style();
  test_truncation_edges();
  test_tiny_viterbi();
  test_errors();
  test_proto_errors();
  test_alloc_failures();
  return tu_finish();
}
