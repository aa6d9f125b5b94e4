/* plan_sign.c — plan signatures and key files (see plan_sign.h): parsing
 * trusts nothing (every line is checked, every key must be a point on the
 * curve), secret keys are written 0600 and never over an existing file,
 * and secret bytes are wiped after use. */
#include "plan_sign.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char digest_context[] = "diffc plan signature v1";

static dc_status *sodium_ready(void) {
  if (sodium_init() < 0) return dc_error(DC_ERR_INTERNAL, "libsodium could not start (sodium_init failed)");
  return NULL;
}

void dc_secret_wipe(void *p, size_t n) { sodium_memzero(p, n); }

void dc_key_id(const uint8_t pk[DC_SIGN_PUBLIC_BYTES], char out[17]) {
  for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", pk[i]);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Exactly 2n hex digits at s, ending at end or whitespace. */
static int parse_hex(const char *s, const char *end, uint8_t *out, size_t n) {
  if ((size_t)(end - s) < 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  const char *after = s + 2 * n;
  return after == end || *after == ' ' || *after == '\t' ? 0 : -1;
}

static void to_hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", p[i]);
}

/* ---- trusted public keys ------------------------------------------------ */

static dc_status *add_key(dc_trusted_keys *k, const uint8_t pk[DC_SIGN_PUBLIC_BYTES]) {
  if (k->n == DC_SIGN_MAX_KEYS)
    return dc_error(DC_ERR_FORMAT, "%s: more than %d keys", k->path, DC_SIGN_MAX_KEYS);
  uint8_t(*keys)[DC_SIGN_PUBLIC_BYTES] = dc_realloc(k->keys, (size_t)(k->n + 1) * DC_SIGN_PUBLIC_BYTES);
  if (!keys) return dc_nomem("reading trusted keys");
  k->keys = keys;
  memcpy(k->keys[k->n++], pk, DC_SIGN_PUBLIC_BYTES);
  return NULL;
}

static dc_status *parse_key_line(dc_trusted_keys *k, int lineno, const char *s, const char *end) {
  while (s < end && (*s == ' ' || *s == '\t')) s++;
  while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
  if (s == end || *s == '#') return NULL;
  if ((size_t)(end - s) >= strlen(DC_SIGN_SECRET_PREFIX) - 1 && !strncmp(s, DC_SIGN_SECRET_PREFIX, strlen(DC_SIGN_SECRET_PREFIX) - 1))
    return dc_error(DC_ERR_FORMAT,
                    "%s:%d: this is a diffc secret key; --trusted-keys takes public keys (the PUBFILE diffc keygen "
                    "wrote)",
                    k->path, lineno);
  const char *tok_end = s;
  while (tok_end < end && *tok_end != ' ' && *tok_end != '\t') tok_end++;
  uint8_t pk[DC_SIGN_PUBLIC_BYTES];
  if (parse_hex(s, tok_end, pk, sizeof pk) != 0)
    return dc_error(DC_ERR_FORMAT,
                    "%s:%d: expected an Ed25519 public key as 64 hex digits (then an optional comment), found \"%.*s\"%s",
                    k->path, lineno, (int)(tok_end - s > 70 ? 70 : tok_end - s), s, tok_end - s > 70 ? "..." : "");
  if (!crypto_core_ed25519_is_valid_point(pk))
    return dc_error(DC_ERR_FORMAT, "%s:%d: %.16s... is not a valid Ed25519 public key (damaged?)", k->path, lineno, s);
  return add_key(k, pk);
}

dc_status *dc_trusted_keys_load(const char *path, dc_trusted_keys *out) {
  memset(out, 0, sizeof *out);
  DC_TRY(sodium_ready());
  out->path = dc_strdup(path);
  if (!out->path) return dc_nomem("reading trusted keys");
  char *text = NULL;
  size_t size = 0;
  dc_status *st = dc_file_read_all(path, &text, &size);
  if (st) st = dc_status_annotate(st, "--trusted-keys");
  if (!st && memchr(text, 0, size))
    st = dc_error(DC_ERR_FORMAT, "%s: not a text file of public keys (it holds NUL bytes)", path);
  int lineno = 0;
  for (const char *s = text; !st && s && s < text + size; lineno++) {
    const char *nl = memchr(s, '\n', (size_t)(text + size - s)), *end = nl ? nl : text + size;
    st = parse_key_line(out, lineno + 1, s, end);
    s = end + 1;
  }
  if (!st && out->n == 0)
    st = dc_error(DC_ERR_FORMAT,
                  "%s: no public keys (one per line: 64 hex digits, then an optional comment; '#' starts a comment "
                  "line)",
                  path);
  dc_free(text);
  if (st) dc_trusted_keys_deinit(out);
  return st;
}

void dc_trusted_keys_deinit(dc_trusted_keys *k) {
  dc_free(k->path);
  dc_free(k->keys);
  memset(k, 0, sizeof *k);
}

int dc_trusted_keys_has(const dc_trusted_keys *k, const uint8_t pk[DC_SIGN_PUBLIC_BYTES]) {
  for (int i = 0; i < k->n; i++)
    if (!memcmp(k->keys[i], pk, DC_SIGN_PUBLIC_BYTES)) return 1;
  return 0;
}

/* ---- the secret key -------------------------------------------------------- */

static dc_status *parse_secret(const char *path, const char *text, size_t size, uint8_t sk[DC_SIGN_SECRET_BYTES]) {
  const char *s = text, *end = text + size;
  while (s < end) { /* skip '#' lines and blank ones */
    const char *nl = memchr(s, '\n', (size_t)(end - s)), *le = nl ? nl : end;
    if (le > s && *s != '#' && !(le == s + 1 && *s == '\r')) {
      end = le;
      break;
    }
    s = le + 1;
  }
  while (end > s && (end[-1] == '\r' || end[-1] == ' ')) end--;
  size_t plen = strlen(DC_SIGN_SECRET_PREFIX);
  if (s >= end || (size_t)(end - s) < plen || strncmp(s, DC_SIGN_SECRET_PREFIX, plen) != 0 ||
      parse_hex(s + plen, end, sk, DC_SIGN_SECRET_BYTES) != 0)
    return dc_error(DC_ERR_FORMAT,
                    "--sign %s: not a diffc secret key (expected a line \"%s\" and 128 hex digits, as diffc keygen "
                    "writes)",
                    path, DC_SIGN_SECRET_PREFIX);
  uint8_t pk[DC_SIGN_PUBLIC_BYTES], check[DC_SIGN_SECRET_BYTES];
  int bad = crypto_sign_seed_keypair(pk, check, sk) != 0 || sodium_memcmp(check, sk, DC_SIGN_SECRET_BYTES) != 0;
  sodium_memzero(check, sizeof check);
  if (bad) return dc_error(DC_ERR_FORMAT, "--sign %s: damaged secret key (its public half does not match its seed)", path);
  return NULL;
}

dc_status *dc_secret_key_load(const char *path, uint8_t sk[DC_SIGN_SECRET_BYTES]) {
  DC_TRY(sodium_ready());
  struct stat sb;
  if (stat(path, &sb) != 0) return dc_error(DC_ERR_IO, "--sign %s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return dc_error(DC_ERR_IO, "--sign %s: not a regular file", path);
  if (sb.st_mode & 077)
    return dc_error(DC_ERR_ARGUMENT,
                    "--sign %s: the secret key may be read or written by others (mode %04o); anyone who reads it can "
                    "sign plans in your name: chmod 600 %s",
                    path, (unsigned)(sb.st_mode & 07777), path);
  char *text = NULL;
  size_t size = 0;
  DC_TRY(dc_status_annotate(dc_file_read_all(path, &text, &size), "--sign"));
  dc_status *st = parse_secret(path, text, size, sk);
  sodium_memzero(text, size);
  dc_free(text);
  return st;
}

/* Writes text to a fresh temporary file of the given mode beside path and
 * returns its name (dc_malloc'd). */
static dc_status *write_temp(const char *path, const char *text, mode_t mode, char **tmp) {
  *tmp = dc_asprintf("%s.tmp.%ld", path, (long)getpid());
  if (!*tmp) return dc_nomem("writing a key");
  int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    dc_status *st = dc_error(DC_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    dc_free(*tmp);
    *tmp = NULL;
    return st;
  }
  size_t n = strlen(text);
  int ok = fchmod(fd, mode) == 0 && write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
  int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) {
    unlink(*tmp);
    dc_free(*tmp);
    *tmp = NULL;
    return dc_error(DC_ERR_IO, "%s: write failed: %s", path, strerror(err));
  }
  return NULL;
}

/* link(2) puts the file in place only if nothing is there: a key is never
 * overwritten, even by a file that appeared after the first check. */
static dc_status *link_into_place(const char *tmp, const char *path) {
  if (link(tmp, path) == 0) return NULL;
  if (errno == EEXIST)
    return dc_error(DC_ERR_IO, "%s exists: diffc keygen never overwrites a key file (remove it, or choose another name)",
                    path);
  return dc_error(DC_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
}

static dc_status *write_pair(const char *secret_path, const char *public_path, const char *sec, const char *pub) {
  char *ts = NULL, *tp = NULL;
  dc_status *st = write_temp(secret_path, sec, 0600, &ts);
  if (!st) st = write_temp(public_path, pub, 0644, &tp);
  if (!st) st = link_into_place(ts, secret_path);
  if (!st) {
    st = link_into_place(tp, public_path);
    if (st) unlink(secret_path); /* both or neither */
  }
  if (ts) unlink(ts);
  if (tp) unlink(tp);
  dc_free(ts);
  dc_free(tp);
  return st;
}

dc_status *dc_keygen(const char *secret_path, const char *public_path, char keyid[17]) {
  DC_TRY(sodium_ready());
  if (!strcmp(secret_path, public_path))
    return dc_error(DC_ERR_ARGUMENT, "diffc keygen: the secret and public key files must differ (both %s)", secret_path);
  const char *paths[2] = {secret_path, public_path};
  for (int i = 0; i < 2; i++)
    if (access(paths[i], F_OK) == 0)
      return dc_error(DC_ERR_IO, "%s exists: diffc keygen never overwrites a key file (remove it, or choose another name)",
                      paths[i]);
  uint8_t pk[DC_SIGN_PUBLIC_BYTES], sk[DC_SIGN_SECRET_BYTES];
  crypto_sign_keypair(pk, sk);
  char id[17], pkhex[2 * DC_SIGN_PUBLIC_BYTES + 1], skhex[2 * DC_SIGN_SECRET_BYTES + 1];
  dc_key_id(pk, id);
  to_hex(pk, sizeof pk, pkhex);
  to_hex(sk, sizeof sk, skhex);
  char sec[512], pub[256];
  snprintf(sec, sizeof sec,
           "# diffc Ed25519 secret key %s: keep it private; anyone who has it can sign plans in your name\n%s%s\n", id,
           DC_SIGN_SECRET_PREFIX, skhex);
  snprintf(pub, sizeof pub, "%s diffc key %s\n", pkhex, id);
  dc_status *st = write_pair(secret_path, public_path, sec, pub);
  sodium_memzero(sk, sizeof sk);
  sodium_memzero(skhex, sizeof skhex);
  sodium_memzero(sec, sizeof sec);
  if (!st && keyid) memcpy(keyid, id, 17);
  return st;
}

/* ---- the digest and the signature ------------------------------------------ */

void dc_plan_sign_spans(uint64_t hsize, uint32_t sign_index, uint64_t sign_offset, dc_span out[3]) {
  out[0] = (dc_span){32 + (uint64_t)sign_index * 32 + 24, 8}; /* the SIGN entry's xxh64 */
  out[1] = (dc_span){hsize, 8};                               /* the header checksum */
  out[2] = (dc_span){sign_offset + 4 + DC_SIGN_PUBLIC_BYTES, DC_SIGN_BYTES};
}

int dc_plan_digest(const uint8_t *file, size_t size, const dc_span *zero, int nzero, uint8_t out[DC_SIGN_DIGEST_BYTES]) {
  if (sodium_init() < 0) return -1;
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, DC_SIGN_DIGEST_BYTES);
  crypto_generichash_update(&h, (const uint8_t *)digest_context, sizeof digest_context);
  uint8_t buf[1 << 16];
  for (uint64_t at = 0; at < size;) {
    uint64_t n = size - at < sizeof buf ? size - at : sizeof buf;
    int masked = 0;
    for (int i = 0; i < nzero; i++) masked |= zero[i].at < at + n && zero[i].at + zero[i].len > at;
    if (!masked) {
      crypto_generichash_update(&h, file + at, n);
    } else {
      memcpy(buf, file + at, n);
      for (int i = 0; i < nzero; i++) {
        uint64_t lo = zero[i].at > at ? zero[i].at : at, hi = zero[i].at + zero[i].len;
        if (hi > at + n) hi = at + n;
        if (lo < hi) memset(buf + (lo - at), 0, hi - lo);
      }
      crypto_generichash_update(&h, buf, n);
    }
    at += n;
  }
  crypto_generichash_final(&h, out, DC_SIGN_DIGEST_BYTES);
  return 0;
}

int dc_sign_digest(uint8_t sig[DC_SIGN_BYTES], const uint8_t digest[DC_SIGN_DIGEST_BYTES],
                   const uint8_t sk[DC_SIGN_SECRET_BYTES]) {
  if (sodium_init() < 0) return -1;
  return crypto_sign_detached(sig, NULL, digest, DC_SIGN_DIGEST_BYTES, sk);
}

int dc_sign_verify(const uint8_t sig[DC_SIGN_BYTES], const uint8_t digest[DC_SIGN_DIGEST_BYTES],
                   const uint8_t pk[DC_SIGN_PUBLIC_BYTES]) {
  if (sodium_init() < 0) return 0;
  return crypto_sign_verify_detached(sig, digest, DC_SIGN_DIGEST_BYTES, pk) == 0;
}
