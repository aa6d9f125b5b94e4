/* test_json.c — dc_json_load's line:column syntax errors and every typed
 * getter's messages: wrong types, non-integers, int lists with scalar
 * broadcast, lengths and minimums. */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "testutil.h"

/* Writes text to tmpdir/name and loads it; returns the load status. */
static dc_status *load_text(const char *name, const char *text, dc_json_doc *d, char **path) {
  *path = tu_path(name);
  tu_write_file(*path, text, strlen(text));
  return dc_json_load(*path, d);
}

/* Expects loading `text` to fail with "<path><suffix>". */
static void check_load_err(const char *text, const char *suffix) {
  dc_json_doc d;
  char *path;
  dc_status *st = load_text("bad.json", text, &d, &path);
  char want[512];
  snprintf(want, sizeof want, "%s%s", path, suffix);
  CHECK_ERR(st, want);
  CHECK(d.root == NULL && d.text == NULL && d.path == NULL);
  free(path);
}

static void test_syntax(void) {
  printf("syntax errors with line:column\n");
  check_load_err("{\n  \"a\": 1,\n  \"b\": x\n}\n",
                 ":3:8: not valid JSON (unexpected character 'x')");
  check_load_err("{\"a\": 1,}", ":1:9: not valid JSON (unexpected character '}')");
  check_load_err("{\"a\": 1", ":1:8: not valid JSON (unexpected end of file)");
  check_load_err("{\"a\": [1,\n 2", ":2:3: not valid JSON (unexpected end of file)");
  check_load_err("{\"a\": \"abc\n}", ":1:7: not valid JSON (unterminated string)");
  check_load_err("{\"a\": \"\\q\"}", ":1:8: not valid JSON (bad escape in a string)");
  check_load_err("{\"a\": \"\\u12g4\"}", ":1:8: not valid JSON (bad escape in a string)");
  check_load_err("{\"a\": \"x\ty\"}", ":1:9: not valid JSON (control character 0x09 in a string)");
  check_load_err("{\"a\": 01}", ":1:8: not valid JSON (unexpected character '1')");
  check_load_err("{\"a\": 1.}", ":1:9: not valid JSON (unexpected character '}')");
  check_load_err("{\"a\": tru}", ":1:10: not valid JSON (unexpected character '}')");
  check_load_err("{\"a\" 1}", ":1:6: not valid JSON (unexpected character '1')");
  check_load_err("{1: 2}", ":1:2: not valid JSON (unexpected character '1')");
  check_load_err("{\"a\": NaN}", ":1:7: not valid JSON (unexpected character 'N')");
  check_load_err("", ":1:1: not valid JSON (unexpected end of file)");
  check_load_err("{} x", ":1:4: not valid JSON (unexpected character 'x')");
  check_load_err("{}\n\x01", ":2:1: not valid JSON (unexpected byte 0x01)");
  check_load_err("[1, 2]", ": expected a JSON object at the top level, got a list");
  check_load_err("\"s\"", ": expected a JSON object at the top level, got a string");
  check_load_err("{\"a\": 1, \"a\": 2}", ": key \"a\" appears twice");

  char deep[1200];
  memcpy(deep, "{\"a\":", 5);
  memset(deep + 5, '[', 600); /* the object is level 0, the first '[' level 1 */
  snprintf(deep + 605, sizeof deep - 605, "]");
  check_load_err(deep, ":1:517: not valid JSON (nested more than 512 deep)");

  dc_json_doc d;
  CHECK_ERR(dc_json_load("/nonexistent/config.json", &d), "/nonexistent/config.json: cannot open");

  char *path;
  CHECK_OK(load_text("ok.json", "{\"a\": 1}  \n", &d, &path));
  CHECK(d.root && strcmp(d.path, path) == 0);
  dc_json_free(&d);
  free(path);
}

static const char *config =
    "{\n"
    "  \"int\": 3, \"neg\": -7, \"frac\": 2.5, \"big\": 1e300, \"str\": \"silu\",\n"
    "  \"t\": true, \"f\": false, \"nul\": null, \"list\": [1, 2, 3], \"obj\": {},\n"
    "  \"ints\": [320, 640, 1280], \"zeros\": [0, 1], \"mixed\": [1, \"x\"],\n"
    "  \"fracs\": [1, 2.5], \"strs\": [\"DownBlock2D\", \"CrossAttnDownBlock2D\"],\n"
    "  \"two\": 2.0, \"empty\": []\n"
    "}\n";

static void test_scalars(const dc_json_doc *d) {
  printf("scalar getters\n");
  const char *p = d->path;
  char want[512];
  int64_t i;
  CHECK_OK(dc_json_int(d, "int", 0, &i));
  CHECK(i == 3);
  CHECK_OK(dc_json_int(d, "neg", 0, &i));
  CHECK(i == -7);
  CHECK_OK(dc_json_int(d, "two", 0, &i));
  CHECK(i == 2);
  CHECK_OK(dc_json_int(d, "absent", 42, &i));
  CHECK(i == 42);
  CHECK_OK(dc_json_int(d, "nul", 43, &i));
  CHECK(i == 43);
  snprintf(want, sizeof want, "%s: \"frac\" must be an integer, got 2.5", p);
  CHECK_ERR(dc_json_int(d, "frac", 0, &i), want);
  snprintf(want, sizeof want, "%s: \"big\" must be an integer, got 1e+300", p);
  CHECK_ERR(dc_json_int(d, "big", 0, &i), want);
  snprintf(want, sizeof want, "%s: \"str\" must be an integer, got a string", p);
  CHECK_ERR(dc_json_int(d, "str", 0, &i), want);
  snprintf(want, sizeof want, "%s: \"t\" must be an integer, got a bool", p);
  CHECK_ERR(dc_json_int(d, "t", 0, &i), want);
  snprintf(want, sizeof want, "%s: \"list\" must be an integer, got a list", p);
  CHECK_ERR(dc_json_int(d, "list", 0, &i), want);
  snprintf(want, sizeof want, "%s: \"obj\" must be an integer, got an object", p);
  CHECK_ERR(dc_json_int(d, "obj", 0, &i), want);

  double x;
  CHECK_OK(dc_json_num(d, "frac", 0, &x));
  CHECK(x == 2.5);
  CHECK_OK(dc_json_num(d, "int", 0, &x));
  CHECK(x == 3);
  CHECK_OK(dc_json_num(d, "absent", 1e-5, &x));
  CHECK(x == 1e-5);
  snprintf(want, sizeof want, "%s: \"str\" must be a number, got a string", p);
  CHECK_ERR(dc_json_num(d, "str", 0, &x), want);

  int b;
  CHECK_OK(dc_json_bool(d, "t", 0, &b));
  CHECK(b == 1);
  CHECK_OK(dc_json_bool(d, "f", 1, &b));
  CHECK(b == 0);
  CHECK_OK(dc_json_bool(d, "nul", 1, &b));
  CHECK(b == 1);
  snprintf(want, sizeof want, "%s: \"int\" must be true or false, got 3", p);
  CHECK_ERR(dc_json_bool(d, "int", 0, &b), want);

  const char *s;
  CHECK_OK(dc_json_str(d, "str", NULL, &s));
  CHECK(s && strcmp(s, "silu") == 0);
  CHECK_OK(dc_json_str(d, "absent", NULL, &s));
  CHECK(s == NULL);
  CHECK_OK(dc_json_str(d, "nul", "dflt", &s));
  CHECK(s && strcmp(s, "dflt") == 0);
  snprintf(want, sizeof want, "%s: \"list\" must be a string, got a list", p);
  CHECK_ERR(dc_json_str(d, "list", NULL, &s), want);
}

static void test_int_lists(const dc_json_doc *d) {
  printf("int lists\n");
  const char *p = d->path;
  char want[512];
  int64_t v[8];
  int n, present;
  CHECK_OK(dc_json_int_list(d, "ints", 0, 0, 1, v, 8, &n, &present));
  CHECK(n == 3 && present && v[0] == 320 && v[1] == 640 && v[2] == 1280);
  CHECK_OK(dc_json_int_list(d, "ints", 1, 3, 1, v, 8, &n, &present));
  CHECK(n == 3 && v[2] == 1280);
  /* scalar broadcast to `want` entries, or one entry when want is 0 */
  CHECK_OK(dc_json_int_list(d, "int", 1, 4, 1, v, 8, &n, &present));
  CHECK(n == 4 && present && v[0] == 3 && v[3] == 3);
  CHECK_OK(dc_json_int_list(d, "int", 1, 0, 1, v, 8, &n, NULL));
  CHECK(n == 1 && v[0] == 3);
  CHECK_OK(dc_json_int_list(d, "absent", 1, 4, 1, v, 8, &n, &present));
  CHECK(n == 0 && !present);
  CHECK_OK(dc_json_int_list(d, "nul", 1, 4, 1, v, 8, &n, &present));
  CHECK(n == 0 && !present);
  CHECK_OK(dc_json_int_list(d, "empty", 0, 0, 1, v, 8, &n, &present));
  CHECK(n == 0 && present);
  CHECK_OK(dc_json_int_list(d, "zeros", 0, 2, 0, v, 8, &n, &present));
  CHECK(n == 2 && v[0] == 0);

  snprintf(want, sizeof want, "%s: \"str\" must be a list of positive integers, got a string", p);
  CHECK_ERR(dc_json_int_list(d, "str", 0, 0, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want,
           "%s: \"str\" must be a positive integer or a list of positive integers, got a string",
           p);
  CHECK_ERR(dc_json_int_list(d, "str", 1, 0, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want, "%s: \"int\" must be a list of positive integers, got 3", p);
  CHECK_ERR(dc_json_int_list(d, "int", 0, 0, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want,
           "%s: \"neg\" must be a positive integer or a list of positive integers, got -7", p);
  CHECK_ERR(dc_json_int_list(d, "neg", 1, 2, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want, "%s: \"zeros\" must be a list of positive integers, got 0 at index 0",
           p);
  CHECK_ERR(dc_json_int_list(d, "zeros", 0, 0, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want,
           "%s: \"mixed\" must be a list of non-negative integers, got a string at index 1", p);
  CHECK_ERR(dc_json_int_list(d, "mixed", 0, 0, 0, v, 8, &n, NULL), want);
  snprintf(want, sizeof want, "%s: \"fracs\" must be a list of integers, got 2.5 at index 1", p);
  CHECK_ERR(dc_json_int_list(d, "fracs", 0, 0, INT64_MIN, v, 8, &n, NULL), want);
  snprintf(want, sizeof want, "%s: \"ints\" must have 4 entries, got 3", p);
  CHECK_ERR(dc_json_int_list(d, "ints", 1, 4, 1, v, 8, &n, NULL), want);
  snprintf(want, sizeof want, "%s: \"ints\" has 3 entries; diffc supports at most 2", p);
  CHECK_ERR(dc_json_int_list(d, "ints", 0, 0, 1, v, 2, &n, NULL), want);
  CHECK(n == 0);
}

static void test_str_lists(const dc_json_doc *d) {
  printf("string lists\n");
  const char *p = d->path;
  char want[512];
  const char *s[8];
  int n;
  CHECK_OK(dc_json_str_list(d, "strs", s, 8, &n));
  CHECK(n == 2 && strcmp(s[0], "DownBlock2D") == 0 && strcmp(s[1], "CrossAttnDownBlock2D") == 0);
  CHECK_OK(dc_json_str_list(d, "absent", s, 8, &n));
  CHECK(n == 0);
  snprintf(want, sizeof want, "%s: \"str\" must be a list of strings, got a string", p);
  CHECK_ERR(dc_json_str_list(d, "str", s, 8, &n), want);
  snprintf(want, sizeof want, "%s: \"mixed\" must be a list of strings, got 1 at index 0", p);
  CHECK_ERR(dc_json_str_list(d, "mixed", s, 8, &n), want);
  snprintf(want, sizeof want, "%s: \"strs\" has 2 entries; diffc supports at most 1", p);
  CHECK_ERR(dc_json_str_list(d, "strs", s, 1, &n), want);
}

/* Every allocation inside load (including cJSON's, through the hooks) may
 * fail: each failure must be a clean out-of-memory error with no leak. */
static void test_alloc_failures(void) {
  printf("allocation failures during load\n");
  char *path = tu_path("oom.json");
  tu_write_file(path, config, strlen(config));
  int failures = 0, ok = 0;
  for (long k = 0; k < 200 && !ok; k++) {
    dc_json_doc d;
    dc_alloc_fail_after(k);
    dc_status *st = dc_json_load(path, &d);
    dc_alloc_fail_after(-1);
    if (!st) {
      ok = 1;
      dc_json_free(&d);
    } else {
      failures += dc_status_code_of(st) == DC_ERR_NOMEM;
      CHECK(dc_status_code_of(st) == DC_ERR_NOMEM);
      dc_status_free(st);
    }
  }
  CHECK(ok && failures > 3);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_syntax();
  dc_json_doc d;
  char *path;
  CHECK_OK(load_text("config.json", config, &d, &path));
  if (d.root) {
    test_scalars(&d);
    test_int_lists(&d);
    test_str_lists(&d);
    dc_json_free(&d);
  }
  free(path);
  test_alloc_failures();
  return tu_finish();
}
