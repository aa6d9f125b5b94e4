/* text_files.c — lookup in a set of in-memory files (text_files.h). */
#include "text_files.h"

#include <string.h>

const dc_text_file *dc_text_files_find(const dc_text_files *fs, const char *name) {
  for (int i = 0; i < fs->nfiles; i++)
    if (strcmp(fs->files[i].name, name) == 0) return &fs->files[i];
  return NULL;
}
