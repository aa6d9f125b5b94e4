/* test_torch_rng.c — dc_torch_manual_seed + dc_torch_randn against torch
 * itself, BITWISE: every float32 must have the bits torch.randn gave
 * (tests/fixtures/schedulers/torch_rng.*, written by
 * tools/make_fixtures_scheduler.py).  Seeds 0, 1, 42, 2^32 + 5 (torch keeps
 * the low 32 bits) and a large 64-bit one; sizes 1, 7, 15 (the scalar path
 * with its cached normal), 16, 17, 31, 100 (blocks of 16, ragged tails),
 * 1024 and 32768 (the last compared through SHA-256 of its bytes); two
 * successive draws per fresh generator, and one generator through every
 * size twice. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/torch_rng.h"
#include "testutil.h"

static char *fixture(const char *name) {
  return dc_asprintf("%s/fixtures/schedulers/%s", tu_source_dir, name);
}

/* The first index where got and want differ bitwise, or -1. */
static long first_diff(const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (dc_f32_bits(got[i]) != dc_f32_bits(want[i])) return (long)i;
  return -1;
}

static int sha_matches(const float *v, size_t n, const char *hex) {
  unsigned char h[crypto_hash_sha256_BYTES];
  char got[2 * crypto_hash_sha256_BYTES + 1];
  crypto_hash_sha256(h, (const unsigned char *)v, n * sizeof(float)); /* little-endian host */
  sodium_bin2hex(got, sizeof got, h, sizeof h);
  return strcmp(got, hex) == 0;
}

/* The generator state a draw continues from: fresh per (kind, seed) run. */
typedef struct {
  char kind[32], seed[32];
  dc_torch_gen g;
} stream;

static int check_draw(stream *s, const cJSON *d, const dc_st_file *st) {
  const char *kind = cJSON_GetObjectItem(d, "kind")->valuestring;
  const char *seed = cJSON_GetObjectItem(d, "seed")->valuestring;
  size_t n = (size_t)cJSON_GetObjectItem(d, "n")->valuedouble;
  if (strcmp(kind, s->kind) || strcmp(seed, s->seed)) { /* a new run */
    snprintf(s->kind, sizeof s->kind, "%s", kind);
    snprintf(s->seed, sizeof s->seed, "%s", seed);
    dc_torch_manual_seed(&s->g, strtoull(seed, NULL, 10));
  }
  float *got = malloc(n * sizeof(float));
  dc_torch_randn(&s->g, got, n);
  int ok;
  const cJSON *name = cJSON_GetObjectItem(d, "tensor");
  if (name) {
    const dc_st_tensor *t = dc_st_find(st, name->valuestring);
    float *want = malloc(n * sizeof(float));
    ok = t && t->bytes == n * sizeof(float);
    if (ok) memcpy(want, st->file.data + t->offset, n * sizeof(float));
    long at = ok ? first_diff(got, want, n) : -2;
    if (at >= 0)
      fprintf(stderr, "  %s seed %s draw %d: element %ld is %.9g (0x%08x), torch has %.9g (0x%08x)\n", kind, seed,
              cJSON_GetObjectItem(d, "index")->valueint, at, got[at], dc_f32_bits(got[at]), want[at],
              dc_f32_bits(want[at]));
    ok = at == -1;
    free(want);
  } else {
    ok = sha_matches(got, n, cJSON_GetObjectItem(d, "sha256")->valuestring);
    if (!ok) fprintf(stderr, "  %s seed %s: the %zu values' SHA-256 differs from torch's\n", kind, seed, n);
  }
  free(got);
  return ok;
}

static void test_against_torch(void) {
  printf("torch.randn, bitwise, against tests/fixtures/schedulers/torch_rng.*\n");
  char *jpath = fixture("torch_rng.json"), *spath = fixture("torch_rng.safetensors");
  dc_json_doc doc;
  dc_st_file st;
  CHECK_OK(dc_json_load(jpath, &doc));
  CHECK_OK(dc_st_open(spath, &st));
  const cJSON *draws = cJSON_GetObjectItem(doc.root, "draws");
  stream s = {{0}, {0}, {{0}, 0, 0, 0, 0, 0}};
  int n = 0, bad = 0;
  size_t values = 0;
  for (const cJSON *d = draws ? draws->child : NULL; d; d = d->next, n++) {
    int ok = check_draw(&s, d, &st);
    values += (size_t)cJSON_GetObjectItem(d, "n")->valuedouble;
    bad += !ok;
    CHECK(ok);
  }
  printf("  %d draws (%zu values) checked, %d differ\n", n, values, bad);
  CHECK(n == 5 * (9 * 2 + 18));
  dc_st_close(&st);
  dc_json_free(&doc);
  dc_free(jpath);
  dc_free(spath);
}

/* The scalar path's cache: randn(1) returns r cos(theta) and keeps
 * r sin(theta) for the next call; a 16+ draw in between leaves it alone. */
static void test_cache(void) {
  printf("the n < 16 path keeps its second normal across calls\n");
  dc_torch_gen a, b;
  dc_torch_manual_seed(&a, 7);
  dc_torch_manual_seed(&b, 7);
  float two[2], one[1], big[20], after[1];
  dc_torch_randn(&a, two, 2);
  dc_torch_randn(&b, one, 1);
  CHECK(dc_f32_bits(one[0]) == dc_f32_bits(two[0]));
  dc_torch_randn(&b, big, 20);
  dc_torch_randn(&b, after, 1);
  CHECK(dc_f32_bits(after[0]) == dc_f32_bits(two[1]));
  CHECK(b.has_next_double_normal == 0);
  /* reseeding forgets the cache */
  dc_torch_randn(&a, one, 1);
  CHECK(a.has_next_double_normal == 1);
  dc_torch_manual_seed(&a, 7);
  CHECK(a.has_next_double_normal == 0);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (sodium_init() < 0) {
    fprintf(stderr, "libsodium failed to start\n");
    return 1;
  }
  test_against_torch();
  test_cache();
  return tu_finish();
}
