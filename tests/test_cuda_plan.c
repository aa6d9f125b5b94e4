/* test_cuda_plan.c — the CUDA plan format and the CUDA compile path around
 * the kernels:
 *   - a dc_plan_cuda built by hand round-trips through the writer and the
 *     reader exactly;
 *   - the reader refuses bad KERN contents (geometry beyond CUDA's limits,
 *     empty symbols, kernel indices out of range or on leaves, unterminated
 *     PTX, non-ELF cubins, mismatched archs, wrong formats for the target)
 *     with messages naming the plan, the section and the kernel; every
 *     truncation of the section is refused, every byte flip is survived;
 *   - option checks of dc_compile, and the one message for a missing NVRTC;
 *   - with NVRTC: --cuda-arch parsing, and the kernel cache (a second
 *     compile takes every kernel from the cache with identical images, a
 *     corrupt, truncated or foreign entry is detected, recompiled and
 *     rewritten, NVRTC's warnings survive the cache, --no-kernel-cache
 *     writes nothing, an unusable cache directory is a warning only), and a
 *     failed compile's message (kernel, arch, the first lines of the log). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver/compile.h"
#include "codegen/kernel_cache.h"
#include "codegen/emit_cuda.h"
#include "kernel_harness.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "testutil.h"

/* x[4,8] -> silu -> add(., x) -> y, through the pipeline (memory planned). */
static dc_module *small_module(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 2, (int64_t[]){4, 8});
  int32_t s = kh_node(m, dc_node_make(OP_SILU, 1, &x));
  int32_t y = kh_node(m, dc_node_make(OP_ADD, 2, (int32_t[]){s, x}));
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_module_set_meta(m, "class", "Test"));
  CHECK_OK(dc_pipeline_run(m, NULL));
  return m;
}

/* ---- a hand-built dc_plan_cuda ----------------------------------------- */

static void fake_image(dc_plan_cuda_image *im, const char *arch, int ptx, const char *text) {
  im->arch = dc_strdup(arch);
  im->kind = ptx ? DC_CUDA_IMAGE_PTX : DC_CUDA_IMAGE_CUBIN;
  im->size = strlen(text) + (ptx ? 1 : 0);
  im->data = dc_malloc(im->size);
  memcpy(im->data, text, im->size);
}

static void fake_kernel(dc_plan_cuda_kernel *k, const char *name, uint32_t gx, uint32_t gy, uint32_t bx, uint32_t by,
                        uint32_t smem) {
  k->name = dc_strdup(name);
  k->source = dc_asprintf("#include \"dc_cuda.cuh\"\nDC_KERNEL void %s(float *out) {}\n", name);
  k->grid[0] = gx, k->grid[1] = gy, k->grid[2] = 1;
  k->block[0] = bx, k->block[1] = by, k->block[2] = 1;
  k->smem_bytes = smem;
  k->images = dc_calloc(2, sizeof *k->images);
  k->nimages = 2;
  fake_image(&k->images[0], "sm_80", 0,
             "\x7f"
             "ELF fake cubin of ");
  fake_image(&k->images[1], "compute_90", 1, ".version 9.0\n.target sm_90\n");
}

/* Two kernels used alternately by the non-leaf nodes of m. */
static void fake_cuda(const dc_module *m, dc_plan_cuda *c) {
  memset(c, 0, sizeof *c);
  c->compute = dc_strdup("bf16");
  c->nvrtc_version = dc_strdup("13.0");
  c->kernels = dc_calloc(2, sizeof *c->kernels);
  c->nkernels = 2;
  fake_kernel(&c->kernels[0], "k0_silu", 4, 1, 128, 1, 0);
  fake_kernel(&c->kernels[1], "k1_add", 2, 3, 32, 8, 49152);
  c->kernel_of_node = dc_calloc((size_t)m->nnodes, sizeof *c->kernel_of_node);
  c->nnodes = m->nnodes;
  int next = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    c->kernel_of_node[i] = dc_op_get(m->nodes[i].op)->flags & OPF_LEAF ? -1 : next++ % 2;
}

static dc_status *write_cuda_plan(const dc_module *m, const dc_plan_cuda *c, const char *path) {
  char *text = tu_ir_text(m);
  dc_plan plan = {.target = DC_TARGET_CUDA,
                  .options_json = "{\"target\":\"cuda\"}",
                  .ir_text = text,
                  .module = (dc_module *)m,
                  .cuda = *c};
  dc_status *st = dc_plan_write(path, &plan);
  dc_free(text);
  return st;
}

static int same_kernel(const dc_plan_cuda_kernel *a, const dc_plan_cuda_kernel *b) {
  int same = !strcmp(a->name, b->name) && !strcmp(a->source, b->source) && a->smem_bytes == b->smem_bytes &&
             !memcmp(a->grid, b->grid, sizeof a->grid) && !memcmp(a->block, b->block, sizeof a->block) &&
             a->nimages == b->nimages;
  for (int j = 0; same && j < a->nimages; j++)
    same = !strcmp(a->images[j].arch, b->images[j].arch) && a->images[j].kind == b->images[j].kind &&
           a->images[j].size == b->images[j].size && !memcmp(a->images[j].data, b->images[j].data, a->images[j].size);
  return same;
}

static int same_cuda(const dc_plan_cuda *a, const dc_plan_cuda *b) {
  int same = !strcmp(a->compute, b->compute) && !strcmp(a->nvrtc_version, b->nvrtc_version) &&
             a->nkernels == b->nkernels && a->nnodes == b->nnodes &&
             !memcmp(a->kernel_of_node, b->kernel_of_node, (size_t)a->nnodes * sizeof *a->kernel_of_node);
  for (int k = 0; same && k < a->nkernels; k++) same = same_kernel(&a->kernels[k], &b->kernels[k]);
  return same;
}

static void test_roundtrip(const dc_module *m) {
  dc_plan_cuda c;
  fake_cuda(m, &c);
  char *path = tu_path("cuda.dplan");
  CHECK_OK(write_cuda_plan(m, &c, path));
  dc_plan back;
  CHECK_OK(dc_plan_read(path, &back));
  CHECK(back.target == DC_TARGET_CUDA);
  CHECK(back.module && back.cuda.kernels && same_cuda(&c, &back.cuda));
  CHECK(back.kernels.nobjects == 0);
  printf("round trip: %d kernels, %d nodes, cubin + PTX images, geometry and sources identical\n", back.cuda.nkernels,
         back.cuda.nnodes);
  dc_plan_deinit(&back);
  dc_plan_cuda_deinit(&c);
  free(path);
}

/* ---- bad KERN contents, written with valid checksums -------------------- */

typedef struct {
  const char *what, *needle;
} bad_case;

static const bad_case bad_cases[] = {
    {"block of 2048 threads", "kernel 1 (k1_add): block 32x32x2 (CUDA allows 1 to 1024 threads per block)"},
    {"block dim 0", "kernel 0 (k0_silu): block 0x1x1"},
    {"grid y 65536", "kernel 1 (k1_add): grid 2x65536x1 (CUDA allows x 1..2147483647, y and z 1..65535)"},
    {"grid x 0", "kernel 0 (k0_silu): grid 0x1x1"},
    {"smem 228 KiB", "kernel 1 (k1_add): 233472 bytes of dynamic shared memory (at most 232448)"},
    {"empty symbol", "kernel 0 has an empty symbol"},
    {"empty source", "kernel 1 (k1_add) has no source"},
    {"no images", "kernel 0 (k0_silu): 0 images (expected 1..16"},
    {"PTX without NUL", "kernel 1 (k1_add): the compute_90 PTX is not NUL-terminated"},
    {"cubin not ELF", "kernel 0 (k0_silu): the sm_80 cubin is not an ELF image"},
    {"arch of the wrong kind", "kernel 0 (k0_silu): image \"compute_80\" of kind 0"},
    {"bad arch name", "kernel 1 (k1_add): image \"sm_9x\" of kind 0"},
    {"other archs", "kernel 1 (k1_add) has images for other architectures than kernel 0 (k0_silu)"},
    {"duplicate symbol", "kernels 0 and 1 are both named k0_silu"},
    {"index out of range", "has kernel 2, but the plan has kernels 0..1"},
    {"leaf with a kernel", "node %0 (input) is a leaf or a copy but has kernel 0 (expected -1)"},
    {"unknown precision", "compute precision \"f64\" (expected f32, bf16 or f16)"},
    {"node count", "kernel table for 2 nodes, but the schedule has"},
};
enum { NBAD = sizeof bad_cases / sizeof bad_cases[0] };

static int last_nonleaf(const dc_module *m) {
  int k = -1;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (!(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF)) k = i;
  return k;
}

static void replace(char **s, const char *v) {
  dc_free(*s);
  *s = dc_strdup(v);
}

static void mutate(const dc_module *m, int which, dc_plan_cuda *c) {
  dc_plan_cuda_kernel *k0 = &c->kernels[0], *k1 = &c->kernels[1];
  switch (which) {
    case 0:
      k1->block[1] = 32, k1->block[2] = 2;
      break;
    case 1:
      k0->block[0] = 0;
      break;
    case 2:
      k1->grid[1] = 65536;
      break;
    case 3:
      k0->grid[0] = 0;
      break;
    case 4:
      k1->smem_bytes = 228 * 1024;
      break;
    case 5:
      k0->name[0] = 0;
      break;
    case 6:
      k1->source[0] = 0;
      break;
    case 7:
      k0->nimages = 0;
      break;
    case 8:
      k1->images[1].size--;
      break; /* drops the NUL */
    case 9:
      k0->images[0].data[0] = 'X';
      break;
    case 10:
      replace(&k0->images[0].arch, "compute_80");
      break;
    case 11:
      replace(&k1->images[0].arch, "sm_9x");
      break;
    case 12:
      replace(&k1->images[0].arch, "sm_86");
      break;
    case 13:
      replace(&k1->name, "k0_silu");
      break;
    case 14:
      c->kernel_of_node[last_nonleaf(m)] = 2;
      break;
    case 15:
      c->kernel_of_node[0] = 0;
      break;
    case 16:
      replace(&c->compute, "f64");
      break;
    case 17:
      c->nnodes = 2;
      break;
  }
}

static void test_bad_contents(const dc_module *m) {
  char *path = tu_path("bad.dplan");
  for (int i = 0; i < NBAD; i++) {
    dc_plan_cuda c;
    fake_cuda(m, &c);
    int saved_nimages = c.kernels[0].nimages, saved_nnodes = c.nnodes;
    mutate(m, i, &c);
    CHECK_OK(write_cuda_plan(m, &c, path));
    dc_plan back;
    dc_status *st = dc_plan_read(path, &back);
    const char *msg = st ? dc_status_message(st) : "(read without error)";
    int ok = st && strstr(msg, "bad.dplan: section KERN: at byte ") && strstr(msg, bad_cases[i].needle);
    CHECK(ok);
    printf("  %-24s %s: %s\n", bad_cases[i].what, ok ? "refused" : "WRONG", msg);
    if (st)
      dc_status_free(st);
    else
      dc_plan_deinit(&back);
    c.kernels[0].nimages = saved_nimages;
    c.nnodes = saved_nnodes;
    dc_plan_cuda_deinit(&c);
  }
  printf("bad KERN contents: %d cases refused, each naming the plan, the section and the kernel\n", NBAD);
  free(path);
}

/* ---- byte surgery with valid checksums --------------------------------- */

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static void put(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes every section checksum and the header checksum. */
static void rehash(unsigned char *d) {
  uint32_t n = (uint32_t)le(d + 16, 4);
  for (uint32_t i = 0; i < n; i++) {
    unsigned char *e = d + 32 + 32 * i;
    put(e + 24, dc_hash64(d + le(e + 8, 8), le(e + 16, 8)), 8);
  }
  put(d + 32 + 32 * n, dc_hash64(d, 32 + 32 * n), 8);
}

static unsigned char *kern_entry(unsigned char *d) {
  for (uint32_t i = 0; i < le(d + 16, 4); i++)
    if (!memcmp(d + 32 + 32 * i, "KERN", 4)) return d + 32 + 32 * i;
  return NULL;
}

static dc_status *read_bytes_as_plan(const unsigned char *d, size_t n, const char *path) {
  tu_write_file(path, d, n);
  dc_plan back;
  dc_status *st = dc_plan_read(path, &back);
  if (!st) dc_plan_deinit(&back);
  return st;
}

/* Every shortened KERN is refused; every flipped byte is refused or read. */
static void test_truncation_and_flips(const dc_module *m) {
  dc_plan_cuda c;
  fake_cuda(m, &c);
  char *path = tu_path("good.dplan"), *bad = tu_path("cut.dplan");
  CHECK_OK(write_cuda_plan(m, &c, path));
  dc_plan_cuda_deinit(&c);
  char *text;
  size_t n;
  CHECK_OK(dc_file_read_all(path, &text, &n));
  unsigned char *d = (unsigned char *)text, *e = kern_entry(d);
  CHECK(e != NULL);
  uint64_t off = le(e + 8, 8), size = le(e + 16, 8);
  int refused = 0, named = 0;
  for (uint64_t cut = 0; cut < size; cut++) {
    put(e + 16, cut, 8);
    rehash(d);
    dc_status *st = read_bytes_as_plan(d, n, bad);
    refused += st != NULL;
    named += st && strstr(dc_status_message(st), "cut.dplan: section KERN: at byte") != NULL;
    dc_status_free(st);
  }
  CHECK(refused == (int)size && named == (int)size);
  printf("truncation: all %d shortened KERN sections refused, each message naming the plan and section KERN\n",
         refused);
  put(e + 16, size, 8);
  int flips_refused = 0;
  for (uint64_t i = 0; i < size; i++) {
    d[off + i] ^= 0xff;
    rehash(d);
    dc_status *st = read_bytes_as_plan(d, n, bad);
    flips_refused += st != NULL;
    dc_status_free(st);
    d[off + i] ^= 0xff;
  }
  CHECK(flips_refused > 0);
  printf("byte flips: %d of %llu flipped KERN bytes refused, the rest read (sources, padding), none crashed\n",
         flips_refused, (unsigned long long)size);

  /* The target in the header must agree with the KERN format. */
  rehash(d);
  put(d + 12, DC_TARGET_CPU, 4);
  rehash(d);
  CHECK_ERR(read_bytes_as_plan(d, n, bad),
            "cut.dplan: section KERN: at byte 4: CUDA kernels (format 2) in a plan for the CPU");
  put(d + 12, 7, 4);
  rehash(d);
  CHECK_ERR(read_bytes_as_plan(d, n, bad), "cut.dplan: unknown target 7 (this diffrun knows 0 = cpu and 1 = cuda)");
  dc_free(text);

  /* A CPU plan relabelled CUDA. */
  char *ir = tu_ir_text(m);
  dc_plan cpu = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = ir, .module = (dc_module *)m};
  CHECK_OK(dc_plan_write(path, &cpu));
  dc_free(ir);
  CHECK_OK(dc_file_read_all(path, &text, &n));
  d = (unsigned char *)text;
  put(d + 12, DC_TARGET_CUDA, 4);
  rehash(d);
  CHECK_ERR(read_bytes_as_plan(d, n, bad),
            "section KERN: at byte 4: a CUDA plan needs CUDA kernels (format 2), found format 0");
  dc_free(text);
  printf("target: a CPU KERN in a CUDA plan, a CUDA KERN in a CPU plan and an unknown target are refused\n");
  free(path);
  free(bad);
}

/* ---- options and NVRTC discovery ----------------------------------------- */

static void test_options(void) {
  char *model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model"), *out = tu_path("never.dplan");
  dc_compile_options o = {.model = model, .compute = "bf16"};
  CHECK_ERR(dc_compile(&o, out, NULL), "--compute-dtype bf16: the cpu target computes in f32 only for now");
  o = (dc_compile_options){.model = model, .target = "tpu"};
  CHECK_ERR(dc_compile(&o, out, NULL), "--target tpu: expected cpu or cuda");
  o = (dc_compile_options){.model = model, .target = "cuda", .compute = "fp8"};
  CHECK_ERR(dc_compile(&o, out, NULL), "--compute-dtype fp8: expected f32, bf16 or f16");
  o = (dc_compile_options){.model = model, .cuda_arch = "sm_90"};
  CHECK_ERR(dc_compile(&o, out, NULL), "--cuda-arch sm_90: only for --target cuda");
  o = (dc_compile_options){.model = model, .cuda_sm_count = 108};
  CHECK_ERR(dc_compile(&o, out, NULL), "--cuda-sm-count 108: only for --target cuda");
  o = (dc_compile_options){.model = model, .kernel_cache = "/tmp", .no_kernel_cache = 1};
  CHECK_ERR(dc_compile(&o, out, NULL), "--kernel-cache /tmp and --no-kernel-cache contradict each other");
  o = (dc_compile_options){.model = model, .target = "cuda", .cpu = "generic"};
  CHECK_ERR(dc_compile(&o, out, NULL), "--cpu generic: only for --target cpu");
  CHECK(!dc_file_exists(out));

  /* NVRTC missing: one message saying what was searched. */
  const char *saved = getenv("DIFFC_NVRTC");
  char *keep = saved ? strdup(saved) : NULL;
  setenv("DIFFC_NVRTC", "/nonexistent/libnvrtc.so.13", 1);
  o = (dc_compile_options){.model = model, .target = "cuda"};
  CHECK_ERR(dc_compile(&o, out, NULL),
            "--target cuda: NVRTC, the CUDA toolkit's runtime compiler, was not found: tried "
            "/nonexistent/libnvrtc.so.13 ($DIFFC_NVRTC) (last error: /nonexistent/libnvrtc.so.13: cannot open shared "
            "object file");
  if (keep)
    setenv("DIFFC_NVRTC", keep, 1);
  else
    unsetenv("DIFFC_NVRTC");
  free(keep);
  printf("options: target, precision, arch and cache options checked before any work; no NVRTC is one message\n");
  free(model);
  free(out);
}

static void test_default_cache_dir(void) {
  const char *names[] = {"DIFFC_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  char *saved[3];
  for (int i = 0; i < 3; i++) saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
  setenv("DIFFC_CACHE_DIR", "/a/b", 1);
  setenv("XDG_CACHE_HOME", "/x", 1);
  setenv("HOME", "/h", 1);
  char *d = dc_kcache_default_dir();
  CHECK(d && !strcmp(d, "/a/b"));
  dc_free(d);
  unsetenv("DIFFC_CACHE_DIR");
  d = dc_kcache_default_dir();
  CHECK(d && !strcmp(d, "/x/diffc"));
  dc_free(d);
  unsetenv("XDG_CACHE_HOME");
  d = dc_kcache_default_dir();
  CHECK(d && !strcmp(d, "/h/.cache/diffc"));
  dc_free(d);
  for (int i = 0; i < 3; i++) {
    if (saved[i])
      setenv(names[i], saved[i], 1);
    else
      unsetenv(names[i]);
    free(saved[i]);
  }
  printf("cache dir: $DIFFC_CACHE_DIR, else $XDG_CACHE_HOME/diffc, else ~/.cache/diffc\n");
}

/* ---- with NVRTC ------------------------------------------------------------ */

static void test_archs(const dc_nvrtc *nv) {
  dc_cuda_arch a[DC_CUDA_MAX_ARCHS];
  int n;
  char buf[128];
  CHECK_OK(dc_nvrtc_parse_archs(nv, NULL, a, &n));
  CHECK(n == 3 && !strcmp(dc_cuda_archs_str(a, n, buf, sizeof buf), "sm_80,sm_90,compute_90") && a[2].ptx && !a[0].ptx);
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_90a,compute_80", a, &n));
  CHECK(n == 2 && a[0].number == 90 && !a[0].ptx && a[1].number == 80 && a[1].ptx);
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "sm_80,sm_91", a, &n), "--cuda-arch sm_80,sm_91: NVRTC");
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "sm_80,sm_91", a, &n), "does not support sm_91; it supports 75 80");
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "gfx90a", a, &n), "\"gfx90a\" is not an architecture; expected sm_NN");
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "sm_90,", a, &n), "\"\" is not an architecture");
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "sm_80a", a, &n), "\"sm_80a\" is not an architecture");
  CHECK_ERR(dc_nvrtc_parse_archs(nv, "sm_90,compute_90,sm_90", a, &n), "sm_90 is listed twice");
  printf("archs: default sm_80,sm_90,compute_90; unknown, malformed and repeated ones refused (NVRTC %s supports %s)\n",
         dc_nvrtc_version(nv), dc_nvrtc_supported_archs(nv));
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "cuda-", 5);
  if (d) closedir(d);
  return n;
}

static dc_status *emit(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_arch *a, int na, const char *dir,
                       int no_cache, dc_plan_cuda *c, dc_cuda_emit_report *r) {
  dc_cuda_emit_options o = {.compute = DC_CUDA_COMPUTE_F32,
                            .archs = a,
                            .narchs = na,
                            .cache_dir = dir,
                            .no_cache = no_cache};
  return dc_emit_cuda_kernels(m, nv, &o, c, r);
}

/* The cache entry of kernel 0's first image. */
static char *entry_of(const dc_nvrtc *nv, const dc_plan_cuda *c, const dc_cuda_arch *a, const char *dir) {
  dc_kcache kc;
  CHECK_OK(dc_kcache_open(dir, 0, "cuda", &kc));
  uint64_t key = 0;
  CHECK(dc_nvrtc_cache_key(nv, c->kernels[0].source, &a[0], &key));
  char *p = dc_kcache_entry_path(&kc, key);
  dc_kcache_close(&kc);
  return p;
}

static void damage(const char *path, int how, const char *other) {
  char *d;
  size_t n;
  CHECK_OK(dc_file_read_all(path, &d, &n));
  if (how == 0) d[n - 3] ^= 0x10; /* a payload byte: the payload hash fails */
  if (how == 1) n = 20;           /* truncated */
  if (how == 2) {                 /* another entry's bytes under this name */
    dc_free(d);
    CHECK_OK(dc_file_read_all(other, &d, &n));
  }
  tu_write_file(path, d, n);
  dc_free(d);
}

static void test_cache(const dc_module *m, const dc_nvrtc *nv) {
  dc_cuda_arch a[2];
  int na;
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_80,compute_90", a, &na));
  char *dir = tu_path("kcache");
  dc_plan_cuda first, again;
  dc_cuda_emit_report r;
  CHECK_OK(emit(m, nv, a, na, dir, 0, &first, &r));
  int ncompiles = r.ncompiles;
  CHECK(r.nkernels == 2 && ncompiles == 4 && r.ncached == 0 && r.nwarnings == 0 && !r.cache_warning);
  CHECK(count_entries(dir) == 4);
  printf("cache: first compile: %d kernels x %d archs compiled in %.0f ms, %d entries written\n", r.nkernels, na,
         r.seconds * 1e3, count_entries(dir));
  dc_cuda_emit_report_deinit(&r);
  CHECK_OK(emit(m, nv, a, na, dir, 0, &again, &r));
  CHECK(r.ncached == ncompiles && same_cuda(&first, &again));
  printf("cache: second compile: %d of %d from the cache in %.0f ms, images identical\n", r.ncached, ncompiles,
         r.seconds * 1e3);
  dc_cuda_emit_report_deinit(&r);
  dc_plan_cuda_deinit(&again);

  char *victim = entry_of(nv, &first, a, dir);
  static const char *const hows[] = {"a flipped payload byte", "a truncated entry", "another key's entry"};
  for (int how = 0; how < 3; how++) {
    char *donor = NULL;
    if (how == 2) { /* any other entry */
      DIR *dd = opendir(dir);
      for (struct dirent *e; dd && (e = readdir(dd));)
        if (!strncmp(e->d_name, "cuda-", 5) && !strstr(victim, e->d_name) && !donor)
          donor = dc_path_join(dir, e->d_name);
      if (dd) closedir(dd);
    }
    damage(victim, how, donor);
    dc_free(donor);
    CHECK_OK(emit(m, nv, a, na, dir, 0, &again, &r));
    CHECK(r.nrejected == 1 && r.ncached == ncompiles - 1 && same_cuda(&first, &again));
    printf("cache: %s was detected, recompiled (%d from the cache) and the result identical\n", hows[how], r.ncached);
    dc_cuda_emit_report_deinit(&r);
    dc_plan_cuda_deinit(&again);
    CHECK_OK(emit(m, nv, a, na, dir, 0, &again, &r));
    CHECK(r.nrejected == 0 && r.ncached == ncompiles);
    dc_cuda_emit_report_deinit(&r);
    dc_plan_cuda_deinit(&again);
  }
  printf("cache: each damaged entry was rewritten (the next compile takes all %d from the cache)\n", ncompiles);
  dc_free(victim);

  /* --no-kernel-cache reads and writes nothing. */
  char *fresh = tu_path("kcache-unused");
  CHECK_OK(emit(m, nv, a, na, fresh, 1, &again, &r));
  CHECK(r.ncached == 0 && !r.cache_dir && !dc_dir_exists(fresh) && same_cuda(&first, &again));
  dc_cuda_emit_report_deinit(&r);
  dc_plan_cuda_deinit(&again);
  printf("cache: --no-kernel-cache compiled everything and created nothing\n");
  free(fresh);

  /* A directory that cannot be created: a warning, and the compile works. */
  char *file = tu_path("plainfile"), *under = tu_path("plainfile/cache");
  tu_write_file(file, "x", 1);
  CHECK_OK(emit(m, nv, a, na, under, 0, &again, &r));
  CHECK(r.ncached == 0 && r.cache_warning &&
        strstr(r.cache_warning, "plainfile/cache cannot be created (Not a directory)"));
  CHECK(same_cuda(&first, &again));
  printf("cache: unusable directory only warned: %s\n", r.cache_warning ? r.cache_warning : "(none)");
  dc_cuda_emit_report_deinit(&r);
  dc_plan_cuda_deinit(&again);
  free(file);
  free(under);
  dc_plan_cuda_deinit(&first);
  free(dir);
}

/* A kernel with an NVRTC warning: the warning comes back from the cache, and
 * an entry that cannot be written turns writing off with a warning. */
static void test_cache_entry(const dc_nvrtc *nv) {
  const char *src =
      "#include \"dc_cuda.cuh\"\nDC_KERNEL void kw(float *out) { int unused; out[threadIdx.x] = 1.0f; }\n";
  dc_cuda_arch a[1];
  int na;
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_90", a, &na));
  dc_nvrtc_output o, back;
  CHECK_OK(dc_nvrtc_compile(nv, "kw", src, &a[0], &o));
  CHECK(o.log && strstr(o.log, "warning #177-D: variable \"unused\" was declared but never referenced"));
  char *dir = tu_path("kcache-entry");
  dc_kcache kc;
  CHECK_OK(dc_kcache_open(dir, 0, "cuda", &kc));
  uint64_t key = 0;
  CHECK(dc_nvrtc_cache_key(nv, src, &a[0], &key));
  CHECK(!dc_kcache_get(&kc, key, &back) && kc.misses == 1);
  dc_kcache_put(&kc, key, &o);
  CHECK(dc_kcache_get(&kc, key, &back) && kc.hits == 1);
  CHECK(back.log && o.log && !strcmp(back.log, o.log) && back.image.len == o.image.len &&
        !memcmp(back.image.data, o.image.data, o.image.len));
  dc_nvrtc_output_deinit(&back);
  printf("cache entry: NVRTC's warning is stored with the cubin and comes back from the cache\n");

  /* A directory where the entry should be: the write fails, once. */
  uint64_t key2 = key ^ 1;
  char *blocked = dc_kcache_entry_path(&kc, key2), *inside = dc_path_join(blocked, "x");
  CHECK(mkdir(blocked, 0755) == 0);
  tu_write_file(inside, "x", 1);
  dc_kcache_put(&kc, key2, &o);
  CHECK(kc.read_only && kc.warning && strstr(kc.warning, "cannot be written"));
  printf("cache entry: a failed write is a warning: %s\n", kc.warning ? kc.warning : "(none)");
  dc_kcache_put(&kc, key ^ 2, &o);
  CHECK(kc.written == 1);                /* writing stays off */
  CHECK(dc_kcache_get(&kc, key, &back)); /* reading goes on */
  dc_nvrtc_output_deinit(&back);
  dc_free(blocked);
  dc_free(inside);
  dc_kcache_close(&kc);
  dc_nvrtc_output_deinit(&o);
  free(dir);
}

/* A failed compile names the kernel and the arch and quotes the log's first
 * lines; a long log is cut. */
static void test_compile_errors(const dc_nvrtc *nv) {
  dc_cuda_arch a[1];
  int na;
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_90", a, &na));
  dc_nvrtc_output o;
  CHECK_ERR(
      dc_nvrtc_compile(nv, "kbad", "#include \"dc_cuda.cuh\"\nDC_KERNEL void kbad(float *out) { out[0] = nosuch; }\n",
                       &a[0], &o),
      "NVRTC could not compile kernel kbad for sm_90 (NVRTC_ERROR_COMPILATION):\nkbad.cu(2): error: identifier "
      "\"nosuch\" is undefined");
  dc_buf src;
  dc_buf_init(&src);
  dc_buf_printf(&src, "#include \"dc_cuda.cuh\"\nDC_KERNEL void klong(float *out) {\n");
  for (int i = 0; i < 40; i++) dc_buf_printf(&src, "  out[%d] = missing%d;\n", i, i);
  dc_buf_printf(&src, "}\n");
  dc_buf_u8(&src, 0);
  dc_status *st = dc_nvrtc_compile(nv, "klong", (const char *)src.data, &a[0], &o);
  const char *msg = st ? dc_status_message(st) : "";
  int lines = 0;
  for (const char *p = msg; *p; p++) lines += *p == '\n';
  CHECK(st && strstr(msg, "missing0") && !strstr(msg, "missing39") && strstr(msg, " more lines)") && lines <= 16);
  printf("compile errors: the kernel, arch and log are quoted; a %d-error log is cut to %d lines\n", 40, lines);
  dc_status_free(st);
  dc_buf_deinit(&src);
}

/* Real images through the writer and reader: the reader's ELF and NUL checks
 * hold for what NVRTC makes. */
static void test_real_plan(const dc_module *m, const dc_nvrtc *nv) {
  dc_cuda_arch a[DC_CUDA_MAX_ARCHS];
  int na;
  CHECK_OK(dc_nvrtc_parse_archs(nv, NULL, a, &na));
  dc_plan_cuda c;
  dc_cuda_emit_report r;
  char *dir = tu_path("kcache"), *path = tu_path("real.dplan");
  CHECK_OK(emit(m, nv, a, na, dir, 0, &c, &r));
  dc_cuda_emit_report_deinit(&r);
  CHECK_OK(write_cuda_plan(m, &c, path));
  dc_plan back;
  CHECK_OK(dc_plan_read(path, &back));
  CHECK(back.module && same_cuda(&c, &back.cuda));
  CHECK(c.nkernels == 2 && c.kernels[0].nimages == 3 && !strcmp(c.kernels[0].name, "k0_silu") &&
        !strcmp(c.kernels[1].name, "k1_add") && !strcmp(c.compute, "f32"));
  printf("real plan: %d kernels x %d images (%s) round-trip; %s is %llu bytes of cubin\n", c.nkernels, na,
         "sm_80, sm_90, compute_90", c.kernels[0].name, (unsigned long long)c.kernels[0].images[0].size);
  if (back.module) dc_plan_deinit(&back);
  dc_plan_cuda_deinit(&c);
  free(dir);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_module *m = small_module();
  test_roundtrip(m);
  test_bad_contents(m);
  test_truncation_and_flips(m);
  test_options();
  test_default_cache_dir();
  dc_nvrtc *nv = NULL;
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("NVRTC not found, the compile and cache checks are skipped: %s\n", dc_status_message(st));
    dc_status_free(st);
  } else {
    test_archs(nv);
    test_cache(m, nv);
    test_cache_entry(nv);
    test_compile_errors(nv);
    test_real_plan(m, nv);
    dc_nvrtc_unload(nv);
  }
  dc_module_destroy(m);
  return tu_finish();
}
