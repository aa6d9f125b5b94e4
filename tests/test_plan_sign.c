/* test_plan_sign.c — signed plans (issue 11, item 18): diffc keygen's key
 * files, a plan signed with --sign runs under --trusted-keys; one flipped
 * byte anywhere (header, table, every section, the padding, the signer's
 * key, the signature), whether or not the xxh64 checksums are then
 * recomputed as an attacker would, is refused; a stripped signature, a
 * plan signed by another key and a malformed SIGN section are refused,
 * each with its own message; malformed key files get clear errors; without
 * --trusted-keys signed and unsigned plans load as before. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver/compile.h"
#include "plan/plan_format.h"
#include "plan/plan_sign.h"
#include "testutil.h"

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *read_file(const char *path, size_t *n) {
  char *text;
  CHECK_OK(dc_file_read_all(path, &text, n));
  return (uint8_t *)text;
}

/* What an attacker who changed bytes does next: every checksum the reader
 * checks made right again (as tests/fuzz/fuzz_plan.c does). */
static void fix_checksums(uint8_t *d, size_t size) {
  uint32_t n = (uint32_t)get_le(d + 16, 4);
  if (n > DC_PLAN_MAX_SECTIONS) return;
  size_t hsize = DC_PLAN_HEADER_SIZE + (size_t)n * DC_PLAN_ENTRY_SIZE;
  if (hsize + 8 > size) return;
  put_le(d + 24, size, 8);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *e = d + DC_PLAN_HEADER_SIZE + (size_t)i * DC_PLAN_ENTRY_SIZE;
    uint64_t off = get_le(e + 8, 8), sz = get_le(e + 16, 8);
    if (off <= size && sz <= size - off) put_le(e + 24, dc_hash64(d + off, (size_t)sz), 8);
  }
  put_le(d + hsize, dc_hash64(d, hsize), 8);
}

static dc_status *load(const char *plan, const char *keys, int run) {
  drt_options o = {.backend = "reference", .threads = 1, .trusted_keys = keys, .inspect = !run};
  drt_plan *p = NULL;
  dc_status *st = drt_load(plan, &o, &p);
  if (!st && run) {
    drt_set_random_inputs(p, 1);
    drt_stats s;
    st = drt_run(p, &s);
  }
  drt_destroy(p);
  return st;
}

static char *plain_plan, *key_a, *pub_a, *key_b, *pub_b, *both_pubs;

/* A copy of the compiled plan, signed by sk (or unsigned for NULL). */
static void resign(const char *from, const char *to, const uint8_t *sk) {
  dc_plan p;
  CHECK_OK(dc_plan_read(from, &p));
  p.sign_secret = sk;
  CHECK_OK(dc_plan_write(to, &p));
  dc_plan_deinit(&p);
}

static void test_keygen(void) {
  key_a = tu_path("a.key"), pub_a = tu_path("a.pub"), key_b = tu_path("b.key"), pub_b = tu_path("b.pub");
  char id[17];
  CHECK_OK(dc_keygen(key_a, pub_a, id));
  CHECK(strlen(id) == 16);
  CHECK_OK(dc_keygen(key_b, pub_b, NULL));
  struct stat sb;
  CHECK(stat(key_a, &sb) == 0 && (sb.st_mode & 0777) == 0600);
  char *key_c = tu_path("c.key"), *pub_c = tu_path("c.pub");
  CHECK_ERR(dc_keygen(key_a, pub_c, NULL), "a.key exists: diffc keygen never overwrites a key file");
  CHECK_ERR(dc_keygen(key_c, pub_a, NULL), "a.pub exists: diffc keygen never overwrites a key file");
  CHECK(!dc_file_exists(key_c) && !dc_file_exists(pub_c)); /* both or neither */
  free(key_c), free(pub_c);
  uint8_t sk[DC_SIGN_SECRET_BYTES];
  CHECK_OK(dc_secret_key_load(key_a, sk));
  dc_trusted_keys k;
  CHECK_OK(dc_trusted_keys_load(pub_a, &k));
  CHECK(k.n == 1 && !memcmp(k.keys[0], sk + 32, 32));
  dc_trusted_keys_deinit(&k);
  /* a file of both keys, with comments and blank lines, is a trusted-keys file */
  size_t na, nb;
  char *a = (char *)read_file(pub_a, &na), *b = (char *)read_file(pub_b, &nb), text[1024];
  snprintf(text, sizeof text, "# the team's keys\n\n%s  \t\r\n%s", a, b);
  both_pubs = tu_path("both.pub");
  tu_write_file(both_pubs, text, strlen(text));
  CHECK_OK(dc_trusted_keys_load(both_pubs, &k));
  CHECK(k.n == 2);
  dc_trusted_keys_deinit(&k);
  dc_free(a), dc_free(b);
  printf("keygen: secret 0600, public one line; never overwrites; both or neither written\n");
}

static void write_text(const char *name, const char *text, char **path) {
  *path = tu_path(name);
  tu_write_file(*path, text, strlen(text));
}

static void test_bad_key_files(void) {
  static const char key64[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char *p, text[512];
  write_text("empty.pub", "", &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "empty.pub: no public keys (one per line: 64 hex digits");
  free(p);
  write_text("comments.pub", "# only a comment\n\n", &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "comments.pub: no public keys");
  free(p);
  write_text("short.pub", "# ok\n0123456789abcdef not-a-key\n", &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}),
            "short.pub:2: expected an Ed25519 public key as 64 hex digits (then an optional comment), found \"0123456789abcdef\"");
  free(p);
  snprintf(text, sizeof text, "%.63sg\n", key64);
  write_text("badhex.pub", text, &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "badhex.pub:1: expected an Ed25519 public key as 64 hex digits");
  free(p);
  snprintf(text, sizeof text, "%s00\n", key64);
  write_text("long.pub", text, &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "long.pub:1: expected an Ed25519 public key as 64 hex digits");
  free(p);
  write_text("point.pub", "0200000000000000000000000000000000000000000000000000000000000000\n", &p);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "point.pub:1: 0200000000000000... is not a valid Ed25519 public key");
  free(p);
  write_text("nul.pub", "abc\0def", &p);
  tu_write_file(p, "abc\0def", 7);
  CHECK_ERR(dc_trusted_keys_load(p, &(dc_trusted_keys){0}), "nul.pub: not a text file of public keys");
  free(p);
  CHECK_ERR(dc_trusted_keys_load(key_a, &(dc_trusted_keys){0}), "a.key:2: this is a diffc secret key; --trusted-keys takes public keys");
  char *missing = tu_path("missing.pub");
  CHECK_ERR(dc_trusted_keys_load(missing, &(dc_trusted_keys){0}), "--trusted-keys: ");
  /* through drt_load: the key file's error, nothing loaded */
  CHECK_ERR(load(plain_plan, missing, 0), "missing.pub: cannot open");
  free(missing);

  /* the secret key: mode, format, halves */
  uint8_t sk[DC_SIGN_SECRET_BYTES];
  chmod(key_a, 0644);
  CHECK_ERR(dc_secret_key_load(key_a, sk), "the secret key may be read or written by others (mode 0644)");
  chmod(key_a, 0600);
  CHECK_ERR(dc_secret_key_load(pub_a, sk), "a.pub: the secret key may be read or written by others (mode 0644)");
  chmod(pub_a, 0600);
  CHECK_ERR(dc_secret_key_load(pub_a, sk), "a.pub: not a diffc secret key (expected a line \"diffc-ed25519-secret \" and 128 hex digits");
  chmod(pub_a, 0644);
  size_t n;
  char *sec = (char *)read_file(key_a, &n);
  char *last = sec + n - 2; /* the last hex digit: the public half */
  *last = *last == '0' ? '1' : '0';
  p = tu_path("damaged.key");
  tu_write_file(p, sec, n);
  chmod(p, 0600);
  CHECK_ERR(dc_secret_key_load(p, sk), "damaged.key: damaged secret key (its public half does not match its seed)");
  free(p), dc_free(sec);
  printf("key files: empty, comment-only, short, bad hex, too long, off-curve, binary, a secret key given as public, "
         "missing; secret key readable by others, not a key, damaged: each refused with its own message\n");
}

/* One byte changed: refused as it is, and refused when the checksums are
 * recomputed too; inside a signed section the signature is what refuses.
 * Returns 1 when refused (with `want` in the message), 0 when not, -1
 * when recomputing the checksums gave back the original file (the byte
 * was a checksum: nothing to refuse). */
static int flip_refused(const uint8_t *orig, size_t size, uint64_t at, int fix, const char *want) {
  uint8_t *d = malloc(size);
  memcpy(d, orig, size);
  d[at] ^= 0x10;
  if (fix) fix_checksums(d, size);
  if (!memcmp(d, orig, size)) {
    free(d);
    return -1;
  }
  char *path = tu_path("flipped.dplan");
  tu_write_file(path, d, size);
  dc_status *st = load(path, pub_a, 0);
  int ok = st != NULL && (!want || strstr(dc_status_message(st), want) != NULL);
  if (!ok)
    fprintf(stderr, "  offset %llu%s: %s\n", (unsigned long long)at, fix ? " (checksums fixed)" : "",
            st ? dc_status_message(st) : "accepted");
  dc_status_free(st);
  free(d), free(path);
  return ok;
}

static void test_flips(const char *signed_plan) {
  size_t size;
  uint8_t *d = read_file(signed_plan, &size);
  uint32_t n = (uint32_t)get_le(d + 16, 4);
  size_t hsize = DC_PLAN_HEADER_SIZE + (size_t)n * DC_PLAN_ENTRY_SIZE;
  CHECK(n == 6 && !memcmp(d + DC_PLAN_HEADER_SIZE + 5 * DC_PLAN_ENTRY_SIZE, "SIGN", 4));
  int tried = 0, refused = 0, by_signature = 0, payload_tries = 0;
  /* the header and every table field, the header checksum */
  for (uint64_t at = 0; at < hsize + 8; at += (at < DC_PLAN_HEADER_SIZE ? 4 : 3)) {
    tried++;
    refused += flip_refused(d, size, at, 0, NULL);
    int r = flip_refused(d, size, at, 1, NULL);
    if (r >= 0) tried++, refused += r;
  }
  /* every section: first, middle and last byte, and the padding after it */
  uint64_t sig_at = 0, pk_at = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = d + DC_PLAN_HEADER_SIZE + (size_t)i * DC_PLAN_ENTRY_SIZE;
    uint64_t off = get_le(e + 8, 8), sz = get_le(e + 16, 8);
    int sign = !memcmp(e, "SIGN", 4);
    if (sign) pk_at = off + 4, sig_at = off + 4 + DC_SIGN_PUBLIC_BYTES;
    uint64_t pts[4] = {off, off + sz / 2, off + sz - 1, off + sz};
    for (int k = 0; k < 4; k++) {
      if (pts[k] >= size || (k == 3 && (pts[k] & 63) == 0)) continue; /* no padding there */
      tried += 2;
      /* padding is in no checksum: the signature covers it */
      refused += flip_refused(d, size, pts[k], 0, k == 3 ? "does not verify" : "checksum mismatch");
      /* an attacker's fix of the checksums does not get past the signature */
      int ok = flip_refused(d, size, pts[k], 1, sign && k < 3 ? NULL : "does not verify");
      refused += ok;
      if (!sign || k == 3) by_signature += ok, payload_tries++;
    }
  }
  /* the signer's key and the signature itself */
  for (uint64_t at = pk_at; at < pk_at + DC_SIGN_PUBLIC_BYTES; at += 7) {
    tried++;
    refused += flip_refused(d, size, at, 1, "which is not one of the 1 key in --trusted-keys");
  }
  for (uint64_t at = sig_at; at < sig_at + DC_SIGN_BYTES; at += 5) {
    tried++;
    refused += flip_refused(d, size, at, 1, "the signature by trusted key");
  }
  CHECK(refused == tried);
  CHECK(by_signature == payload_tries && payload_tries >= 20);
  printf("flips: %d single-byte changes across the header, table, all %u sections, padding, key and signature: all "
         "refused; %d of them with the checksums recomputed, refused by the signature\n",
         tried, n, by_signature);
  dc_free(d);
}

/* The signature cut off as an attacker would: one section fewer, the file
 * ends where SIGN began, total and header checksum made right. */
static void test_stripped(const char *signed_plan) {
  size_t size;
  uint8_t *d = read_file(signed_plan, &size);
  const uint8_t *e = d + DC_PLAN_HEADER_SIZE + 5 * DC_PLAN_ENTRY_SIZE;
  uint64_t sign_off = get_le(e + 8, 8);
  put_le(d + 16, 5, 4);
  memset(d + DC_PLAN_HEADER_SIZE + 5 * DC_PLAN_ENTRY_SIZE, 0, DC_PLAN_ENTRY_SIZE);
  fix_checksums(d, sign_off);
  char *path = tu_path("stripped.dplan");
  tu_write_file(path, d, sign_off);
  CHECK_OK(load(path, NULL, 0)); /* a well-formed unsigned plan */
  CHECK_ERR(load(path, pub_a, 0), "stripped.dplan: refused: the plan is not signed (no SIGN section) and --trusted-keys");
  /* and the same plan written unsigned by diffc */
  CHECK_ERR(load(plain_plan, pub_a, 0), "refused: the plan is not signed");
  dc_free(d), free(path);
  printf("stripped: a plan whose SIGN section was cut off is refused under --trusted-keys\n");
}

/* A SIGN section of the wrong size or algorithm: refused with keys,
 * ignored without (as any plan's unknown data). */
static void test_malformed_sign(const char *signed_plan) {
  size_t size;
  uint8_t *d = read_file(signed_plan, &size);
  uint8_t *e = d + DC_PLAN_HEADER_SIZE + 5 * DC_PLAN_ENTRY_SIZE;
  uint64_t off = get_le(e + 8, 8);
  char *path = tu_path("malformed.dplan");
  put_le(d + off, 7, 4); /* algorithm 7 */
  fix_checksums(d, size);
  tu_write_file(path, d, size);
  CHECK_ERR(load(path, pub_a, 0), "refused: malformed signature: its signature uses algorithm 7");
  CHECK_OK(load(path, NULL, 0));
  put_le(d + off, DC_SIGN_ALG_ED25519_BLAKE2B, 4);
  put_le(e + 16, DC_SIGN_SECTION_BYTES - 1, 8);
  fix_checksums(d, size);
  tu_write_file(path, d, size);
  CHECK_ERR(load(path, pub_a, 0), "refused: malformed signature: its SIGN section has 99 bytes, expected 100");
  put_le(e + 16, DC_SIGN_SECTION_BYTES, 8);
  memcpy(e + 8, e - DC_PLAN_ENTRY_SIZE + 8, 8); /* SIGN's payload where IRTX's begins */
  fix_checksums(d, size);
  tu_write_file(path, d, size);
  CHECK_ERR(load(path, pub_a, 0), "refused: malformed signature: its SIGN section overlaps another section");
  dc_free(d), free(path);
  printf("malformed SIGN: wrong algorithm, wrong size, overlapping: refused under --trusted-keys\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model");
  plain_plan = tu_path("plain.dplan");
  dc_compile_options co = {.model = model, .entry = "decode"};
  CHECK_OK(dc_compile(&co, plain_plan, NULL));
  test_keygen();

  uint8_t ska[DC_SIGN_SECRET_BYTES], skb[DC_SIGN_SECRET_BYTES];
  CHECK_OK(dc_secret_key_load(key_a, ska));
  CHECK_OK(dc_secret_key_load(key_b, skb));
  char *signed_a = tu_path("signed_a.dplan"), *signed_b = tu_path("signed_b.dplan");
  resign(plain_plan, signed_a, ska);
  resign(plain_plan, signed_b, skb);
  /* signed by diffc itself: --sign through dc_compile */
  char *compiled = tu_path("compiled_signed.dplan");
  co.sign_secret = ska;
  CHECK_OK(dc_compile(&co, compiled, NULL));
  CHECK_OK(load(compiled, pub_a, 1));
  CHECK_OK(load(signed_a, pub_a, 1));
  CHECK_OK(load(signed_a, both_pubs, 1));
  CHECK_OK(load(signed_b, both_pubs, 1));
  CHECK_OK(load(signed_a, NULL, 1)); /* without --trusted-keys, signed and unsigned run as before */
  CHECK_OK(load(plain_plan, NULL, 1));
  CHECK_ERR(load(signed_b, pub_a, 1), "signed_b.dplan: refused: the plan is signed by key ");
  CHECK_ERR(load(signed_b, pub_a, 1), ", which is not one of the 1 key in --trusted-keys ");
  /* drt_info says who signed and whether it was checked */
  drt_plan *p = NULL;
  drt_options o = {.inspect = 1, .trusted_keys = pub_a};
  CHECK_OK(drt_load(signed_a, &o, &p));
  char id[17];
  dc_key_id(ska + 32, id);
  CHECK(p && strstr(drt_info(p)->signature, id) && strstr(drt_info(p)->signature, "verified against --trusted-keys"));
  drt_destroy(p);
  o.trusted_keys = NULL;
  CHECK_OK(drt_load(signed_a, &o, &p));
  CHECK(p && strstr(drt_info(p)->signature, "(not verified: no --trusted-keys)"));
  drt_destroy(p);
  CHECK_OK(drt_load(plain_plan, &o, &p));
  CHECK(p && !strcmp(drt_info(p)->signature, "none"));
  drt_destroy(p);
  printf("signed: runs with its key (alone or among others), refused under another key; unsigned runs without "
         "--trusted-keys\n");

  test_bad_key_files();
  test_flips(signed_a);
  test_stripped(signed_a);
  test_malformed_sign(signed_a);
  dc_secret_wipe(ska, sizeof ska);
  dc_secret_wipe(skb, sizeof skb);
  free(signed_a), free(signed_b), free(compiled);
  dc_free(model);
  return tu_finish();
}
