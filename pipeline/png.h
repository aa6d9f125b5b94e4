/* png.h — 8-bit RGB PNG files through libpng, and animated PNGs (APNG) for
 * videos, written atomically (temp name, then rename), with text chunks (the
 * generation parameters go in a tEXt chunk named "parameters", where image
 * tools look for them).
 *
 * A video is what diffusers' video pipelines return with output_type="pt"
 * (CogVideoXPipeline): [B, F, 3, H, W] floats in [0, 1]; these functions
 * take one sample of it, frames [F, 3, H, W], each frame as
 * dc_png_write_chw takes an image. */
#ifndef DC_PNG_H
#define DC_PNG_H

#include "support/support.h"

typedef struct {
  const char *key, *text; /* Latin-1 keyword (1-79 bytes); UTF-8 text goes in an iTXt chunk */
} dc_png_text;

/* image: [3,H,W] float32 in [0,1] (diffusers' output_type="pt" for one
 * sample), written as (x*255).round() clamped, like diffusers' PIL output
 * (numpy_to_pil: (images * 255).round().astype("uint8")). */
dc_status *dc_png_write_chw(const char *path, const float *image, int height, int width,
                            const dc_png_text *texts, int ntexts);

/* The file frame f of video b (of `batch` videos) goes to when a video is
 * written as one PNG per frame: png minus its ".png" (4 characters, any
 * case), then "-<f>" for one video or "-<b>-<f>" for several, f zero-padded
 * to three digits, then the extension: out.png -> out-000.png,
 * out-001.png, ...; with 2 videos out-0-000.png ... out-1-000.png ... (as
 * several images go to out-0.png, out-1.png).  dc_malloc'd; NULL when out of
 * memory. */
char *dc_png_frame_path(const char *png, int64_t batch, int64_t b, int64_t f);

/* Every frame of frames [nframes, 3, H, W] as its own PNG, named by
 * dc_png_frame_path(png, batch, b, f); each file is written atomically, in
 * frame order, and an error stops there (naming the file). */
dc_status *dc_png_write_frames(const char *png, int64_t batch, int64_t b, const float *frames, int nframes,
                               int height, int width, const dc_png_text *texts, int ntexts);

/* frames [nframes, 3, H, W] as one animated PNG at fps frames per second
 * (each frame's fcTL delay 1/fps: delay_num 1, delay_den fps; fps 1 to
 * 65535), looping forever (acTL num_plays 0).  Frame 0 is the default image
 * (IDAT), so a reader without APNG support shows the first frame; every
 * frame covers the whole canvas (dispose NONE, blend SOURCE).  Pixels as
 * dc_png_write_chw; texts before the first frame. */
dc_status *dc_apng_write_chw(const char *path, const float *frames, int nframes, int height, int width, int fps,
                             const dc_png_text *texts, int ntexts);

#endif
