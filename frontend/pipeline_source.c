/* pipeline_source.c — closing a pipeline source (pipeline_source.h), whichever
 * opener filled it. */
#include "pipeline_source.h"

#include <string.h>

void dc_pipeline_source_close(dc_pipeline_source *s) {
  dc_folder_close(&s->unet);
  dc_folder_close(&s->vae);
  dc_folder_close(&s->text_encoder);
  dc_folder_close(&s->text_encoder_2);
  dc_text_files_free(&s->tokenizer);
  dc_text_files_free(&s->tokenizer_2);
  dc_text_files_free(&s->scheduler);
  if (s->close_owned) s->close_owned(s->owned); /* after the folders that borrow it */
  dc_free(s->origin);
  dc_free(s->class_name);
  memset(s, 0, sizeof *s);
}
