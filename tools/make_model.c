/* make_model — a diffusers model folder with seeded random weights, made
 * from a config alone.
 *
 * Full-size checkpoints (SD1.5's UNet is 3.4 GB, SDXL's 10 GB in f32) cannot
 * travel to a machine that is lent for minutes with no network, but their
 * configs can: the frontend's record mode lists every (name, shape) the
 * builder asks for, and this tool writes exactly those tensors.  Values
 * follow PyTorch's default initialisation so activations stay of order one
 * through a deep UNet:
 *   conv / linear weight  uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 *                         fan_in = product of dims[1:] (kaiming_uniform with
 *                         a=sqrt(5), as nn.Conv2d and nn.Linear do)
 *   their bias            uniform with the weight's bound
 *   norm weight / bias    1 / 0 (a rank-1 ".weight" is a GroupNorm/LayerNorm)
 *   nn.Embedding weight   normal(0, 1) (module name ending in "embedding(s)")
 * Each value is a hash of (seed, tensor name, element index), so the bytes
 * depend on neither the order of writing nor the shard layout.
 *
 * Tensors stream to the file chunk by chunk (never the whole model in
 * memory), to a temporary name renamed into place (support.h dc_atomic_*).
 * The folder is then opened with the frontend's own reader as a check. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "runtime/kernels.h" /* defines: dc_f32_to_bf16, dc_f32_to_f16 */

#define CHUNK (1 << 20) /* elements generated and written at a time */

static const char usage[] =
    "usage: make_model CONFIG.json OUT_DIR [options]\n"
    "\n"
    "Writes a diffusers model folder for the model CONFIG.json describes, with seeded random\n"
    "weights: OUT_DIR/config.json (a copy) and OUT_DIR/diffusion_pytorch_model.safetensors\n"
    "(model.safetensors for a transformers model such as a CLIP text encoder), or shards with\n"
    "an index (diffusion_pytorch_model.safetensors.index.json).  Every tensor diffc's\n"
    "builder needs for every entry of the model is written, initialised like PyTorch's\n"
    "defaults (conv/linear uniform(+-1/sqrt(fan_in)), norms 1 and 0, embeddings normal(0,1)).\n"
    "\n"
    "options:\n"
    "  --seed N             seed of the values (default 0); the same seed gives the same bytes\n"
    "  --dtype f32|bf16|f16 stored dtype (default f32)\n"
    "  --shard-size BYTES   split into shards of at most BYTES each (a larger tensor gets a\n"
    "                       shard of its own); suffixes K, M, G (powers of 1024) allowed\n"
    "  -q, --quiet          no progress or summary on stderr\n"
    "  -h, --help           this help\n"
    "\n"
    "Other weight files of OUT_DIR (a single file, an index or shards from an earlier run) are\n"
    "removed, so the folder holds one checkpoint.\n";

typedef struct {
  const char *config, *out_dir;
  uint64_t seed, shard_size; /* shard_size 0: one file */
  dc_dtype dtype;
  int quiet;
} options;

/* ---- arguments ------------------------------------------------------------- */

static dc_status *parse_u64(const char *opt, const char *v, int suffixes, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  uint64_t scale = 1;
  if (suffixes && *end && !end[1]) {
    if (*end == 'K' || *end == 'k') scale = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') scale = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') scale = 1ull << 30, end++;
  }
  if (!*v || *v == '-' || *end || errno || dc_mul_overflows(x, scale, out))
    return dc_error(DC_ERR_ARGUMENT, "%s %s: expected a non-negative integer%s", opt, v,
                    suffixes ? " (optionally with K, M or G)" : "");
  return NULL;
}

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  memset(o, 0, sizeof *o);
  o->dtype = DT_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else if (!strcmp(a, "--seed") || !strcmp(a, "--dtype") || !strcmp(a, "--shard-size")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see make_model --help)", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--seed")) DC_TRY(parse_u64(a, v, 0, &o->seed));
      else if (!strcmp(a, "--shard-size")) {
        DC_TRY(parse_u64(a, v, 1, &o->shard_size));
        if (o->shard_size == 0) return dc_error(DC_ERR_ARGUMENT, "--shard-size must be positive");
      } else if (strcmp(v, "f32") && strcmp(v, "bf16") && strcmp(v, "f16")) {
        return dc_error(DC_ERR_ARGUMENT, "--dtype %s: expected f32, bf16 or f16", v);
      } else {
        dc_dtype_from_name(v, &o->dtype);
      }
    } else if (a[0] == '-') {
      return dc_error(DC_ERR_ARGUMENT, "unknown option %s (see make_model --help)", a);
    } else if (!o->config) {
      o->config = a;
    } else if (!o->out_dir) {
      o->out_dir = a;
    } else {
      return dc_error(DC_ERR_ARGUMENT, "unexpected argument %s", a);
    }
  }
  if (!o->config || !o->out_dir)
    return dc_error(DC_ERR_ARGUMENT, "need CONFIG.json and OUT_DIR (see make_model --help)");
  return NULL;
}

/* ---- initialisation ---------------------------------------------------------- */

typedef enum { FILL_UNIFORM, FILL_ONES, FILL_ZEROS, FILL_NORMAL } fill_kind;

typedef struct {
  fill_kind kind;
  float bound; /* FILL_UNIFORM */
} fill_rule;

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static float fan_in_bound(const dc_weight_spec *w) {
  double fan_in = 1;
  for (int d = 1; d < w->rank; d++) fan_in *= (double)w->dims[d];
  return (float)(1.0 / sqrt(fan_in));
}

/* nn.Embedding is named "<...>embedding.weight" / "<...>embeddings.weight";
 * TimestepEmbedding's Linear layers are "time_embedding.linear_1.weight". */
static int is_embedding_table(const dc_weight_spec *s) {
  return s->rank == 2 && (ends_with(s->name, "embedding.weight") || ends_with(s->name, "embeddings.weight"));
}

static dc_status *fill_rule_for(const dc_weight_list *l, const dc_weight_spec *s, fill_rule *out) {
  *out = (fill_rule){FILL_ZEROS, 0};
  if (ends_with(s->name, ".weight")) {
    out->kind = is_embedding_table(s) ? FILL_NORMAL : s->rank >= 2 ? FILL_UNIFORM : FILL_ONES;
    if (out->kind == FILL_UNIFORM) out->bound = fan_in_bound(s);
    return NULL;
  }
  if (!ends_with(s->name, ".bias")) return out->kind = FILL_NORMAL, NULL;
  /* A bias takes its weight's bound; a norm's bias (rank-1 weight) is 0. */
  char sibling[512];
  size_t stem = strlen(s->name) - strlen("bias");
  if (stem + sizeof "weight" > sizeof sibling)
    return dc_error(DC_ERR_UNSUPPORTED, "tensor name \"%s\" is too long", s->name);
  memcpy(sibling, s->name, stem);
  memcpy(sibling + stem, "weight", sizeof "weight");
  const dc_weight_spec *w = dc_weight_list_find(l, sibling);
  out->kind = w && w->rank >= 2 ? FILL_UNIFORM : FILL_ZEROS;
  if (out->kind == FILL_UNIFORM) out->bound = fan_in_bound(w);
  return NULL;
}

/* splitmix64's output function: value i of a stream is mix(key + (i+1)*gamma). */
static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
#define GAMMA 0x9e3779b97f4a7c15ULL

static uint64_t tensor_key(uint64_t seed, const char *name) {
  return dc_hash64(name, strlen(name)) ^ mix64(seed * GAMMA + 1);
}

/* Elements [first, first + n) of the tensor into out. */
static void fill(const fill_rule *r, uint64_t key, uint64_t first, size_t n, float *out) {
  switch (r->kind) {
  case FILL_ONES:
  case FILL_ZEROS:
    for (size_t i = 0; i < n; i++) out[i] = r->kind == FILL_ONES ? 1.0f : 0.0f;
    break;
  case FILL_UNIFORM:
    for (size_t i = 0; i < n; i++) {
      float u = (float)(mix64(key + (first + i + 1) * GAMMA) >> 40) * 0x1p-24f; /* [0, 1) */
      out[i] = (2.0f * u - 1.0f) * r->bound;
    }
    break;
  case FILL_NORMAL: /* Box-Muller on two values of the stream per element */
    for (size_t i = 0; i < n; i++) {
      uint64_t j = 2 * (first + i);
      double u1 = (double)(mix64(key + (j + 1) * GAMMA) >> 11) * 0x1p-53;
      double u2 = (double)(mix64(key + (j + 2) * GAMMA) >> 11) * 0x1p-53;
      out[i] = (float)(sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2));
    }
    break;
  }
}

/* ---- the plan of the files ------------------------------------------------------ */

typedef struct {
  const dc_weight_list *list;
  uint64_t *bytes;  /* per tensor */
  int *shard;       /* per tensor */
  int nshards;
  uint64_t total;
  const char *stem; /* "diffusion_pytorch_model", or "model" for a transformers config */
} layout;

static dc_status *layout_make(const dc_weight_list *l, const options *o, layout *out) {
  memset(out, 0, sizeof *out);
  out->list = l;
  dc_json_doc config; /* the file names follow the config's library */
  DC_TRY(dc_json_load(o->config, &config));
  out->stem = dc_weights_stem(&config);
  dc_json_free(&config);
  out->bytes = dc_calloc((size_t)l->n + 1, sizeof *out->bytes);
  out->shard = dc_calloc((size_t)l->n + 1, sizeof *out->shard);
  if (!out->bytes || !out->shard) return dc_nomem("planning the weight files");
  uint64_t in_shard = 0;
  out->nshards = 1;
  for (int i = 0; i < l->n; i++) {
    uint64_t b = (uint64_t)dc_dtype_size(o->dtype);
    for (int d = 0; d < l->items[i].rank; d++)
      if (dc_mul_overflows(b, (uint64_t)l->items[i].dims[d], &b))
        return dc_error(DC_ERR_UNSUPPORTED, "tensor \"%s\" is too large", l->items[i].name);
    if (o->shard_size && in_shard > 0 && in_shard + b > o->shard_size) out->nshards++, in_shard = 0;
    out->bytes[i] = b;
    out->shard[i] = out->nshards - 1;
    in_shard += b;
    out->total += b;
  }
  return NULL;
}

static void layout_free(layout *x) {
  dc_free(x->bytes);
  dc_free(x->shard);
}

/* "diffusion_pytorch_model-00001-of-00003.safetensors", or the single name
 * ("model..." for a transformers model). */
static char *shard_name(const layout *x, int s) {
  if (x->nshards == 1 && s == 0) return dc_asprintf("%s.safetensors", x->stem);
  return dc_asprintf("%s-%05d-of-%05d.safetensors", x->stem, s + 1, x->nshards);
}

/* ---- writing ------------------------------------------------------------------------- */

typedef struct {
  const options *o;
  uint64_t written, next_report;
  double t0;
} progress;

static void progress_add(progress *p, uint64_t n, uint64_t total) {
  p->written += n;
  if (p->o->quiet || total < (256u << 20) || p->written < p->next_report) return;
  char b1[32], b2[32];
  fprintf(stderr, "make_model: %3.0f%%  %s of %s  (%.1f s)\n", 100.0 * (double)p->written / (double)total,
          dc_format_bytes(p->written, b1, sizeof b1), dc_format_bytes(total, b2, sizeof b2), dc_now_seconds() - p->t0);
  p->next_report += total / 10;
}

/* name as a JSON string (builder names are plain ASCII, but a name is
 * data: quote what JSON requires). */
/* The safetensors header of shard s: tensors in name order, padded with
 * spaces to a multiple of 8 as the reference writer does. */
static dc_status *shard_header(const layout *x, int s, dc_dtype dt, dc_buf *b) {
  uint64_t at = 0;
  dc_buf_printf(b, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < x->list->n; i++) {
    if (x->shard[i] != s) continue;
    const dc_weight_spec *t = &x->list->items[i];
    dc_buf_u8(b, ',');
    dc_buf_json_string(b, t->name);
    dc_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dc_dtype_safetensors_name(dt));
    for (int d = 0; d < t->rank; d++) dc_buf_printf(b, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    dc_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                  (unsigned long long)(at + x->bytes[i]));
    at += x->bytes[i];
  }
  dc_buf_u8(b, '}');
  while (!b->failed && b->len % 8) dc_buf_u8(b, ' ');
  return dc_buf_status(b, "writing a safetensors header");
}

/* Generates one tensor chunk by chunk into the open file. */
static dc_status *write_tensor(dc_atomic_file *af, const layout *x, int i, const options *o, float *f32,
                               uint16_t *u16, progress *p) {
  const dc_weight_spec *t = &x->list->items[i];
  fill_rule r;
  DC_TRY(fill_rule_for(x->list, t, &r));
  uint64_t key = tensor_key(o->seed, t->name), numel = x->bytes[i] / (uint64_t)dc_dtype_size(o->dtype);
  for (uint64_t first = 0; first < numel && !af->failed; first += CHUNK) {
    size_t n = (size_t)(numel - first < CHUNK ? numel - first : CHUNK);
    fill(&r, key, first, n, f32);
    if (o->dtype == DT_F32) {
      dc_atomic_write(af, f32, n * 4);
    } else {
      for (size_t k = 0; k < n; k++) u16[k] = o->dtype == DT_BF16 ? dc_f32_to_bf16(f32[k]) : dc_f32_to_f16(f32[k]);
      dc_atomic_write(af, u16, n * 2);
    }
    progress_add(p, n * (uint64_t)dc_dtype_size(o->dtype), x->total);
  }
  return NULL;
}

static dc_status *write_shard(const layout *x, int s, const char *path, const options *o, progress *p) {
  dc_buf hdr;
  dc_buf_init(&hdr);
  float *f32 = dc_malloc(sizeof(float) * CHUNK);
  uint16_t *u16 = dc_malloc(sizeof(uint16_t) * CHUNK);
  dc_status *st = f32 && u16 ? shard_header(x, s, o->dtype, &hdr) : dc_nomem("writing weights");
  dc_atomic_file af;
  if (!st) st = dc_atomic_open(path, &af);
  if (!st) {
    uint8_t len[8];
    for (int k = 0; k < 8; k++) len[k] = (uint8_t)((uint64_t)hdr.len >> (8 * k));
    dc_atomic_write(&af, len, 8);
    dc_atomic_write(&af, hdr.data, hdr.len);
    for (int i = 0; i < x->list->n && !st; i++)
      if (x->shard[i] == s) st = write_tensor(&af, x, i, o, f32, u16, p);
    if (st) dc_atomic_abort(&af);
    else st = dc_atomic_commit(&af);
  }
  dc_buf_deinit(&hdr);
  dc_free(f32);
  dc_free(u16);
  return st;
}

static dc_status *write_text(const char *path, const char *text, size_t n) {
  dc_atomic_file af;
  DC_TRY(dc_atomic_open(path, &af));
  dc_atomic_write(&af, text, n);
  return dc_atomic_commit(&af);
}

/* diffusers' index: {"metadata": {"total_size": N}, "weight_map": {name: shard}}. */
static dc_status *write_index(const layout *x, const char *dir) {
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
  cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
  int ok = root && meta && map && cJSON_AddNumberToObject(meta, "total_size", (double)x->total);
  char **names = dc_calloc((size_t)x->nshards, sizeof *names);
  ok = ok && names;
  for (int s = 0; ok && s < x->nshards; s++) ok = (names[s] = shard_name(x, s)) != NULL;
  for (int i = 0; ok && i < x->list->n; i++)
    ok = cJSON_AddStringToObject(map, x->list->items[i].name, names[x->shard[i]]) != NULL;
  char *index = dc_asprintf("%s.safetensors.index.json", x->stem);
  char *text = ok ? cJSON_Print(root) : NULL, *path = index ? dc_path_join(dir, index) : NULL;
  dc_free(index);
  dc_status *st = text && path ? write_text(path, text, strlen(text)) : dc_nomem("writing the shard index");
  for (int s = 0; names && s < x->nshards; s++) dc_free(names[s]);
  dc_free(names);
  dc_free(path);
  cJSON_free(text);
  cJSON_Delete(root);
  return st;
}

/* ---- the folder ----------------------------------------------------------------------- */

static dc_status *make_dir(const char *dir) {
  if (mkdir(dir, 0777) == 0 || (errno == EEXIST && dc_dir_exists(dir))) return NULL;
  return dc_error(DC_ERR_IO, "%s: cannot create the directory (%s)", dir, strerror(errno));
}

static dc_status *copy_config(const char *from, const char *dir) {
  char *text = NULL, *to = dc_path_join(dir, "config.json");
  size_t n = 0;
  dc_status *st = to ? dc_file_read_all(from, &text, &n) : dc_nomem("copying the config");
  if (!st) st = write_text(to, text, n);
  dc_free(text);
  dc_free(to);
  return st;
}

/* A weights file name of the library's stem: the single file, an index, or a shard. */
static int is_weights_name(const char *stem, const char *n) {
  int a, b;
  char tail[32];
  size_t ls = strlen(stem);
  if (strncmp(n, stem, ls) != 0) return 0;
  n += ls;
  return !strcmp(n, ".safetensors") || !strcmp(n, ".safetensors.index.json") ||
         (sscanf(n, "-%5d-of-%5d%31s", &a, &b, tail) == 3 && !strcmp(tail, ".safetensors"));
}

/* Removes weight files this run did not write: a folder with both a single
 * file and an index would be read as the single file. */
static dc_status *remove_stale(const layout *x, const char *dir, int quiet) {
  DIR *dp = opendir(dir);
  if (!dp) return dc_error(DC_ERR_IO, "%s: cannot list the directory", dir);
  dc_status *st = NULL;
  for (struct dirent *de; !st && (de = readdir(dp));) {
    if (!is_weights_name(x->stem, de->d_name)) continue;
    int ours = x->nshards > 1 && !strncmp(de->d_name, x->stem, strlen(x->stem)) &&
               !strcmp(de->d_name + strlen(x->stem), ".safetensors.index.json");
    for (int s = 0; !ours && s < x->nshards; s++) {
      char *n = shard_name(x, s);
      if (!n) st = dc_nomem("listing the output folder");
      ours = n && !strcmp(n, de->d_name);
      dc_free(n);
    }
    char *p = ours || st ? NULL : dc_path_join(dir, de->d_name);
    if (p && unlink(p) != 0) st = dc_error(DC_ERR_IO, "%s: cannot remove a stale weight file (%s)", p, strerror(errno));
    else if (p && !quiet) fprintf(stderr, "make_model: removed %s (an earlier checkpoint)\n", p);
    dc_free(p);
  }
  closedir(dp);
  return st;
}

/* Reads the folder back with the frontend's reader: every tensor there. */
static dc_status *check_folder(const char *dir, const dc_weight_list *l) {
  dc_folder f;
  DC_TRY(dc_folder_open(dir, NULL, &f));
  dc_status *st = NULL;
  if (f.nentries != l->n)
    st = dc_error(DC_ERR_INTERNAL, "%s: wrote %d tensors but the folder holds %d", dir, l->n, f.nentries);
  dc_folder_close(&f);
  return st;
}

static dc_status *make_model(const options *o) {
  double t0 = dc_now_seconds();
  dc_weight_list l;
  DC_TRY(dc_frontend_weight_list(o->config, NULL, &l));
  layout x;
  progress p = {o, 0, 0, t0};
  dc_status *st = layout_make(&l, o, &x);
  p.next_report = x.total / 10;
  if (!st) st = make_dir(o->out_dir);
  if (!st) st = copy_config(o->config, o->out_dir);
  for (int s = 0; !st && s < x.nshards; s++) {
    char *name = shard_name(&x, s), *path = name ? dc_path_join(o->out_dir, name) : NULL;
    st = path ? write_shard(&x, s, path, o, &p) : dc_nomem("writing weights");
    dc_free(name);
    dc_free(path);
  }
  if (!st && x.nshards > 1) st = write_index(&x, o->out_dir);
  if (!st) st = remove_stale(&x, o->out_dir, o->quiet);
  if (!st) st = check_folder(o->out_dir, &l);
  if (!st && !o->quiet) {
    uint64_t params = x.total / (uint64_t)dc_dtype_size(o->dtype);
    char b[32];
    fprintf(stderr, "make_model: wrote %s: %d tensors, %.1f M parameters, %s of %s in %d file%s, seed %llu (%.1f s)\n",
            o->out_dir, l.n, (double)params / 1e6, dc_format_bytes(x.total, b, sizeof b), dc_dtype_name(o->dtype),
            x.nshards, x.nshards == 1 ? "" : "s", (unsigned long long)o->seed, dc_now_seconds() - t0);
  }
  layout_free(&x);
  dc_weight_list_deinit(&l);
  return st;
}

int main(int argc, char **argv) {
  options o;
  int exit_now = 0;
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (!st && !exit_now) st = make_model(&o);
  if (st) {
    fprintf(stderr, "make_model: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}
