/* dc_mma.cuh — the CPU emulator's version of the tensor-core primitives
 * (the GPU's is inline PTX in codegen/cuda/prelude.c; the contract, with
 * the fragment layouts, is in codegen/cuda/cuda_codegen.h).  Included after
 * dc_cuda.cuh.
 *
 * Why it is strict: these primitives expose register layouts, so a kernel's
 * bug is a wrong index, a missing wait or a stray address, and the GPU
 * gives garbage rather than an error.  Here:
 *  - dc_mma_16816_* and dc_ldmatrix_* are warp collectives (all 32 lanes at
 *    the same call site, else a deadlock or divergence error); the lane that
 *    completes one gathers every lane's fragments into the full matrices,
 *    computes, and scatters the results back by the PTX layouts;
 *  - mma: products of the 16-bit values are exact in f32, summed in k order,
 *    then added to d;
 *  - ldmatrix: every row address used must be 16-byte aligned and inside the
 *    block's shared memory (lanes not used may pass anything);
 *  - cp.async: see dc_emu.h: the destination reads NaN until a wait lands
 *    the copy, and a thread exiting with copies queued fails the launch.
 * Each call site has a static marker of its own (as __shfl_xor_sync's). */
#ifndef DC_MMA_EMU_CUH
#define DC_MMA_EMU_CUH

#ifndef DC_CUDA_EMU_CUH
#error "dc_mma.cuh is included after dc_cuda.cuh"
#endif

/* ---- mma.sync m16n8k16, f32 accumulators ------------------------------------- */
struct dc_emu_mma_lane {
  float *d;
  const unsigned *a, *b;
};

/* Half h (0 low, 1 high) of a packed pair as f32. */
static inline float dc_emu_half_of(unsigned v, int h, int f16) {
  unsigned short bits = (unsigned short)(h ? v >> 16 : v & 0xffffu);
  return f16 ? __half2float(__ushort_as_half(bits)) : __bfloat162float(__ushort_as_bfloat16(bits));
}

static inline void dc_emu_mma_16816(const void *site, const char *file, int line, int f16, float d[4],
                                    const unsigned a[4], const unsigned b[2]) {
  dc_emu_mma_lane mine = {d, a, b};
  dc_emu_coll c = {f16 ? "dc_mma_16816_f16" : "dc_mma_16816_bf16", site, file, line, {0, 0, 0}, &mine, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (!lanes) return;
  float A[16][16], B[16][8], D[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const dc_emu_mma_lane *l = (const dc_emu_mma_lane *)lanes[lane]->ptr;
    int g = lane >> 2, t = lane & 3;
    for (int h = 0; h < 2; h++) {
      A[g][2 * t + h] = dc_emu_half_of(l->a[0], h, f16);
      A[g + 8][2 * t + h] = dc_emu_half_of(l->a[1], h, f16);
      A[g][2 * t + 8 + h] = dc_emu_half_of(l->a[2], h, f16);
      A[g + 8][2 * t + 8 + h] = dc_emu_half_of(l->a[3], h, f16);
      B[2 * t + h][g] = dc_emu_half_of(l->b[0], h, f16);
      B[2 * t + 8 + h][g] = dc_emu_half_of(l->b[1], h, f16);
      D[g][2 * t + h] = l->d[h];
      D[g + 8][2 * t + h] = l->d[2 + h];
    }
  }
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 8; col++) {
      float s = 0.0f;
      for (int k = 0; k < 16; k++) s += A[r][k] * B[k][col];
      D[r][col] += s;
    }
  for (int lane = 0; lane < 32; lane++) {
    float *dl = ((const dc_emu_mma_lane *)lanes[lane]->ptr)->d;
    int g = lane >> 2, t = lane & 3;
    for (int h = 0; h < 2; h++) dl[h] = D[g][2 * t + h], dl[2 + h] = D[g + 8][2 * t + h];
  }
}

#define dc_mma_16816_bf16(d, a, b)                                             \
  ({                                                                           \
    static const char dc_emu_site_ = 0;                                        \
    dc_emu_mma_16816(&dc_emu_site_, __FILE__, __LINE__, 0, (d), (a), (b));     \
  })
#define dc_mma_16816_f16(d, a, b)                                              \
  ({                                                                           \
    static const char dc_emu_site_ = 0;                                        \
    dc_emu_mma_16816(&dc_emu_site_, __FILE__, __LINE__, 1, (d), (a), (b));     \
  })

/* ---- ldmatrix m8n8 .b16, x1 / x2 / x4, optionally transposed ------------------ */
struct dc_emu_ldm_lane {
  const void *row;
  unsigned *r;
};

static inline void dc_emu_ldmatrix(const void *site, const char *file, int line, const char *what, int count,
                                   int trans, unsigned *r, const void *row) {
  dc_emu_ldm_lane mine = {row, r};
  dc_emu_coll c = {what, site, file, line, {(unsigned long long)count, (unsigned long long)trans, 0}, &mine, 0, 0};
  dc_emu_coll *const *lanes = dc_emu_warp_sync(&c);
  if (!lanes) return;
  const unsigned short *rows[32];
  for (int lane = 0; lane < 8 * count; lane++) {
    const void *p = ((const dc_emu_ldm_lane *)lanes[lane]->ptr)->row;
    if ((unsigned long long)p % 16)
      dc_emu_fail("%s:%d: %s: lane %d's row address %p is not 16-byte aligned", file, line, what, lane, p);
    if (!dc_emu_in_shared(p, 16))
      dc_emu_fail("%s:%d: %s: lane %d's row address %p is not inside the block's shared memory", file, line, what,
                  lane, p);
    rows[lane] = (const unsigned short *)p;
  }
  unsigned out[32][4];
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < count; i++) {
      int q = lane >> 2, t = lane & 3;
      unsigned lo, hi;
      if (trans) lo = rows[8 * i + 2 * t][q], hi = rows[8 * i + 2 * t + 1][q];
      else lo = rows[8 * i + q][2 * t], hi = rows[8 * i + q][2 * t + 1];
      out[lane][i] = lo | hi << 16;
    }
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < count; i++) ((const dc_emu_ldm_lane *)lanes[lane]->ptr)->r[i] = out[lane][i];
}

#define DC_EMU_LDMATRIX(what, count, trans, r, row)                                    \
  ({                                                                                   \
    static const char dc_emu_site_ = 0;                                                \
    dc_emu_ldmatrix(&dc_emu_site_, __FILE__, __LINE__, what, count, trans, (r), (row)); \
  })
#define dc_ldmatrix_x1(r, row) DC_EMU_LDMATRIX("dc_ldmatrix_x1", 1, 0, r, row)
#define dc_ldmatrix_x2(r, row) DC_EMU_LDMATRIX("dc_ldmatrix_x2", 2, 0, r, row)
#define dc_ldmatrix_x4(r, row) DC_EMU_LDMATRIX("dc_ldmatrix_x4", 4, 0, r, row)
#define dc_ldmatrix_x2_trans(r, row) DC_EMU_LDMATRIX("dc_ldmatrix_x2_trans", 2, 1, r, row)
#define dc_ldmatrix_x4_trans(r, row) DC_EMU_LDMATRIX("dc_ldmatrix_x4_trans", 4, 1, r, row)

/* ---- cp.async (the queue is in dc_emu.cpp) ------------------------------------ */
#define dc_cp_async_16(smem, gmem, src_bytes) dc_emu_cp_async((smem), (gmem), (src_bytes), __FILE__, __LINE__)
#define dc_cp_async_commit() dc_emu_cp_async_commit()
/* The count must be a constant, as the PTX instruction's immediate. */
#define DC_CP_ASYNC_WAIT(n)                                                     \
  do {                                                                          \
    static_assert((n) >= 0, "DC_CP_ASYNC_WAIT takes a non-negative literal");   \
    dc_emu_cp_async_wait((n), __FILE__, __LINE__);                              \
  } while (0)

#endif
