/* png.c — 8-bit RGB PNG files through libpng (png.h).
 *
 * Pixels are diffusers' numpy_to_pil of the [0,1] image:
 * (x * 255).round().astype("uint8") on float32, i.e. the float32 product
 * rounded half to even (rintf in the default rounding mode).  Text goes in a
 * tEXt chunk when it is Latin-1 representable, else in an iTXt chunk as
 * UTF-8: what PIL's PngInfo.add_text does.
 *
 * libpng reports errors by longjmp to the setjmp of the writing function;
 * every allocation (ours and, through png_create_write_struct_2, libpng's)
 * goes through dc_malloc, and the bytes through dc_atomic_write, so an error
 * anywhere leaves nothing under the final name. */
#include "png.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <png.h>
#include <string.h>

#define PNG_MAX_SIDE 1000000 /* libpng's default user limit on width and height */

/* ---- pixels ------------------------------------------------------------------ */

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "png.c needs float arithmetic in float precision (FLT_EVAL_METHOD 0) to round as numpy does"
#endif

/* One channel value as numpy computes it on float32: clamped to [0,1], the
 * float32 product with 255 rounded half to even.  NaN (which numpy's cast
 * leaves undefined) is written as 0. */
static png_byte to_u8(float x) {
  if (!(x > 0.0f)) return 0; /* also NaN */
  if (x > 1.0f) x = 1.0f;
  return (png_byte)rintf(x * 255.0f);
}

/* Row y of the [3,H,W] image as interleaved RGB. */
static void fill_row(png_bytep row, const float *image, size_t h, size_t w, size_t y) {
  for (size_t c = 0; c < 3; c++) {
    const float *src = image + (c * h + y) * w;
    for (size_t x = 0; x < w; x++) row[3 * x + c] = to_u8(src[x]);
  }
}

/* ---- text chunks ------------------------------------------------------------- */

/* Decodes UTF-8 s to Latin-1 into out (strlen(s) + 1 bytes); returns 1 when
 * every character is below U+0100, 0 when one is not, -1 (with *bad the byte
 * offset) on invalid UTF-8. */
static int utf8_to_latin1(const char *s, char *out, size_t *bad) {
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0;
  int latin1 = 1;
  for (size_t i = 0; p[i];) {
    int len = p[i] < 0x80 ? 1 : p[i] >= 0xc2 && p[i] <= 0xdf ? 2 : p[i] >= 0xe0 && p[i] <= 0xef ? 3
                                                            : p[i] >= 0xf0 && p[i] <= 0xf4 ? 4 : 0;
    uint32_t cp = len == 1 ? p[i] : len ? p[i] & (0x3f >> (len - 1)) : 0;
    for (int k = 1; k < len; k++) {
      if ((p[i + k] & 0xc0) != 0x80) len = 0;
      else cp = cp << 6 | (p[i + k] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shorter forms are overlong */
    if (!len || cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      *bad = i;
      return -1;
    }
    if (cp > 0xff) latin1 = 0;
    out[o++] = (char)cp;
    i += (size_t)len;
  }
  out[o] = 0;
  return latin1;
}

/* A PNG keyword: 1-79 Latin-1 characters, printable (32-126, 161-255), no
 * leading, trailing or double spaces. */
static int keyword_ok(const char *k) {
  size_t n = strlen(k);
  if (n < 1 || n > 79 || k[0] == ' ' || k[n - 1] == ' ') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    if (c < 32 || (c > 126 && c < 161) || (c == ' ' && k[i + 1] == ' ')) return 0;
  }
  return 1;
}

static void free_texts(png_text *t, int n) {
  for (int i = 0; t && i < n; i++) {
    dc_free(t[i].key);
    dc_free(t[i].text);
  }
  dc_free(t);
}

/* One text as libpng wants it: key in Latin-1; text in Latin-1 (tEXt) or UTF-8 (iTXt). */
static dc_status *make_text(const dc_png_text *in, png_text *out) {
  size_t bad = 0, kn = strlen(in->key), tn = strlen(in->text);
  out->key = dc_malloc(kn + 1);
  out->text = dc_malloc(tn + 1);
  if (!out->key || !out->text) return dc_nomem("PNG text chunks");
  if (utf8_to_latin1(in->key, out->key, &bad) != 1 || !keyword_ok(out->key))
    return dc_error(DC_ERR_ARGUMENT, "PNG text key \"%.100s\": expected 1-79 printable Latin-1 characters "
                    "without leading, trailing or double spaces", in->key);
  int latin1 = utf8_to_latin1(in->text, out->text, &bad);
  if (latin1 < 0)
    return dc_error(DC_ERR_ARGUMENT, "PNG text \"%s\": not valid UTF-8 at byte offset %zu", out->key, bad);
  if (!latin1) memcpy(out->text, in->text, tn + 1);
  out->compression = latin1 ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
  out->text_length = latin1 ? strlen(out->text) : 0;
  out->itxt_length = latin1 ? 0 : tn;
  return NULL;
}

static dc_status *make_texts(const dc_png_text *in, int n, png_text **out) {
  *out = n ? dc_calloc((size_t)n, sizeof **out) : NULL;
  if (n && !*out) return dc_nomem("PNG text chunks");
  for (int i = 0; i < n; i++) {
    dc_status *st = make_text(&in[i], &(*out)[i]);
    if (st) {
      free_texts(*out, n);
      *out = NULL;
      return st;
    }
  }
  return NULL;
}

/* ---- libpng ------------------------------------------------------------------- */

typedef struct {
  dc_atomic_file f;
  char msg[200]; /* libpng's error message */
  int nomem;     /* an allocation for libpng failed */
} png_ctx;

static void on_error(png_structp png, png_const_charp msg) {
  png_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static png_voidp on_malloc(png_structp png, png_alloc_size_t n) {
  void *p = dc_malloc(n);
  if (!p) ((png_ctx *)png_get_mem_ptr(png))->nomem = 1;
  return p;
}

static void on_free(png_structp png, png_voidp p) { (void)png, dc_free(p); }

static void on_write(png_structp png, png_bytep data, size_t n) {
  png_ctx *c = png_get_io_ptr(png);
  dc_atomic_write(&c->f, data, n);
  if (c->f.failed) png_error(png, strerror(c->f.failed));
}

static void on_flush(png_structp png) { (void)png; } /* dc_atomic_commit flushes */

/* The libpng calls.  A libpng error longjmps back to the setjmp and this
 * returns 0.  Nothing is read after the longjmp but the return value, so no
 * local needs to be volatile (the loop counter's value is lost, and unused);
 * what must outlive the jump (png, info, row, ctx) belongs to the caller. */
static int write_all(png_structp png, png_infop info, png_bytep row, const float *image, size_t h, size_t w,
                     png_text *texts, int ntexts) {
  if (setjmp(png_jmpbuf(png))) return 0;
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (ntexts) png_set_text(png, info, texts, ntexts);
  png_write_info(png, info);
  for (size_t y = 0; y < h; y++) {
    fill_row(row, image, h, w, y);
    png_write_row(png, row);
  }
  png_write_end(png, info);
  return 1;
}

/* Writes into ctx->f (open); returns the error, if any. */
static dc_status *write_png(png_ctx *ctx, const char *path, const float *image, size_t h, size_t w,
                            png_text *texts, int ntexts) {
  png_structp png = png_create_write_struct_2(PNG_LIBPNG_VER_STRING, ctx, on_error, on_warning, ctx, on_malloc,
                                              on_free);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  png_bytep row = dc_malloc(3 * w);
  dc_status *st = NULL;
  if (!png || !info || !row) {
    st = dc_nomem("writing a PNG");
  } else {
    png_set_write_fn(png, ctx, on_write, on_flush);
    if (!write_all(png, info, row, image, h, w, texts, ntexts))
      st = ctx->nomem ? dc_nomem("writing a PNG")
                      : dc_error(DC_ERR_IO, "%s: writing the PNG failed: %s", path, ctx->msg);
  }
  dc_free(row);
  if (png) png_destroy_write_struct(&png, info ? &info : NULL);
  return st;
}

dc_status *dc_png_write_chw(const char *path, const float *image, int height, int width, const dc_png_text *texts,
                            int ntexts) {
  if (height < 1 || width < 1 || height > PNG_MAX_SIDE || width > PNG_MAX_SIDE || !image || ntexts < 0)
    return dc_error(DC_ERR_ARGUMENT, "%s: cannot write a %dx%d PNG (each side 1 to %d)", path, width, height,
                    PNG_MAX_SIDE);
  png_text *pt = NULL;
  DC_TRY(dc_status_annotate(make_texts(texts, ntexts, &pt), "%s", path));
  png_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  dc_status *st = dc_atomic_open(path, &ctx.f);
  if (!st) st = write_png(&ctx, path, image, (size_t)height, (size_t)width, pt, ntexts);
  if (!st) st = dc_atomic_commit(&ctx.f); /* renames into place, or removes the temporary */
  else dc_atomic_abort(&ctx.f);
  free_texts(pt, ntexts);
  return st;
}
