/* cuda_harness.c — see cuda_harness.h.
 *
 * Building a kernel: the source, the dc_common.cuh text and a wrapper
 *     extern "C" void dc_emu_entry(void **p) { NAME((float *)p[0], ...); }
 * are written into a fresh directory under the test's temp dir and compiled
 * with `c++ -std=c++17 -O1 -fPIC -shared` against tests/cuda_emu/ and the
 * emulator runtime (dc_emu.cpp, compiled once per process), then dlopen'ed.
 *
 * Built kernels are kept on disk across test processes and runs, in
 * <kernel cache dir>/emu/ (DIFFC_CACHE_DIR, else XDG_CACHE_HOME/diffc, else
 * ~/.cache/diffc, as diffc's kernel cache): a host compile takes about a
 * second and the CUDA tests build the same kernels again and again (every
 * test process, and CI's sanitizer stage, which builds them identically).
 * An entry is named by a hash of everything the shared object is made from
 * (the kernel source and entry wrapper, dc_common.cuh, the emulator's own
 * files in tests/cuda_emu/ (dc_mma.cuh included, which kernels reach through
 * the same -I), the compile commands and `c++ --version`), and
 * written under a temporary name, then renamed; one that does not load is
 * rebuilt. */
#include "cuda_harness.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cuda/cgen.h" /* dc_cuda_ctype */
#include "codegen/cuda/nvrtc.h"
#include "codegen/kernel_cache.h" /* dc_kcache_default_dir */
#include "runtime/cuda_driver.h" /* the CUresult values the fake driver returns */
#include "runtime/kernels.h"
#include "testutil.h"

typedef int (*emu_run_fn)(const unsigned grid[3], const unsigned block[3], unsigned smem, void (*entry)(void **),
                          void **params, char *err, size_t errcap);

struct ch_kernel {
  char *name;
  void *so;
  void (*entry)(void **);
  emu_run_fn run;
};

static char *tests_dir;
static char *emu_root; /* <tmp>/cuda_emu: dc_common.cuh, dc_emu.o, one dir per kernel */
static dc_status *emu_ready; /* the result of the one-time setup, kept */
static int emu_inited, kernel_count;
/* Kernels built so far, by a hash of their source and entry: a second build
 * of the same text (an in-place rerun, say) reuses the shared object. */
enum { CACHE_MAX = 4096 };
typedef struct {
  uint64_t hash;
  int id;
} built_kernel;
static built_kernel built[CACHE_MAX];
static int nbuilt;
static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static char *emu_cache;     /* <cache>/emu, or NULL: no disk cache */
static uint64_t emu_base;   /* hash of what every kernel is built with */

#define EMU_KERNEL_CMD "c++ -std=c++17 -O1 -fPIC -shared"
#define EMU_RUNTIME_CMD "c++ -std=c++17 -O2 -fPIC -fvisibility=hidden -c"

/* The compiler runs in each kernel's directory: keep the path absolute. */
void ch_init(const char *dir) {
  char *abs = realpath(dir, NULL);
  dc_free(tests_dir);
  tests_dir = dc_strdup(abs ? abs : dir);
  free(abs);
}

/* ---- building ----------------------------------------------------------- */
static dc_status *write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  size_t n = strlen(text);
  if (!f) return dc_error(DC_ERR_IO, "%s: cannot create", path);
  int ok = fwrite(text, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  return ok ? NULL : dc_error(DC_ERR_IO, "%s: write failed", path);
}

/* The first lines of a compiler log, for an error message. */
static char *log_head(const char *path) {
  char *text = NULL;
  size_t size = 0;
  dc_status *st = dc_file_read_all(path, &text, &size);
  if (st) {
    dc_status_free(st);
    return dc_strdup("(no compiler output)");
  }
  char *p = text;
  for (int lines = 0; *p && lines < 20; p++)
    if (*p == '\n') lines++;
  *p = 0;
  return text;
}

/* Runs a shell command; on failure the error holds the log's head. */
static dc_status *run_compiler(const char *cmd, const char *log, const char *what) {
  if (system(cmd) == 0) return NULL;
  char *head = log_head(log);
  dc_status *st = dc_error(DC_ERR_INTERNAL, "%s does not compile as host C++ under the CUDA emulator:\n%s", what, head);
  dc_free(head);
  return st;
}

/* ---- the disk cache ------------------------------------------------------ */
/* Folds file dir/name into h; 0 when it cannot be read. */
static int hash_file(uint64_t *h, const char *dir, const char *name) {
  char *path = dc_path_join(dir, name), *text = NULL;
  size_t size = 0;
  dc_status *st = path ? dc_file_read_all(path, &text, &size) : dc_nomem("path");
  dc_free(path);
  if (st) {
    dc_status_free(st);
    return 0;
  }
  *h = dc_hash64(text, size) ^ (*h * 0x9E3779B97F4A7C15ull);
  dc_free(text);
  return 1;
}

/* Folds the text of s into h. */
static void hash_text(uint64_t *h, const char *s) { *h = dc_hash64(s, strlen(s)) ^ (*h * 0x9E3779B97F4A7C15ull); }

/* Sets emu_cache and emu_base, or leaves the cache off (a warning) when the
 * directory or the compiler's version cannot be had. */
static void disk_cache_open(void) {
  char *base = dc_kcache_default_dir(), *dir = base ? dc_path_join(base, "emu") : NULL;
  dc_free(base);
  char *cmd = dir ? dc_asprintf("mkdir -p '%s' && c++ --version > '%s/version.txt' 2>/dev/null", dir, emu_root) : NULL;
  int ok = cmd && system(cmd) == 0;
  dc_free(cmd);
  uint64_t h = 0;
  const char *files[] = {"dc_emu.cpp", "dc_emu.h", "dc_cuda.cuh", "dc_mma.cuh"};
  char *emu_src = ok ? dc_path_join(tests_dir, "cuda_emu") : NULL;
  for (int i = 0; ok && i < (int)(sizeof files / sizeof files[0]); i++) ok = hash_file(&h, emu_src, files[i]);
  ok = ok && hash_file(&h, emu_root, "version.txt");
  dc_free(emu_src);
  if (!ok) {
    fprintf(stderr, "cuda_harness: no disk cache for emulated kernels (%s); building each one\n",
                dir ? dir : "no cache directory");
    dc_free(dir);
    return;
  }
  hash_text(&h, dc_cuda_common_text());
  hash_text(&h, EMU_KERNEL_CMD " " EMU_RUNTIME_CMD);
  emu_base = h, emu_cache = dir;
}

/* The cache entry for a kernel of this hash, dc_malloc'd; NULL: no cache. */
static char *disk_cache_path(uint64_t hash) {
  if (!emu_cache) return NULL;
  uint64_t both[2] = {emu_base, hash};
  return dc_asprintf("%s/kernel-%016llx.so", emu_cache, (unsigned long long)dc_hash64(both, sizeof both));
}

/* Copies the built object into the cache, atomically (support's writer:
 * a temporary name, then a rename); a failure only means the next process
 * builds it again. */
static void disk_cache_put(const char *built_so, const char *entry) {
  char *data = NULL;
  size_t size = 0;
  dc_atomic_file f;
  dc_status *st = dc_file_read_all(built_so, &data, &size);
  if (!st) st = dc_atomic_open(entry, &f);
  if (!st) {
    dc_atomic_write(&f, data, size);
    st = dc_atomic_commit(&f);
  }
  if (st) fprintf(stderr, "cuda_harness: could not store %s in the cache: %s\n", built_so, dc_status_message(st));
  dc_status_free(st);
  dc_free(data);
}

static dc_status *emu_setup(void) {
  if (!tests_dir) return dc_error(DC_ERR_ARGUMENT, "cuda_harness: ch_init(tests_dir) was not called");
  if (system("command -v c++ >/dev/null 2>&1") != 0)
    return dc_error(DC_ERR_UNSUPPORTED, "no host C++ compiler (c++) on PATH: the CUDA emulator cannot build kernels");
  emu_root = dc_path_join(tu_tmpdir(), "cuda_emu");
  if (mkdir(emu_root, 0700) != 0) return dc_error(DC_ERR_IO, "%s: cannot create the emulator's directory", emu_root);
  char *common = dc_path_join(emu_root, "dc_common.cuh");
  dc_status *st = write_text(common, dc_cuda_common_text());
  dc_free(common);
  if (st) return st;
  char *cmd = dc_asprintf(EMU_RUNTIME_CMD " '%s/cuda_emu/dc_emu.cpp' -o '%s/dc_emu.o' > '%s/dc_emu.log' 2>&1",
                          tests_dir, emu_root, emu_root);
  char *log = dc_asprintf("%s/dc_emu.log", emu_root);
  st = run_compiler(cmd, log, "the emulator runtime tests/cuda_emu/dc_emu.cpp");
  dc_free(cmd);
  dc_free(log);
  if (!st) disk_cache_open();
  return st;
}

/* The one-time setup, once per process; its error (say, no compiler) is
 * returned to every caller.  *id is the directory number for a kernel of
 * this hash; *cached says it is already built there. */
static dc_status *emu_once(uint64_t hash, int *id, int *cached) {
  pthread_mutex_lock(&emu_lock);
  if (!emu_inited) {
    emu_ready = emu_setup();
    emu_inited = 1;
  }
  *cached = 0;
  for (int i = 0; i < nbuilt && !*cached; i++)
    if (built[i].hash == hash) *id = built[i].id, *cached = 1;
  if (!*cached) *id = kernel_count++;
  dc_status *st = emu_ready ? dc_error(dc_status_code_of(emu_ready), "%s", dc_status_message(emu_ready)) : NULL;
  pthread_mutex_unlock(&emu_lock);
  return st;
}

static char *entry_wrapper(const char *name, int nparams, const char *const *ctypes) {
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "#include \"kernel.cu\"\nextern \"C\" void dc_emu_entry(void **p) {\n  %s(", name);
  for (int i = 0; i < nparams; i++) dc_buf_printf(&b, "%s(%s *)p[%d]", i ? ", " : "", ctypes[i], i);
  dc_buf_printf(&b, ");\n}\n");
  dc_buf_u8(&b, 0);
  if (b.failed) {
    dc_buf_deinit(&b);
    return NULL;
  }
  return (char *)b.data;
}

static dc_status *write_sources(const char *dir, const char *source, const char *name, int nparams,
                                const char *const *ctypes) {
  char *kpath = dc_path_join(dir, "kernel.cu"), *epath = dc_path_join(dir, "entry.cpp");
  char *wrapper = entry_wrapper(name, nparams, ctypes);
  dc_status *st = wrapper ? NULL : dc_nomem("emulator entry wrapper");
  if (!st) st = write_text(kpath, source);
  if (!st) st = write_text(epath, wrapper);
  dc_free(kpath);
  dc_free(epath);
  dc_free(wrapper);
  return st;
}

static dc_status *load_so(const char *path, ch_kernel *k) {
  k->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!k->so) return dc_error(DC_ERR_INTERNAL, "%s: dlopen failed: %s", path, dlerror());
  *(void **)&k->entry = dlsym(k->so, "dc_emu_entry");
  *(void **)&k->run = dlsym(k->so, "dc_emu_run");
  if (!k->entry || !k->run) return dc_error(DC_ERR_INTERNAL, "%s: dc_emu_entry or dc_emu_run is missing", path);
  return NULL;
}

dc_status *ch_kernel_build(const char *source, const char *name, int nparams, const char *const *param_ctypes,
                           ch_kernel **out) {
  int id, cached;
  *out = NULL;
  char *wrapper = entry_wrapper(name, nparams, param_ctypes);
  if (!wrapper) return dc_nomem("emulator entry wrapper");
  uint64_t hash = dc_hash64(source, strlen(source)) ^ (dc_hash64(wrapper, strlen(wrapper)) * 31);
  dc_free(wrapper);
  DC_TRY(emu_once(hash, &id, &cached));
  ch_kernel *k = dc_calloc(1, sizeof *k);
  char *dir = dc_asprintf("%s/k%d", emu_root, id);
  if (!k || !dir || !(k->name = dc_strdup(name))) {
    dc_free(dir);
    ch_kernel_free(k);
    return dc_nomem("emulated kernel");
  }
  dc_status *st = NULL;
  char *entry = cached ? NULL : disk_cache_path(hash);
  if (entry && dc_file_exists(entry)) {
    st = load_so(entry, k);
    if (!st) cached = 2; /* loaded from disk; nothing to build */
    else {
      dc_status_free(st); /* a damaged entry: build it again */
      st = NULL;
      if (k->so) dlclose(k->so);
      k->so = NULL;
    }
  }
  if (!cached) st = mkdir(dir, 0700) ? dc_error(DC_ERR_IO, "%s: cannot create", dir) : NULL;
  if (!st && !cached) st = write_sources(dir, source, name, nparams, param_ctypes);
  if (!st && !cached) {
    char *cmd = dc_asprintf("cd '%s' && " EMU_KERNEL_CMD " -I'%s' -I'%s/cuda_emu' entry.cpp '%s/dc_emu.o' -o kernel.so "
                            "> build.log 2>&1",
                            dir, emu_root, tests_dir, emu_root);
    char *log = dc_asprintf("%s/build.log", dir), *what = dc_asprintf("kernel %s (%s/kernel.cu)", name, dir);
    st = run_compiler(cmd, log, what);
    dc_free(cmd);
    dc_free(log);
    dc_free(what);
  }
  if (!st && cached != 2) {
    char *so = dc_asprintf("%s/kernel.so", dir);
    st = load_so(so, k);
    if (!st && !cached && entry) disk_cache_put(so, entry);
    dc_free(so);
  }
  dc_free(entry);
  if (!st && !cached) {
    pthread_mutex_lock(&emu_lock);
    if (nbuilt < CACHE_MAX) built[nbuilt++] = (built_kernel){hash, id};
    pthread_mutex_unlock(&emu_lock);
  }
  dc_free(dir);
  if (st) {
    ch_kernel_free(k);
    return st;
  }
  *out = k;
  return NULL;
}

dc_status *ch_kernel_launch(ch_kernel *k, const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
                            void **params) {
  char err[1024] = "";
  unsigned g[3] = {grid[0], grid[1], grid[2]}, b[3] = {block[0], block[1], block[2]};
  if (k->run(g, b, smem, k->entry, params, err, sizeof err) != 0)
    return dc_error(DC_ERR_INTERNAL, "kernel %s, grid (%u,%u,%u) block (%u,%u,%u), %u bytes of dynamic shared memory: %s",
                    k->name, g[0], g[1], g[2], b[0], b[1], b[2], smem, err);
  return NULL;
}

void ch_kernel_free(ch_kernel *k) {
  if (!k) return;
  if (k->so) dlclose(k->so);
  dc_free(k->name);
  dc_free(k);
}

/* ---- guarded buffers ------------------------------------------------------ */
/* The data sits GUARD_PRE bytes into its block: 64-byte aligned (what the
 * arena guarantees) but not 128, so a kernel assuming more shows. */
enum { GUARD_PRE = 320, GUARD_POST = 256, GUARD_BYTE = 0xff };

typedef struct {
  uint8_t *base, *data;
  size_t bytes;
} gbuf;

static int gbuf_alloc(gbuf *g, size_t bytes) {
  g->bytes = bytes;
  g->base = aligned_alloc(256, (GUARD_PRE + bytes + GUARD_POST + 255) / 256 * 256);
  if (!g->base) return -1;
  g->data = g->base + GUARD_PRE;
  memset(g->base, GUARD_BYTE, GUARD_PRE + bytes + GUARD_POST);
  return 0;
}

/* Which guard was overwritten, or NULL. */
static const char *gbuf_guard_broken(const gbuf *g) {
  for (size_t i = 0; i < GUARD_PRE; i++)
    if (g->base[i] != GUARD_BYTE) return "before";
  for (size_t i = 0; i < GUARD_POST; i++)
    if (g->data[g->bytes + i] != GUARD_BYTE) return "after";
  return NULL;
}

static void gbuf_free(gbuf *g) {
  free(g->base);
  g->base = g->data = NULL;
}

/* ---- random inputs -------------------------------------------------------- */
static uint64_t next_u64(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s;
}

static double uniform01(uint64_t *s) { return ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0; }

static int finite_bits(dc_dtype t, unsigned v) {
  switch (t) {
    case DT_F16: return ((v >> 10) & 0x1f) != 0x1f;
    case DT_BF16: return ((v >> 7) & 0xff) != 0xff;
    case DT_F8_E4M3: return (v & 0x7f) != 0x7f;
    case DT_F8_E5M2: return ((v >> 2) & 0x1f) != 0x1f;
    default: return 1;
  }
}

static void fill_random(const dc_type *t, void *data, uint64_t *s, double scale) {
  size_t n = dc_type_numel(t);
  if (t->dtype == DT_F32) {
    float *f = data;
    for (size_t i = 0; i < n; i++) {
      double u1 = uniform01(s), u2 = uniform01(s);
      f[i] = (float)(scale * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    do v = (unsigned)(next_u64(s) >> 40); while (!finite_bits(t->dtype, v & 0xffff));
    if (dc_dtype_size(t->dtype) == 2) ((uint16_t *)data)[i] = (uint16_t)v;
    else ((uint8_t *)data)[i] = (uint8_t)v;
  }
}

/* ---- one node, emulated vs reference --------------------------------------- */
typedef struct {
  const dc_module *m;
  const dc_node *n;
  int32_t id;
  gbuf in[DC_MAX_INPUTS], out;
  void *saved[DC_MAX_INPUTS]; /* the inputs' bytes, to check they are left alone */
  void *want;
} trial;

static void trial_deinit(trial *t) {
  for (int i = 0; i < DC_MAX_INPUTS; i++) {
    gbuf_free(&t->in[i]);
    free(t->saved[i]);
  }
  gbuf_free(&t->out);
  free(t->want);
}

/* Inputs from `given` (or random when NULL), their saved copies, and the
 * reference output. */
static dc_status *trial_init(trial *t, const dc_module *m, int32_t id, const void *const *given, uint64_t seed,
                             double scale) {
  memset(t, 0, sizeof *t);
  t->m = m;
  t->id = id;
  t->n = &m->nodes[id];
  uint64_t s = seed;
  const void *ins[DC_MAX_INPUTS];
  for (int i = 0; i < t->n->ninputs; i++) {
    const dc_type *ty = &m->nodes[t->n->inputs[i]].type;
    size_t bytes = (size_t)dc_type_bytes(ty);
    if (gbuf_alloc(&t->in[i], bytes) || !(t->saved[i] = malloc(bytes + 1))) return dc_nomem("emulator test input");
    if (given) memcpy(t->in[i].data, given[i], bytes);
    else fill_random(ty, t->in[i].data, &s, scale);
    memcpy(t->saved[i], t->in[i].data, bytes);
    ins[i] = t->in[i].data;
  }
  size_t obytes = (size_t)dc_type_bytes(&t->n->type);
  if (gbuf_alloc(&t->out, obytes) || !(t->want = malloc(obytes + 64))) return dc_nomem("emulator test output");
  if (!dc_ref_kernel_for(t->n->op))
    return dc_error(DC_ERR_ARGUMENT, "node %%%d (%s) has no reference kernel", id, dc_op_get(t->n->op)->name);
  return dc_ref_run(m, t->n, ins, t->want);
}

static dc_status *build_node_kernel(const trial *t, const dc_cuda_kernel *ck, ch_kernel **out) {
  char types[1 + DC_MAX_INPUTS][48];
  const char *ptypes[1 + DC_MAX_INPUTS];
  snprintf(types[0], sizeof types[0], "%s", dc_cuda_ctype(t->n->type.dtype));
  for (int i = 0; i < t->n->ninputs; i++)
    snprintf(types[i + 1], sizeof types[i + 1], "const %s", dc_cuda_ctype(t->m->nodes[t->n->inputs[i]].type.dtype));
  for (int i = 0; i <= t->n->ninputs; i++) ptypes[i] = types[i];
  return ch_kernel_build(ck->source, ck->name, t->n->ninputs + 1, ptypes, out);
}

/* After the run: guards intact, inputs unchanged (but the aliased one). */
static dc_status *check_buffers(const trial *t, int alias) {
  const char *side = gbuf_guard_broken(&t->out);
  if (side) return dc_error(DC_ERR_MISMATCH, "the kernel wrote outside its output buffer (%s it)", side);
  for (int i = 0; i < t->n->ninputs; i++) {
    if ((side = gbuf_guard_broken(&t->in[i])))
      return dc_error(DC_ERR_MISMATCH, "the kernel wrote outside input %d's buffer (%s it)", i, side);
    if (i != alias && memcmp(t->in[i].data, t->saved[i], t->in[i].bytes) != 0)
      return dc_error(DC_ERR_MISMATCH, "the kernel wrote into input %d", i);
  }
  return NULL;
}

/* alias >= 0: the output buffer is input `alias`'s, pre-filled with it. */
static dc_status *run_trial(trial *t, const dc_cuda_options *o, int alias, kh_result *out) {
  dc_cuda_kernel ck;
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", (int)t->id, dc_op_get(t->n->op)->name);
  DC_TRY(dc_cuda_gen_node(t->m, t->id, o, name, &ck));
  ch_kernel *k = NULL;
  dc_status *st = build_node_kernel(t, &ck, &k);
  void *params[1 + DC_MAX_INPUTS];
  gbuf *outbuf = alias >= 0 ? &t->in[alias] : &t->out;
  params[0] = outbuf->data;
  for (int i = 0; i < t->n->ninputs; i++) params[i + 1] = t->in[i].data;
  if (!st) st = ch_kernel_launch(k, ck.grid, ck.block, ck.smem_bytes, params);
  if (!st) st = check_buffers(t, alias);
  if (!st) kh_compare_out(&t->n->type, outbuf->data, t->want, out);
  ch_kernel_free(k);
  dc_cuda_kernel_deinit(&ck);
  return dc_status_annotate(st, "node %%%d (%s)", (int)t->id, dc_op_get(t->n->op)->name);
}

static dc_status *compare(const dc_module *m, int32_t id, const dc_cuda_options *o, const void *const *given,
                          uint64_t seed, double scale, int alias, kh_result *out) {
  trial t;
  dc_status *st = trial_init(&t, m, id, given, seed, scale);
  if (!st) st = run_trial(&t, o, alias, out);
  trial_deinit(&t);
  return st;
}

dc_status *ch_compare(const dc_module *m, int32_t id, const dc_cuda_options *o, uint64_t seed, double scale,
                      kh_result *out) {
  return compare(m, id, o, NULL, seed, scale, -1, out);
}

dc_status *ch_compare_with(const dc_module *m, int32_t id, const dc_cuda_options *o, const void *const *inputs,
                           kh_result *out) {
  return compare(m, id, o, inputs, 0, 1.0, -1, out);
}

dc_status *ch_compare_aliased(const dc_module *m, int32_t id, const dc_cuda_options *o, uint64_t seed, double scale,
                              int input, kh_result *out) {
  const dc_node *n = &m->nodes[id];
  if (input < 0 || input >= n->ninputs || !dc_type_equal(&m->nodes[n->inputs[input]].type, &n->type))
    return dc_error(DC_ERR_ARGUMENT, "ch_compare_aliased: input %d of %%%d is not output-shaped", input, (int)id);
  return compare(m, id, o, NULL, seed, scale, input, out);
}

/* ---- a whole plan's kernels ---------------------------------------------- */

/* The node a plan's kernel ki was generated for: the first that runs it. */
static const dc_node *plan_kernel_node(const dc_plan *plan, int ki) {
  for (int32_t s = 0; s < plan->module->nnodes; s++)
    if (plan->cuda.kernel_of_node[s] == ki) return &plan->module->nodes[s];
  return NULL;
}

static dc_status *plan_build_one(const dc_plan *plan, int ki, ch_kernel **out) {
  const dc_plan_cuda_kernel *k = &plan->cuda.kernels[ki];
  const dc_node *n = plan_kernel_node(plan, ki);
  if (!n) return dc_error(DC_ERR_INTERNAL, "kernel %s runs at no step", k->name);
  char types[DC_MAX_INPUTS + 1][48];
  const char *ctypes[DC_MAX_INPUTS + 1];
  snprintf(types[0], sizeof types[0], "%s", dc_cuda_ctype(n->type.dtype)); /* f32, or a bf16/f16 activation */
  for (int i = 0; i < n->ninputs; i++)
    snprintf(types[i + 1], sizeof types[i + 1], "const %s",
             dc_cuda_ctype(plan->module->nodes[n->inputs[i]].type.dtype));
  for (int i = 0; i <= n->ninputs; i++) ctypes[i] = types[i];
  return dc_status_annotate(ch_kernel_build(k->source, k->name, n->ninputs + 1, ctypes, out), "kernel %s", k->name);
}

typedef struct {
  const dc_plan *plan;
  ch_kernel **kernels;
  int next;
  dc_status *first;
  pthread_mutex_t lock;
} plan_build_queue;

static void *plan_builder(void *arg) {
  plan_build_queue *q = arg;
  for (;;) {
    pthread_mutex_lock(&q->lock);
    int ki = q->first ? q->plan->cuda.nkernels : q->next++;
    pthread_mutex_unlock(&q->lock);
    if (ki >= q->plan->cuda.nkernels) return NULL;
    dc_status *st = plan_build_one(q->plan, ki, &q->kernels[ki]);
    pthread_mutex_lock(&q->lock);
    if (st && !q->first) q->first = st;
    else dc_status_free(st);
    pthread_mutex_unlock(&q->lock);
  }
}

dc_status *ch_plan_build(const dc_plan *plan, ch_kernel ***out) {
  *out = calloc((size_t)plan->cuda.nkernels + 1, sizeof **out);
  if (!*out) return dc_nomem("building a plan's kernels");
  plan_build_queue q = {plan, *out, 0, NULL, PTHREAD_MUTEX_INITIALIZER};
  pthread_t t[2];
  int started = 0;
  for (int i = 0; i < 2; i++) started += pthread_create(&t[i], NULL, plan_builder, &q) == 0;
  if (started == 0) plan_builder(&q); /* no threads: build them here */
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  return q.first;
}

void ch_plan_free(const dc_plan *plan, ch_kernel **kernels) {
  for (int i = 0; kernels && i < plan->cuda.nkernels; i++) ch_kernel_free(kernels[i]);
  free(kernels);
}

dc_status *ch_plan_launch(const dc_plan *plan, ch_kernel *const *kernels, int ki, const uint32_t grid[3],
                          const uint32_t block[3], uint32_t smem, void **params) {
  const dc_node *n = plan_kernel_node(plan, ki);
  if (!n || !kernels[ki]) return dc_error(DC_ERR_INTERNAL, "kernel %d was not built", ki);
  void *args[DC_MAX_INPUTS + 1];
  for (int i = 0; i <= n->ninputs; i++) memcpy(&args[i], params[i], sizeof args[i]);
  return ch_kernel_launch(kernels[ki], grid, block, smem, args);
}

/* ---- NVRTC ---------------------------------------------------------------- */
enum { NV_MAX_SOURCES = 1024 };
static dc_nvrtc *nv;
static dc_cuda_arch nv_archs[DC_CUDA_MAX_ARCHS];
static int nv_narchs, nv_compiles, nv_ncompiled;
static uint64_t nv_compiled[NV_MAX_SOURCES];

int ch_nvrtc_open(void) {
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("NVRTC not found (%s): the sources are not compiled here\n", dc_status_message(st));
    dc_status_free(st);
    nv = NULL;
    return 0;
  }
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_80,sm_90", nv_archs, &nv_narchs));
  printf("NVRTC %s: every distinct source compiled for sm_80 and sm_90, warnings fail\n", dc_nvrtc_version(nv));
  return 1;
}

void ch_nvrtc_check(const dc_cuda_kernel *k) {
  if (!nv) return;
  uint64_t h = dc_hash64(k->source, strlen(k->source));
  for (int i = 0; i < nv_ncompiled; i++)
    if (nv_compiled[i] == h) return;
  if (nv_ncompiled < NV_MAX_SOURCES) nv_compiled[nv_ncompiled++] = h;
  for (int a = 0; a < nv_narchs; a++) {
    dc_nvrtc_output out;
    memset(&out, 0, sizeof out);
    dc_status *st = dc_nvrtc_compile(nv, k->name, k->source, &nv_archs[a], &out);
    CHECK_OK(st);
    CHECK(!st && !out.log);
    if (!st && out.log) fprintf(stderr, "NVRTC warnings for %s on %s:\n%s\n", k->name, nv_archs[a].name, out.log);
    nv_compiles++;
    dc_nvrtc_output_deinit(&out);
  }
}

void ch_nvrtc_close(int *sources, int *compiles) {
  *sources = nv_ncompiled;
  *compiles = nv_compiles;
  if (nv) dc_nvrtc_unload(nv);
  nv = NULL;
}

/* ---- the fake driver's execute hook for a plan ------------------------------ */
static const dc_plan *emulated_plan;
static ch_kernel *const *emulated_built;
static char emulate_error[600];

void ch_emulate_plan(const dc_plan *plan, ch_kernel *const *kernels) {
  emulated_plan = plan, emulated_built = kernels;
  emulate_error[0] = 0;
}

int ch_emulate_launch(int ki, const unsigned grid[3], const unsigned block[3], unsigned smem, void **params) {
  dc_status *st = ch_plan_launch(emulated_plan, emulated_built, ki, grid, block, smem, params);
  if (!st) return DC_CUDA_SUCCESS;
  snprintf(emulate_error, sizeof emulate_error, "%s", dc_status_message(st));
  dc_status_free(st);
  return DC_CUDA_ERROR_LAUNCH_FAILED;
}

const char *ch_emulate_error(void) { return emulate_error; }
