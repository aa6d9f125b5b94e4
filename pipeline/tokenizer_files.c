/* tokenizer_files.c — the files a CLIP tokenizer folder may hold. */
#include "tokenizer.h"

const char *const dc_clip_tokenizer_file_names[] = {"vocab.json", "merges.txt", "tokenizer.json",
                                                     "tokenizer_config.json", "special_tokens_map.json", NULL};
