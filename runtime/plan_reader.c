/* plan_reader.c — reads a plan file and trusts none of it: magic, version,
 * declared size, header checksum, each section's bounds and checksum, then
 * the IR through the deserializer and the verifier. */
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
  if (version != DC_PLAN_VERSION)
    return dc_error(DC_ERR_FORMAT,
                    "%s: plan format version %u, but this diffrun reads version %u; recompile the model "
                    "with this version of diffc",
                    path, version, DC_PLAN_VERSION);
  *target = dc_read_u32(&r);
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

static void get_kernels(dc_reader *r, int32_t nnodes, dc_plan_kernels *k) {
  uint32_t format = dc_read_u32(r);
  if (r->err || format == 0) return;
  if (format != 1) return dc_reader_fail(r, "unknown kernel format %u", format);
  k->triple = dc_read_str(r, NULL, 256);
  k->cpu = dc_read_str(r, NULL, 256);
  k->features = dc_read_str(r, NULL, 1 << 16);
  uint32_t nobj = dc_read_u32(r);
  if (!r->err && (nobj == 0 || nobj > 256)) return dc_reader_fail(r, "%u object files (expected 1..256)", nobj);
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
  get_kernels(&r, out->module->nnodes, &out->kernels);
  return r.err;
}

dc_status *dc_plan_read(const char *path, dc_plan *out) {
  memset(out, 0, sizeof *out);
  dc_mapped_file f;
  DC_TRY(dc_file_map(path, &f));
  entry e[DC_PLAN_MAX_SECTIONS];
  uint32_t n = 0;
  dc_status *st = read_header(path, &f, &out->target, e, &n);
  if (!st) st = read_sections(path, &f, e, n, out);
  dc_file_unmap(&f);
  if (st) dc_plan_deinit(out);
  return st;
}

void dc_plan_deinit(dc_plan *plan) {
  dc_free(plan->options_json);
  dc_free(plan->ir_text);
  dc_module_destroy(plan->module);
  dc_plan_kernels_deinit(&plan->kernels);
  memset(plan, 0, sizeof *plan);
}
