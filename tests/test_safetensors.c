/* test_safetensors.c — dc_st_write round trips, and every rule of the format
 * dc_st_open enforces, each with a file crafted byte by byte and the exact
 * message pinned. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "testutil.h"

/* Writes 8-byte LE `n` + header text + `data_len` bytes of data. */
static char *craft_n(const char *name, uint64_t n, const char *header, size_t data_len) {
  char *path = tu_path(name);
  size_t hl = strlen(header), total = 8 + hl + data_len;
  unsigned char *b = calloc(1, total);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
  memcpy(b + 8, header, hl);
  for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (unsigned char)i;
  tu_write_file(path, b, total);
  free(b);
  return path;
}

static char *craft(const char *name, const char *header, size_t data_len) {
  return craft_n(name, strlen(header), header, data_len);
}

/* Crafts the file and expects dc_st_open to fail with "<path>: <msg>". */
static void check_bad(const char *header, size_t data_len, const char *msg) {
  char *path = craft("bad.safetensors", header, data_len);
  char want[1024];
  snprintf(want, sizeof want, "%s: %s", path, msg);
  dc_st_file f;
  CHECK_ERR(dc_st_open(path, &f), want);
  CHECK(f.tensors == NULL && f.ntensors == 0 && f.file.data == NULL);
  free(path);
}

static void check_good(const char *header, size_t data_len, int ntensors) {
  char *path = craft("good.safetensors", header, data_len);
  dc_st_file f;
  CHECK_OK(dc_st_open(path, &f));
  CHECK(f.ntensors == ntensors);
  dc_st_close(&f);
  free(path);
}


static void test_round_trip(void) {
  printf("dc_st_write then dc_st_open\n");
  float a[6] = {1, 2, 3, 4, 5, 6};
  uint16_t h[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
  uint16_t bf[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
  uint8_t f8[3] = {1, 2, 3};
  float s = 42;
  dc_st_out t[] = {
      {"z.weight", {DT_F32, 2, {2, 3}}, a}, {"a.half", {DT_F16, 1, {4}}, h},
      {"m.bf16", {DT_BF16, 2, {2, 2}}, bf}, {"e.empty", {DT_F32, 2, {0, 3}}, NULL},
      {"s.scalar", {DT_F32, 0, {0}}, &s},   {"q\"uote\\d", {DT_F8_E4M3, 1, {3}}, f8},
      {"f8b", {DT_F8_E5M2, 1, {3}}, f8},
  };
  int n = (int)(sizeof t / sizeof *t);
  char *path = tu_path("rt.safetensors");
  CHECK_OK(dc_st_write(path, t, n));
  CHECK(tu_tmp_files_left() == 0);
  dc_st_file f;
  CHECK_OK(dc_st_open(path, &f));
  CHECK(f.ntensors == n);
  CHECK(f.header_len % 8 == 0);
  CHECK(f.header_hash == dc_hash64(f.file.data, (size_t)(8 + f.header_len)));
  for (int i = 1; i < f.ntensors; i++) CHECK(strcmp(f.tensors[i - 1].name, f.tensors[i].name) < 0);
  /* offsets follow name order, starting right after the header */
  CHECK(f.tensors[0].offset == 8 + f.header_len);
  for (int i = 0; i < n; i++) {
    const dc_st_tensor *r = dc_st_find(&f, t[i].name);
    CHECK(r != NULL);
    if (!r) continue;
    CHECK(r->dtype == t[i].type.dtype && r->rank == t[i].type.rank);
    for (int k = 0; k < r->rank; k++) CHECK(r->dims[k] == t[i].type.dims[k]);
    CHECK(r->bytes == dc_type_bytes(&t[i].type));
    CHECK(r->offset + r->bytes <= f.file.size);
    CHECK(r->bytes == 0 || memcmp(f.file.data + r->offset, t[i].data, r->bytes) == 0);
  }
  CHECK(dc_st_find(&f, "nope") == NULL);
  CHECK(dc_st_find(&f, "s.scalar")->bytes == 4);
  uint64_t hash = f.header_hash;
  dc_st_close(&f);
  /* the same tensors in another order give the same bytes */
  dc_st_out rev[16];
  for (int i = 0; i < n; i++) rev[i] = t[n - 1 - i];
  CHECK_OK(dc_st_write(path, rev, n));
  CHECK_OK(dc_st_open(path, &f));
  CHECK(f.header_hash == hash);
  dc_st_close(&f);
  /* a file of no tensors is valid too */
  CHECK_OK(dc_st_write(path, t, 0));
  CHECK_OK(dc_st_open(path, &f));
  CHECK(f.ntensors == 0 && dc_st_find(&f, "x") == NULL);
  dc_st_close(&f);
  free(path);
}

static void test_write_errors(void) {
  printf("dc_st_write argument errors\n");
  float a[2] = {0, 1};
  char *path = tu_path("werr.safetensors");
  dc_st_out dup[] = {{"x", {DT_F32, 1, {2}}, a}, {"x", {DT_F32, 1, {2}}, a}};
  CHECK_ERR(dc_st_write(path, dup, 2), "safetensors writer: tensor \"x\" given twice");
  dc_st_out neg[] = {{"x", {DT_F32, 1, {-2}}, a}};
  CHECK_ERR(dc_st_write(path, neg, 1), "tensor \"x\" has a bad shape");
  dc_st_out nodata[] = {{"x", {DT_F32, 1, {2}}, NULL}};
  CHECK_ERR(dc_st_write(path, nodata, 1), "tensor \"x\" has no data");
  CHECK(!dc_file_exists(path) && tu_tmp_files_left() == 0);
  CHECK_ERR(dc_st_write("/nonexistent-dir/x.safetensors", dup, 1), "cannot create");
  free(path);
}

#define T(name, dt, shape, b, e) \
  "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_fixed_part(void) {
  printf("length prefix\n");
  char *path = tu_path("short.safetensors");
  tu_write_file(path, "\x05\0\0\0\0", 5);
  char want[512];
  snprintf(want, sizeof want,
           "%s: file is 5 bytes, too short for the 8-byte header length (truncated?)", path);
  dc_st_file f;
  CHECK_ERR(dc_st_open(path, &f), want);
  free(path);

  path = craft_n("huge.safetensors", 123456789012ull, "{}", 0);
  snprintf(
      want, sizeof want,
      "%s: header length 123456789012 exceeds the 100000000-byte limit (not a safetensors file?)",
      path);
  CHECK_ERR(dc_st_open(path, &f), want);
  free(path);

  path = craft_n("pasteof.safetensors", 100, "{}", 0);
  snprintf(want, sizeof want,
           "%s: header length 100 runs past the end of the file (10 bytes; truncated?)", path);
  CHECK_ERR(dc_st_open(path, &f), want);
  free(path);

  CHECK_ERR(dc_st_open("/nonexistent/x.safetensors", &f),
            "/nonexistent/x.safetensors: cannot open");
}

static void test_header_json(void) {
  printf("header JSON\n");
  check_bad("{\"a\": x}", 0,
            "header is not valid JSON (unexpected character 'x' at byte 6 of the 8-byte header; "
            "not a safetensors file?)");
  check_bad("{\"a\":", 0, "header is not valid JSON (unexpected end of file at byte 5");
  check_bad("[1, 2]  ", 0, "header must be a JSON object, got a list");
  check_bad("{\"\xff\":1}", 0, "header is not valid UTF-8 (byte 2 of the header)");
  check_bad(
      "{\"x\": 5}", 0,
      "tensor \"x\": entry must be an object with dtype, shape and data_offsets, got a number");
  check_bad("{\"__metadata__\": [1]}", 0,
            "\"__metadata__\" must be an object of strings, got a list");
  check_bad("{\"__metadata__\": {\"k\": 1}}", 0,
            "\"__metadata__\" must map strings to strings, but \"k\" is a number");
  check_good("{\"__metadata__\": {\"format\": \"pt\"}}      ", 0, 0);
  check_good("{}", 0, 0);
  check_good("{}\n\t ", 0, 0);
}

static void test_entries(void) {
  printf("entries\n");
  check_bad("{" T("x", "Q4", "[2]", 0, 2) "}", 2,
            "tensor \"x\": dtype \"Q4\" is not supported (expected one of F32, F16, BF16, F8_E4M3, "
            "F8_E5M2, I32, I64)");
  check_bad("{" T("ids", "I16", "[2]", 0, 4) "}", 4,
            "tensor \"ids\": dtype \"I16\" is not supported (expected one of F32, F16, BF16, "
            "F8_E4M3, F8_E5M2, I32, I64)");
  check_good("{" T("ids", "I64", "[2]", 0, 16) "}", 16, 1); /* token ids: diffrun --inputs reads them */
  check_bad("{" T("x", "F32", "[2,-1]", 0, 0) "}", 0,
            "tensor \"x\": shape dim 1 must be a non-negative integer, got -1");
  check_bad("{" T("x", "F32", "[2.5]", 0, 0) "}", 0,
            "tensor \"x\": shape dim 0 must be a non-negative integer, got 2.5");
  check_bad("{" T("x", "F32", "[1,1,1,1,1,1,1]", 0, 4) "}", 4,
            "tensor \"x\": shape has 7 dims; diffc supports at most 6");
  check_bad(
      "{" T("x", "F32", "[2,3]", 0, 20) "}", 20,
      "tensor \"x\": shape [2,3] with dtype F32 needs 24 bytes but data_offsets [0, 20) hold 20");
  check_bad("{" T("x", "F32", "[4294967296,4294967296]", 0, 0) "}", 0,
            "tensor \"x\": shape [4294967296,4294967296] with dtype F32 overflows 64 bits");
  check_bad("{" T("x", "F32", "[1]", 8, 4) "}", 0,
            "tensor \"x\": data_offsets [8, 4) end before they begin");
  check_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
            "tensor \"x\": data_offsets must be a list of two non-negative integers [begin, end]");
  check_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4,
            "tensor \"x\": unexpected key \"extra\" (expected dtype, shape, data_offsets)");
  check_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
            "tensor \"x\": missing \"data_offsets\"");
  check_bad("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "tensor \"x\": key \"dtype\" appears twice");
  check_bad("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "tensor \"x\": dtype must be a string, got a number");
  check_bad("{" T("x", "F32", "[1]", 0, 4) "," T("x", "F32", "[1]", 4, 8) "}", 8,
            "tensor \"x\" appears twice in the header");
  /* empty tensors and 0-rank scalars are fine */
  check_good("{" T("e", "F16", "[0,4]", 0, 0) "," T("s", "F32", "[]", 0, 4) "}", 4, 2);
  check_good("{" T("e", "BF16", "[3,0]", 4, 4) "," T("s", "F8_E5M2", "[4]", 0, 4) "}", 4, 2);
}

static void test_layout(void) {
  printf("data buffer layout\n");
  check_bad(
      "{" T("conv_in.weight", "F32", "[1226]", 4096, 9000) "," T("b", "F32", "[1024]", 0, 4096) "}",
      8192,
      "tensor \"conv_in.weight\": data_offsets [4096, 9000) run past the end of the data buffer "
      "(8192 bytes); truncated download?");
  check_bad("{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[4]", 8, 24) "}", 24,
            "tensors \"a\" [0, 16) and \"b\" [8, 24) overlap");
  check_bad("{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[2]", 24, 32) "}", 32,
            "data buffer bytes [16, 24) belong to no tensor (the next is \"b\")");
  check_bad("{" T("a", "F32", "[2]", 8, 16) "}", 16,
            "data buffer bytes [0, 8) belong to no tensor (the next is \"a\")");
  /* header "{...}" is 55 bytes: 8 + 55 + 16 = 79 described, 83 present */
  check_bad("{" T("a", "F32", "[4]", 0, 16) "}", 20,
            "file is 83 bytes but the header describes 79 (8 + 55 header + 16 data); truncated or "
            "padded?");
  check_bad(
      "{}", 3,
      "file is 13 bytes but the header describes 10 (8 + 2 header + 0 data); truncated or padded?");
  /* offsets need not be in name order */
  check_good("{" T("b", "F32", "[2]", 0, 8) "," T("a", "F32", "[4]", 8, 24) "}", 24, 2);
}

/* Each allocation in open may fail; every failure is a clean error. */
static void test_alloc_failures(void) {
  printf("allocation failures during open\n");
  char *path = craft("oom.safetensors",
                     "{\"__metadata__\":{\"format\":\"pt\"}," T("b", "F32", "[2]", 0, 8) "," T(
                         "a", "F16", "[4]", 8, 16) "}",
                     16);
  int nomem = 0, ok = 0;
  for (long k = 0; k < 100 && !ok; k++) {
    dc_st_file f;
    dc_alloc_fail_after(k);
    dc_status *st = dc_st_open(path, &f);
    dc_alloc_fail_after(-1);
    if (!st) ok = 1, dc_st_close(&f);
    else nomem += dc_status_code_of(st) == DC_ERR_NOMEM, dc_status_free(st);
  }
  CHECK(ok && nomem > 3);
  /* and in write: no file, no temp file left behind */
  float a[4] = {0};
  dc_st_out t[] = {{"b", {DT_F32, 1, {4}}, a}, {"a", {DT_F32, 1, {2}}, a}};
  char *out = tu_path("oom-write.safetensors");
  nomem = ok = 0;
  for (long k = 0; k < 100 && !ok; k++) {
    dc_alloc_fail_after(k);
    dc_status *st = dc_st_write(out, t, 2);
    dc_alloc_fail_after(-1);
    if (!st) ok = 1;
    else {
      nomem += dc_status_code_of(st) == DC_ERR_NOMEM;
      CHECK(!dc_file_exists(out) && tu_tmp_files_left() == 0);
      dc_status_free(st);
    }
  }
  CHECK(ok && nomem >= 2);
  free(out);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_round_trip();
  test_write_errors();
  test_fixed_part();
  test_header_json();
  test_entries();
  test_layout();
  test_alloc_failures();
  return tu_finish();
}
