/* plan_sign.h — Ed25519 signatures on plans (libsodium), and the key files.
 *
 * A plan carries machine code that diffrun links and runs, so a plan from
 * someone else is as dangerous as a shared library from someone else; its
 * xxHash checksums stop accidents, not attackers.  A signature lets a user
 * run plans they did not build: diffc --sign SECRETFILE adds a SIGN
 * section, and diffrun --trusted-keys FILE refuses any plan that is not
 * signed by one of FILE's keys.
 *
 * What is signed (plan/plan_format.h): the BLAKE2b-512 digest of the
 * whole plan file — header, section table, every section, the padding —
 * with exactly three fields read as zeros, because they are derived from
 * the signature itself: the 64 signature bytes, the SIGN section's xxh64 in
 * the table and the header checksum.  The reader checks those two
 * checksums as for any plan, so every byte of the file is either signed or
 * checked against signed bytes.
 *
 * Key files (text):
 *   public:  one key per line, 64 hex digits, then optional whitespace and
 *            a comment; blank lines and lines starting with '#' are
 *            skipped.  `diffc keygen` writes one such line; a
 *            --trusted-keys file is any number of them.
 *   secret:  "diffc-ed25519-secret " and 128 hex digits (libsodium's
 *            seed || public key), after optional '#' lines; mode 0600, and
 *            refused when group or others may read or write it. */
#ifndef DC_PLAN_SIGN_H
#define DC_PLAN_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "../support/support.h"

#define DC_SIGN_PUBLIC_BYTES 32
#define DC_SIGN_SECRET_BYTES 64
#define DC_SIGN_BYTES 64
#define DC_SIGN_DIGEST_BYTES 64
#define DC_SIGN_ALG_ED25519_BLAKE2B 1u
/* SIGN payload: u32 algorithm, the signer's public key, the signature. */
#define DC_SIGN_SECTION_BYTES (4 + DC_SIGN_PUBLIC_BYTES + DC_SIGN_BYTES)
#define DC_SIGN_SECRET_PREFIX "diffc-ed25519-secret "
#define DC_SIGN_MAX_KEYS 1024

typedef struct {
  char *path;     /* the file they came from, for messages */
  uint8_t (*keys)[DC_SIGN_PUBLIC_BYTES];
  int n;
} dc_trusted_keys;

/* A --trusted-keys file; every malformed line is an error naming the file,
 * the line and what was expected. */
dc_status *dc_trusted_keys_load(const char *path, dc_trusted_keys *out);
void dc_trusted_keys_deinit(dc_trusted_keys *k);
int dc_trusted_keys_has(const dc_trusted_keys *k, const uint8_t pk[DC_SIGN_PUBLIC_BYTES]);

/* A secret key file as diffc keygen wrote it (mode checked, halves checked). */
dc_status *dc_secret_key_load(const char *path, uint8_t sk[DC_SIGN_SECRET_BYTES]);
/* Makes a key pair: the secret file with mode 0600 and the public file,
 * each written to a temporary name and linked into place, never over an
 * existing file.  keyid: the key's id (16 hex digits), may be NULL. */
dc_status *dc_keygen(const char *secret_path, const char *public_path, char keyid[17]);

/* Wipes secret bytes (not optimized away). */
void dc_secret_wipe(void *p, size_t n);

/* A key's id: its first 8 bytes in hex (16 digits, NUL-terminated). */
void dc_key_id(const uint8_t pk[DC_SIGN_PUBLIC_BYTES], char out[17]);

/* The fields read as zeros by the digest: the SIGN entry's xxh64, the
 * header checksum and the signature, for a plan whose table (of hsize
 * bytes) has the SIGN entry at index sign_index and its payload at
 * sign_offset. */
typedef struct {
  uint64_t at, len;
} dc_span;
void dc_plan_sign_spans(uint64_t hsize, uint32_t sign_index, uint64_t sign_offset, dc_span out[3]);
/* BLAKE2b-512 of "diffc plan signature v1" and the file with the spans
 * read as zeros.  0 on success, -1 if libsodium cannot start. */
int dc_plan_digest(const uint8_t *file, size_t size, const dc_span *zero, int nzero,
                   uint8_t out[DC_SIGN_DIGEST_BYTES]);
int dc_sign_digest(uint8_t sig[DC_SIGN_BYTES], const uint8_t digest[DC_SIGN_DIGEST_BYTES],
                   const uint8_t sk[DC_SIGN_SECRET_BYTES]);
/* 1 when sig is pk's signature of digest. */
int dc_sign_verify(const uint8_t sig[DC_SIGN_BYTES], const uint8_t digest[DC_SIGN_DIGEST_BYTES],
                   const uint8_t pk[DC_SIGN_PUBLIC_BYTES]);

#endif
