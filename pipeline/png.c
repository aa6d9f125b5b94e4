/* png.c — 8-bit RGB PNG files through libpng, and animated PNGs (png.h).
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
 * anywhere leaves nothing under the final name.
 *
 * Animated PNGs are written here chunk by chunk (libpng as Debian ships it
 * has no APNG API): the PNG chunks of the APNG specification (IHDR, acTL,
 * text, then per frame fcTL and the frame's zlib stream — IDAT for frame
 * 0, fdAT with a sequence number for the others — and IEND), each with its
 * CRC-32; rows unfiltered (filter type 0), deflated by zlib (libpng's own
 * dependency) with its allocations through dc_malloc. */
#include "png.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <png.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

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

/* ---- frames as PNGs ----------------------------------------------------------- */

char *dc_png_frame_path(const char *png, int64_t batch, int64_t b, int64_t f) {
  size_t n = strlen(png);
  size_t stem = n > 4 && !strcasecmp(png + n - 4, ".png") ? n - 4 : n;
  if (batch == 1) return dc_asprintf("%.*s-%03lld%s", (int)stem, png, (long long)f, png + stem);
  return dc_asprintf("%.*s-%lld-%03lld%s", (int)stem, png, (long long)b, (long long)f, png + stem);
}

dc_status *dc_png_write_frames(const char *png, int64_t batch, int64_t b, const float *frames, int nframes,
                               int height, int width, const dc_png_text *texts, int ntexts) {
  size_t per = (size_t)3 * (size_t)(height > 0 ? height : 0) * (size_t)(width > 0 ? width : 0);
  for (int f = 0; f < nframes; f++) {
    char *path = dc_png_frame_path(png, batch, b, f);
    if (!path) return dc_nomem("writing the frames");
    dc_status *st = dc_png_write_chw(path, frames + per * (size_t)f, height, width, texts, ntexts);
    dc_free(path);
    DC_TRY(st);
  }
  return NULL;
}

/* ---- animated PNG ------------------------------------------------------------- */

enum { APNG_DATA_CHUNK = 1 << 20 }; /* the most zlib bytes per IDAT/fdAT chunk */

typedef struct {
  dc_atomic_file f;
  uint32_t seq; /* the next fcTL/fdAT sequence number */
  int nomem;    /* zlib could not allocate */
} apng_writer;

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }

/* One chunk: length, type, head then body as its data, CRC-32 of type and data. */
static void write_chunk(apng_writer *w, const char *type, const uint8_t *head, size_t nhead, const uint8_t *body,
                        size_t nbody) {
  uint8_t pre[8], crc_bytes[4];
  put32(pre, (uint32_t)(nhead + nbody));
  memcpy(pre + 4, type, 4);
  uLong crc = crc32(0L, pre + 4, 4);
  if (nhead) crc = crc32_z(crc, head, nhead);
  if (nbody) crc = crc32_z(crc, body, nbody);
  put32(crc_bytes, (uint32_t)crc);
  dc_atomic_write(&w->f, pre, 8);
  if (nhead) dc_atomic_write(&w->f, head, nhead);
  if (nbody) dc_atomic_write(&w->f, body, nbody);
  dc_atomic_write(&w->f, crc_bytes, 4);
}

static void write_header(apng_writer *w, size_t h, size_t wd, int nframes) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t ihdr[13] = {0}, actl[8] = {0};
  dc_atomic_write(&w->f, signature, 8);
  put32(ihdr, (uint32_t)wd);
  put32(ihdr + 4, (uint32_t)h);
  ihdr[8] = 8; /* bit depth; color type 2 (RGB), deflate, filter method 0, no interlace */
  ihdr[9] = 2;
  write_chunk(w, "IHDR", ihdr, 13, NULL, 0);
  put32(actl, (uint32_t)nframes);
  put32(actl + 4, 0); /* num_plays: forever */
  write_chunk(w, "acTL", actl, 8, NULL, 0);
}

/* A tEXt chunk (Latin-1) or an iTXt one (UTF-8, uncompressed, no language). */
static void write_text(apng_writer *w, const png_text *t) {
  size_t nk = strlen(t->key), nt = strlen(t->text);
  uint8_t head[80 + 4] = {0}; /* keyword (1-79), its NUL, iTXt's flag, method, empty language and translation */
  memcpy(head, t->key, nk);
  if (t->compression == PNG_TEXT_COMPRESSION_NONE) write_chunk(w, "tEXt", head, nk + 1, (const uint8_t *)t->text, nt);
  else write_chunk(w, "iTXt", head, nk + 5, (const uint8_t *)t->text, nt);
}

static void write_fctl(apng_writer *w, size_t h, size_t wd, int fps) {
  uint8_t fctl[26] = {0};
  put32(fctl, w->seq++);
  put32(fctl + 4, (uint32_t)wd);
  put32(fctl + 8, (uint32_t)h);
  /* x, y offsets 0 */
  put16(fctl + 20, 1);            /* delay_num */
  put16(fctl + 22, (uint32_t)fps); /* delay_den: 1/fps seconds */
  /* dispose_op 0 (NONE), blend_op 0 (SOURCE) */
  write_chunk(w, "fcTL", fctl, 26, NULL, 0);
}

/* A frame's zlib bytes so far: IDAT for frame 0, else fdAT with its sequence number. */
static void write_frame_bytes(apng_writer *w, int frame, const uint8_t *data, size_t n) {
  if (frame == 0) {
    write_chunk(w, "IDAT", data, n, NULL, 0);
  } else {
    uint8_t seq[4];
    put32(seq, w->seq++);
    write_chunk(w, "fdAT", seq, 4, data, n);
  }
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
  void *p = (size_t)items * size / (size ? size : 1) == items ? dc_malloc((size_t)items * size) : NULL;
  if (!p) ((apng_writer *)opaque)->nomem = 1;
  return p;
}

static void z_free(voidpf opaque, voidpf p) { (void)opaque, dc_free(p); }

/* Feeds z until it wants more input (or, finishing, until the stream
 * ends), writing each full buffer of output as a chunk; *used: bytes in out. */
static int deflate_some(apng_writer *w, z_stream *z, int finish, int frame, uint8_t *out, size_t *used) {
  for (;;) {
    z->next_out = out + *used;
    z->avail_out = (uInt)(APNG_DATA_CHUNK - *used);
    int ret = deflate(z, finish ? Z_FINISH : Z_NO_FLUSH);
    if (ret == Z_STREAM_ERROR) return 0;
    *used = APNG_DATA_CHUNK - z->avail_out;
    if (*used == APNG_DATA_CHUNK) {
      write_frame_bytes(w, frame, out, *used);
      *used = 0;
    }
    if (finish ? ret == Z_STREAM_END : z->avail_out != 0) return 1;
  }
}

/* One frame [3, H, W]: its rows (filter byte 0, then RGB) through zlib. */
static dc_status *write_frame(apng_writer *w, int frame, const float *image, size_t h, size_t wd, uint8_t *row,
                              uint8_t *out) {
  z_stream z;
  memset(&z, 0, sizeof z);
  z.zalloc = z_alloc, z.zfree = z_free, z.opaque = w;
  if (deflateInit(&z, Z_DEFAULT_COMPRESSION) != Z_OK)
    return w->nomem ? dc_nomem("writing an animated PNG") : dc_error(DC_ERR_INTERNAL, "zlib's deflateInit failed");
  size_t used = 0;
  int ok = 1;
  for (size_t y = 0; y < h && ok; y++) {
    row[0] = 0;
    fill_row(row + 1, image, h, wd, y);
    z.next_in = row;
    z.avail_in = (uInt)(1 + 3 * wd);
    ok = deflate_some(w, &z, y == h - 1, frame, out, &used);
  }
  deflateEnd(&z);
  if (!ok) return w->nomem ? dc_nomem("writing an animated PNG") : dc_error(DC_ERR_INTERNAL, "zlib's deflate failed");
  if (used) write_frame_bytes(w, frame, out, used);
  return NULL;
}

static dc_status *write_apng(apng_writer *w, const float *frames, int nframes, size_t h, size_t wd, int fps,
                             const png_text *texts, int ntexts) {
  uint8_t *row = dc_malloc(1 + 3 * wd), *out = dc_malloc(APNG_DATA_CHUNK);
  dc_status *st = row && out ? NULL : dc_nomem("writing an animated PNG");
  if (!st) write_header(w, h, wd, nframes);
  for (int i = 0; i < ntexts && !st; i++) write_text(w, &texts[i]);
  for (int f = 0; f < nframes && !st && !w->f.failed; f++) { /* a failed write: commit reports it */
    write_fctl(w, h, wd, fps);
    st = write_frame(w, f, frames + (size_t)f * 3 * h * wd, h, wd, row, out);
  }
  if (!st) write_chunk(w, "IEND", NULL, 0, NULL, 0);
  dc_free(row);
  dc_free(out);
  return st;
}

dc_status *dc_apng_write_chw(const char *path, const float *frames, int nframes, int height, int width, int fps,
                             const dc_png_text *texts, int ntexts) {
  if (height < 1 || width < 1 || height > PNG_MAX_SIDE || width > PNG_MAX_SIDE || !frames || ntexts < 0)
    return dc_error(DC_ERR_ARGUMENT, "%s: cannot write a %dx%d animated PNG (each side 1 to %d)", path, width, height,
                    PNG_MAX_SIDE);
  if (nframes < 1) return dc_error(DC_ERR_ARGUMENT, "%s: an animated PNG needs at least one frame, got %d", path, nframes);
  if (fps < 1 || fps > 65535)
    return dc_error(DC_ERR_ARGUMENT, "%s: %d frames per second: an animated PNG's frame delay takes 1 to 65535", path,
                    fps);
  png_text *pt = NULL;
  DC_TRY(dc_status_annotate(make_texts(texts, ntexts, &pt), "%s", path));
  apng_writer w;
  memset(&w, 0, sizeof w);
  dc_status *st = dc_atomic_open(path, &w.f);
  if (!st) st = write_apng(&w, frames, nframes, (size_t)height, (size_t)width, fps, pt, ntexts);
  if (!st) st = dc_atomic_commit(&w.f); /* reports a failed write, naming the path */
  else dc_atomic_abort(&w.f);
  free_texts(pt, ntexts);
  return st;
}
