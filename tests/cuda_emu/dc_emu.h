/* dc_emu.h — the interface between emulated kernels (dc_cuda.cuh) and the
 * emulator's fiber runtime (dc_emu.cpp). */
#ifndef DC_EMU_H
#define DC_EMU_H

#include <stddef.h>

struct dc_emu_uint3 {
  unsigned x, y, z;
};

/* What a kernel sees of the current thread. */
struct dc_emu_ids {
  dc_emu_uint3 threadIdx, blockIdx, blockDim, gridDim;
};

/* One lane's arrival at a warp collective: all 32 lanes must arrive with the
 * same (what, site, key); the last one to arrive gets every lane's
 * record and performs the operation for the warp. */
struct dc_emu_coll {
  const char *what;
  const void *site; /* the call site's marker (shuffles), else NULL */
  const char *file;
  int line;
  unsigned long long key[3];
  void *ptr;             /* the lane's operand (a fragment) */
  unsigned val, result;  /* shuffles */
};

extern "C" {
extern dc_emu_ids *dc_emu_cur;
void dc_emu_syncthreads(const void *site, const char *file, int line);
/* Returns the 32 lanes' records to the lane that completes the collective,
 * NULL to the others (after it completed). */
dc_emu_coll *const *dc_emu_warp_sync(dc_emu_coll *mine);
unsigned char *dc_emu_dynamic_smem(void);
/* Ends the launch with an error naming the thread; does not return. */
[[noreturn]] void dc_emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
}

/* wmma load/store: the pointer must be 256-bit aligned and ldm a multiple of
 * 16 bytes, as CUDA requires; else the launch fails. */
extern "C" void dc_emu_wmma_check(const char *what, const void *p, unsigned ldm, unsigned elem_bytes);

/* 1 when [p, p + n) lies in the running block's shared memory, static
 * (__shared__) or dynamic (DC_DYNAMIC_SMEM). */
extern "C" int dc_emu_in_shared(const void *p, size_t n);

/* cp.async (dc_mma.cuh), a queue per thread: a copy of 16 bytes is read
 * from src at issue (zeros when src_bytes is 0) and dst filled with 0xff
 * until a wait completes it; commit closes the open group; wait(n) performs
 * the copies of all committed groups but the newest n.  A thread exiting
 * with copies still queued fails the launch, as does a misaligned address
 * or a destination outside shared memory. */
extern "C" void dc_emu_cp_async(void *dst, const void *src, int src_bytes, const char *file, int line);
extern "C" void dc_emu_cp_async_commit(void);
extern "C" void dc_emu_cp_async_wait(int n, const char *file, int line);

/* Runs entry(params) on every thread of the grid; 0, or -1 with a message in
 * err (a deadlock, a misused collective, bad geometry). */
extern "C" int dc_emu_run(const unsigned grid[3], const unsigned block[3], unsigned smem, void (*entry)(void **params),
                          void **params, char *err, size_t errcap);

#endif
