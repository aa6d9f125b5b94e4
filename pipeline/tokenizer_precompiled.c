/* tokenizer_precompiled.c — sentencepiece's precompiled normalization map
 * (nmt_nfkc and friends) as the tokenizers crate's "Precompiled" normalizer
 * applies it.
 *
 * The map: a little-endian u32 trie size in bytes, the trie (darts-clone
 * double-array units), then the replacement strings, each NUL-terminated.
 * A unit holds a label (the byte leading to it), an offset to its children
 * and a has-leaf bit; the leaf unit's value is the replacement's offset.
 *
 * The crate walks the text by extended grapheme cluster: a cluster shorter
 * than 6 bytes is looked up whole, and when any prefix of it is a key, the
 * whole cluster becomes the replacement of the SHORTEST such prefix (so
 * "ﬁ" + U+0301 becomes "fi", the accent dropped); otherwise each character
 * is looked up alone.  We do the same, cluster breaks from utf8proc. */
#include "tokenizer_t5_impl.h"

#include <string.h>
#include <utf8proc.h>

static uint32_t rd_u32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

dc_status *dc_t5_charsmap_parse(const uint8_t *data, size_t n, const char *where, dc_t5_charsmap *out) {
  memset(out, 0, sizeof *out);
  if (n < 4) return dc_error(DC_ERR_FORMAT, "%s: precompiled charsmap of %zu bytes, expected at least 4", where, n);
  size_t trie = rd_u32(data);
  if (trie > n - 4)
    return dc_error(DC_ERR_FORMAT, "%s: precompiled charsmap says its trie has %zu bytes, only %zu follow", where,
                    trie, n - 4);
  if (trie < 4) return dc_error(DC_ERR_FORMAT, "%s: precompiled charsmap has an empty trie", where);
  out->nunits = trie / 4;
  out->norm_len = n - 4 - trie;
  out->units = dc_malloc(out->nunits * 4);
  out->norm = dc_malloc(out->norm_len + 1);
  out->where = dc_strdup(where);
  if (!out->units || !out->norm || !out->where) return dc_nomem("reading a precompiled charsmap");
  for (size_t i = 0; i < out->nunits; i++) out->units[i] = rd_u32(data + 4 + 4 * i);
  memcpy(out->norm, data + 4 + trie, out->norm_len);
  out->norm[out->norm_len] = 0;
  utf8proc_int32_t cp;
  for (size_t i = 0; i < out->norm_len;) { /* the crate refuses a map whose replacements are not UTF-8 */
    utf8proc_ssize_t k =
        utf8proc_iterate((const uint8_t *)out->norm + i, (utf8proc_ssize_t)(out->norm_len - i), &cp);
    if (k <= 0)
      return dc_error(DC_ERR_FORMAT, "%s: precompiled charsmap's replacement strings are not valid UTF-8 (byte %zu)",
                      where, i);
    i += (size_t)k;
  }
  return NULL;
}

void dc_t5_charsmap_free(dc_t5_charsmap *m) {
  dc_free(m->units);
  dc_free(m->norm);
  dc_free(m->where);
  memset(m, 0, sizeof *m);
}

/* darts-clone unit fields */
static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7fffffffu; }
static uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xffu); }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

/* The replacement of the shortest key that is a prefix of s[0..n): 1 and
 * *rep and *rep_len set; 0 when none; -1 when the map points outside itself. */
static int shortest_match(const dc_t5_charsmap *m, const char *s, size_t n, const char **rep, size_t *rep_len) {
  size_t pos = unit_offset(m->units[0]);
  for (size_t i = 0; i < n; i++) {
    uint8_t c = (uint8_t)s[i];
    if (!c) return 0;
    pos ^= c;
    if (pos >= m->nunits) return -1;
    uint32_t u = m->units[pos];
    if (unit_label(u) != c) return 0;
    pos ^= unit_offset(u);
    if (pos >= m->nunits) return -1;
    if (unit_has_leaf(u)) {
      size_t at = unit_value(m->units[pos]);
      if (at > m->norm_len) return -1;
      if (at < m->norm_len && ((uint8_t)m->norm[at] & 0xc0) == 0x80) return -1; /* not at a character */
      *rep = m->norm + at;
      *rep_len = strlen(m->norm + at);
      return 1;
    }
  }
  return 0;
}

/* A unit or value that points outside the map: the crate would panic, we
 * refuse (found only when a prompt reaches that part of the trie). */
static dc_status *corrupt(const dc_t5_charsmap *m) {
  return dc_error(DC_ERR_FORMAT, "%s: corrupt: its trie points outside the map", m->where);
}

/* One character or cluster: its replacement appended (1), or nothing (0). */
static int replace_into(const dc_t5_charsmap *m, const char *s, size_t n, dc_buf *out) {
  const char *rep;
  size_t rl;
  int r = shortest_match(m, s, n, &rep, &rl);
  if (r == 1) dc_buf_append(out, rep, rl);
  return r;
}

static dc_status *normalize_cluster(const dc_t5_charsmap *m, const char *s, size_t n, dc_buf *out) {
  if (n < 6) {
    int r = replace_into(m, s, n, out);
    if (r < 0) return corrupt(m);
    if (r) return NULL;
  }
  utf8proc_int32_t cp;
  for (size_t i = 0; i < n;) {
    size_t k = (size_t)utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    int r = replace_into(m, s + i, k, out);
    if (r < 0) return corrupt(m);
    if (!r) dc_buf_append(out, s + i, k);
    i += k;
  }
  return NULL;
}

dc_status *dc_t5_charsmap_normalize(const dc_t5_charsmap *m, const char *s, size_t n, dc_buf *out) {
  utf8proc_int32_t state = 0, prev = -1, cp;
  size_t start = 0;
  for (size_t i = 0; i < n;) {
    utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) return dc_error(DC_ERR_INTERNAL, "normalizing invalid UTF-8");
    if (prev >= 0 && utf8proc_grapheme_break_stateful(prev, cp, &state)) {
      DC_TRY(normalize_cluster(m, s + start, i - start, out));
      start = i;
    }
    prev = cp;
    i += (size_t)k;
  }
  if (n > start) DC_TRY(normalize_cluster(m, s + start, n - start, out));
  return dc_buf_status(out, "normalizing a prompt");
}
