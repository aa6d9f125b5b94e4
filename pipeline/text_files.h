/* text_files.h — a small set of named files held in memory: how a
 * pipeline plan carries its tokenizer and scheduler files (the PIPE
 * section), and how the tokenizer and scheduler parsers receive them, so
 * the same parser reads a folder at compile time and a plan at run time. */
#ifndef DC_TEXT_FILES_H
#define DC_TEXT_FILES_H

#include "support/support.h"

typedef struct {
  const char *name;   /* "vocab.json", "merges.txt", "tokenizer_config.json", ... */
  const uint8_t *data;
  size_t size;
} dc_text_file;

typedef struct {
  const char *origin;   /* where they came from, for messages: "models/sd15/tokenizer" or "sd15.dplan" */
  const dc_text_file *files;
  int nfiles;
} dc_text_files;

/* Reads the files of `names` (NULL-terminated) that exist in dir into
 * *out, which then owns them (free with dc_text_files_free); origin = dir.
 * A missing file is not an error here (the parser says what it needs); a
 * file that exists but cannot be read is. */
dc_status *dc_text_files_read_dir(const char *dir, const char *const *names, dc_text_files *out);
/* Copies name/data into *fs, which must be owned (read_dir, or zeroed with
 * origin dc_strdup'd); fs keeps its own copy. */
dc_status *dc_text_files_add(dc_text_files *fs, const char *name, const void *data, size_t size);
void dc_text_files_free(dc_text_files *fs);

/* The file called name, or NULL. */
const dc_text_file *dc_text_files_find(const dc_text_files *fs, const char *name);

#endif
