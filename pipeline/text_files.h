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

/* The file called name, or NULL. */
const dc_text_file *dc_text_files_find(const dc_text_files *fs, const char *name);

#endif
