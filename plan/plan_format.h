/* plan_format.h — the plan file: what diffc writes and diffrun reads.
 *
 *   offset 0   char[8]  magic "DIFFCPLN"
 *          8   u32      format version (DC_PLAN_VERSION)
 *         12   u32      target (DC_TARGET_CPU, ...)
 *         16   u32      number of sections n (<= DC_PLAN_MAX_SECTIONS)
 *         20   u32      reserved, 0
 *         24   u64      total file size
 *         32   n x { char tag[4]; u32 reserved; u64 offset; u64 size; u64 xxh64 }
 *   32 + 32n   u64      xxh64 of bytes [0, 32 + 32n)
 *   then the section payloads, each at a 64-byte aligned offset.
 * All integers little-endian.  Sections:
 *   OPTS  compile options and provenance, JSON text
 *   WREF  weight references: files (path, size, xxh64 of the safetensors
 *         header) and tensors (name, file, offset, bytes, XXH3-64 of the
 *         tensor's bytes, dtype, shape); diffrun re-hashes every tensor at
 *         load and refuses the plan if one differs (version 4 on)
 *   SCHD  the schedule: the verified IR (nodes in execution order, inputs,
 *         outputs, metadata, and the values of constants) in
 *         ir/serialize.c's format
 *   KERN  compiled kernels: u32 format (0 = none, 1 = LLVM objects,
 *         2 = CUDA images), then
 *         for format 1: the target (triple, cpu, features), u32 n object
 *         files (each u64 size + bytes; one per distinct kernel, each
 *         defining the symbol dck_<its kernel cache key>),
 *         and u32 n entries of (u32 node, symbol, u64 scratch bytes per
 *         thread);
 *         for format 2 (target CUDA): str compute precision ("f32", "bf16"
 *         or "f16"), str NVRTC version ("13.0"), u32 n kernels, each: str
 *         symbol, str source, u32 grid[3], u32 block[3], u32 dynamic shared
 *         bytes, u32 n images (1..16), each: str arch ("sm_90", "sm_90a" or
 *         "compute_90"), u32 kind (0 = cubin for sm_, 1 = PTX for compute_),
 *         u64 size, the bytes (an ELF cubin, or PTX ending in its NUL);
 *         every kernel has images for the same archs in the same order;
 *         then u32 nnodes (= the schedule's) and per node the i32 kernel
 *         index (-1 for leaves, 0..n-1 for every other node).  A str is a
 *         u32 length and the bytes, no NUL
 *   IRTX  the IR dump text, for `diffrun --print-ir` and people
 *   PIPE  optional, a pipeline plan (diffc PIPELINE_DIR; version 6 on): str
 *         pipeline JSON (class, sizes, scaling factor, the phases' roles:
 *         pipeline/generate.h), u32 n files, each str name
 *         ("tokenizer/vocab.json", "scheduler/scheduler_config.json"), u64
 *         size, the bytes: what the host needs besides the module
 *   SIGN  optional (diffc --sign), the last section: u32 algorithm (1 =
 *         Ed25519 over a BLAKE2b-512 digest), the signer's 32-byte public
 *         key, the 64-byte signature.  The digest covers every byte of the
 *         file but three fields read as zeros, those the signature itself
 *         determines: the signature, SIGN's xxh64 in the table and the
 *         header checksum (plan/plan_sign.h).  diffrun --trusted-keys
 *         checks it before any section is parsed.
 * Unknown sections are skipped; missing required ones are an error. */
#ifndef DC_PLAN_FORMAT_H
#define DC_PLAN_FORMAT_H

#include "../ir/ir.h"
#include "../pipeline/text_files.h"
#include "plan_sign.h"

#define DC_PLAN_MAGIC "DIFFCPLN"
/* 7: linear's gated residual (attributes gate and gate_at, which every
 * linear node in SCHD now carries); 6: phases (module metadata "phases", whose liveness rules a version 5
 * reader would not apply) and the PIPE section; 5: integer dtypes (i32,
 * i64), constants (their bytes in SCHD) and nodes of up to DC_MAX_INPUTS
 * inputs; 4: weight content hashes. */
#define DC_PLAN_VERSION 7u
#define DC_PLAN_MAX_SECTIONS 16u
#define DC_PLAN_HEADER_SIZE 32u
#define DC_PLAN_ENTRY_SIZE 32u

enum { DC_TARGET_CPU = 0, DC_TARGET_CUDA = 1 };

typedef struct {
  int32_t node;
  char *symbol;
  uint64_t scratch_bytes; /* per thread */
} dc_plan_kernel;

typedef struct {
  uint8_t *data;
  uint64_t size;
} dc_plan_object;

/* The KERN section: LLVM object code for the nodes that have kernels. */
typedef struct {
  char *triple, *cpu, *features; /* NULL when the plan has no compiled kernels */
  dc_plan_object *objects;       /* nobjects > 0 exactly when there are kernels */
  int32_t nobjects;
  dc_plan_kernel *entries;
  int32_t nentries;
} dc_plan_kernels;

/* The KERN section of a CUDA plan: one entry per distinct kernel; nodes
 * with the same signature share one.  Launch parameters are the node's
 * output then its inputs, one device pointer each (codegen/cuda). */
enum { DC_CUDA_IMAGE_CUBIN = 0, DC_CUDA_IMAGE_PTX = 1 };

typedef struct {
  char *arch;      /* "sm_80", "sm_90" for a cubin; "compute_90" for PTX */
  uint32_t kind;   /* DC_CUDA_IMAGE_* */
  uint8_t *data;   /* cubin bytes, or NUL-terminated PTX text (size includes the NUL) */
  uint64_t size;
} dc_plan_cuda_image;

typedef struct {
  char *name;      /* entry symbol */
  char *source;    /* the CUDA C it was compiled from (inspection, emulator tests) */
  uint32_t grid[3], block[3], smem_bytes;
  dc_plan_cuda_image *images;
  int32_t nimages;
} dc_plan_cuda_kernel;

typedef struct {
  char *compute;          /* "f32", "bf16", "f16": precision of tensor-core work */
  char *nvrtc_version;    /* "13.0" */
  dc_plan_cuda_kernel *kernels;
  int32_t nkernels;
  int32_t *kernel_of_node; /* nnodes entries, -1 for leaves */
  int32_t nnodes;
} dc_plan_cuda;

/* A plan in memory.  The writer fills it from a compilation; the reader fills
 * it from a file (module deserialized and verified, texts NUL-terminated). */
typedef struct {
  uint32_t target;
  char *options_json;
  char *ir_text;
  dc_module *module; /* with weights and files from WREF */
  dc_plan_kernels kernels; /* target CPU */
  dc_plan_cuda cuda;       /* target CUDA */
  /* PIPE: NULL / empty for a plan of one model */
  char *pipeline_json;
  dc_text_files pipeline_files;
  /* Writer: sign with this Ed25519 secret key (libsodium's 64 bytes), or
   * NULL for an unsigned plan. */
  const uint8_t *sign_secret;
  /* Reader: the SIGN section's public key when the plan has a well-formed
   * one (signed = 1), and whether the signature was verified against a
   * trusted key (dc_plan_read_trusted; dc_plan_read does not verify). */
  int is_signed, signature_verified;
  uint8_t signer[DC_SIGN_PUBLIC_BYTES];
} dc_plan;

/* Writes atomically (temp name, then rename). */
dc_status *dc_plan_write(const char *path, const dc_plan *plan);
/* Reads and checks everything: magic, version, sizes, checksums, then the
 * module through the verifier.  Messages name the file and the section. */
dc_status *dc_plan_read(const char *path, dc_plan *out);
/* The same, and first (after the header and checksums, before any section
 * is parsed) requires a SIGN section whose key is one of `keys` and whose
 * signature verifies; the file is read into memory, not mapped, so what
 * is verified is what is parsed.  keys NULL: dc_plan_read. */
dc_status *dc_plan_read_trusted(const char *path, const dc_trusted_keys *keys, dc_plan *out);
void dc_plan_deinit(dc_plan *plan);
void dc_plan_kernels_deinit(dc_plan_kernels *k);
void dc_plan_cuda_deinit(dc_plan_cuda *c);

#endif
