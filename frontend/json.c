/* json.c — config files (config.json, model_index.json, shard indexes) and
 * safetensors headers, parsed with cJSON, plus the messages cJSON does not
 * give: "file:line:col" for syntax errors (from a strict scanner that runs
 * first), and typed getters that name the file, the key, what was expected
 * and what was found.
 *
 * cJSON is pointed at diffc's allocator once (so injected allocation
 * failures reach it), and an allocation failure inside cJSON is reported as
 * out of memory rather than as bad JSON. */
#include "frontend.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- strict syntax check -------------------------------------------------- */
/* cJSON's error position is approximate (often one past the bad byte, and
 * clamped to the last byte at the end of input), and it accepts things
 * Python's json rejects (leading zeros, raw control characters in strings).
 * So a small RFC 8259 scanner runs first: it finds the exact byte of the
 * first error and makes us as strict as the Python that wrote the file. */

#define JSON_MAX_DEPTH 512 /* below cJSON's own nesting limit of 1000 */

typedef enum { JE_NONE, JE_UNEXPECTED, JE_UNTERMINATED, JE_ESCAPE, JE_CONTROL, JE_DEPTH } json_err;

typedef struct {
  const char *s;
  size_t n, i;
  json_err err;
  size_t at;
} json_scan;

static int js_fail(json_scan *j, size_t at, json_err e) {
  j->err = e;
  j->at = at;
  return 0;
}
static int js_peek(const json_scan *j) { return j->i < j->n ? (unsigned char)j->s[j->i] : -1; }
static int json_is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static void js_ws(json_scan *j) {
  while (json_is_space(js_peek(j))) j->i++;
}
static int js_digit(int c) { return c >= '0' && c <= '9'; }
static int js_hex(int c) { return js_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int js_literal(json_scan *j, const char *lit) {
  for (; *lit; lit++, j->i++)
    if (js_peek(j) != *lit) return js_fail(j, j->i, JE_UNEXPECTED);
  return 1;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_number(json_scan *j) {
  if (js_peek(j) == '-') j->i++;
  if (js_peek(j) == '0') j->i++;
  else if (!js_digit(js_peek(j))) return js_fail(j, j->i, JE_UNEXPECTED);
  else
    while (js_digit(js_peek(j))) j->i++;
  if (js_peek(j) == '.') {
    j->i++;
    if (!js_digit(js_peek(j))) return js_fail(j, j->i, JE_UNEXPECTED);
    while (js_digit(js_peek(j))) j->i++;
  }
  if (js_peek(j) == 'e' || js_peek(j) == 'E') {
    j->i++;
    if (js_peek(j) == '+' || js_peek(j) == '-') j->i++;
    if (!js_digit(js_peek(j))) return js_fail(j, j->i, JE_UNEXPECTED);
    while (js_digit(js_peek(j))) j->i++;
  }
  return 1;
}

static int js_string(json_scan *j) {
  size_t open = j->i++;
  for (;;) {
    int c = js_peek(j);
    if (c < 0 || c == '\n') return js_fail(j, open, JE_UNTERMINATED);
    if (c == '"') break;
    if (c < 0x20) return js_fail(j, j->i, JE_CONTROL);
    if (c == '\\') {
      size_t esc = j->i++;
      c = js_peek(j);
      if (c < 0) return js_fail(j, open, JE_UNTERMINATED);
      if (c == 'u') {
        for (int k = 1; k <= 4; k++)
          if (j->i + (size_t)k >= j->n || !js_hex((unsigned char)j->s[j->i + (size_t)k]))
            return js_fail(j, esc, JE_ESCAPE);
        j->i += 4;
      } else if (!strchr("\"\\/bfnrt", c)) {
        return js_fail(j, esc, JE_ESCAPE);
      }
    }
    j->i++;
  }
  j->i++;
  return 1;
}

static int js_value(json_scan *j, int depth);

/* A list (close ']') or an object (close '}'): "[" (value ("," value)*)? "]" */
static int js_container(json_scan *j, int depth, int close) {
  if (depth >= JSON_MAX_DEPTH) return js_fail(j, j->i, JE_DEPTH);
  j->i++;
  js_ws(j);
  if (js_peek(j) == close) return j->i++, 1;
  for (;;) {
    if (close == '}') {
      js_ws(j);
      if (js_peek(j) != '"') return js_fail(j, j->i, JE_UNEXPECTED);
      if (!js_string(j)) return 0;
      js_ws(j);
      if (js_peek(j) != ':') return js_fail(j, j->i, JE_UNEXPECTED);
      j->i++;
    }
    if (!js_value(j, depth + 1)) return 0;
    if (js_peek(j) == close) return j->i++, 1;
    if (js_peek(j) != ',') return js_fail(j, j->i, JE_UNEXPECTED);
    j->i++;
  }
}

/* One value with the whitespace around it. */
static int js_value(json_scan *j, int depth) {
  js_ws(j);
  int c = js_peek(j), ok;
  if (c == '{' || c == '[') ok = js_container(j, depth, c == '{' ? '}' : ']');
  else if (c == '"') ok = js_string(j);
  else if (c == '-' || js_digit(c)) ok = js_number(j);
  else if (c == 't') ok = js_literal(j, "true");
  else if (c == 'f') ok = js_literal(j, "false");
  else if (c == 'n') ok = js_literal(j, "null");
  else ok = js_fail(j, j->i, JE_UNEXPECTED);
  if (ok) js_ws(j);
  return ok;
}

static void js_describe(const json_scan *j, char *why, size_t cap) {
  unsigned char c = j->at < j->n ? (unsigned char)j->s[j->at] : 0;
  switch (j->err) {
    case JE_UNTERMINATED: snprintf(why, cap, "unterminated string"); break;
    case JE_ESCAPE: snprintf(why, cap, "bad escape in a string"); break;
    case JE_CONTROL: snprintf(why, cap, "control character 0x%02x in a string", c); break;
    case JE_DEPTH: snprintf(why, cap, "nested more than %d deep", JSON_MAX_DEPTH); break;
    default:
      if (j->at >= j->n) snprintf(why, cap, "unexpected end of file");
      else if (c >= 0x20 && c < 0x7f) snprintf(why, cap, "unexpected character '%c'", c);
      else snprintf(why, cap, "unexpected byte 0x%02x", c);
  }
}

/* ---- parsing -------------------------------------------------------------- */
/* cJSON is pointed at diffc's allocator; a failed allocation inside it sets
 * json_oom so it is not mistaken for bad JSON. */

static _Thread_local int json_oom;

static void *json_malloc(size_t n) {
  void *p = dc_malloc(n);
  if (!p) json_oom = 1;
  return p;
}

static pthread_once_t json_hooks_once = PTHREAD_ONCE_INIT;
static void json_hooks_init(void) {
  cJSON_Hooks h = {json_malloc, dc_free};
  cJSON_InitHooks(&h);
}

/* Parses text[0..n) (need not be NUL-terminated) as one JSON value with
 * optional whitespace around it.  A syntax error returns NULL with *err_at
 * the byte offset and why[] its description ("unexpected character 'x'");
 * running out of memory returns NULL with why[0] == 0.  Shared with
 * safetensors.c. */
cJSON *dc_json_parse_bytes(const char *text, size_t n, size_t *err_at, char why[64]) {
  json_scan j = {text, n, 0, JE_NONE, 0};
  *err_at = 0;
  why[0] = 0;
  if (js_value(&j, 0) && j.i < n) js_fail(&j, j.i, JE_UNEXPECTED);
  if (j.err) {
    *err_at = j.at;
    js_describe(&j, why, 64);
    return NULL;
  }
  pthread_once(&json_hooks_once, json_hooks_init);
  json_oom = 0;
  cJSON *root = cJSON_ParseWithLengthOpts(text, n, NULL, 0);
  if (!root && !json_oom) snprintf(why, 64, "rejected by cJSON");
  return root;
}

/* "string", "number", "bool", "list", "object", "null" */
const char *dc_json_type_name(const cJSON *v) {
  if (cJSON_IsString(v)) return "string";
  if (cJSON_IsNumber(v)) return "number";
  if (cJSON_IsBool(v)) return "bool";
  if (cJSON_IsArray(v)) return "list";
  if (cJSON_IsObject(v)) return "object";
  if (cJSON_IsNull(v)) return "null";
  return "invalid value";
}

/* What a message says was found: numbers by value, anything else by type. */
static const char *json_found(const cJSON *v, char *buf, size_t cap) {
  if (cJSON_IsNumber(v)) {
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, cap, "%.*g", prec, v->valuedouble);
      if (strtod(buf, NULL) == v->valuedouble) break;
    }
    return buf;
  }
  if (cJSON_IsNull(v)) return "null";
  const char *t = dc_json_type_name(v);
  snprintf(buf, cap, "%s %s", t[0] == 'o' || t[0] == 'i' ? "an" : "a", t);
  return buf;
}

/* "path:line:col: not valid JSON (why)" for the error at byte `at`. */
static dc_status *json_syntax_error(const char *path, const char *text, size_t at,
                                    const char *why) {
  int line = 1, col = 1;
  for (size_t i = 0; i < at; i++) {
    if (text[i] == '\n') line++, col = 1;
    else col++;
  }
  return dc_error(DC_ERR_FORMAT, "%s:%d:%d: not valid JSON (%s)", path, line, col, why);
}

static int json_key_cmp(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* cJSON keeps every copy of a repeated key and returns the first, while
 * Python's json (which diffusers uses) keeps the last: refuse to guess. */
static dc_status *json_check_unique_keys(const char *path, const cJSON *obj) {
  int n = cJSON_GetArraySize(obj);
  if (n < 2) return NULL;
  const cJSON **keys = dc_malloc(sizeof *keys * (size_t)n);
  if (!keys) return dc_nomem("checking JSON keys");
  int i = 0;
  for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c;
  qsort(keys, (size_t)n, sizeof *keys, json_key_cmp);
  dc_status *st = NULL;
  for (i = 1; i < n && !st; i++)
    if (strcmp(keys[i - 1]->string, keys[i]->string) == 0)
      st = dc_error(DC_ERR_FORMAT, "%s: key \"%s\" appears twice", path, keys[i]->string);
  dc_free(keys);
  return st;
}

static dc_status *json_parse_doc(dc_json_doc *d, size_t n) {
  size_t at;
  char why[64];
  d->root = dc_json_parse_bytes(d->text, n, &at, why);
  if (!d->root && !why[0]) return dc_nomem("parsing JSON");
  if (!d->root) return json_syntax_error(d->path, d->text, at, why);
  if (!cJSON_IsObject(d->root)) {
    char buf[64];
    return dc_error(DC_ERR_FORMAT, "%s: expected a JSON object at the top level, got %s", d->path,
                    json_found(d->root, buf, sizeof buf));
  }
  return json_check_unique_keys(d->path, d->root);
}

dc_status *dc_json_load(const char *path, dc_json_doc *out) {
  memset(out, 0, sizeof *out);
  out->path = dc_strdup(path);
  if (!out->path) return dc_nomem("loading JSON");
  size_t n = 0;
  dc_status *st = dc_file_read_all(path, &out->text, &n);
  if (!st) st = json_parse_doc(out, n);
  if (st) dc_json_free(out);
  return st;
}

void dc_json_free(dc_json_doc *d) {
  cJSON_Delete(d->root);
  dc_free(d->text);
  dc_free(d->path);
  memset(d, 0, sizeof *d);
}

/* ---- typed getters -------------------------------------------------------- */

/* The value of key, or NULL when absent or null. */
static const cJSON *json_get(const dc_json_doc *d, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, key);
  return cJSON_IsNull(v) ? NULL : v;
}

/* A JSON number that is exactly an integer a double can still tell apart. */
static int json_exact_int(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double x = v->valuedouble;
  if (!(x >= -9007199254740992.0 && x <= 9007199254740992.0) || x != floor(x)) return 0;
  *out = (int64_t)x;
  return 1;
}

static dc_status *json_type_error(const dc_json_doc *d, const char *key, const char *expected,
                                  const cJSON *v) {
  char buf[64];
  return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be %s, got %s", d->path, key, expected,
                  json_found(v, buf, sizeof buf));
}

dc_status *dc_json_int(const dc_json_doc *d, const char *key, int64_t def, int64_t *out) {
  const cJSON *v = json_get(d, key);
  *out = def;
  if (v && !json_exact_int(v, out)) return json_type_error(d, key, "an integer", v);
  return NULL;
}

dc_status *dc_json_int_min(const dc_json_doc *d, const char *key, int64_t def, int64_t min, int64_t *out) {
  DC_TRY(dc_json_int(d, key, def, out));
  if (*out < min)
    return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be an integer >= %lld, got %lld", d->path, key, (long long)min,
                    (long long)*out);
  return NULL;
}

dc_status *dc_json_num(const dc_json_doc *d, const char *key, double def, double *out) {
  const cJSON *v = json_get(d, key);
  *out = def;
  if (!v) return NULL;
  if (!cJSON_IsNumber(v)) return json_type_error(d, key, "a number", v);
  *out = v->valuedouble;
  return NULL;
}

dc_status *dc_json_bool(const dc_json_doc *d, const char *key, int def, int *out) {
  const cJSON *v = json_get(d, key);
  *out = def;
  if (!v) return NULL;
  if (!cJSON_IsBool(v)) return json_type_error(d, key, "true or false", v);
  *out = cJSON_IsTrue(v);
  return NULL;
}

dc_status *dc_json_str(const dc_json_doc *d, const char *key, const char *def, const char **out) {
  const cJSON *v = json_get(d, key);
  *out = def;
  if (!v) return NULL;
  if (!cJSON_IsString(v)) return json_type_error(d, key, "a string", v);
  *out = v->valuestring;
  return NULL;
}

/* "positive integer", "non-negative integer", "integer >= -3"; plural adds "s". */
static const char *json_int_kind(int64_t min_value, int plural, char *buf, size_t cap) {
  const char *s = plural ? "s" : "";
  if (min_value == 1) snprintf(buf, cap, "positive integer%s", s);
  else if (min_value == 0) snprintf(buf, cap, "non-negative integer%s", s);
  else if (min_value == INT64_MIN) snprintf(buf, cap, "integer%s", s);
  else snprintf(buf, cap, "integer%s >= %lld", s, (long long)min_value);
  return buf;
}

static dc_status *json_int_list_error(const dc_json_doc *d, const char *key, int allow_scalar,
                                      int64_t min_value, const cJSON *v, int index) {
  char one[48], many[48], found[64], expected[160];
  json_int_kind(min_value, 0, one, sizeof one);
  json_int_kind(min_value, 1, many, sizeof many);
  if (allow_scalar)
    snprintf(expected, sizeof expected, "a%s %s or a list of %s", one[0] == 'i' ? "n" : "", one,
             many);
  else snprintf(expected, sizeof expected, "a list of %s", many);
  json_found(v, found, sizeof found);
  if (index < 0)
    return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be %s, got %s", d->path, key, expected, found);
  return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be %s, got %s at index %d", d->path, key,
                  expected, found, index);
}

static dc_status *json_check_count(const dc_json_doc *d, const char *key, int n, int want,
                                   int max_n) {
  if (want > max_n)
    return dc_error(DC_ERR_INTERNAL, "%s: \"%s\": asked for %d entries with room for %d", d->path,
                    key, want, max_n);
  if (want > 0 && n != want)
    return dc_error(DC_ERR_MISMATCH, "%s: \"%s\" must have %d entries, got %d", d->path, key, want,
                    n);
  if (n > max_n)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" has %d entries; diffc supports at most %d",
                    d->path, key, n, max_n);
  return NULL;
}

dc_status *dc_json_int_list(const dc_json_doc *d, const char *key, int allow_scalar, int want,
                            int64_t min_value, int64_t *out, int max_n, int *out_n,
                            int *out_present) {
  const cJSON *v = json_get(d, key);
  *out_n = 0;
  if (out_present) *out_present = v != NULL;
  if (!v) return NULL;
  int64_t x;
  if (allow_scalar && cJSON_IsNumber(v)) {
    if (!json_exact_int(v, &x) || x < min_value)
      return json_int_list_error(d, key, allow_scalar, min_value, v, -1);
    int n = want > 0 ? want : 1;
    DC_TRY(json_check_count(d, key, n, want, max_n));
    for (int i = 0; i < n; i++) out[i] = x;
    *out_n = n;
    return NULL;
  }
  if (!cJSON_IsArray(v)) return json_int_list_error(d, key, allow_scalar, min_value, v, -1);
  int n = cJSON_GetArraySize(v), i = 0;
  DC_TRY(json_check_count(d, key, n, want, max_n));
  for (const cJSON *c = v->child; c; c = c->next, i++) {
    if (!json_exact_int(c, &x) || x < min_value)
      return json_int_list_error(d, key, allow_scalar, min_value, c, i);
    out[i] = x;
  }
  *out_n = n;
  return NULL;
}

dc_status *dc_json_str_list(const dc_json_doc *d, const char *key, const char **out, int max_n,
                            int *out_n) {
  const cJSON *v = json_get(d, key);
  *out_n = 0;
  if (!v) return NULL;
  if (!cJSON_IsArray(v)) return json_type_error(d, key, "a list of strings", v);
  int n = cJSON_GetArraySize(v), i = 0;
  DC_TRY(json_check_count(d, key, n, 0, max_n));
  for (const cJSON *c = v->child; c; c = c->next, i++) {
    if (!cJSON_IsString(c)) {
      char buf[64];
      return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be a list of strings, got %s at index %d",
                      d->path, key, json_found(c, buf, sizeof buf), i);
    }
    out[i] = c->valuestring;
  }
  *out_n = n;
  return NULL;
}

const char *dc_json_show(const cJSON *v, char *buf, size_t cap) {
  char *s = v ? cJSON_PrintUnformatted(v) : NULL;
  if (!s) return snprintf(buf, cap, "%s", v ? "a value" : "absent"), buf;
  if (strlen(s) >= cap) snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
  else snprintf(buf, cap, "%s", s);
  cJSON_free(s);
  return buf;
}
