/* test_png.c — dc_png_write_chw (pipeline/png.h): images read back with
 * libpng, pixels against numpy's float32 (x * 255).round() (a table numpy
 * computed, and an independent double-precision derivation for every
 * half-way boundary), tEXt / iTXt chunks, and the failures: a missing folder,
 * a directory in the way, bad keys and text, a write error midway (a file
 * size limit), every allocation failing in turn — each a clear error with
 * nothing left under the final name or a temporary one. */
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "pipeline/png.h"
#include "testutil.h"

/* ---- reading back ---- */

typedef struct {
  char key[80], text[256];
  int compression; /* PNG_TEXT_COMPRESSION_NONE: tEXt; PNG_ITXT_COMPRESSION_NONE: iTXt */
} read_text;

typedef struct {
  int ok, width, height, bit_depth, color_type, interlace, ntexts;
  uint8_t *rgb; /* height * width * 3 */
  read_text texts[8];
} read_png;

static void read_chunks(png_structp png, png_infop info, read_png *r) {
  png_textp t;
  int n = 0;
  png_get_text(png, info, &t, &n);
  for (int i = 0; i < n && r->ntexts < 8; i++) {
    read_text *o = &r->texts[r->ntexts++];
    snprintf(o->key, sizeof o->key, "%s", t[i].key);
    size_t len = t[i].compression == PNG_TEXT_COMPRESSION_NONE ? t[i].text_length : t[i].itxt_length;
    snprintf(o->text, sizeof o->text, "%.*s", (int)len, t[i].text);
    o->compression = t[i].compression;
  }
}

/* png, info and r outlive the longjmp; nothing local is read after it. */
static int read_body(png_structp png, png_infop info, FILE *f, read_png *r) {
  if (setjmp(png_jmpbuf(png))) return 0;
  png_init_io(png, f);
  png_read_info(png, info);
  png_uint_32 w, h;
  png_get_IHDR(png, info, &w, &h, &r->bit_depth, &r->color_type, &r->interlace, NULL, NULL);
  r->width = (int)w, r->height = (int)h;
  r->rgb = malloc((size_t)w * h * 3);
  for (png_uint_32 y = 0; y < h; y++) png_read_row(png, r->rgb + (size_t)y * w * 3, NULL);
  png_read_end(png, info);
  read_chunks(png, info, r); /* tEXt/iTXt may come before or after the pixels */
  return 1;
}

static read_png read_file(const char *path) {
  read_png r;
  memset(&r, 0, sizeof r);
  FILE *f = fopen(path, "rb");
  if (!f) return r;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  r.ok = read_body(png, info, f, &r);
  png_destroy_read_struct(&png, &info, NULL);
  fclose(f);
  return r;
}

/* ---- the expected bytes ---- */

/* numpy's (x * 255).round().astype("uint8") on float32, derived independently
 * of png.c: the product of two floats is exact in double, so rounding it once
 * to float gives the float32 product; then half to even by hand.  Clamped to
 * [0,1] first (torch's clamp in diffusers); NaN written as 0. */
static int numpy_u8(float x) {
  double c = isnan(x) ? 0 : x < 0 ? 0 : x > 1 ? 1 : x;
  float p = (float)(c * 255.0);
  double fl = floor(p), frac = p - fl;
  return (int)fl + (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) == 1.0));
}

static float f32(uint32_t bits) { return dc_f32_from_bits(bits); }

/* Written by numpy 2.4.6:  a = np.float32((k + 0.5) / 255) and its neighbours,
 * (a * 255).round().astype("uint8") — the half-way cases go to even. */
static const struct {
  uint32_t bits;
  int want;
} numpy_table[] = {
    {0x3b008080, 0},   {0x3b008081, 0},   {0x3b008082, 1},   {0x3bc0c0c0, 1},   {0x3bc0c0c1, 2},
    {0x3bc0c0c2, 2},   {0x3c20a0a0, 2},   {0x3c20a0a1, 2},   {0x3c20a0a2, 3},   {0x3effffff, 127},
    {0x3f000000, 128}, {0x3f000001, 128}, {0x3f010100, 128}, {0x3f010101, 128}, {0x3f010102, 129},
    {0x3f7e7e7d, 253}, {0x3f7e7e7e, 254}, {0x3f7e7e7f, 254}, {0x3f7f7f7e, 254}, {0x3f7f7f7f, 254},
    {0x3f7f7f80, 254},
};
#define NTABLE ((int)(sizeof numpy_table / sizeof numpy_table[0]))


/* ---- tests ---- */

static void test_rounding(void) {
  printf("pixels: numpy's float32 rounding, half to even, clamping\n");
  /* one row per channel value set: R holds the test values, G and B others */
  enum { W = NTABLE + 8 + 256 * 5 };
  static float img[3 * W];
  int want[W];
  int n = 0;
  for (int i = 0; i < NTABLE; i++, n++) img[n] = f32(numpy_table[i].bits), want[n] = numpy_table[i].want;
  const float odd[8] = {0.0f, -0.0f, -0.25f, 1.0f, 1.5f, INFINITY, -INFINITY, NAN};
  const int odd_want[8] = {0, 0, 0, 255, 255, 255, 0, 0};
  for (int i = 0; i < 8; i++, n++) img[n] = odd[i], want[n] = odd_want[i];
  for (int k = 0; k < 256; k++) { /* every half-way point and two floats either side */
    float x = (float)((k + 0.5) / 255);
    float v[5] = {nextafterf(nextafterf(x, 0), 0), nextafterf(x, 0), x, nextafterf(x, 2),
                  nextafterf(nextafterf(x, 2), 2)};
    for (int j = 0; j < 5; j++, n++) img[n] = v[j], want[n] = numpy_u8(v[j]);
  }
  for (int i = 0; i < NTABLE; i++) CHECK(numpy_u8(f32(numpy_table[i].bits)) == numpy_table[i].want);
  for (int x = 0; x < W; x++) img[W + x] = (float)x / (W - 1), img[2 * W + x] = 1.0f - (float)x / (W - 1);
  char *path = tu_path("round.png");
  CHECK_OK(dc_png_write_chw(path, img, 1, W, NULL, 0));
  read_png r = read_file(path);
  CHECK(r.ok && r.width == W && r.height == 1 && r.bit_depth == 8 && r.color_type == PNG_COLOR_TYPE_RGB &&
        r.interlace == PNG_INTERLACE_NONE && r.ntexts == 0);
  int bad = 0;
  for (int x = 0; r.ok && x < W; x++) {
    bad += r.rgb[3 * x] != want[x];
    bad += r.rgb[3 * x + 1] != numpy_u8(img[W + x]) || r.rgb[3 * x + 2] != numpy_u8(img[2 * W + x]);
    if (r.rgb[3 * x] != want[x] && bad < 5)
      fprintf(stderr, "  x=%d value %.9g (0x%08x): wrote %d, numpy gives %d\n", x, img[x], dc_f32_bits(img[x]),
              r.rgb[3 * x], want[x]);
  }
  CHECK(bad == 0);
  free(r.rgb);
  free(path);
}

static void test_image_and_text(void) {
  printf("a [3,H,W] image and its text chunks\n");
  enum { H = 5, Wd = 7 };
  float img[3 * H * Wd];
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < Wd; x++) img[(c * H + y) * Wd + x] = 0.3f * (float)c + 0.11f * (float)y + 0.031f * (float)x;
  dc_png_text texts[] = {
      {"parameters", "a cat, Steps: 20, Seed: 42\nNegative prompt: blur"},
      {"Comment", "caf\xc3\xa9 au lait \xc2\xb1 1"}, /* Latin-1 representable: tEXt */
      {"Title", "\xe6\x9d\xb1\xe4\xba\xac tower \xf0\x9f\x97\xbc"}, /* not: iTXt */
      {"Empty", ""},
  };
  char *path = tu_path("image.png");
  CHECK_OK(dc_png_write_chw(path, img, H, Wd, texts, 4));
  read_png r = read_file(path);
  CHECK(r.ok && r.width == Wd && r.height == H && r.ntexts == 4);
  int bad = 0;
  for (int y = 0; r.ok && y < H; y++)
    for (int x = 0; x < Wd; x++)
      for (int c = 0; c < 3; c++) bad += r.rgb[(y * Wd + x) * 3 + c] != numpy_u8(img[(c * H + y) * Wd + x]);
  CHECK(bad == 0);
  CHECK(r.ok && r.rgb[(4 * Wd + 6) * 3 + 2] == 255); /* 0.6 + 0.44 + 0.186 clamps */
  const char *want_text[4] = {texts[0].text, "caf\xe9 au lait \xb1 1", texts[2].text, ""};
  const int want_comp[4] = {PNG_TEXT_COMPRESSION_NONE, PNG_TEXT_COMPRESSION_NONE, PNG_ITXT_COMPRESSION_NONE,
                            PNG_TEXT_COMPRESSION_NONE};
  for (int i = 0; i < r.ntexts && i < 4; i++) {
    CHECK(strcmp(r.texts[i].key, texts[i].key) == 0);
    CHECK(strcmp(r.texts[i].text, want_text[i]) == 0);
    CHECK(r.texts[i].compression == want_comp[i]);
  }
  free(r.rgb);
  /* writing again replaces the file */
  float black[3] = {0, 0, 0};
  CHECK_OK(dc_png_write_chw(path, black, 1, 1, NULL, 0));
  r = read_file(path);
  CHECK(r.ok && r.width == 1 && r.height == 1 && r.ntexts == 0 && r.rgb[0] == 0);
  free(r.rgb);
  CHECK(tu_tmp_files_left() == 0);
  free(path);
}

static void expect_error_nothing_left(const char *path, const float *img, int h, int w, const dc_png_text *t,
                                      int nt, const char *needle) {
  CHECK_ERR(dc_png_write_chw(path, img, h, w, t, nt), needle);
  struct stat sb;
  CHECK(stat(path, &sb) != 0);
  CHECK(tu_tmp_files_left() == 0);
}

static void test_bad_arguments(void) {
  printf("bad arguments: nothing written\n");
  float img[12] = {0};
  char *path = tu_path("bad.png");
  expect_error_nothing_left(path, img, 0, 2, NULL, 0, "cannot write a 2x0 PNG (each side 1 to 1000000)");
  expect_error_nothing_left(path, img, 2, 2000000, NULL, 0, "cannot write a 2000000x2 PNG");
  static const char *const bad_keys[] = {"", " lead", "trail ", "two  spaces", "tab\tkey",
                                         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                                         "\xe6\x9d\xb1"};
  for (int i = 0; i < 7; i++) {
    dc_png_text t = {bad_keys[i], "x"};
    expect_error_nothing_left(path, img, 2, 2, &t, 1, "expected 1-79 printable Latin-1 characters");
  }
  dc_png_text t = {"parameters", "ok \xff not UTF-8"};
  expect_error_nothing_left(path, img, 2, 2, &t, 1, "PNG text \"parameters\": not valid UTF-8 at byte offset 3");
  free(path);
}

static void test_unwritable(void) {
  printf("unwritable paths: a clear error, nothing left\n");
  float img[12] = {0.5f};
  char *path = tu_path("no/such/folder/out.png");
  char *want = dc_asprintf("%s: cannot create: no folder", path);
  expect_error_nothing_left(path, img, 2, 2, NULL, 0, want);
  dc_free(want);
  free(path);
  /* a folder in the way: written, then the rename fails; the temporary goes */
  path = tu_path("a_folder.png");
  mkdir(path, 0755);
  CHECK_ERR(dc_png_write_chw(path, img, 2, 2, NULL, 0), "a_folder.png: cannot rename into place");
  CHECK(dc_dir_exists(path) && tu_tmp_files_left() == 0);
  free(path);
}

/* A file size limit makes a write fail partway: libpng's error path (longjmp)
 * must abort the temporary file. */
static void test_write_error(void) {
  printf("a write error midway\n");
  enum { H = 256, Wd = 256 };
  float *img = malloc(sizeof *img * 3 * H * Wd);
  uint32_t s = 12345;
  for (int i = 0; i < 3 * H * Wd; i++) img[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f;
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 8192;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* fwrite then fails with EFBIG instead of killing us */
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  char *path = tu_path("big.png");
  CHECK_ERR(dc_png_write_chw(path, img, H, Wd, NULL, 0), "big.png: ");
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  struct stat sb;
  CHECK(stat(path, &sb) != 0 && tu_tmp_files_left() == 0);
  CHECK_OK(dc_png_write_chw(path, img, H, Wd, NULL, 0)); /* and without the limit it works */
  CHECK(stat(path, &sb) == 0 && sb.st_size > 8192);
  free(path);
  free(img);
}

static void test_alloc_failures(void) {
  printf("allocation failure sweep\n");
  float img[3 * 4 * 4];
  for (int i = 0; i < 48; i++) img[i] = (float)i / 47;
  dc_png_text t[2] = {{"parameters", "steps 20"}, {"Title", "\xe6\x9d\xb1"}};
  char *path = tu_path("sweep.png");
  int fails = 0, done = 0;
  for (long k = 0; k < 500 && !done; k++) {
    dc_alloc_fail_after(k);
    dc_status *st = dc_png_write_chw(path, img, 4, 4, t, 2);
    dc_alloc_fail_after(-1);
    if (!st) {
      done = 1;
      break;
    }
    fails++;
    CHECK(dc_status_code_of(st) == DC_ERR_NOMEM);
    dc_status_free(st);
    struct stat sb;
    CHECK(stat(path, &sb) != 0 && tu_tmp_files_left() == 0);
  }
  printf("  %d failures, then success\n", fails);
  CHECK(done && fails > 5);
  read_png r = read_file(path);
  CHECK(r.ok && r.ntexts == 2);
  free(r.rgb);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_rounding();
  test_image_and_text();
  test_bad_arguments();
  test_unwritable();
  test_write_error();
  test_alloc_failures();
  return tu_finish();
}
