/* fuzz_plan.c — the plan loader: dc_plan_read (magic, version, section
 * table, checksums, OPTS/WREF/SCHD/KERN/IRTX, the module through the
 * verifier) then, when that succeeds, drt_load with the reference backend
 * (maps the weight files the plan names and checks them).  Plans carry
 * xxh64 checksums, which random mutations almost never keep right, so each
 * input runs twice: as it is (the header, table and checksum checks) and,
 * when it has a plausible header, with its total size, section checksums
 * and header checksum recomputed (the section parsers and the verifier
 * behind them).  The replay test adds a plan compiled from unet_tiny at
 * test time.
 *
 * Each input is also read as diffrun --trusted-keys reads it, trusting the
 * fuzz key (tests/fuzz/fuzz_sign.key, a test-only key whose secret is in
 * the repository): the SIGN section's parser and the signature check run
 * before the sections'.  The replay test adds a plan signed with that key,
 * and corpus/plan/sign_* are SIGN-only plans (valid, damaged signature,
 * unknown algorithm, short section). */
#include "frontend/frontend.h"
#include "fuzz_common.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"

/* The public half of tests/fuzz/fuzz_sign.key. */
static const char fuzz_public_key[] = "d6393dd4e1622c6168a95bfc220a8183cf52ccdd74bfd92d8a11f18b00e7aad4 fuzz key\n";
static char keys_path[256];
static dc_trusted_keys keys;

/* dc_plan_read_trusted with the fuzz key; with the signature good, also
 * drt_load with --trusted-keys. */
static void load_trusted(const char *path) {
  dc_plan plan;
  dc_status *st = dc_plan_read_trusted(path, &keys, &plan);
  if (st) {
    fuzz_drop(st);
    return;
  }
  dc_plan_deinit(&plan);
  drt_options opt = {.backend = "reference", .threads = 1, .trusted_keys = keys_path, .inspect = 1};
  drt_plan *p = NULL;
  st = drt_load(path, &opt, &p);
  if (!st) drt_destroy(p);
  fuzz_drop(st);
}

static void load(const char *path, const uint8_t *data, size_t size) {
  fuzz_write_file(path, data, size);
  load_trusted(path);
  dc_plan plan;
  dc_status *st = dc_plan_read(path, &plan);
  if (st) {
    fuzz_drop(st);
    return;
  }
  dc_plan_deinit(&plan);
  drt_options opt = {.backend = "reference", .threads = 1};
  drt_plan *p = NULL;
  st = drt_load(path, &opt, &p);
  if (!st) {
    for (int i = 0; i < drt_input_count(p); i++) (void)drt_input_info(p, i);
    for (int i = 0; i < drt_output_count(p); i++) (void)drt_output_info(p, i);
    (void)drt_meta(p, "class");
    (void)drt_ir_text(p);
    drt_destroy(p);
  }
  fuzz_drop(st);
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the total size and every checksum the reader checks; returns 0
 * when the header is not plausible enough to fix. */
static int fix_checksums(uint8_t *d, size_t size) {
  if (size < DC_PLAN_HEADER_SIZE || memcmp(d, DC_PLAN_MAGIC, 8) != 0) return 0;
  uint32_t n = (uint32_t)d[16] | (uint32_t)d[17] << 8 | (uint32_t)d[18] << 16 | (uint32_t)d[19] << 24;
  if (n > DC_PLAN_MAX_SECTIONS) return 0;
  size_t hsize = DC_PLAN_HEADER_SIZE + (size_t)n * DC_PLAN_ENTRY_SIZE;
  if (hsize + 8 > size) return 0;
  put_u64(d + 24, size);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *e = d + DC_PLAN_HEADER_SIZE + (size_t)i * DC_PLAN_ENTRY_SIZE;
    uint64_t off = get_u64(e + 8), sz = get_u64(e + 16);
    if (off <= size && sz <= size - off) put_u64(e + 24, dc_hash64(d + off, (size_t)sz));
  }
  put_u64(d + hsize, dc_hash64(d, hsize));
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[256];
  if (!path[0]) {
    fuzz_tmp_path(path, sizeof path, "plan", ".dplan");
    fuzz_cleanup_add(path);
    fuzz_tmp_path(keys_path, sizeof keys_path, "plan", ".pub");
    fuzz_cleanup_add(keys_path);
    fuzz_write_file(keys_path, (const uint8_t *)fuzz_public_key, strlen(fuzz_public_key));
    dc_status *st = dc_trusted_keys_load(keys_path, &keys);
    if (st) {
      fprintf(stderr, "fuzz harness: %s\n", dc_status_message(st));
      abort();
    }
  }
  load(path, data, size);
  uint8_t *fixed = malloc(size ? size : 1);
  if (!fixed) abort();
  memcpy(fixed, data, size);
  if (fix_checksums(fixed, size) && memcmp(fixed, data, size) != 0) load(path, fixed, size);
  free(fixed);
  return 0;
}
