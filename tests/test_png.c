/* test_png.c — dc_png_write_chw (pipeline/png.h): images read back with
 * libpng, pixels against numpy's float32 (x * 255).round() (a table numpy
 * computed, and an independent double-precision derivation for every
 * half-way boundary), tEXt / iTXt chunks, and the failures: a missing folder,
 * a directory in the way, bad keys and text, a write error midway (a file
 * size limit), every allocation failing in turn — each a clear error with
 * nothing left under the final name or a temporary one.
 *
 * Videos: one PNG per frame (names and pixels), and animated PNGs, which
 * libpng (without APNG support) reads as their first frame while this test
 * parses every chunk itself: signature, CRCs (a CRC-32 of its own), chunk
 * order, acTL's frame count, each fcTL (sequence numbers, size, delay
 * 1/fps, dispose and blend), and every frame's pixels from its IDAT or fdAT
 * data (inflated by zlib, unfiltered here for all five filter types). */
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <zlib.h>

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

/* ---- videos ---- */

/* frames [F,3,H,W] with every value distinct enough to catch a mix-up. */
static float *make_frames(int nf, int h, int w) {
  float *v = malloc(sizeof *v * (size_t)nf * 3 * h * w);
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          v[(((size_t)f * 3 + c) * h + y) * w + x] = 0.13f * (float)f + 0.3f * (float)c + 0.047f * (float)y +
                                                      0.021f * (float)x - 0.1f;
  return v;
}

/* Whether rgb (H*W*3, interleaved) holds frame [3,H,W] as numpy rounds it. */
static int pixels_match(const uint8_t *rgb, const float *frame, int h, int w) {
  int bad = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) bad += rgb[((size_t)y * w + x) * 3 + c] != numpy_u8(frame[((size_t)c * h + y) * w + x]);
  return bad == 0;
}

static void test_frame_paths(void) {
  printf("frame file names\n");
  static const struct {
    const char *png;
    int64_t batch, b, f;
    const char *want;
  } cases[] = {{"out.png", 1, 0, 0, "out-000.png"},      {"out.png", 1, 0, 12, "out-012.png"},
               {"dir/v.PNG", 1, 0, 1234, "dir/v-1234.PNG"}, {"out.png", 2, 1, 7, "out-1-007.png"},
               {"a.b.png", 3, 0, 0, "a.b-0-000.png"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = dc_png_frame_path(cases[i].png, cases[i].batch, cases[i].b, cases[i].f);
    if (!p || strcmp(p, cases[i].want))
      fprintf(stderr, "  %s: got %s, want %s\n", cases[i].png, p ? p : "nothing", cases[i].want);
    CHECK(p && !strcmp(p, cases[i].want));
    dc_free(p);
  }
}

static void test_frames_as_pngs(void) {
  printf("a video as one PNG per frame\n");
  enum { F = 3, H = 4, Wd = 6 };
  float *v = make_frames(F, H, Wd);
  dc_png_text t = {"parameters", "a cat"};
  char *png = tu_path("clip.png");
  CHECK_OK(dc_png_write_frames(png, 2, 1, v, F, H, Wd, &t, 1));
  for (int f = 0; f < F; f++) {
    char *path = dc_png_frame_path(png, 2, 1, f);
    read_png r = read_file(path);
    CHECK(r.ok && r.width == Wd && r.height == H && r.ntexts == 1);
    CHECK(r.ok && pixels_match(r.rgb, v + (size_t)f * 3 * H * Wd, H, Wd));
    free(r.rgb);
    dc_free(path);
  }
  char *missing = dc_png_frame_path(png, 2, 1, F); /* no more than F files */
  struct stat sb;
  CHECK(stat(missing, &sb) != 0 && tu_tmp_files_left() == 0);
  dc_free(missing);
  /* the error names the frame's file */
  char *bad = tu_path("no/such/dir/clip.png");
  char *want = dc_asprintf("%s/no/such/dir/clip-000.png: cannot create", tu_tmpdir());
  CHECK_ERR(dc_png_write_frames(bad, 1, 0, v, F, H, Wd, NULL, 0), want);
  dc_free(want);
  free(bad);
  free(png);
  free(v);
}

/* CRC-32 (ISO-HDLC, as PNG defines it), bit by bit: independent of zlib's. */
static uint32_t crc32_bits(const uint8_t *p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

typedef struct {
  int ok, nframes_actl, nplays, nfctl, width, height, nchunks;
  int delay_num[16], delay_den[16], dispose[16], blend[16], fctl_w[16], fctl_h[16], fctl_x[16], fctl_y[16];
  uint8_t *data[16]; /* each frame's zlib bytes, concatenated */
  size_t ndata[16];
  int data_chunks; /* IDAT + fdAT chunks */
  char order[64];  /* one letter per chunk: H acTL=A fcTL=F IDAT=I fdAT=D text=T IEND=E */
} apng_file;

static void add_data(apng_file *a, int frame, const uint8_t *p, size_t n) {
  a->data[frame] = realloc(a->data[frame], a->ndata[frame] + n);
  memcpy(a->data[frame] + a->ndata[frame], p, n);
  a->ndata[frame] += n;
  a->data_chunks++;
}

/* Every chunk of an APNG; ok when the structure holds (order, CRCs, sequence numbers). */
static apng_file parse_apng(const char *path) {
  apng_file a;
  memset(&a, 0, sizeof a);
  char *bytes = NULL;
  size_t n = 0;
  dc_status *st = dc_file_read_all(path, &bytes, &n);
  if (st) {
    fprintf(stderr, "  %s\n", dc_status_message(st));
    dc_status_free(st);
    return a;
  }
  const uint8_t *p = (const uint8_t *)bytes;
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  int ok = n >= 8 && !memcmp(p, sig, 8), seq = 0, frame = -1, ended = 0;
  for (size_t at = 8; ok && at < n && !ended;) {
    if (n - at < 12) ok = 0;
    uint32_t len = ok ? get32(p + at) : 0;
    if (ok && len > n - at - 12) ok = 0;
    if (!ok) break;
    const uint8_t *type = p + at + 4, *d = p + at + 8;
    ok &= crc32_bits(type, 4 + len, 0) == get32(d + len);
    char letter = !memcmp(type, "IHDR", 4) ? 'H' : !memcmp(type, "acTL", 4) ? 'A' : !memcmp(type, "fcTL", 4) ? 'F'
                  : !memcmp(type, "IDAT", 4) ? 'I' : !memcmp(type, "fdAT", 4) ? 'D' : !memcmp(type, "IEND", 4) ? 'E'
                  : !memcmp(type, "tEXt", 4) || !memcmp(type, "iTXt", 4) ? 'T' : '?';
    if (a.nchunks < 63) a.order[a.nchunks++] = letter;
    if (letter == 'H' && len == 13) a.width = (int)get32(d), a.height = (int)get32(d + 4);
    if (letter == 'A' && len == 8) a.nframes_actl = (int)get32(d), a.nplays = (int)get32(d + 4);
    if (letter == 'F') {
      ok &= len == 26 && (int)get32(d) == seq++ && a.nfctl < 16;
      if (!ok) break;
      int k = frame = a.nfctl++;
      a.fctl_w[k] = (int)get32(d + 4), a.fctl_h[k] = (int)get32(d + 8);
      a.fctl_x[k] = (int)get32(d + 12), a.fctl_y[k] = (int)get32(d + 16);
      a.delay_num[k] = d[20] << 8 | d[21], a.delay_den[k] = d[22] << 8 | d[23];
      a.dispose[k] = d[24], a.blend[k] = d[25];
    }
    if (letter == 'I') ok &= frame == 0, add_data(&a, 0, d, len);
    if (letter == 'D') {
      ok &= frame >= 1 && len >= 4 && (int)get32(d) == seq++;
      if (ok) add_data(&a, frame, d + 4, len - 4);
    }
    ended = letter == 'E';
    at += 12 + len;
  }
  a.ok = ok && ended;
  dc_free(bytes);
  return a;
}

static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* A frame's zlib bytes to interleaved RGB (h * w * 3), undoing every PNG filter type; 0 on a bad stream. */
static int decode_frame(const uint8_t *z, size_t nz, int h, int w, uint8_t *rgb) {
  size_t stride = (size_t)w * 3, raw_n = (stride + 1) * (size_t)h;
  uint8_t *raw = malloc(raw_n);
  uLongf got = (uLongf)raw_n;
  int ok = uncompress(raw, &got, z, (uLong)nz) == Z_OK && got == raw_n;
  for (int y = 0; ok && y < h; y++) {
    const uint8_t *in = raw + (size_t)y * (stride + 1) + 1;
    uint8_t *out = rgb + (size_t)y * stride, *up = y ? out - stride : NULL;
    int filter = in[-1];
    ok = filter <= 4;
    for (size_t i = 0; ok && i < stride; i++) {
      int a = i >= 3 ? out[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
      int pred = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2 : paeth(a, b, c);
      out[i] = (uint8_t)(in[i] + pred);
    }
  }
  free(raw);
  return ok;
}

static void free_apng(apng_file *a) {
  for (int i = 0; i < 16; i++) free(a->data[i]);
}

/* Writes frames as an APNG at fps and checks everything about the file. */
static void check_apng(const char *path, const float *v, int nf, int h, int w, int fps, const dc_png_text *t, int nt) {
  CHECK_OK(dc_apng_write_chw(path, v, nf, h, w, fps, t, nt));
  apng_file a = parse_apng(path);
  CHECK(a.ok && a.width == w && a.height == h && a.nframes_actl == nf && a.nplays == 0 && a.nfctl == nf);
  CHECK(a.order[0] == 'H' && a.order[1] == 'A' && a.order[a.nchunks - 1] == 'E');
  uint8_t *rgb = malloc((size_t)h * w * 3);
  for (int f = 0; a.ok && f < nf; f++) {
    CHECK(a.fctl_w[f] == w && a.fctl_h[f] == h && a.fctl_x[f] == 0 && a.fctl_y[f] == 0);
    CHECK(a.delay_num[f] == 1 && a.delay_den[f] == fps && a.dispose[f] == 0 && a.blend[f] == 0);
    CHECK(decode_frame(a.data[f], a.ndata[f], h, w, rgb) && pixels_match(rgb, v + (size_t)f * 3 * h * w, h, w));
  }
  /* what a reader without APNG support sees: the first frame, and the texts */
  read_png r = read_file(path);
  CHECK(r.ok && r.width == w && r.height == h && r.ntexts == nt && pixels_match(r.rgb, v, h, w));
  free(r.rgb);
  free(rgb);
  printf("  %d frames %dx%d at %d fps: %d chunks (%d of frame data), every frame's pixels as written\n", nf, w, h,
         fps, a.nchunks, a.data_chunks);
  free_apng(&a);
}

static void test_apng(void) {
  printf("animated PNGs\n");
  enum { F = 5, H = 6, Wd = 9 };
  float *v = make_frames(F, H, Wd);
  dc_png_text t[2] = {{"parameters", "a cat, Steps: 50"}, {"Title", "\xe6\x9d\xb1"}};
  char *path = tu_path("clip.apng");
  check_apng(path, v, F, H, Wd, 8, t, 2);
  check_apng(path, v, 1, H, Wd, 24, NULL, 0); /* one frame; rewriting replaces the file */
  free(v);
  /* frames bigger than one data chunk (1 MiB): split over several IDAT / fdAT chunks */
  enum { BH = 700, BW = 700 };
  float *big = malloc(sizeof *big * 2 * 3 * BH * BW);
  uint32_t s = 777;
  for (size_t i = 0; i < (size_t)2 * 3 * BH * BW; i++) big[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f;
  check_apng(path, big, 2, BH, BW, 65535, NULL, 0);
  free(big);
  CHECK(tu_tmp_files_left() == 0);
  free(path);
}

static void test_apng_errors(void) {
  printf("animated PNG refusals and failures: a clear error, nothing left\n");
  float v[3 * 2 * 2 * 2];
  for (int i = 0; i < 24; i++) v[i] = (float)i / 23;
  char *path = tu_path("bad.apng");
  struct stat sb;
  CHECK_ERR(dc_apng_write_chw(path, v, 2, 2, 2, 0, NULL, 0), "bad.apng: 0 frames per second: an animated PNG's frame delay takes 1 to 65535");
  CHECK_ERR(dc_apng_write_chw(path, v, 2, 2, 2, 65536, NULL, 0), "65536 frames per second");
  CHECK_ERR(dc_apng_write_chw(path, v, 0, 2, 2, 8, NULL, 0), "bad.apng: an animated PNG needs at least one frame, got 0");
  CHECK_ERR(dc_apng_write_chw(path, v, 2, 0, 2, 8, NULL, 0), "cannot write a 2x0 animated PNG");
  dc_png_text bad = {"two  spaces", "x"};
  CHECK_ERR(dc_apng_write_chw(path, v, 2, 2, 2, 8, &bad, 1), "expected 1-79 printable Latin-1 characters");
  CHECK(stat(path, &sb) != 0 && tu_tmp_files_left() == 0);
  char *nodir = tu_path("no/such/folder/v.apng");
  char *want = dc_asprintf("%s: cannot create: no folder", nodir);
  CHECK_ERR(dc_apng_write_chw(nodir, v, 2, 2, 2, 8, NULL, 0), want);
  dc_free(want);
  free(nodir);
  /* a write error midway (a file size limit) */
  enum { H = 256, Wd = 256 };
  float *img = malloc(sizeof *img * 2 * 3 * H * Wd);
  uint32_t s = 12345;
  for (int i = 0; i < 2 * 3 * H * Wd; i++) img[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f;
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 8192;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  CHECK_ERR(dc_apng_write_chw(path, img, 2, H, Wd, 8, NULL, 0), "bad.apng: write failed");
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  CHECK(stat(path, &sb) != 0 && tu_tmp_files_left() == 0);
  free(img);
  /* every allocation failing in turn (zlib's included) */
  dc_png_text t[2] = {{"parameters", "steps 20"}, {"Title", "\xe6\x9d\xb1"}};
  int fails = 0, done = 0;
  for (long k = 0; k < 500 && !done; k++) {
    dc_alloc_fail_after(k);
    dc_status *st = dc_apng_write_chw(path, v, 2, 2, 2, 8, t, 2);
    dc_alloc_fail_after(-1);
    if (!st) {
      done = 1;
      break;
    }
    fails++;
    CHECK(dc_status_code_of(st) == DC_ERR_NOMEM);
    dc_status_free(st);
    CHECK(stat(path, &sb) != 0 && tu_tmp_files_left() == 0);
  }
  printf("  allocation sweep: %d failures, then success\n", fails);
  CHECK(done && fails > 5);
  apng_file a = parse_apng(path);
  CHECK(a.ok && a.nfctl == 2);
  free_apng(&a);
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
  test_frame_paths();
  test_frames_as_pngs();
  test_apng();
  test_apng_errors();
  return tu_finish();
}
