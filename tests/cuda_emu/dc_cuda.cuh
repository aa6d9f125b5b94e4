/* dc_cuda.cuh — the CPU emulator's platform part of the one header every
 * generated CUDA source includes (the GPU one is codegen/cuda/prelude.c's).
 *
 * Why: the tests have no GPU, yet every generated kernel must be run against
 * its reference kernel.  So the CUDA C is compiled as host C++ (g++) against
 * this header and dc_emu.cpp: each CUDA thread of a block is a fiber with its
 * own stack, blocks run one after another, __syncthreads is a block barrier,
 * warp collectives (shuffles and the WMMA *_sync calls) wait for all 32
 * lanes, and a deadlock or a misuse is reported as an error string.
 *
 * Only the primitives listed in codegen/cuda/cuda_codegen.h exist here; a
 * kernel that uses anything else fails to compile, which is the point (e.g.
 * WMMA fragments have no .x[] and no num_elements: their layout is opaque).
 *
 * Shared memory: `__shared__` is `static`, so a function-static array is the
 * block's shared memory (blocks run one at a time).  DC_DYNAMIC_SMEM(name)
 * must appear inside the kernel body.  Static and dynamic shared memory are
 * filled with 0xff bytes (NaN as f32 and bf16) before each block, so reading
 * before writing shows. */
#ifndef DC_CUDA_EMU_CUH
#define DC_CUDA_EMU_CUH

#include <cmath>
#include <cstring>

/* ---- qualifiers ---------------------------------------------------------- */
#define DC_DEVICE static inline
#define DC_KERNEL extern "C"
#define DC_DYNAMIC_SMEM(name) unsigned char *const name = dc_emu_dynamic_smem()
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
/* Every __shared__ variable lands in one section, which the runtime fills
 * with 0xff before each block (read-before-write shows as NaN). */
#define __shared__ static __attribute__((section("dc_emu_shared")))
#define __launch_bounds__(...)

#include "dc_emu.h"

#define threadIdx (dc_emu_cur->threadIdx)
#define blockIdx (dc_emu_cur->blockIdx)
#define blockDim (dc_emu_cur->blockDim)
#define gridDim (dc_emu_cur->gridDim)
#define warpSize 32
/* Each call site gets a static marker of its own, so two barriers (or two
 * shuffles) on one line are still told apart. */
#define __syncthreads()                                      \
  do {                                                       \
    static const char dc_emu_site_ = 0;                      \
    dc_emu_syncthreads(&dc_emu_site_, __FILE__, __LINE__);   \
  } while (0)

/* ---- warp shuffles (full mask, width 32) ----------------------------------- */
static inline unsigned dc_emu_shfl_xor_bits(const void *site, const char *file, int line, unsigned mask, unsigned v, int lanemask,
                                            int width) {
  if (mask != 0xffffffffu) dc_emu_fail("%s:%d: __shfl_xor_sync with mask 0x%x (only the full mask is supported)", file, line, mask);
  if (width != 32) dc_emu_fail("%s:%d: __shfl_xor_sync with width %d (only 32 is supported)", file, line, width);
  if (lanemask < 0 || lanemask > 31) dc_emu_fail("%s:%d: __shfl_xor_sync lane mask %d is outside 0..31", file, line, lanemask);
  dc_emu_coll c = {"__shfl_xor_sync", site, file, line, {(unsigned long long)lanemask, 0, 0}, nullptr, v, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (lanes)
    for (int i = 0; i < 32; i++) lanes[i]->result = lanes[i ^ lanemask]->val;
  return c.result;
}
static inline float dc_emu_shfl_xor(const void *site, const char *file, int line, unsigned mask, float v, int lanemask, int width = 32) {
  unsigned b, r;
  std::memcpy(&b, &v, 4);
  r = dc_emu_shfl_xor_bits(site, file, line, mask, b, lanemask, width);
  std::memcpy(&v, &r, 4);
  return v;
}
static inline int dc_emu_shfl_xor(const void *site, const char *file, int line, unsigned mask, int v, int lanemask, int width = 32) {
  return (int)dc_emu_shfl_xor_bits(site, file, line, mask, (unsigned)v, lanemask, width);
}
static inline unsigned dc_emu_shfl_xor(const void *site, const char *file, int line, unsigned mask, unsigned v, int lanemask,
                                       int width = 32) {
  return dc_emu_shfl_xor_bits(site, file, line, mask, v, lanemask, width);
}
#define __shfl_xor_sync(...)                                        \
  ({                                                                \
    static const char dc_emu_site_ = 0;                             \
    dc_emu_shfl_xor(&dc_emu_site_, __FILE__, __LINE__, __VA_ARGS__); \
  })

/* ---- bit casts and math ------------------------------------------------------ */
static inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
/* Single IEEE operations that the compiler may not fuse into an FMA. */
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* glibc declares (but does not export) __expf and friends: macros, not functions. */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x > 1.0f ? 1.0f : x >= 0.0f ? x : 0.0f; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

/* ---- bf16 and half: storage types with explicit conversions only ------------ */
/* Round to nearest even exactly as CUDA (cvt.rn): NaN becomes the canonical
 * 0x7fff, f16 overflow becomes inf. */
struct __nv_bfloat16 {
  unsigned short dc_emu_bits;
};
struct __half {
  unsigned short dc_emu_bits;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned x = __float_as_uint(f);
  __nv_bfloat16 r;
  if ((x & 0x7fffffffu) > 0x7f800000u) r.dc_emu_bits = 0x7fff;
  else r.dc_emu_bits = (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.dc_emu_bits << 16); }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.dc_emu_bits; }

static inline __half __float2half_rn(float f) {
  unsigned x = __float_as_uint(f), ax = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u, r;
  if (ax > 0x7f800000u) r = 0x7fffu;                 /* NaN */
  else if (ax >= 0x477ff000u) r = sign | 0x7c00u;    /* >= 65520 (and inf) */
  else if (ax >= 0x38800000u) {                      /* normal */
    ax += 0xfffu + ((ax >> 13) & 1u);
    r = sign | ((ax - 0x38000000u) >> 13);
  } else if (ax <= 0x33000000u) r = sign;           /* <= 2^-25 (half the smallest subnormal) */
  else {                                             /* subnormal: units of 2^-24, ties to even */
    unsigned shift = 126u - (ax >> 23), man = (ax & 0x7fffffu) | 0x800000u;
    unsigned q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    r = sign | q;
  }
  __half h;
  h.dc_emu_bits = (unsigned short)r;
  return h;
}
static inline float __half2float(__half h) {
  unsigned s = (unsigned)(h.dc_emu_bits & 0x8000u) << 16, e = (h.dc_emu_bits >> 10) & 0x1fu, m = h.dc_emu_bits & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(s | 0x7f800000u | (m << 13));
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-8f;
    return s ? -f : f;
  }
  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
static inline unsigned short __half_as_ushort(__half h) { return h.dc_emu_bits; }

static inline float dc_emu_to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
static inline float dc_emu_to_float(__half h) { return __half2float(h); }

/* ---- nvcuda::wmma, m16n16k16 ----------------------------------------------- */
/* A fragment holds the whole 16x16 tile, row-major by logical index, in every
 * lane (layouts are opaque to kernels, so this is indistinguishable).  The
 * *_sync calls are warp collectives, as in CUDA: every lane must reach them
 * with the same arguments, and the lane completing the collective does the
 * work for the warp. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename T> struct dc_emu_same { typedef T type; };
template <typename A, typename B> struct dc_emu_is { static const bool value = false; };
template <typename A> struct dc_emu_is<A, A> { static const bool value = true; };

template <typename Use, int m, int n, int k, typename T, typename Layout = void> class fragment;

template <typename Use, typename T, typename Layout> class fragment<Use, 16, 16, 16, T, Layout> {
  static_assert((dc_emu_is<Use, matrix_a>::value || dc_emu_is<Use, matrix_b>::value) &&
                    (dc_emu_is<T, __nv_bfloat16>::value || dc_emu_is<T, __half>::value) &&
                    (dc_emu_is<Layout, row_major>::value || dc_emu_is<Layout, col_major>::value),
                "the emulator supports matrix_a/matrix_b fragments of __nv_bfloat16 or __half, row_major or col_major");

 public:
  T dc_emu_tile[256];
};

template <typename T> class fragment<accumulator, 16, 16, 16, T, void> {
  static_assert(dc_emu_is<T, float>::value, "the emulator supports float accumulators only");

 public:
  float dc_emu_tile[256];
};

template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, const typename dc_emu_same<T>::type &v) {
  for (int i = 0; i < 256; i++) f.dc_emu_tile[i] = v;
}

/* Element (r, c) of a 16x16 tile at p: row-major p[r*ldm + c], else p[r + c*ldm]. */
static inline unsigned long long dc_emu_at(int r, int c, unsigned ldm, bool row) {
  return row ? (unsigned long long)r * ldm + (unsigned long long)c : (unsigned long long)r + (unsigned long long)c * ldm;
}

/* Copies the completing lane's fragment to every other lane's. */
template <typename F> inline void dc_emu_broadcast(dc_emu_coll *const *lanes, const F &f) {
  for (int i = 0; i < 32; i++)
    if (lanes[i]->ptr != (const void *)&f) std::memcpy(lanes[i]->ptr, &f, sizeof f);
}

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
  dc_emu_wmma_check("load_matrix_sync", p, ldm, sizeof(T));
  dc_emu_coll c = {"load_matrix_sync", nullptr, "", 0, {(unsigned long long)p, ldm, 0}, &f, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (!lanes) return;
  const bool row = dc_emu_is<L, row_major>::value;
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) f.dc_emu_tile[r * 16 + col] = p[dc_emu_at(r, col, ldm, row)];
  dc_emu_broadcast(lanes, f);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t layout) {
  dc_emu_wmma_check("load_matrix_sync", p, ldm, sizeof(float));
  dc_emu_coll c = {"load_matrix_sync", nullptr, "", 0, {(unsigned long long)p, ldm, (unsigned long long)layout}, &f, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (!lanes) return;
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) f.dc_emu_tile[r * 16 + col] = p[dc_emu_at(r, col, ldm, layout == mem_row_major)];
  dc_emu_broadcast(lanes, f);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t layout) {
  dc_emu_wmma_check("store_matrix_sync", p, ldm, sizeof(float));
  dc_emu_coll c = {"store_matrix_sync", nullptr, "", 0, {(unsigned long long)p, ldm, (unsigned long long)layout},
                   (void *)&f, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (!lanes) return;
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) p[dc_emu_at(r, col, ldm, layout == mem_row_major)] = f.dc_emu_tile[r * 16 + col];
}

/* d = a b + c: products exact in f32 (16-bit inputs), summed in f32 in k order. */
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
  dc_emu_coll mine = {"mma_sync", nullptr, "", 0, {0, 0, 0}, &d, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&mine);
  if (!lanes) return;
  float out[256];
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) {
      float s = c.dc_emu_tile[r * 16 + col];
      for (int k = 0; k < 16; k++)
        s += dc_emu_to_float(a.dc_emu_tile[r * 16 + k]) * dc_emu_to_float(b.dc_emu_tile[k * 16 + col]);
      out[r * 16 + col] = s;
    }
  std::memcpy(d.dc_emu_tile, out, sizeof out);
  dc_emu_broadcast(lanes, d);
}
}  // namespace wmma
}  // namespace nvcuda

#include "dc_common.cuh"

#endif
