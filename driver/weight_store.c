/* weight_store.c — weights diffc writes at compile time: one safetensors
 * file per offload group in --offload-dir (diffusers' offload_to_disk_path).
 *
 * A group's file is named by a hash of what it holds — tensor names, dtypes,
 * shapes and bytes — "group_<xxh64>.safetensors", so a file left by another
 * model or another version can never be mistaken for this group's: a
 * different content is a different name.  A file that exists under the right
 * name is re-hashed before it is reused and rewritten if it does not match
 * (a partial or damaged file is never trusted; diffusers reuses whatever is
 * there).  Files are written to a temporary name and renamed.  The module's
 * weight references are then repointed to the group files (the plan checks
 * their header hash and size at load, as for any weight file), and weight
 * files nothing references any more are dropped from the module.
 *
 * It also writes the weights layerwise casting converted (pass
 * cast-weights): one file beside the plan, in the storage dtype. */
#include "weight_store.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "frontend/frontend.h"
#include "support/dtype_convert.h"

/* The weights (indices into m->weights) uploaded by group g, in schedule
 * order, that are still in one of the first nsources files.  A group that
 * runs more than once (a tiled VAE's decoder, once per tile) is one group
 * per run with the same weights: the first run's file holds them, and the
 * later runs find them moved already (their file index is past the
 * sources, which were sized before any group file was added). */
static int group_weights(const dc_module *m, int64_t g, int32_t nsources, int32_t *out) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *u = &m->nodes[i];
    if (u->op != OP_UPLOAD || dc_node_int(u, "group") != g) continue;
    int32_t w = m->nodes[u->inputs[0]].ref;
    if (m->weights[w].file < nsources) out[n++] = w;
  }
  return n;
}

typedef struct {
  dc_mapped_file *maps; /* per module file, mapped on first use */
  int32_t nfiles;
} sources;

static dc_status *weight_bytes(const dc_module *m, sources *s, int32_t w, const uint8_t **out) {
  const dc_weight *wt = &m->weights[w];
  dc_mapped_file *f = &s->maps[wt->file];
  if (!f->data) DC_TRY(dc_file_map(m->files[wt->file].path, f));
  if (wt->offset + wt->bytes > (uint64_t)f->size)
    return dc_error(DC_ERR_IO, "%s: tensor %s [%" PRIu64 ", +%" PRIu64 ") lies past the end (%zu bytes): the file changed",
                    m->files[wt->file].path, wt->name, wt->offset, wt->bytes, (size_t)f->size);
  *out = f->data + wt->offset;
  return NULL;
}

/* The content hash naming a group's file. */
static dc_status *group_hash(const dc_module *m, sources *s, const int32_t *ws, int n, uint64_t *out) {
  XXH64_state_t *h = XXH64_createState();
  if (!h) return dc_nomem("hashing an offload group");
  XXH64_reset(h, 0x6469666663ull);
  dc_status *st = NULL;
  for (int i = 0; i < n && !st; i++) {
    const dc_weight *w = &m->weights[ws[i]];
    const uint8_t *data;
    char tb[160];
    st = weight_bytes(m, s, ws[i], &data);
    if (st) break;
    XXH64_update(h, w->name, strlen(w->name) + 1);
    dc_type_str(&w->type, tb, sizeof tb);
    XXH64_update(h, tb, strlen(tb) + 1);
    XXH64_update(h, data, w->bytes);
  }
  *out = XXH64_digest(h);
  XXH64_freeState(h);
  return st;
}

/* An existing file under the group's name holds exactly the group's
 * tensors with the same bytes (else it is rewritten). */
static int file_matches(const dc_module *m, sources *s, const char *path, const int32_t *ws, int n) {
  dc_st_file f;
  dc_status *st = dc_st_open(path, &f);
  if (st) {
    dc_status_free(st);
    return 0;
  }
  int ok = f.ntensors == n;
  for (int i = 0; ok && i < n; i++) {
    const dc_weight *w = &m->weights[ws[i]];
    const dc_st_tensor *t = dc_st_find(&f, w->name);
    const uint8_t *data;
    ok = t && t->dtype == w->type.dtype && t->bytes == w->bytes && !(st = weight_bytes(m, s, ws[i], &data)) &&
         memcmp(f.file.data + t->offset, data, w->bytes) == 0;
  }
  if (st) dc_status_free(st);
  dc_st_close(&f);
  return ok;
}

static dc_status *write_group(const dc_module *m, sources *s, const char *path, const int32_t *ws, int n) {
  dc_st_out *outs = dc_calloc((size_t)n + 1, sizeof *outs);
  if (!outs) return dc_nomem("writing an offload group");
  dc_status *st = NULL;
  for (int i = 0; i < n && !st; i++) {
    const uint8_t *data;
    st = weight_bytes(m, s, ws[i], &data);
    outs[i] = (dc_st_out){m->weights[ws[i]].name, m->weights[ws[i]].type, data};
  }
  if (!st) st = dc_st_write(path, outs, n);
  dc_free(outs);
  return st;
}

/* Points the group's weights at the file just written or verified. */
static dc_status *repoint(dc_module *m, const char *path, const int32_t *ws, int n) {
  dc_st_file f;
  DC_TRY(dc_st_open(path, &f));
  dc_weight_file wf = {path, f.header_hash, (uint64_t)f.file.size};
  int32_t fi = dc_module_add_file(m, &wf);
  dc_status *st = fi < 0 ? dc_nomem("adding an offload file") : NULL;
  for (int i = 0; i < n && !st; i++) {
    dc_weight *w = &m->weights[ws[i]];
    const dc_st_tensor *t = dc_st_find(&f, w->name);
    if (!t || t->bytes != w->bytes)
      st = dc_error(DC_ERR_IO, "%s: tensor %s is missing or of the wrong size after writing", path, w->name);
    else
      w->file = fi, w->offset = t->offset;
  }
  dc_st_close(&f);
  return st;
}

/* Drops weight files no weight references (the originals of moved weights). */
static dc_status *drop_unused_files(dc_module *m) {
  int32_t *map = dc_calloc((size_t)m->nfiles + 1, sizeof *map);
  if (!map) return dc_nomem("dropping weight files");
  for (int32_t i = 0; i < m->nweights; i++) map[m->weights[i].file] = 1;
  int32_t n = 0;
  for (int32_t f = 0; f < m->nfiles; f++) {
    if (!map[f]) continue;
    m->files[n] = m->files[f];
    map[f] = n++;
  }
  for (int32_t i = 0; i < m->nweights; i++) m->weights[i].file = map[m->weights[i].file];
  m->nfiles = n;
  dc_free(map);
  return NULL;
}

static dc_status *check_dir(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return dc_error(DC_ERR_IO, "--offload-dir %s: cannot create it: %s", dir, strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return dc_error(DC_ERR_IO, "--offload-dir %s: not a directory", dir);
  if (access(dir, W_OK) != 0) return dc_error(DC_ERR_IO, "--offload-dir %s: not writable: %s", dir, strerror(errno));
  return NULL;
}

static int64_t group_count(const dc_module *m) {
  int64_t n = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_UPLOAD && dc_node_int(&m->nodes[i], "group") + 1 > n) n = dc_node_int(&m->nodes[i], "group") + 1;
  return n;
}

static int has_disk_weight(const dc_module *m, const int32_t *ws, int n) {
  for (int i = 0; i < n; i++)
    if (m->weights[ws[i]].place == DC_PLACE_DISK) return 1;
  return 0;
}

/* Module metadata "offload_dir": the dump then says the offloaded weights
 * wait on disk in the dir (ir/print.c), not in host memory. */
static dc_status *describe_dir(dc_module *m, const char *dir) {
  char *probe = dc_path_join(dir, ""); /* the prefix every group file's path has */
  if (!probe) return dc_nomem("describing the offload dir");
  int files = 0;
  for (int32_t f = 0; f < m->nfiles; f++) files += strncmp(m->files[f].path, probe, strlen(probe)) == 0;
  char *what = dc_asprintf("%s (%d group file%s)", dir, files, files == 1 ? "" : "s");
  dc_free(probe);
  dc_status *st = what ? dc_module_set_meta(m, "offload_dir", what) : dc_nomem("describing the offload dir");
  dc_free(what);
  return st;
}

/* The bytes dc_store_offload_groups will write or check: each weight once
 * (a group run again uploads weights its first run holds). */
static uint64_t offload_bytes(const dc_module *m, int64_t ngroups, int disk_only, int32_t *ws) {
  uint8_t *seen = dc_calloc((size_t)m->nweights + 1, 1);
  uint64_t total = 0;
  for (int64_t g = 0; seen && g < ngroups; g++) {
    int n = group_weights(m, g, m->nfiles, ws);
    if (disk_only && !has_disk_weight(m, ws, n)) continue;
    for (int i = 0; i < n; i++)
      if (!seen[ws[i]]) seen[ws[i]] = 1, total += m->weights[ws[i]].bytes;
  }
  dc_free(seen);
  return total;
}

dc_status *dc_store_offload_groups(dc_module *m, const char *dir, int disk_only, int verbose,
                                   const dc_progress *progress, dc_offload_store_report *rep) {
  if (rep) memset(rep, 0, sizeof *rep);
  int64_t ngroups = group_count(m);
  int any_disk = 0;
  for (int32_t w = 0; w < m->nweights; w++) any_disk |= m->weights[w].place == DC_PLACE_DISK;
  if (ngroups == 0 || (disk_only && !any_disk))
    return dc_error(DC_ERR_ARGUMENT, "--offload-dir %s: nothing is offloaded%s", dir,
                    disk_only && ngroups ? " to disk (--device-map put no module there: add disk=SIZE to --max-memory, "
                                           "or \"disk\" in the map)"
                                         : " (add --offload group|sequential|model)");
  for (int32_t w = 0; w < m->nweights; w++)
    if (dc_weight_pending(&m->weights[w])) /* the file bytes are not what the plan reads yet */
      return dc_error(DC_ERR_INTERNAL, "--offload-dir %s: weight %s is not converted yet (store the cast weights first)",
                      dir, m->weights[w].name);
  DC_TRY(check_dir(dir));
  sources s = {dc_calloc((size_t)m->nfiles + 1, sizeof *s.maps), m->nfiles};
  int32_t *ws = dc_calloc((size_t)m->nweights + 1, sizeof *ws);
  dc_status *st = s.maps && ws ? NULL : dc_nomem("writing offload groups");
  dc_progress_counter done;
  dc_progress_count_begin(&done, progress, "writing weights", st ? 0 : (int64_t)offload_bytes(m, ngroups, disk_only, ws), 1);
  for (int64_t g = 0; g < ngroups && !st; g++) {
    int n = group_weights(m, g, s.nfiles, ws);
    if (n == 0) continue; /* a later run of a group already written */
    if (disk_only && !has_disk_weight(m, ws, n)) continue; /* a cpu-placed group stays in host memory */
    uint64_t hash = 0;
    st = group_hash(m, &s, ws, n, &hash);
    if (st) break;
    char name[40];
    snprintf(name, sizeof name, "group_%016" PRIx64 ".safetensors", hash);
    char *path = dc_path_join(dir, name);
    if (!path) st = dc_nomem("writing offload groups");
    else if (file_matches(m, &s, path, ws, n)) {
      if (rep) rep->reused++;
    } else {
      st = write_group(m, &s, path, ws, n);
      if (!st && rep) rep->written++;
      if (!st && verbose) {
        dc_progress_pause(progress); /* a line of its own, not after the progress line */
        fprintf(stderr, "diffc: wrote %s (%d tensors)\n", path, n);
      }
    }
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += m->weights[ws[i]].bytes;
    if (!st) st = repoint(m, path, ws, n);
    if (!st) dc_progress_count_add(&done, (int64_t)bytes, 0);
    dc_free(path);
  }
  for (int32_t f = 0; s.maps && f < s.nfiles; f++)
    if (s.maps[f].data) dc_file_unmap(&s.maps[f]);
  dc_free(s.maps);
  dc_free(ws);
  dc_progress_count_end(&done);
  if (!st) st = drop_unused_files(m);
  if (!st) st = describe_dir(m, dir);
  return dc_status_annotate(st, "--offload-dir %s", dir);
}

/* ---- layerwise casting ------------------------------------------------ */

static void decode_to_f32(dc_dtype t, const uint8_t *src, uint64_t i, float *out) {
  uint16_t h;
  switch (t) {
    case DT_F32: memcpy(out, src + 4 * i, 4); return;
    case DT_BF16: memcpy(&h, src + 2 * i, 2); *out = dc_bf16_to_f32(h); return;
    case DT_F16: memcpy(&h, src + 2 * i, 2); *out = dc_f16_to_f32(h); return;
    case DT_F8_E4M3: *out = dc_f8e4m3_to_f32(src[i]); return;
    case DT_F8_E5M2: *out = dc_f8e5m2_to_f32(src[i]); return;
    default: *out = 0; return;
  }
}

/* The source element of destination element i: itself, or for a repacked
 * conv weight (dst [O,kh,kw,C] from src [O,C,kh,kw]) its OIHW index. */
static uint64_t source_index(const dc_weight *w, uint64_t i) {
  if (!w->repack_pending) return i;
  const int64_t *d = w->type.dims; /* O, kh, kw, C */
  uint64_t c = i % (uint64_t)d[3], kx = i / (uint64_t)d[3] % (uint64_t)d[2];
  uint64_t ky = i / (uint64_t)(d[3] * d[2]) % (uint64_t)d[1], o = i / (uint64_t)(d[3] * d[2] * d[1]);
  return ((o * (uint64_t)d[3] + c) * (uint64_t)d[1] + ky) * (uint64_t)d[2] + kx;
}

/* Converts weight w's source bytes into dst (type.dtype, repacked if asked). */
static dc_status *convert(const dc_weight *w, const uint8_t *src, uint8_t *dst) {
  uint64_t n = dc_type_numel(&w->type);
  if (!w->cast_pending && !w->repack_pending) { /* a constant's bytes, as they are */
    memcpy(dst, src, (size_t)w->bytes);
    return NULL;
  }
  if (!w->cast_pending) { /* a repack alone moves elements as they are: src in order, no index arithmetic */
    size_t es = (size_t)dc_dtype_size(w->type.dtype);
    const int64_t *d = w->type.dims; /* O, kh, kw, C */
    uint64_t taps = (uint64_t)(d[1] * d[2]), c_n = (uint64_t)d[3];
    for (uint64_t o = 0; o < (uint64_t)d[0]; o++)
      for (uint64_t c = 0; c < c_n; c++)
        for (uint64_t t = 0; t < taps; t++, src += es)
          memcpy(dst + es * ((o * taps + t) * c_n + c), src, es);
    return NULL;
  }
  double worst = 0;
  for (uint64_t i = 0; i < n; i++) {
    float x;
    decode_to_f32(w->from_dtype, src, source_index(w, i), &x);
    uint16_t h;
    switch (w->type.dtype) {
      case DT_BF16: h = dc_f32_to_bf16(x); memcpy(dst + 2 * i, &h, 2); break;
      case DT_F16: h = dc_f32_to_f16(x); memcpy(dst + 2 * i, &h, 2); break;
      case DT_F8_E4M3: dst[i] = dc_f32_to_f8e4m3(x); break;
      case DT_F8_E5M2: dst[i] = dc_f32_to_f8e5m2(x); break;
      default: return dc_error(DC_ERR_INTERNAL, "%s: no conversion to %s", w->name, dc_dtype_name(w->type.dtype));
    }
    if (w->type.dtype == DT_F8_E4M3 && fabs(x) > worst) worst = fabs(x);
  }
  if (worst > 448.0)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "--storage-dtype fp8_e4m3: tensor %s holds %g, beyond e4m3's largest value 448 (PyTorch would "
                    "silently store 448); skip its module with --skip-cast, or use --storage-dtype fp8_e5m2 (max 57344) "
                    "or bf16",
                    w->name, worst);
  return NULL;
}

/* Where weight w's bytes are in its (mapped) source file. */
static dc_status *source_bytes(const dc_module *m, sources *s, const dc_weight *w, const uint8_t **out) {
  uint64_t from_bytes = w->cast_pending ? w->from_bytes : w->bytes;
  dc_mapped_file *f = &s->maps[w->file];
  if (!f->data) DC_TRY(dc_file_map(m->files[w->file].path, f));
  if (w->offset + from_bytes > (uint64_t)f->size)
    return dc_error(DC_ERR_IO, "%s: tensor %s lies past the end: the file changed", m->files[w->file].path, w->name);
  *out = f->data + w->offset;
  return NULL;
}

dc_status *dc_store_cast_weights(dc_module *m, const char *path, int verbose, const dc_progress *progress) {
  int n = 0;
  uint64_t total = 0;
  for (int32_t i = 0; i < m->nweights; i++)
    if (dc_weight_pending(&m->weights[i])) n++, total += m->weights[i].bytes;
  if (n == 0) return NULL;
  sources s = {dc_calloc((size_t)m->nfiles + 1, sizeof *s.maps), m->nfiles};
  dc_st_out *outs = dc_calloc((size_t)n + 1, sizeof *outs);
  int32_t *ws = dc_calloc((size_t)n + 1, sizeof *ws);
  uint8_t *data = dc_malloc(total ? total : 1);
  dc_status *st = s.maps && outs && ws && data ? NULL : dc_nomem("converting weights");
  uint64_t at = 0;
  int k = 0;
  dc_progress_counter done;
  dc_progress_count_begin(&done, progress, "writing weights", (int64_t)total, 1);
  for (int32_t i = 0; i < m->nweights && !st; i++) {
    dc_weight *w = &m->weights[i];
    if (!dc_weight_pending(w)) continue;
    const uint8_t *src = w->inline_bytes;
    if (!src) st = source_bytes(m, &s, w, &src);
    if (!st) st = convert(w, src, data + at);
    outs[k] = (dc_st_out){w->name, w->type, data + at};
    ws[k++] = i;
    at += w->bytes;
    if (!st) dc_progress_count_add(&done, (int64_t)w->bytes, 0);
  }
  dc_progress_count_end(&done);
  if (!st) st = dc_st_write(path, outs, n);
  for (int32_t f = 0; s.maps && f < s.nfiles; f++)
    if (s.maps[f].data) dc_file_unmap(&s.maps[f]);
  if (!st) {
    for (int i = 0; i < n; i++) {
      m->weights[ws[i]].cast_pending = m->weights[ws[i]].repack_pending = 0;
      m->weights[ws[i]].inline_bytes = NULL;
    }
    st = repoint(m, path, ws, n);
  }
  if (!st) st = drop_unused_files(m);
  if (!st && verbose) {
    char b[32];
    dc_progress_pause(progress);
    fprintf(stderr, "diffc: wrote %s: %d weights converted (storage dtype, NHWC repack, constants), %s\n", path, n, dc_format_bytes(total, b, sizeof b));
  }
  dc_free(s.maps);
  dc_free(outs);
  dc_free(ws);
  dc_free(data);
  return st;
}
