/* text_files.c — a set of named in-memory files (text_files.h). */
#include "text_files.h"

#include <string.h>

const dc_text_file *dc_text_files_find(const dc_text_files *fs, const char *name) {
  for (int i = 0; i < fs->nfiles; i++)
    if (strcmp(fs->files[i].name, name) == 0) return &fs->files[i];
  return NULL;
}

dc_status *dc_text_files_add(dc_text_files *fs, const char *name, const void *data, size_t size) {
  dc_text_file *grown = dc_realloc((void *)fs->files, (size_t)(fs->nfiles + 1) * sizeof *grown);
  if (!grown) return dc_nomem("keeping a tokenizer or scheduler file");
  fs->files = grown;
  char *nm = dc_strdup(name);
  uint8_t *copy = dc_malloc(size + 1); /* NUL after the bytes: parsers may read it as text */
  if (!nm || !copy) {
    dc_free(nm);
    dc_free(copy);
    return dc_nomem("keeping a tokenizer or scheduler file");
  }
  if (size) memcpy(copy, data, size);
  copy[size] = 0;
  grown[fs->nfiles++] = (dc_text_file){nm, copy, size};
  return NULL;
}

dc_status *dc_text_files_read_dir(const char *dir, const char *const *names, dc_text_files *out) {
  memset(out, 0, sizeof *out);
  out->origin = dc_strdup(dir);
  if (!out->origin) return dc_nomem("reading a tokenizer or scheduler folder");
  dc_status *st = NULL;
  for (int i = 0; names[i] && !st; i++) {
    char *path = dc_path_join(dir, names[i]);
    if (!path) {
      st = dc_nomem("reading a tokenizer or scheduler folder");
      break;
    }
    if (dc_file_exists(path)) {
      char *text = NULL;
      size_t size = 0;
      st = dc_file_read_all(path, &text, &size);
      if (!st) st = dc_text_files_add(out, names[i], text, size);
      dc_free(text);
    }
    dc_free(path);
  }
  if (st) dc_text_files_free(out);
  return st;
}

void dc_text_files_free(dc_text_files *fs) {
  for (int i = 0; i < fs->nfiles; i++) {
    dc_free((void *)fs->files[i].name);
    dc_free((void *)fs->files[i].data);
  }
  dc_free((void *)fs->files);
  dc_free((void *)fs->origin);
  memset(fs, 0, sizeof *fs);
}
