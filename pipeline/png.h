/* png.h — 8-bit RGB PNG files through libpng, written atomically (temp
 * name, then rename), with text chunks (the generation parameters go in a
 * tEXt chunk named "parameters", where image tools look for them). */
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

#endif
