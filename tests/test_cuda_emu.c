/* test_cuda_emu.c — the CUDA CPU emulator itself (tests/cuda_emu/), through
 * the harness's ch_kernel_build / ch_kernel_launch: thread and block ids,
 * barrier semantics (a shared-memory reduction is wrong without its barriers
 * and right with them, in either thread order), shared memory (static and
 * dynamic) filled with NaN before each block, warp shuffles, the deadlock
 * and misuse reports, WMMA m16n16k16 against a plain matmul for bf16 and
 * half in every layout, CUDA's bf16/half rounding against
 * runtime/kernels.h's, and that touching a fragment's elements does not
 * compile. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

static const uint32_t ONE[3] = {1, 1, 1};

/* Builds and runs a kernel NAME(float *out, const float *in). */
static dc_status *run_f32(const char *src, const char *name, const uint32_t grid[3], const uint32_t block[3],
                          uint32_t smem, float *out, const float *in) {
  static const char *const types[] = {"float", "const float"};
  ch_kernel *k = NULL;
  DC_TRY(ch_kernel_build(src, name, 2, types, &k));
  void *params[2] = {out, (void *)in};
  dc_status *st = ch_kernel_launch(k, grid, block, smem, params);
  ch_kernel_free(k);
  return st;
}

/* ---- ids ---------------------------------------------------------------------- */
static const char ids_src[] =
    "#include \"dc_cuda.cuh\"\n"
    "DC_KERNEL void ids(float *out, const float *in) {\n"
    "  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
    "  unsigned i = b * blockDim.x * blockDim.y * blockDim.z + t;\n"
    "  out[i] += (float)(i + 1) + in[0];\n" /* += : each element exactly once */
    "}\n";

static void check_ids(void) {
  const uint32_t grid[3] = {3, 2, 2}, block[3] = {8, 4, 2};
  int n = 3 * 2 * 2 * 8 * 4 * 2, bad = 0;
  float *out = calloc((size_t)n, sizeof *out), in[1] = {0.0f};
  CHECK_OK(run_f32(ids_src, "ids", grid, block, 0, out, in));
  for (int i = 0; i < n; i++) bad += out[i] != (float)(i + 1);
  CHECK(bad == 0);
  printf("ids: grid (3,2,2) x block (8,4,2): %d of %d threads saw their own ids once\n", n - bad, n);
  free(out);
}

/* ---- barriers --------------------------------------------------------------------- */
/* A tree reduction over 256 threads in shared memory; BAR is the barrier. */
static char *reduce_src(const char *bar) {
  return dc_asprintf("#include \"dc_cuda.cuh\"\n"
                     "DC_KERNEL void reduce(float *out, const float *in) {\n"
                     "  __shared__ float s[256];\n"
                     "  s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];\n"
                     "  %s\n"
                     "  for (int o = 128; o > 0; o >>= 1) {\n"
                     "    if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];\n"
                     "    %s\n"
                     "  }\n"
                     "  if (threadIdx.x == 0) out[blockIdx.x] = s[0];\n"
                     "}\n",
                     bar, bar);
}

static void check_barrier(void) {
  const uint32_t grid[3] = {2, 1, 1}, block[3] = {256, 1, 1};
  float in[512], out[2], want[2] = {0, 0};
  for (int i = 0; i < 512; i++) {
    in[i] = (float)(i % 13) - 4.0f;
    want[i / 256] += in[i];
  }
  for (int with = 0; with <= 1; with++) {
    char *src = reduce_src(with ? "__syncthreads();" : "");
    CHECK_OK(run_f32(src, "reduce", grid, block, 0, out, in));
    int right = out[0] == want[0] && out[1] == want[1];
    CHECK(right == with);
    printf("reduction %s barriers: block sums %g %g (want %g %g): %s\n", with ? "with" : "without", out[0], out[1],
           want[0], want[1], right ? "right" : "wrong");
    dc_free(src);
  }
}

/* Thread i reads what thread i-1 wrote: right in ascending order without a
 * barrier, so only the odd (descending) blocks show the missing barrier. */
static void check_barrier_order(void) {
  static const char src[] =
      "#include \"dc_cuda.cuh\"\n"
      "DC_KERNEL void shift(float *out, const float *in) {\n"
      "  __shared__ float s[64];\n"
      "  s[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];\n"
      "  out[blockIdx.x * 64 + threadIdx.x] = threadIdx.x ? s[threadIdx.x - 1] : 0.0f;\n"
      "}\n";
  const uint32_t grid[3] = {2, 1, 1}, block[3] = {64, 1, 1};
  float in[128], out[128];
  int wrong[2] = {0, 0};
  for (int i = 0; i < 128; i++) in[i] = (float)i + 1;
  CHECK_OK(run_f32(src, "shift", grid, block, 0, out, in));
  for (int i = 0; i < 128; i++) wrong[i / 64] += out[i] != (i % 64 ? in[i - 1] : 0.0f);
  CHECK(wrong[0] == 0 && wrong[1] > 0);
  printf("missing barrier, neighbour read: block 0 (ascending) %d wrong, block 1 (descending) %d wrong\n", wrong[0],
         wrong[1]);
}

/* Shared memory, dynamic and static, reads as NaN before it is written in
 * each block (block 1 does not see block 0's values). */
static void check_smem_poison(void) {
  static const char src[] =
      "#include \"dc_cuda.cuh\"\n"
      "DC_KERNEL void dyn(float *out, const float *in) {\n"
      "  DC_DYNAMIC_SMEM(raw);\n"
      "  float *s = (float *)raw;\n"
      "  __shared__ float st[64];\n"
      "  unsigned i = blockIdx.x * 64 + threadIdx.x;\n"
      "  out[i] = s[threadIdx.x];\n" /* before any write: NaN */
      "  out[128 + i] = st[threadIdx.x];\n"
      "  __syncthreads();\n"
      "  s[threadIdx.x] = in[threadIdx.x];\n"
      "  st[threadIdx.x] = 2.0f * in[threadIdx.x];\n"
      "  __syncthreads();\n"
      "  out[256 + i] = s[63 - threadIdx.x] + (float)((unsigned long long)raw % 128);\n"
      "  out[384 + i] = st[63 - threadIdx.x];\n"
      "}\n";
  const uint32_t grid[3] = {2, 1, 1}, block[3] = {64, 1, 1};
  float in[64], out[512];
  int nan = 0, right = 0;
  for (int i = 0; i < 64; i++) in[i] = (float)i;
  CHECK_OK(run_f32(src, "dyn", grid, block, 64 * 4, out, in));
  for (int i = 0; i < 256; i++) nan += isnan(out[i]) != 0;
  for (int i = 256; i < 384; i++) right += out[i] == in[63 - i % 64];
  for (int i = 384; i < 512; i++) right += out[i] == 2.0f * in[63 - i % 64];
  CHECK(nan == 256 && right == 256);
  printf("shared memory (dynamic and static), 2 blocks: %d of 256 reads before writing were NaN, %d of 256 after "
         "were right (dynamic 128-aligned)\n",
         nan, right);
}

/* ---- shuffles --------------------------------------------------------------- */
static void check_shuffles(void) {
  static const char src[] =
      "#include \"dc_cuda.cuh\"\n"
      "DC_KERNEL void shfl(float *out, const float *in) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  out[i] = dc_warp_sum(in[i]);\n"
      "  out[256 + i] = (float)__shfl_xor_sync(0xffffffffu, (int)i, 5);\n"
      "  out[512 + i] = dc_warp_max(in[i]);\n"
      "  __shared__ float red[32];\n"
      "  out[768 + i] = dc_block_sum(in[i], red);\n"
      "}\n";
  const uint32_t grid[3] = {2, 1, 1}, block[3] = {128, 1, 1};
  float in[256], out[1024];
  int bad = 0;
  for (int i = 0; i < 256; i++) in[i] = (float)((i * 7) % 11);
  CHECK_OK(run_f32(src, "shfl", grid, block, 0, out, in));
  for (int i = 0; i < 256; i++) {
    float sum = 0, mx = -INFINITY, bsum = 0;
    for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) sum += in[j], mx = fmaxf(mx, in[j]);
    for (int j = i / 128 * 128; j < i / 128 * 128 + 128; j++) bsum += in[j];
    bad += out[i] != sum || out[256 + i] != (float)(i ^ 5) || out[512 + i] != mx || out[768 + i] != bsum;
  }
  CHECK(bad == 0);
  printf("shuffles: warp sum, int xor 5, warp max, block sum over 2x128 threads: %d wrong\n", bad);
}

/* ---- deadlocks and misuse ---------------------------------------------------------- */
static void expect_launch_error(const char *what, const char *body, uint32_t threads, const char *needle) {
  char *src = dc_asprintf("#include \"dc_cuda.cuh\"\n"
                          "DC_KERNEL void bad(float *out, const float *in) {\n"
                          "  int lane = threadIdx.x & 31; float v = in[threadIdx.x];\n"
                          "  %s\n"
                          "  out[threadIdx.x] = v + (float)lane;\n"
                          "}\n",
                          body);
  const uint32_t block[3] = {threads, 1, 1};
  float in[64] = {0}, out[64];
  printf("%s:\n", what);
  CHECK_ERR(run_f32(src, "bad", ONE, block, 0, out, in), needle);
  dc_free(src);
}

static void check_misuse(void) {
  expect_launch_error("barrier reached by half the block", "if (threadIdx.x < 16) __syncthreads();", 64,
                      "deadlock: 16 of 64 threads wait at __syncthreads");
  expect_launch_error("two barriers in divergent code",
                      "if (threadIdx.x < 32) { __syncthreads(); } else { __syncthreads(); }", 64,
                      "a barrier in divergent code");
  expect_launch_error("shuffle reached by half a warp", "if (lane < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);", 32,
                      "deadlock: 16 threads wait at a warp collective");
  expect_launch_error("two shuffles in divergent code",
                      "if (lane < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);\n"
                      "  else v = __shfl_xor_sync(0xffffffffu, v, 1);",
                      32, "divergent warp collective");
  expect_launch_error("shuffle with a partial mask", "v = __shfl_xor_sync(0xffffu, v, 1);", 32,
                      "only the full mask");
  expect_launch_error("shuffle in a partial warp", "v = __shfl_xor_sync(0xffffffffu, v, 1);", 48,
                      "partial warp (the block has 48 threads");
  const uint32_t big[3] = {2048, 1, 1};
  float x[1], y[1];
  printf("block of 2048 threads:\n");
  CHECK_ERR(run_f32(ids_src, "ids", ONE, big, 0, y, x), "outside CUDA's limits");
  printf("a kernel that does not compile:\n");
  CHECK_ERR(run_f32("#include \"dc_cuda.cuh\"\nDC_KERNEL void nope(float *out, const float *in) { out[0] = undefined_thing; }\n",
                    "nope", ONE, ONE, 0, y, x),
            "undefined_thing");
}

/* ---- wmma ------------------------------------------------------------------------ */
/* One warp: C (f32, layout CL, ldm 24) + A (T, layout AL, ldm 24) B (T, layout
 * BL, ldm 32) stored with layout SL (ldm 20) at out.  in holds the 16-bit
 * A and B bits, then C. */
static char *wmma_src(const char *t, const char *al, const char *bl, const char *cl, const char *sl) {
  return dc_asprintf(
      "#include \"dc_cuda.cuh\"\n"
      "using namespace nvcuda;\n"
      "DC_KERNEL void mm(float *out, const unsigned short *ab, const float *c) {\n"
      "  __shared__ __align__(32) %s sa[16 * 24], sb[16 * 32];\n"
      "  for (int i = threadIdx.x; i < 16 * 24; i += 32) sa[i] = __ushort_as_%s(ab[i]);\n"
      "  for (int i = threadIdx.x; i < 16 * 32; i += 32) sb[i] = __ushort_as_%s(ab[16 * 24 + i]);\n"
      "  __syncthreads();\n"
      "  wmma::fragment<wmma::matrix_a, 16, 16, 16, %s, wmma::%s> fa;\n"
      "  wmma::fragment<wmma::matrix_b, 16, 16, 16, %s, wmma::%s> fb;\n"
      "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, c2;\n"
      "  wmma::fill_fragment(acc, 0.0f);\n"
      "  wmma::load_matrix_sync(c2, c, 24, wmma::%s);\n"
      "  wmma::load_matrix_sync(fa, sa, 24);\n"
      "  wmma::load_matrix_sync(fb, sb, 32);\n"
      "  wmma::mma_sync(acc, fa, fb, c2);\n"
      "  wmma::store_matrix_sync(out, acc, 20, wmma::%s);\n"
      "}\n",
      t, strcmp(t, "__half") == 0 ? "half" : "bfloat16", strcmp(t, "__half") == 0 ? "half" : "bfloat16", t, al, t, bl,
      cl, sl);
}

/* Element (r, c) of a tile stored with leading dimension ldm. */
static int at(int r, int c, int ldm, int row) { return row ? r * ldm + c : r + c * ldm; }

static void check_wmma_case(int half, int arow, int brow, int crow, int srow) {
  uint16_t ab[16 * 24 + 16 * 32];
  float a[16][16], b[16][16];
  static float c[16 * 24] __attribute__((aligned(64))), out[16 * 20] __attribute__((aligned(64)));
  uint64_t s = 7 + (uint64_t)(half * 16 + arow * 8 + brow * 4 + crow * 2 + srow);
  for (int i = 0; i < 16 * 24 + 16 * 32; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float v = (float)((int)(s >> 40) % 2001 - 1000) / 256.0f;
    ab[i] = half ? dc_f32_to_f16(v) : dc_f32_to_bf16(v);
  }
  for (int i = 0; i < 16 * 24; i++) c[i] = (float)(i % 17) - 8.0f;
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) {
      uint16_t ha = ab[at(r, k, 24, arow)], hb = ab[16 * 24 + at(r, k, 32, brow)]; /* b: (k = r, n = k) */
      a[r][k] = half ? dc_f16_to_f32(ha) : dc_bf16_to_f32(ha);
      b[r][k] = half ? dc_f16_to_f32(hb) : dc_bf16_to_f32(hb);
    }
  static const char *const types[] = {"float", "const unsigned short", "const float"};
  const char *lay[2] = {"col_major", "row_major"}, *mem[2] = {"mem_col_major", "mem_row_major"};
  char *src = wmma_src(half ? "__half" : "__nv_bfloat16", lay[arow], lay[brow], mem[crow], mem[srow]);
  ch_kernel *k = NULL;
  dc_status *st = ch_kernel_build(src, "mm", 3, types, &k);
  const uint32_t warp[3] = {32, 1, 1};
  void *params[3] = {out, ab, c};
  if (!st) st = ch_kernel_launch(k, ONE, warp, 0, params);
  CHECK_OK(st);
  double maxerr = 0;
  for (int r = 0; r < 16 && !st; r++)
    for (int n = 0; n < 16; n++) {
      double want = c[at(r, n, 24, crow)];
      for (int kk = 0; kk < 16; kk++) want += (double)a[r][kk] * b[kk][n];
      double err = fabs(out[at(r, n, 20, srow)] - want) / (fabs(want) + 1.0);
      if (err > maxerr) maxerr = err;
    }
  CHECK(!st && maxerr <= 1e-6);
  printf("wmma %s A %s B %s C %s store %s: max rel err %.2g\n", half ? "half" : "bf16", lay[arow], lay[brow],
         mem[crow], mem[srow], maxerr);
  ch_kernel_free(k);
  dc_free(src);
}

static void check_wmma(void) {
  for (int half = 0; half <= 1; half++)
    for (int arow = 0; arow <= 1; arow++)
      for (int brow = 0; brow <= 1; brow++) check_wmma_case(half, arow, brow, (arow + brow) & 1, arow);
}

static void check_wmma_misuse(void) {
  static const char *const types[] = {"float", "const float"};
  static const char *const bodies[] = {
      "wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc; wmma::fill_fragment(acc, 0.0f); acc.x[0] = 1.0f;",
      "wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc; out[0] = (float)acc.num_elements;",
      "wmma::fragment<wmma::matrix_a, 16, 16, 16, float, wmma::row_major> a; (void)a;",
  };
  for (int i = 0; i < 3; i++) {
    char *src = dc_asprintf("#include \"dc_cuda.cuh\"\nusing namespace nvcuda;\n"
                            "DC_KERNEL void frag(float *out, const float *in) { %s }\n",
                            bodies[i]);
    ch_kernel *k = NULL;
    dc_status *st = ch_kernel_build(src, "frag", 2, types, &k);
    CHECK(st && strstr(dc_status_message(st), "does not compile"));
    printf("fragment misuse %d does not compile: %s\n", i, st ? "yes" : "NO");
    dc_status_free(st);
    ch_kernel_free(k);
    dc_free(src);
  }
  static const char *const loads[] = {"c + 4, 16", "c, 10"};
  static const char *const needles[] = {"not 256-bit aligned", "ldm 10 is not a multiple of 4"};
  for (int i = 0; i < 2; i++) {
    char *src = dc_asprintf("#include \"dc_cuda.cuh\"\nusing namespace nvcuda;\n"
                            "DC_KERNEL void ld(float *out, const float *c) {\n"
                            "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;\n"
                            "  wmma::load_matrix_sync(acc, %s, wmma::mem_row_major);\n"
                            "  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);\n"
                            "}\n",
                            loads[i]);
    static float c[512] __attribute__((aligned(64))), out[512] __attribute__((aligned(64)));
    const uint32_t warp[3] = {32, 1, 1};
    printf("wmma load_matrix_sync(%s):\n", loads[i]);
    CHECK_ERR(run_f32(src, "ld", ONE, warp, 0, out, c), needles[i]);
    dc_free(src);
  }
}

/* ---- bf16 / half conversions -------------------------------------------------------- */
/* out (as u32 words): bf16 bits, half bits, then float(bf16 code i),
 * float(half code i) for i < 65536. */
static const char conv_src[] =
    "#include \"dc_cuda.cuh\"\n"
    "DC_KERNEL void conv(unsigned *out, const float *in, const unsigned *n) {\n"
    "  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n[0]; i += gridDim.x * blockDim.x) {\n"
    "    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));\n"
    "    out[n[0] + i] = __half_as_ushort(__float2half_rn(in[i]));\n"
    "  }\n"
    "  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < 65536; i += gridDim.x * blockDim.x) {\n"
    "    out[2 * n[0] + i] = __float_as_uint(__bfloat162float(__ushort_as_bfloat16((unsigned short)i)));\n"
    "    out[2 * n[0] + 65536 + i] = __float_as_uint(__half2float(__ushort_as_half((unsigned short)i)));\n"
    "  }\n"
    "}\n";

/* Inputs: every f16 and bf16 code's value and its neighbours (ties and the
 * floats next to them), the f16 subnormal and overflow edges, and random bits. */
static float *conversion_inputs(unsigned *count) {
  unsigned n = 0, cap = 6 * 65536 * 2 + 200000;
  float *v = malloc(sizeof(float) * cap);
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t bits[2] = {dc_f32_bits(dc_bf16_to_f32((uint16_t)h)), dc_f32_bits(dc_f16_to_f32((uint16_t)h))};
    uint32_t half_ulp[2] = {0x8000u, 0x1000u}; /* half a bf16 / (normal) f16 ulp in f32 bits */
    for (int t = 0; t < 2; t++) {
      uint32_t mid = bits[t] + half_ulp[t];
      v[n++] = dc_f32_from_bits(bits[t]);
      v[n++] = dc_f32_from_bits(mid);
      v[n++] = dc_f32_from_bits(mid - 1);
      v[n++] = dc_f32_from_bits(mid + 1);
    }
  }
  for (int e = -27; e <= -13; e++)
    for (int k = -64; k <= 64; k++) v[n++] = ldexpf(1.0f + (float)k / 128.0f, e); /* f16 subnormals */
  for (int k = -2000; k <= 2000; k++) v[n++] = 65520.0f + (float)k / 8.0f;          /* f16 overflow */
  uint64_t s = 99;
  while (n < cap) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[n++] = dc_f32_from_bits((uint32_t)(s >> 32));
  }
  *count = n;
  return v;
}

static void check_conversions(void) {
  unsigned n;
  float *in = conversion_inputs(&n);
  unsigned *out = malloc(sizeof(unsigned) * (2 * (size_t)n + 2 * 65536));
  static const char *const types[] = {"unsigned", "const float", "const unsigned"};
  ch_kernel *k = NULL;
  dc_status *st = ch_kernel_build(conv_src, "conv", 3, types, &k);
  const uint32_t grid[3] = {64, 1, 1}, block[3] = {256, 1, 1};
  void *params[3] = {out, in, &n};
  if (!st) st = ch_kernel_launch(k, grid, block, 0, params);
  CHECK_OK(st);
  long bad_bf = 0, bad_h = 0, nan = 0, bad_back = 0;
  for (unsigned i = 0; i < n && !st; i++) {
    if (isnan(in[i])) { /* CUDA's canonical NaN; kernels.h keeps the payload */
      nan++;
      bad_bf += out[i] != 0x7fffu;
      bad_h += out[n + i] != 0x7fffu;
      continue;
    }
    bad_bf += out[i] != dc_f32_to_bf16(in[i]);
    bad_h += out[n + i] != dc_f32_to_f16(in[i]);
  }
  for (uint32_t h = 0; h < 65536 && !st; h++)
    bad_back += out[2 * n + h] != dc_f32_bits(dc_bf16_to_f32((uint16_t)h)) ||
                out[2 * n + 65536 + h] != dc_f32_bits(dc_f16_to_f32((uint16_t)h));
  CHECK(!st && bad_bf == 0 && bad_h == 0 && bad_back == 0);
  printf("conversions: %u floats (%ld NaN) to bf16: %ld differ from dc_f32_to_bf16, to half: %ld differ from "
         "dc_f32_to_f16; all 65536 codes back to float: %ld differ\n",
         n, nan, bad_bf, bad_h, bad_back);
  ch_kernel_free(k);
  free(in);
  free(out);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  ch_kernel *probe = NULL;
  dc_status *st = ch_kernel_build(ids_src, "ids", 2, (const char *const[]){"float", "const float"}, &probe);
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 77;
  }
  CHECK_OK(st);
  ch_kernel_free(probe);
  check_ids();
  check_barrier();
  check_barrier_order();
  check_smem_poison();
  check_shuffles();
  check_misuse();
  check_wmma();
  check_wmma_misuse();
  check_conversions();
  return tu_finish();
}
