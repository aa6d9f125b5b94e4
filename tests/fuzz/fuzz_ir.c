/* fuzz_ir.c — the IR text parser (ir/parse.c): arbitrary bytes as a dump.
 * A text that parses must also print, and its printed form must parse back
 * to the same text (the round trip the parser promises).  Errors are
 * expected; crashes, leaks, undefined behaviour and a broken round trip are
 * the findings. */
#include <string.h>

#include "fuzz_common.h"
#include "ir/ir.h"

static char *dump(const dc_module *m) {
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_print(m, &b);
  dc_buf_u8(&b, 0);
  if (st) { /* printing a verified module fails only for lack of memory */
    fuzz_drop(st);
    dc_buf_deinit(&b);
    return NULL;
  }
  return (char *)b.data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dc_module *m = NULL;
  dc_status *st = dc_parse((const char *)data, size, "fuzz.ir", &m);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  char *text = dump(m);
  dc_module_destroy(m);
  if (!text) return 0;
  dc_module *again = NULL;
  st = dc_parse(text, strlen(text), "fuzz.ir (printed)", &again);
  if (st) {
    fprintf(stderr, "the printed form of a parsed module does not parse: %s\n", dc_status_message(st));
    abort();
  }
  char *text2 = dump(again);
  if (text2 && strcmp(text, text2) != 0) {
    fprintf(stderr, "print(parse(print(m))) differs from print(m)\n");
    abort();
  }
  dc_free(text2);
  dc_free(text);
  dc_module_destroy(again);
  return 0;
}
