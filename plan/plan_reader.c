/* plan_reader.c — reads a plan file and trusts none of it: magic, version,
 * declared size, header checksum, each section's bounds and checksum, the
 * signature when trusted keys are given (before any section is parsed), then
 * the IR through the deserializer and the verifier, then the kernels (LLVM
 * objects, or CUDA images with launch geometry within CUDA's limits). */
#include <string.h>

#include "plan_format.h"

typedef struct {
  char tag[5];
  uint64_t offset, size, hash;
} entry;

static dc_status *read_header(const char *path, const dc_mapped_file *f, uint32_t *target, entry *e,
                              uint32_t *n) {
  if (f->size < DC_PLAN_HEADER_SIZE + 8)
    return dc_error(DC_ERR_FORMAT, "%s: %zu bytes, too short for a diffc plan header (truncated?)", path, f->size);
  if (memcmp(f->data, DC_PLAN_MAGIC, 8) != 0)
    return dc_error(DC_ERR_FORMAT, "%s: not a diffc plan (no DIFFCPLN magic at the start)", path);
  dc_reader r;
  dc_reader_init(&r, f->data, f->size, path);
  dc_read_bytes(&r, 8);
  uint32_t version = dc_read_u32(&r);
  if (version < DC_PLAN_VERSION)
    return dc_error(DC_ERR_FORMAT,
                    "%s: plan format version %u, written by an older diffc; this diffrun reads version %u (since "
                    "version 7 a linear may gate its residual; since version 6 a plan may be a whole pipeline in "
                    "phases; since version 5 it may hold integer inputs and constants; since version 4 it records a content "
                    "hash of every weight it reads, which diffrun checks at load); recompile the model with this version of diffc",
                    path, version, DC_PLAN_VERSION);
  if (version != DC_PLAN_VERSION)
    return dc_error(DC_ERR_FORMAT,
                    "%s: plan format version %u, but this diffrun reads version %u; recompile the model "
                    "with this version of diffc",
                    path, version, DC_PLAN_VERSION);
  *target = dc_read_u32(&r);
  if (*target != DC_TARGET_CPU && *target != DC_TARGET_CUDA)
    return dc_error(DC_ERR_FORMAT, "%s: unknown target %u (this diffrun knows 0 = cpu and 1 = cuda); corrupted?", path,
                    *target);
  *n = dc_read_u32(&r);
  dc_read_u32(&r);
  uint64_t total = dc_read_u64(&r);
  if (total != f->size)
    return dc_error(DC_ERR_FORMAT, "%s: the header says the plan is %llu bytes but the file has %zu (truncated or appended to?)",
                    path, (unsigned long long)total, f->size);
  if (*n > DC_PLAN_MAX_SECTIONS)
    return dc_error(DC_ERR_FORMAT, "%s: %u sections (at most %u); corrupted?", path, *n, DC_PLAN_MAX_SECTIONS);
  size_t hsize = DC_PLAN_HEADER_SIZE + (size_t)*n * DC_PLAN_ENTRY_SIZE;
  if (hsize + 8 > f->size) return dc_error(DC_ERR_FORMAT, "%s: section table runs past the end (truncated?)", path);
  for (uint32_t i = 0; i < *n; i++) {
    memcpy(e[i].tag, dc_read_bytes(&r, 4), 4);
    e[i].tag[4] = 0;
    dc_read_u32(&r);
    e[i].offset = dc_read_u64(&r);
    e[i].size = dc_read_u64(&r);
    e[i].hash = dc_read_u64(&r);
  }
  uint64_t hh = dc_read_u64(&r);
  if (r.err) return r.err;
  if (hh != dc_hash64(f->data, hsize))
    return dc_error(DC_ERR_FORMAT, "%s: header checksum mismatch (the file is corrupted)", path);
  for (uint32_t i = 0; i < *n; i++) {
    if (e[i].offset > f->size || e[i].size > f->size - e[i].offset)
      return dc_error(DC_ERR_FORMAT, "%s: section %s [%llu, +%llu) runs past the end of the file (truncated?)", path,
                      e[i].tag, (unsigned long long)e[i].offset, (unsigned long long)e[i].size);
    if (dc_hash64(f->data + e[i].offset, e[i].size) != e[i].hash)
      return dc_error(DC_ERR_FORMAT, "%s: section %s checksum mismatch (the file is corrupted)", path, e[i].tag);
  }
  return NULL;
}

static const entry *find(const entry *e, uint32_t n, const char *tag) {
  for (uint32_t i = 0; i < n; i++)
    if (memcmp(e[i].tag, tag, 4) == 0) return &e[i];
  return NULL;
}

static dc_status *need(const char *path, const entry *e, uint32_t n, const char *tag, const entry **out) {
  *out = find(e, n, tag);
  if (!*out) return dc_error(DC_ERR_FORMAT, "%s: the plan has no %s section", path, tag);
  return NULL;
}

static char *copy_text(const dc_mapped_file *f, const entry *e) {
  return dc_strndup((const char *)f->data + e->offset, e->size);
}

/* KERN format 0 (no compiled kernels) or 1 (LLVM objects). */
static void get_cpu_kernels(dc_reader *r, uint32_t format, int32_t nnodes, dc_plan_kernels *k) {
  if (format == 0) return;
  if (format != 1) return dc_reader_fail(r, "unknown kernel format %u", format);
  k->triple = dc_read_str(r, NULL, 256);
  k->cpu = dc_read_str(r, NULL, 256);
  k->features = dc_read_str(r, NULL, 1 << 16);
  uint32_t nobj = dc_read_u32(r);
  if (!r->err && (nobj == 0 || nobj > 65536)) return dc_reader_fail(r, "%u object files (expected 1..65536)", nobj);
  k->objects = r->err ? NULL : dc_calloc(nobj, sizeof *k->objects);
  if (!k->objects && !r->err) return (void)(r->err = dc_nomem("reading kernels"));
  for (uint32_t i = 0; i < nobj && !r->err; i++) {
    uint64_t size = dc_read_u64(r);
    if (r->err) return;
    if (size == 0 || size > r->size - r->pos)
      return dc_reader_fail(r, "object file %u of %llu bytes does not fit", i, (unsigned long long)size);
    k->objects[i].data = dc_malloc(size);
    if (!k->objects[i].data) return (void)(r->err = dc_nomem("reading kernels"));
    memcpy(k->objects[i].data, dc_read_bytes(r, size), size);
    k->objects[i].size = size;
    k->nobjects = (int32_t)i + 1;
  }
  uint32_t n = dc_read_u32(r);
  if (!r->err && (uint64_t)n * 16 > r->size - r->pos) return dc_reader_fail(r, "%u kernels do not fit", n);
  k->entries = dc_calloc((size_t)n + 1, sizeof *k->entries);
  if (!k->entries && !r->err) return (void)(r->err = dc_nomem("reading kernels"));
  for (uint32_t i = 0; i < n && !r->err; i++) {
    dc_plan_kernel *e = &k->entries[i];
    e->node = (int32_t)dc_read_u32(r);
    e->symbol = dc_read_str(r, NULL, 256);
    e->scratch_bytes = dc_read_u64(r);
    k->nentries = (int32_t)i + 1;
    if (!r->err && (e->node < 0 || e->node >= nnodes || (i > 0 && e->node <= k->entries[i - 1].node)))
      dc_reader_fail(r, "kernel %u names node %d (nodes 0..%d, ascending)", i, e->node, nnodes - 1);
    if (!r->err && (e->scratch_bytes > ((uint64_t)1 << 32) || !e->symbol[0]))
      dc_reader_fail(r, "kernel %u has a bad symbol or scratch size", i);
  }
  if (!r->err && r->pos != r->size) dc_reader_fail(r, "%zu trailing bytes", r->size - r->pos);
}

/* ---- KERN format 2: CUDA images ---------------------------------------- */

/* CUDA's launch limits (and the 227 KiB of shared memory an sm_90 block
 * can opt into). */
#define MAX_BLOCK_THREADS 1024u
#define MAX_GRID_X 2147483647u
#define MAX_GRID_YZ 65535u
#define MAX_SMEM_BYTES (227u * 1024u)
#define MAX_IMAGES 16u
#define MIN_IMAGE_BYTES 18u  /* arch string (4 + 1), kind, size, one byte */
#define MIN_KERNEL_BYTES 60u /* symbol, source, geometry, image count, one image */

static int known_compute(const char *s) { return !strcmp(s, "f32") || !strcmp(s, "bf16") || !strcmp(s, "f16"); }

/* "sm_90" / "sm_90a" for a cubin, "compute_90" for PTX. */
static int arch_matches_kind(const char *arch, uint32_t kind) {
  const char *prefix = kind == DC_CUDA_IMAGE_CUBIN ? "sm_" : kind == DC_CUDA_IMAGE_PTX ? "compute_" : NULL;
  if (!prefix || strncmp(arch, prefix, strlen(prefix)) != 0) return 0;
  const char *p = arch + strlen(prefix), *digits = p;
  while (*p >= '0' && *p <= '9') p++;
  return p > digits && (!*p || (p[0] == 'a' && !p[1]));
}

static void check_geometry(dc_reader *r, uint32_t i, const dc_plan_cuda_kernel *k) {
  uint64_t threads = (uint64_t)k->block[0] * k->block[1] * k->block[2];
  if (!k->block[0] || !k->block[1] || !k->block[2] || threads > MAX_BLOCK_THREADS)
    return dc_reader_fail(r, "kernel %u (%s): block %ux%ux%u (CUDA allows 1 to %u threads per block)", i, k->name,
                          k->block[0], k->block[1], k->block[2], MAX_BLOCK_THREADS);
  if (!k->grid[0] || !k->grid[1] || !k->grid[2] || k->grid[0] > MAX_GRID_X || k->grid[1] > MAX_GRID_YZ ||
      k->grid[2] > MAX_GRID_YZ)
    return dc_reader_fail(r, "kernel %u (%s): grid %ux%ux%u (CUDA allows x 1..%u, y and z 1..%u)", i, k->name,
                          k->grid[0], k->grid[1], k->grid[2], MAX_GRID_X, MAX_GRID_YZ);
  if (k->smem_bytes > MAX_SMEM_BYTES)
    dc_reader_fail(r, "kernel %u (%s): %u bytes of dynamic shared memory (at most %u)", i, k->name, k->smem_bytes,
                   MAX_SMEM_BYTES);
}

static void get_image(dc_reader *r, uint32_t i, const char *kname, dc_plan_cuda_image *im) {
  im->arch = dc_read_str(r, NULL, 32);
  im->kind = dc_read_u32(r);
  uint64_t size = dc_read_u64(r);
  if (r->err) return;
  if (!arch_matches_kind(im->arch, im->kind))
    return dc_reader_fail(r,
                          "kernel %u (%s): image \"%s\" of kind %u (expected sm_NN with kind 0 = cubin, compute_NN "
                          "with kind 1 = PTX)",
                          i, kname, im->arch, im->kind);
  if (size == 0 || size > r->size - r->pos)
    return dc_reader_fail(r, "kernel %u (%s): %s image of %llu bytes (%zu bytes left in the section)", i, kname,
                          im->arch, (unsigned long long)size, r->size - r->pos);
  const uint8_t *p = dc_read_bytes(r, size);
  if (im->kind == DC_CUDA_IMAGE_PTX && p[size - 1] != 0)
    return dc_reader_fail(r, "kernel %u (%s): the %s PTX is not NUL-terminated", i, kname, im->arch);
  if (im->kind == DC_CUDA_IMAGE_CUBIN && (size < 4 || memcmp(p,
                                                             "\x7f"
                                                             "ELF",
                                                             4) != 0))
    return dc_reader_fail(r, "kernel %u (%s): the %s cubin is not an ELF image", i, kname, im->arch);
  im->data = dc_malloc(size);
  if (!im->data) return (void)(r->err = dc_nomem("reading CUDA kernels"));
  memcpy(im->data, p, size);
  im->size = size;
}

static void get_cuda_kernel(dc_reader *r, uint32_t i, dc_plan_cuda_kernel *k) {
  k->name = dc_read_str(r, NULL, 256);
  k->source = dc_read_str(r, NULL, 64u << 20);
  for (int d = 0; d < 3; d++) k->grid[d] = dc_read_u32(r);
  for (int d = 0; d < 3; d++) k->block[d] = dc_read_u32(r);
  k->smem_bytes = dc_read_u32(r);
  uint32_t n = dc_read_u32(r);
  if (r->err) return;
  if (!k->name[0]) return dc_reader_fail(r, "kernel %u has an empty symbol", i);
  if (!k->source[0]) return dc_reader_fail(r, "kernel %u (%s) has no source", i, k->name);
  check_geometry(r, i, k);
  if (!r->err && (n == 0 || n > MAX_IMAGES || (uint64_t)n * MIN_IMAGE_BYTES > r->size - r->pos))
    return dc_reader_fail(r, "kernel %u (%s): %u images (expected 1..%u that fit in the section)", i, k->name, n,
                          MAX_IMAGES);
  k->images = r->err ? NULL : dc_calloc(n, sizeof *k->images);
  if (!k->images && !r->err) return (void)(r->err = dc_nomem("reading CUDA kernels"));
  for (uint32_t j = 0; j < n && !r->err; j++) {
    get_image(r, i, k->name, &k->images[j]);
    k->nimages = (int32_t)j + 1;
  }
}

/* Unique symbols, and every kernel with the architectures of kernel 0 (the
 * runtime picks one architecture for the whole plan). */
static void check_kernel_set(dc_reader *r, const dc_plan_cuda *c) {
  for (int i = 1; i < c->nkernels && !r->err; i++) {
    const dc_plan_cuda_kernel *k = &c->kernels[i], *k0 = &c->kernels[0];
    for (int j = 0; j < i; j++)
      if (!strcmp(c->kernels[j].name, k->name))
        return dc_reader_fail(r, "kernels %d and %d are both named %s", j, i, k->name);
    int same = k->nimages == k0->nimages;
    for (int j = 0; same && j < k->nimages; j++) same = !strcmp(k->images[j].arch, k0->images[j].arch);
    if (!same)
      return dc_reader_fail(r, "kernel %d (%s) has images for other architectures than kernel 0 (%s)", i, k->name,
                            k0->name);
  }
}

static void get_node_kernels(dc_reader *r, const dc_module *m, dc_plan_cuda *c) {
  uint32_t n = dc_read_u32(r);
  if (r->err) return;
  if (n != (uint32_t)m->nnodes || (uint64_t)n * 4 > r->size - r->pos)
    return dc_reader_fail(r, "kernel table for %u nodes, but the schedule has %d", n, m->nnodes);
  c->kernel_of_node = dc_calloc((size_t)n + 1, sizeof *c->kernel_of_node);
  if (!c->kernel_of_node) return (void)(r->err = dc_nomem("reading CUDA kernels"));
  c->nnodes = (int32_t)n;
  for (uint32_t i = 0; i < n && !r->err; i++) {
    int32_t k = c->kernel_of_node[i] = (int32_t)dc_read_u32(r);
    const dc_node *node = &m->nodes[i];
    int leaf = (dc_op_get(node->op)->flags & OPF_LEAF) != 0 || dc_op_is_copy(node->op); /* uploads, transfers: copies */
    if (leaf && k != -1)
      dc_reader_fail(r, "node %%%u (%s) is a leaf or a copy but has kernel %d (expected -1)", i, dc_op_get(node->op)->name, k);
    else if (!leaf && (k < 0 || k >= c->nkernels))
      dc_reader_fail(r, "node %%%u (%s%s%s) has kernel %d, but the plan has kernels 0..%d", i,
                     dc_op_get(node->op)->name, node->scope ? " in " : "", node->scope ? node->scope : "", k,
                     c->nkernels - 1);
  }
}

static void get_cuda_kernels(dc_reader *r, const dc_module *m, dc_plan_cuda *c) {
  c->compute = dc_read_str(r, NULL, 16);
  c->nvrtc_version = dc_read_str(r, NULL, 32);
  uint32_t n = dc_read_u32(r);
  if (r->err) return;
  if (!known_compute(c->compute))
    return dc_reader_fail(r, "compute precision \"%s\" (expected f32, bf16 or f16)", c->compute);
  if (!c->nvrtc_version[0]) return dc_reader_fail(r, "no NVRTC version");
  if ((uint64_t)n * MIN_KERNEL_BYTES > r->size - r->pos)
    return dc_reader_fail(r, "%u kernels cannot fit in the %zu bytes left", n, r->size - r->pos);
  c->kernels = dc_calloc((size_t)n + 1, sizeof *c->kernels);
  if (!c->kernels) return (void)(r->err = dc_nomem("reading CUDA kernels"));
  for (uint32_t i = 0; i < n && !r->err; i++) {
    get_cuda_kernel(r, i, &c->kernels[i]);
    c->nkernels = (int32_t)i + 1;
  }
  check_kernel_set(r, c);
  get_node_kernels(r, m, c);
  if (!r->err && r->pos != r->size) dc_reader_fail(r, "%zu trailing bytes", r->size - r->pos);
}

void dc_plan_cuda_deinit(dc_plan_cuda *c) {
  for (int i = 0; i < c->nkernels; i++) {
    dc_plan_cuda_kernel *k = &c->kernels[i];
    for (int j = 0; j < k->nimages; j++) {
      dc_free(k->images[j].arch);
      dc_free(k->images[j].data);
    }
    dc_free(k->images);
    dc_free(k->name);
    dc_free(k->source);
  }
  dc_free(c->kernels);
  dc_free(c->kernel_of_node);
  dc_free(c->compute);
  dc_free(c->nvrtc_version);
  memset(c, 0, sizeof *c);
}

/* The KERN section: its format must suit the plan's target. */
static void get_kernels(dc_reader *r, uint32_t target, const dc_module *m, dc_plan *out) {
  uint32_t format = dc_read_u32(r);
  if (r->err) return;
  if (target == DC_TARGET_CUDA && format != 2)
    return dc_reader_fail(r, "a CUDA plan needs CUDA kernels (format 2), found format %u", format);
  if (target != DC_TARGET_CUDA && format == 2)
    return dc_reader_fail(r, "CUDA kernels (format 2) in a plan for the CPU");
  if (format == 2) return get_cuda_kernels(r, m, &out->cuda);
  get_cpu_kernels(r, format, m->nnodes, &out->kernels);
}

void dc_plan_kernels_deinit(dc_plan_kernels *k) {
  for (int i = 0; i < k->nentries; i++) dc_free(k->entries[i].symbol);
  dc_free(k->entries);
  for (int i = 0; i < k->nobjects; i++) dc_free(k->objects[i].data);
  dc_free(k->objects);
  dc_free(k->triple);
  dc_free(k->cpu);
  dc_free(k->features);
  memset(k, 0, sizeof *k);
}

/* ---- SIGN: the signature (plan/plan_sign.h) ---------------------------- */

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* What is wrong with the SIGN section at index i, or NULL: one section of
 * the expected size and algorithm, after the table, overlapping nothing. */
static const char *sign_section_problem(const entry *e, uint32_t n, uint32_t i, const uint8_t *file, char *buf,
                                        size_t cap) {
  for (uint32_t j = i + 1; j < n; j++)
    if (!memcmp(e[j].tag, "SIGN", 4)) return "it has two SIGN sections";
  const entry *s = &e[i];
  if (s->size != DC_SIGN_SECTION_BYTES) {
    snprintf(buf, cap, "its SIGN section has %llu bytes, expected %u", (unsigned long long)s->size, DC_SIGN_SECTION_BYTES);
    return buf;
  }
  if (s->offset < DC_PLAN_HEADER_SIZE + (uint64_t)n * DC_PLAN_ENTRY_SIZE + 8) return "its SIGN section overlaps the header";
  for (uint32_t j = 0; j < n; j++)
    if (j != i && e[j].offset < s->offset + s->size && s->offset < e[j].offset + e[j].size)
      return "its SIGN section overlaps another section";
  uint32_t alg = get_le32(file + s->offset);
  if (alg != DC_SIGN_ALG_ED25519_BLAKE2B) {
    snprintf(buf, cap, "its signature uses algorithm %u (this diffrun knows 1 = Ed25519 over BLAKE2b-512)", alg);
    return buf;
  }
  return NULL;
}

static dc_status *check_signature(const char *path, const dc_mapped_file *f, const entry *e, uint32_t n,
                                  uint32_t i, const dc_trusted_keys *keys, dc_plan *out) {
  const uint8_t *pk = f->data + e[i].offset + 4, *sig = pk + DC_SIGN_PUBLIC_BYTES;
  char id[17];
  dc_key_id(pk, id);
  if (!dc_trusted_keys_has(keys, pk))
    return dc_error(DC_ERR_MISMATCH,
                    "%s: refused: the plan is signed by key %s, which is not one of the %d key%s in --trusted-keys %s",
                    path, id, keys->n, keys->n == 1 ? "" : "s", keys->path);
  dc_span zero[3];
  dc_plan_sign_spans(DC_PLAN_HEADER_SIZE + (uint64_t)n * DC_PLAN_ENTRY_SIZE, i, e[i].offset, zero);
  uint8_t digest[DC_SIGN_DIGEST_BYTES];
  if (dc_plan_digest(f->data, f->size, zero, 3, digest) != 0)
    return dc_error(DC_ERR_INTERNAL, "%s: libsodium could not start to check the signature", path);
  if (!dc_sign_verify(sig, digest, pk))
    return dc_error(DC_ERR_MISMATCH,
                    "%s: refused: the signature by trusted key %s does not verify (the plan was changed after it was "
                    "signed, or the signature is damaged)",
                    path, id);
  out->signature_verified = 1;
  return NULL;
}

/* Records the signer of a well-formed SIGN section; with keys, requires one
 * by a trusted key that verifies. */
static dc_status *read_signature(const char *path, const dc_mapped_file *f, const entry *e, uint32_t n,
                                 const dc_trusted_keys *keys, dc_plan *out) {
  uint32_t i = 0;
  while (i < n && memcmp(e[i].tag, "SIGN", 4) != 0) i++;
  if (i == n)
    return !keys ? NULL
                 : dc_error(DC_ERR_MISMATCH,
                            "%s: refused: the plan is not signed (no SIGN section) and --trusted-keys %s asks for a "
                            "signature by one of its keys (sign plans with diffc --sign SECRETFILE)",
                            path, keys->path);
  char buf[160];
  const char *problem = sign_section_problem(e, n, i, f->data, buf, sizeof buf);
  if (problem)
    return !keys ? NULL
                 : dc_error(DC_ERR_FORMAT, "%s: refused: malformed signature: %s (--trusted-keys %s)", path, problem,
                            keys->path);
  out->is_signed = 1;
  memcpy(out->signer, f->data + e[i].offset + 4, DC_SIGN_PUBLIC_BYTES);
  return keys ? check_signature(path, f, e, n, i, keys, out) : NULL;
}

/* PIPE (plan_format.h): the pipeline's JSON and files, bounded by the
 * section's bytes. */
static dc_status *read_pipe(const char *path, const dc_mapped_file *f, const entry *e, dc_plan *out) {
  char what[600];
  snprintf(what, sizeof what, "%s: section PIPE", path);
  dc_reader r;
  dc_reader_init(&r, f->data + e->offset, e->size, what);
  out->pipeline_json = dc_read_str(&r, NULL, 1u << 20);
  uint32_t nfiles = dc_read_u32(&r);
  if (!r.err && nfiles > 64) dc_reader_fail(&r, "%u files (at most 64)", nfiles);
  out->pipeline_files.origin = r.err ? NULL : dc_strdup(path);
  if (!r.err && !out->pipeline_files.origin) return dc_nomem("reading a plan");
  for (uint32_t i = 0; i < nfiles && !r.err; i++) {
    char *name = dc_read_str(&r, NULL, 256);
    uint64_t size = dc_read_u64(&r);
    if (!r.err && size > r.size - r.pos) dc_reader_fail(&r, "file %s: %llu bytes past the end", name, (unsigned long long)size);
    const void *bytes = r.err ? NULL : dc_read_bytes(&r, (size_t)size);
    dc_status *st = r.err ? NULL : dc_text_files_add(&out->pipeline_files, name, bytes, (size_t)size);
    dc_free(name);
    DC_TRY(st);
  }
  if (!r.err && r.pos != r.size) dc_reader_fail(&r, "%zu bytes left over", r.size - r.pos);
  if (!r.err && !out->module->nphases) dc_reader_fail(&r, "a pipeline section, but the schedule has no phases");
  return r.err;
}

static dc_status *read_sections(const char *path, const dc_mapped_file *f, const entry *e, uint32_t n,
                                dc_plan *out) {
  const entry *opts, *wref, *schd, *kern, *irtx;
  DC_TRY(need(path, e, n, "OPTS", &opts));
  DC_TRY(need(path, e, n, "WREF", &wref));
  DC_TRY(need(path, e, n, "SCHD", &schd));
  DC_TRY(need(path, e, n, "KERN", &kern));
  DC_TRY(need(path, e, n, "IRTX", &irtx));
  out->options_json = copy_text(f, opts);
  out->ir_text = copy_text(f, irtx);
  if (!out->options_json || !out->ir_text) return dc_nomem("reading a plan");
  char wwhat[600], swhat[600];
  snprintf(wwhat, sizeof wwhat, "%s: section WREF", path);
  snprintf(swhat, sizeof swhat, "%s: section SCHD", path);
  DC_TRY(dc_deserialize(f->data + wref->offset, wref->size, wwhat, f->data + schd->offset, schd->size, swhat,
                        &out->module));
  char kwhat[600];
  snprintf(kwhat, sizeof kwhat, "%s: section KERN", path);
  dc_reader r;
  dc_reader_init(&r, f->data + kern->offset, kern->size, kwhat);
  get_kernels(&r, out->target, out->module, out);
  if (r.err) return r.err;
  for (uint32_t i = 0; i < n; i++)
    if (!memcmp(e[i].tag, "PIPE", 4)) return read_pipe(path, f, &e[i], out);
  if (out->module->nphases)
    return dc_error(DC_ERR_FORMAT, "%s: the schedule has phases (a pipeline) but the plan has no PIPE section", path);
  return NULL;
}

dc_status *dc_plan_read_trusted(const char *path, const dc_trusted_keys *keys, dc_plan *out) {
  memset(out, 0, sizeof *out);
  dc_mapped_file f;
  char *copy = NULL; /* with keys: a private copy, so the bytes verified are the bytes parsed */
  if (keys) {
    memset(&f, 0, sizeof f);
    DC_TRY(dc_file_read_all(path, &copy, &f.size));
    f.data = (const uint8_t *)copy;
  } else {
    DC_TRY(dc_file_map(path, &f));
  }
  entry e[DC_PLAN_MAX_SECTIONS];
  uint32_t n = 0;
  dc_status *st = read_header(path, &f, &out->target, e, &n);
  if (!st) st = read_signature(path, &f, e, n, keys, out);
  if (!st) st = read_sections(path, &f, e, n, out);
  if (copy) dc_free(copy);
  else dc_file_unmap(&f);
  if (st) dc_plan_deinit(out);
  return st;
}

dc_status *dc_plan_read(const char *path, dc_plan *out) { return dc_plan_read_trusted(path, NULL, out); }

void dc_plan_deinit(dc_plan *plan) {
  dc_free(plan->options_json);
  dc_free(plan->ir_text);
  dc_module_destroy(plan->module);
  dc_plan_kernels_deinit(&plan->kernels);
  dc_plan_cuda_deinit(&plan->cuda);
  dc_free(plan->pipeline_json);
  dc_text_files_free(&plan->pipeline_files);
  memset(plan, 0, sizeof *plan);
}
