/* test_cuda_mma.c — the tensor-core primitives of "dc_mma.cuh" (mma.sync
 * m16n8k16, ldmatrix, cp.async), run in the CPU emulator and checked element
 * by element against C computations of the PTX ISA's layouts:
 *  - mma (bf16 and f16): fragments built by the documented layout from
 *    row-major A and B, D = D0 + A.B against a plain matmul; a kernel with
 *    two fragment registers swapped must fail the same check;
 *  - ldmatrix x1/x2/x4 and the .trans forms: each lane's registers against
 *    the documented (row, column) pairs; unused lanes pass junk addresses;
 *  - ldmatrix + mma as kernels use them (A by x4, B by x2.trans);
 *  - cp.async: three groups, each landing only at its wait (NaN before),
 *    a zero-fill, and the data visible to other threads after a barrier;
 *  - misuse: a missing wait, a misaligned cp.async, a cp.async into global
 *    memory, a misaligned or non-shared ldmatrix row, an mma reached by half
 *    a warp;
 *  - the same kernels compiled by NVRTC for sm_80 and sm_90 without warnings
 *    (skipped, saying why, when NVRTC is absent). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "support/dtype_convert.h"
#include "testutil.h"

static const uint32_t ONE[3] = {1, 1, 1}, WARP[3] = {32, 1, 1};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double gauss(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static uint16_t to_bits(float v, int f16) { return f16 ? dc_f32_to_f16(v) : dc_f32_to_bf16(v); }
static float from_bits(uint16_t h, int f16) { return f16 ? dc_f16_to_f32(h) : dc_bf16_to_f32(h); }

/* Every source compiled here, kept for the NVRTC pass at the end. */
enum { MAX_SOURCES = 16 };
static dc_cuda_kernel sources[MAX_SOURCES];
static int nsources;

static void remember(const char *src, const char *name) {
  for (int i = 0; i < nsources; i++)
    if (!strcmp(sources[i].source, src)) return;
  if (nsources == MAX_SOURCES) return;
  sources[nsources].name = dc_strdup(name);
  sources[nsources].source = dc_strdup(src);
  nsources++;
}

static dc_status *run(const char *src, const char *name, int nparams, const char *const *types, const uint32_t block[3],
                      uint32_t smem, void **params) {
  ch_kernel *k = NULL;
  DC_TRY(ch_kernel_build(src, name, nparams, types, &k));
  dc_status *st = ch_kernel_launch(k, ONE, block, smem, params);
  ch_kernel_free(k);
  return st;
}

/* ---- mma.sync m16n8k16 --------------------------------------------------------- */
/* A (16x16) and B (16x8, K x N) row-major as 16-bit bits in ab (A first),
 * D0 (16x8) row-major in d0; out gets D.  SWAP plants a layout bug. */
static char *mma_src(int f16, int swap) {
  return dc_asprintf(
      "#include \"dc_cuda.cuh\"\n"
      "#include \"dc_mma.cuh\"\n"
      "DC_DEVICE unsigned pair(const unsigned short *m, int ld, int r, int c) {\n"
      "  return (unsigned)m[r * ld + c] | ((unsigned)m[r * ld + c + 1] << 16);\n"
      "}\n"
      "DC_KERNEL void mma(float *out, const unsigned short *ab, const float *d0) {\n"
      "  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
      "  const unsigned short *A = ab, *B = ab + 256;\n"
      "  unsigned a[4] = {pair(A, 16, g, 2 * t), pair(A, 16, g + 8, 2 * t), pair(A, 16, g, 2 * t + 8),\n"
      "                   pair(A, 16, g + 8, 2 * t + 8)};\n"
      /* B's k pairs run down a column */
      "  unsigned b[2] = {(unsigned)B[2 * t * 8 + g] | ((unsigned)B[(2 * t + 1) * 8 + g] << 16),\n"
      "                   (unsigned)B[(2 * t + 8) * 8 + g] | ((unsigned)B[(2 * t + 9) * 8 + g] << 16)};\n"
      "  %s\n"
      "  float d[4] = {d0[g * 8 + 2 * t], d0[g * 8 + 2 * t + 1], d0[(g + 8) * 8 + 2 * t], d0[(g + 8) * 8 + 2 * t + 1]};\n"
      "  dc_mma_16816_%s(d, a, b);\n"
      "  out[g * 8 + 2 * t] = d[0]; out[g * 8 + 2 * t + 1] = d[1];\n"
      "  out[(g + 8) * 8 + 2 * t] = d[2]; out[(g + 8) * 8 + 2 * t + 1] = d[3];\n"
      "}\n",
      swap ? "{ unsigned x = a[1]; a[1] = a[2]; a[2] = x; }" : "", f16 ? "f16" : "bf16");
}

/* How many of D's 128 elements are off the matmul by more than f32 rounding
 * of a 16-term sum allows. */
static int mma_wrong(const float *got, const uint16_t *ab, const float *d0, int f16) {
  int bad = 0;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      double want = d0[r * 8 + c], mag = fabs(want);
      for (int k = 0; k < 16; k++) {
        double p = (double)from_bits(ab[r * 16 + k], f16) * from_bits(ab[256 + k * 8 + c], f16);
        want += p, mag += fabs(p);
      }
      bad += !(fabs(got[r * 8 + c] - want) <= 4e-6 * mag);
    }
  return bad;
}

static void check_mma(int f16) {
  static const char *const types[] = {"float", "const unsigned short", "const float"};
  uint16_t ab[256 + 128];
  float d0[128], out[128];
  for (int i = 0; i < 384; i++) ab[i] = to_bits((float)gauss(), f16);
  for (int i = 0; i < 128; i++) d0[i] = (float)gauss();
  for (int swap = 0; swap <= 1; swap++) {
    char *src = mma_src(f16, swap);
    void *params[3] = {out, ab, d0};
    CHECK_OK(run(src, "mma", 3, types, WARP, 0, params));
    int bad = mma_wrong(out, ab, d0, f16);
    CHECK(swap ? bad > 0 : bad == 0);
    printf("mma m16n8k16 %s%s: %d of 128 elements off the matmul\n", f16 ? "f16" : "bf16",
           swap ? " with a[1] and a[2] swapped (a planted layout bug)" : "", bad);
    if (!swap) remember(src, "mma");
    dc_free(src);
  }
}

/* ---- ldmatrix -------------------------------------------------------------------- */
/* Four 8x8 matrices of 16-bit values (m[i][r][c] = in[(8i + r) * 8 + c])
 * are staged in shared memory with rows 48 bytes apart; each form's
 * registers go to out, lane-major: x1 (1), x2 (2), x4 (4), x2.trans (2),
 * x4.trans (4): 13 per lane. */
static const char ldm_src[] =
    "#include \"dc_cuda.cuh\"\n"
    "#include \"dc_mma.cuh\"\n"
    "DC_KERNEL void ldm(unsigned *out, const unsigned short *in) {\n"
    "  __shared__ __align__(16) unsigned short s[32 * 24];\n"
    "  int lane = threadIdx.x & 31;\n"
    "  for (int i = lane; i < 256; i += 32) s[(i / 8) * 24 + i % 8] = in[i];\n"
    "  __syncthreads();\n"
    "  const unsigned short *row = &s[lane * 24];\n"
    "  const void *junk = (const void *)(unsigned long long)(lane * 3 + 1);\n" /* unused lanes: anything */
    "  unsigned r[13];\n"
    "  dc_ldmatrix_x1(r, lane < 8 ? (const void *)row : junk);\n"
    "  dc_ldmatrix_x2(r + 1, lane < 16 ? (const void *)row : junk);\n"
    "  dc_ldmatrix_x4(r + 3, row);\n"
    "  dc_ldmatrix_x2_trans(r + 7, lane < 16 ? (const void *)row : junk);\n"
    "  dc_ldmatrix_x4_trans(r + 9, row);\n"
    "  for (int i = 0; i < 13; i++) out[lane * 13 + i] = r[i];\n"
    "}\n";

static unsigned ldm_want(const uint16_t *in, int mat, int lane, int trans) {
  int q = lane >> 2, t = lane & 3;
  const uint16_t *m = in + mat * 64;
  if (trans) return (unsigned)m[2 * t * 8 + q] | (unsigned)m[(2 * t + 1) * 8 + q] << 16;
  return (unsigned)m[q * 8 + 2 * t] | (unsigned)m[q * 8 + 2 * t + 1] << 16;
}

static void check_ldmatrix(void) {
  static const char *const types[] = {"unsigned", "const unsigned short"};
  uint16_t in[256];
  unsigned out[32 * 13];
  for (int i = 0; i < 256; i++) in[i] = (uint16_t)(i * 0x9e37u + 0x1234u);
  void *params[2] = {out, in};
  CHECK_OK(run(ldm_src, "ldm", 2, types, WARP, 0, params));
  static const struct {
    int first, count, trans;
  } forms[] = {{0, 1, 0}, {1, 2, 0}, {3, 4, 0}, {7, 2, 1}, {9, 4, 1}};
  int bad = 0;
  for (int lane = 0; lane < 32; lane++)
    for (int f = 0; f < 5; f++)
      for (int i = 0; i < forms[f].count; i++)
        bad += out[lane * 13 + forms[f].first + i] != ldm_want(in, i, lane, forms[f].trans);
  CHECK(bad == 0);
  printf("ldmatrix x1, x2, x4, x2.trans, x4.trans: %d of 416 registers differ from the PTX layout\n", bad);
  remember(ldm_src, "ldm");
}

/* ---- ldmatrix feeding mma, as the kernels do ------------------------------------ */
/* A 16x16 row-major and B 16x8 (K x N) row-major, staged into shared memory
 * with padded rows; A by ldmatrix.x4 (lane: row lane & 15, column
 * (lane >> 4) * 8), B by ldmatrix.x2.trans (lane: k row lane & 15). */
static char *ldm_mma_src(int f16) {
  return dc_asprintf(
      "#include \"dc_cuda.cuh\"\n"
      "#include \"dc_mma.cuh\"\n"
      "DC_KERNEL void ldm_mma(float *out, const unsigned short *ab, const float *d0) {\n"
      "  __shared__ __align__(16) unsigned short As[16 * 24], Bs[16 * 16];\n"
      "  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
      "  for (int i = lane; i < 256; i += 32) As[(i / 16) * 24 + i %% 16] = ab[i];\n"
      "  for (int i = lane; i < 128; i += 32) Bs[(i / 8) * 16 + i %% 8] = ab[256 + i];\n"
      "  __syncthreads();\n"
      "  unsigned a[4], b[2];\n"
      "  dc_ldmatrix_x4(a, &As[(lane & 15) * 24 + (lane >> 4) * 8]);\n"
      "  dc_ldmatrix_x2_trans(b, &Bs[(lane & 15) * 16]);\n"
      "  float d[4] = {d0[g * 8 + 2 * t], d0[g * 8 + 2 * t + 1], d0[(g + 8) * 8 + 2 * t], d0[(g + 8) * 8 + 2 * t + 1]};\n"
      "  dc_mma_16816_%s(d, a, b);\n"
      "  out[g * 8 + 2 * t] = d[0]; out[g * 8 + 2 * t + 1] = d[1];\n"
      "  out[(g + 8) * 8 + 2 * t] = d[2]; out[(g + 8) * 8 + 2 * t + 1] = d[3];\n"
      "}\n",
      f16 ? "f16" : "bf16");
}

static void check_ldmatrix_mma(int f16) {
  static const char *const types[] = {"float", "const unsigned short", "const float"};
  uint16_t ab[384];
  float d0[128], out[128];
  for (int i = 0; i < 384; i++) ab[i] = to_bits((float)gauss(), f16);
  for (int i = 0; i < 128; i++) d0[i] = (float)gauss();
  char *src = ldm_mma_src(f16);
  void *params[3] = {out, ab, d0};
  CHECK_OK(run(src, "ldm_mma", 3, types, WARP, 0, params));
  int bad = mma_wrong(out, ab, d0, f16);
  CHECK(bad == 0);
  printf("ldmatrix.x4 (A) + ldmatrix.x2.trans (B) + mma %s: %d of 128 elements off the matmul\n",
         f16 ? "f16" : "bf16", bad);
  remember(src, "ldm_mma");
  dc_free(src);
}

/* ---- cp.async ----------------------------------------------------------------------- */
/* 64 threads, each copying 3 chunks of 16 bytes (4 floats) into dynamic
 * shared memory, one group per chunk (the third zero-filled); after each
 * wait every thread records its own three chunks' first float (out[0..575]);
 * after a barrier each reads its neighbour's first chunk (out[576..]). */
static const char cp_src[] =
    "#include \"dc_cuda.cuh\"\n"
    "#include \"dc_mma.cuh\"\n"
    "DC_KERNEL void cp(float *out, const float *in) {\n"
    "  DC_DYNAMIC_SMEM(raw);\n"
    "  float *s = (float *)raw;\n"
    "  int i = threadIdx.x, n = blockDim.x;\n"
    "  for (int c = 0; c < 3; c++) {\n"
    "    dc_cp_async_16(&s[(c * n + i) * 4], &in[(c * n + i) * 4], c == 2 ? 0 : 16);\n"
    "    dc_cp_async_commit();\n"
    "  }\n"
    "  DC_CP_ASYNC_WAIT(2);\n"
    "  for (int c = 0; c < 3; c++) out[(0 * 3 + c) * n + i] = s[(c * n + i) * 4];\n"
    "  DC_CP_ASYNC_WAIT(1);\n"
    "  for (int c = 0; c < 3; c++) out[(1 * 3 + c) * n + i] = s[(c * n + i) * 4];\n"
    "  DC_CP_ASYNC_WAIT(0);\n"
    "  for (int c = 0; c < 3; c++) out[(2 * 3 + c) * n + i] = s[(c * n + i) * 4 + 3];\n"
    "  __syncthreads();\n"
    "  out[9 * n + i] = s[((i + 1) % n) * 4 + 1];\n"
    "}\n";

static void check_cp_async(void) {
  static const char *const types[] = {"float", "const float"};
  enum { N = 64 };
  const uint32_t block[3] = {N, 1, 1};
  _Alignas(16) float in[3 * N * 4];
  float out[10 * N];
  for (int i = 0; i < 3 * N * 4; i++) in[i] = (float)i + 0.5f;
  void *params[2] = {out, in};
  CHECK_OK(run(cp_src, "cp", 2, types, block, 3 * N * 16, params));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    for (int w = 0; w < 3; w++)    /* after wait w: groups 0..w landed */
      for (int c = 0; c < 3; c++) {
        float got = out[(w * 3 + c) * N + i];
        float want = c > w ? NAN : c == 2 ? 0.0f : in[(c * N + i) * 4 + (w == 2 ? 3 : 0)];
        bad += isnan(want) ? !isnan(got) : got != want;
      }
    bad += out[9 * N + i] != in[((i + 1) % N) * 4 + 1];
  }
  CHECK(bad == 0);
  printf("cp.async, 64 threads x 3 groups (one zero-filled), waits 2/1/0 then a barrier: %d of %d reads wrong "
         "(pending copies read NaN)\n",
         bad, 10 * N);
  remember(cp_src, "cp");
}

/* ---- misuse ---------------------------------------------------------------------------- */
static void expect_error(const char *what, const char *body, uint32_t threads, const char *needle) {
  static const char *const types[] = {"float", "const float"};
  char *src = dc_asprintf("#include \"dc_cuda.cuh\"\n"
                          "#include \"dc_mma.cuh\"\n"
                          "DC_KERNEL void bad(float *out, const float *in) {\n"
                          "  __shared__ __align__(16) float s[256];\n"
                          "  int lane = threadIdx.x & 31;\n"
                          "  unsigned r[4] = {0, 0, 0, 0}, b[2] = {0, 0};\n"
                          "  float d[4] = {0, 0, 0, 0};\n"
                          "  %s\n"
                          "  out[threadIdx.x] = d[0] + (float)r[0] + (float)lane + s[threadIdx.x];\n"
                          "}\n",
                          body);
  const uint32_t block[3] = {threads, 1, 1};
  _Alignas(16) float in[256];
  float out[64];
  for (int i = 0; i < 256; i++) in[i] = (float)i;
  void *params[2] = {out, in};
  printf("%s:\n", what);
  CHECK_ERR(run(src, "bad", 2, types, block, 0, params), needle);
  dc_free(src);
}

static void check_misuse(void) {
  expect_error("cp.async never waited for", "dc_cp_async_16(&s[lane * 4], &in[lane * 4], 16); dc_cp_async_commit();",
               32, "cp.async copies not waited for");
  expect_error("cp.async issued after the last wait",
               "dc_cp_async_16(&s[lane * 4], &in[lane * 4], 16); DC_CP_ASYNC_WAIT(0);", 32,
               "cp.async copies not waited for");
  expect_error("cp.async from a misaligned address",
               "dc_cp_async_16(&s[lane * 4], &in[lane * 4 + 1], 16); dc_cp_async_commit(); DC_CP_ASYNC_WAIT(0);", 32,
               "must be 16-byte aligned");
  expect_error("cp.async into global memory",
               "dc_cp_async_16(&out[0], &in[lane * 4], 16); dc_cp_async_commit(); DC_CP_ASYNC_WAIT(0);", 32,
               "not inside the block's shared memory");
  expect_error("ldmatrix with a misaligned row", "dc_ldmatrix_x4(r, &s[lane * 4 + 2]);", 32,
               "lane 0's row address");
  expect_error("ldmatrix from global memory", "dc_ldmatrix_x2(r, &in[(lane & 15) * 4]);", 32,
               "not inside the block's shared memory");
  expect_error("ldmatrix with a row running past shared memory", "dc_ldmatrix_x1(r, &s[lane == 7 ? 256 : 0]);", 32,
               "not inside the block's shared memory");
  expect_error("mma reached by half a warp", "if (lane < 16) dc_mma_16816_bf16(d, r, b);", 32,
               "deadlock: 16 threads wait at a warp collective");
  expect_error("two mma sites in divergent code",
               "if (lane < 16) dc_mma_16816_bf16(d, r, b);\n  else dc_mma_16816_bf16(d, r, b);", 32,
               "divergent warp collective");
}

/* ---- NVRTC ------------------------------------------------------------------------------ */
static void check_nvrtc(void) {
  if (!ch_nvrtc_open()) return;
  for (int i = 0; i < nsources; i++) ch_nvrtc_check(&sources[i]);
  int n = 0, compiles = 0;
  ch_nvrtc_close(&n, &compiles);
  printf("NVRTC: %d sources, %d compiles (sm_80, sm_90) without a warning\n", n, compiles);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  ch_kernel *probe = NULL;
  dc_status *st = ch_kernel_build(ldm_src, "ldm", 2, (const char *const[]){"unsigned", "const unsigned short"}, &probe);
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 77;
  }
  CHECK_OK(st);
  ch_kernel_free(probe);
  check_mma(0);
  check_mma(1);
  check_ldmatrix();
  check_ldmatrix_mma(0);
  check_ldmatrix_mma(1);
  check_cp_async();
  check_misuse();
  check_nvrtc();
  for (int i = 0; i < nsources; i++) dc_cuda_kernel_deinit(&sources[i]);
  return tu_finish();
}
