/* dc_emu.cpp — the fiber runtime of the CUDA CPU emulator (see dc_cuda.cuh).
 * Compiled once per test process and linked into every emulated kernel's
 * shared object (each .so gets its own copy, its symbols hidden but
 * dc_emu_run's).
 *
 * Execution model: blocks run one at a time in grid order; the threads of a
 * block are ucontext fibers that run one at a time until they block (at a
 * barrier or a warp collective) or exit.  Even-numbered blocks run their
 * threads in ascending order, odd-numbered ones in descending order, so a
 * missing barrier shows whichever thread reads first.  When no thread can run
 * and some have not exited, the block is deadlocked: the error says who waits
 * where and who exited. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "dc_emu.h"

#define DC_EMU_API extern "C" __attribute__((visibility("default")))

/* The bounds of this shared object's __shared__ variables (dc_cuda.cuh puts
 * them in section dc_emu_shared; the linker defines these when it exists). */
extern "C" unsigned char __start_dc_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" unsigned char __stop_dc_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace {

enum fiber_state { RUNNABLE, AT_BARRIER, AT_WARP, EXITED };

/* One cp.async copy in flight: its bytes were read at issue. */
struct async_copy {
  unsigned char *dst;
  unsigned char bytes[16];
  unsigned group; /* the thread's commit count when it was issued */
  const char *file;
  int line;
};

struct fiber {
  dc_emu_ids ids;
  ucontext_t ctx;
  fiber_state state;
  unsigned linear; /* thread index within the block */
  dc_emu_coll *coll; /* while AT_WARP */
  async_copy *copies; /* queued cp.async copies, oldest first (malloc'd on first use) */
  unsigned ncopies, copy_cap, committed;
};

struct warp {
  int arrived;
  int nlanes;
};

struct launch {
  void (*entry)(void **);
  void **params;
  fiber *fibers;
  warp *warps;
  unsigned nthreads, nwarps;
  unsigned char *stacks;
  size_t stack_bytes, map_bytes;
  unsigned char *smem;
  unsigned smem_bytes;
  ucontext_t sched;
  fiber *cur;
  int barrier_arrived;
  const void *bar_site;
  const char *bar_file;
  int bar_line;
  int failed;
  char err[1024];
};

launch *L;
pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
const unsigned long long SMEM_MAX = 227 * 1024; /* sm_90's most dynamic shared memory per block */

void describe_thread(const fiber *f, char *buf, size_t cap) {
  snprintf(buf, cap, "block (%u,%u,%u) thread (%u,%u,%u)", f->ids.blockIdx.x, f->ids.blockIdx.y, f->ids.blockIdx.z,
           f->ids.threadIdx.x, f->ids.threadIdx.y, f->ids.threadIdx.z);
}

/* Back to the scheduler; returns when this fiber is resumed. */
void yield_to_scheduler() {
  fiber *f = L->cur;
  swapcontext(&f->ctx, &L->sched);
}

void fiber_main() {
  L->entry(L->params);
  fiber *f = L->cur;
  if (f->ncopies)
    dc_emu_fail("exited with %u cp.async copies not waited for (the first issued at %s:%d): a missing "
                "cp.async.commit_group / wait_group", f->ncopies, f->copies[0].file, f->copies[0].line);
  f->state = EXITED;
  /* returning resumes uc_link: the scheduler */
}

int same_site(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

int same_coll(const dc_emu_coll *a, const dc_emu_coll *b) {
  return same_site(a->what, b->what) && a->site == b->site &&
         memcmp(a->key, b->key, sizeof a->key) == 0;
}

void describe_coll(const dc_emu_coll *c, char *buf, size_t cap) {
  if (c->file && *c->file && !strcmp(c->what, "__shfl_xor_sync"))
    snprintf(buf, cap, "%s at %s:%d (lane mask %llu)", c->what, c->file, c->line, c->key[0]);
  else if (c->file && *c->file)
    snprintf(buf, cap, "%s at %s:%d", c->what, c->file, c->line);
  else
    snprintf(buf, cap, "%s (pointer %#llx, ldm %llu, layout %llu)", c->what, c->key[0], c->key[1], c->key[2]);
}

}  // namespace

extern "C" {
dc_emu_ids *dc_emu_cur;

void dc_emu_fail(const char *fmt, ...) {
  char who[96], msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  describe_thread(L->cur, who, sizeof who);
  if (!L->failed) snprintf(L->err, sizeof L->err, "%s: %s", who, msg);
  L->failed = 1;
  swapcontext(&L->cur->ctx, &L->sched); /* never resumed */
  abort();
}

unsigned char *dc_emu_dynamic_smem(void) { return L->smem; }

void dc_emu_syncthreads(const void *site, const char *file, int line) {
  fiber *f = L->cur;
  if (L->barrier_arrived == 0) {
    L->bar_site = site;
    L->bar_file = file;
    L->bar_line = line;
  } else if (site != L->bar_site) {
    dc_emu_fail("__syncthreads at %s:%d while other threads wait at another one, at %s:%d (a barrier in divergent code)",
                file, line, L->bar_file, L->bar_line);
  }
  if (++L->barrier_arrived < (int)L->nthreads) {
    f->state = AT_BARRIER;
    yield_to_scheduler();
    return;
  }
  L->barrier_arrived = 0; /* the last to arrive releases everybody */
  for (unsigned i = 0; i < L->nthreads; i++)
    if (L->fibers[i].state == AT_BARRIER) L->fibers[i].state = RUNNABLE;
}

dc_emu_coll *const *dc_emu_warp_sync(dc_emu_coll *mine) {
  static dc_emu_coll *lanes[32];
  fiber *f = L->cur;
  unsigned w = f->linear / 32;
  warp *wp = &L->warps[w];
  if (wp->nlanes != 32)
    dc_emu_fail("%s in a partial warp (the block has %u threads, not a multiple of 32)", mine->what, L->nthreads);
  f->coll = mine;
  if (++wp->arrived < 32) {
    f->state = AT_WARP;
    yield_to_scheduler();
    return nullptr;
  }
  wp->arrived = 0;
  for (unsigned i = 0; i < 32; i++) {
    fiber *g = &L->fibers[w * 32 + i];
    lanes[i] = g->coll;
    if (!same_coll(g->coll, mine)) {
      char a[200], b[200];
      describe_coll(g->coll, a, sizeof a);
      describe_coll(mine, b, sizeof b);
      dc_emu_fail("warp %u: lane %u reached %s while lane %u reached %s (divergent warp collective)", w, i, a,
                  f->linear % 32, b);
    }
    if (g != f) g->state = RUNNABLE;
  }
  return lanes;
}

int dc_emu_in_shared(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  const unsigned char *lo = __start_dc_emu_shared, *hi = __stop_dc_emu_shared;
  if (L->smem && b >= L->smem && n <= L->smem_bytes && b <= L->smem + (L->smem_bytes - n)) return 1;
  return lo != hi && b >= lo && n <= (size_t)(hi - lo) && b <= hi - n;
}

void dc_emu_cp_async(void *dst, const void *src, int src_bytes, const char *file, int line) {
  fiber *f = L->cur;
  if ((unsigned long long)dst % 16 || (unsigned long long)src % 16)
    dc_emu_fail("%s:%d: cp.async from %p to %p: both addresses must be 16-byte aligned", file, line, src, dst);
  if (!dc_emu_in_shared(dst, 16))
    dc_emu_fail("%s:%d: cp.async destination %p is not inside the block's shared memory", file, line, dst);
  if (src_bytes != 16 && src_bytes != 0)
    dc_emu_fail("%s:%d: cp.async with src_bytes %d (16, or 0 to zero-fill)", file, line, src_bytes);
  if (f->ncopies == f->copy_cap) {
    unsigned cap = f->copy_cap ? 2 * f->copy_cap : 16;
    async_copy *more = (async_copy *)realloc(f->copies, cap * sizeof *more);
    if (!more) dc_emu_fail("%s:%d: out of memory queueing a cp.async", file, line);
    f->copies = more, f->copy_cap = cap;
  }
  async_copy *c = &f->copies[f->ncopies++];
  c->dst = (unsigned char *)dst;
  if (src_bytes) memcpy(c->bytes, src, 16);
  else memset(c->bytes, 0, 16);
  c->group = f->committed, c->file = file, c->line = line;
  memset(dst, 0xff, 16); /* until a wait lands it: NaN as f32, bf16 and f16 */
}

void dc_emu_cp_async_commit(void) { L->cur->committed++; }

void dc_emu_cp_async_wait(int n, const char *file, int line) {
  fiber *f = L->cur;
  if (n < 0) dc_emu_fail("%s:%d: cp.async.wait_group %d", file, line, n);
  /* Groups below `done` are complete; copies not yet committed stay queued. */
  unsigned done = f->committed > (unsigned)n ? f->committed - (unsigned)n : 0, kept = 0;
  for (unsigned i = 0; i < f->ncopies; i++) {
    async_copy *c = &f->copies[i];
    if (c->group < done) memcpy(c->dst, c->bytes, 16);
    else f->copies[kept++] = *c;
  }
  f->ncopies = kept;
}

void dc_emu_wmma_check(const char *what, const void *p, unsigned ldm, unsigned elem_bytes) {
  if ((unsigned long long)p % 32)
    dc_emu_fail("%s: pointer %p is not 256-bit aligned", what, p);
  if (ldm < 16 || (ldm * elem_bytes) % 16)
    dc_emu_fail("%s: ldm %u is not a multiple of %u elements (16 bytes) of at least 16", what, ldm, 16 / elem_bytes);
}
}

namespace {

/* Stacks for every thread of a block, each with a guard page below it so an
 * overflow faults instead of corrupting its neighbour. */
int stacks_map(launch *l) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const char *env = getenv("DC_EMU_STACK_KB");
  size_t kb = env && atoi(env) > 0 ? (size_t)atoi(env) : 64;
  l->stack_bytes = (kb * 1024 + page - 1) / page * page;
  l->map_bytes = (l->stack_bytes + page) * l->nthreads;
  void *p = mmap(nullptr, l->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return -1;
  l->stacks = (unsigned char *)p;
  for (unsigned i = 0; i < l->nthreads; i++) mprotect(l->stacks + i * (l->stack_bytes + page), page, PROT_NONE);
  return 0;
}

unsigned char *stack_of(launch *l, unsigned i) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return l->stacks + i * (l->stack_bytes + page) + page;
}

/* Who is stuck where, for the deadlock message. */
void describe_deadlock(launch *l, const dc_emu_uint3 &b) {
  unsigned at_bar = 0, exited = 0, at_warp = 0;
  const fiber *first_warp = nullptr;
  for (unsigned i = 0; i < l->nthreads; i++) {
    const fiber *f = &l->fibers[i];
    at_bar += f->state == AT_BARRIER;
    exited += f->state == EXITED;
    if (f->state == AT_WARP && !at_warp++) first_warp = f;
  }
  int n = snprintf(l->err, sizeof l->err, "block (%u,%u,%u): deadlock:", b.x, b.y, b.z);
  if (at_bar)
    n += snprintf(l->err + n, sizeof l->err - (size_t)n, " %u of %u threads wait at __syncthreads (%s:%d);", at_bar,
                  l->nthreads, l->bar_file, l->bar_line);
  if (at_warp) {
    char c[200];
    describe_coll(first_warp->coll, c, sizeof c);
    n += snprintf(l->err + n, sizeof l->err - (size_t)n, " %u threads wait at a warp collective (thread %u: %s);",
                  at_warp, first_warp->linear, c);
  }
  if (exited)
    snprintf(l->err + n, sizeof l->err - (size_t)n, " %u threads exited without reaching it", exited);
}

int run_block(launch *l, const dc_emu_uint3 &b, int descending) {
  if (l->smem_bytes) memset(l->smem, 0xff, l->smem_bytes);
  unsigned char *shared_lo = __start_dc_emu_shared, *shared_hi = __stop_dc_emu_shared;
  if (shared_lo != shared_hi) memset(shared_lo, 0xff, (size_t)(shared_hi - shared_lo));
  l->barrier_arrived = 0;
  for (unsigned w = 0; w < l->nwarps; w++) l->warps[w].arrived = 0;
  for (unsigned i = 0; i < l->nthreads; i++) {
    fiber *f = &l->fibers[i];
    f->ids.blockIdx = b;
    f->state = RUNNABLE;
    f->coll = nullptr;
    f->ncopies = f->committed = 0;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = stack_of(l, i);
    f->ctx.uc_stack.ss_size = l->stack_bytes;
    f->ctx.uc_link = &l->sched;
    makecontext(&f->ctx, fiber_main, 0);
  }
  for (int progress = 1; progress;) {
    progress = 0;
    for (unsigned k = 0; k < l->nthreads; k++) {
      fiber *f = &l->fibers[descending ? l->nthreads - 1 - k : k];
      if (f->state != RUNNABLE) continue;
      l->cur = f;
      dc_emu_cur = &f->ids;
      swapcontext(&l->sched, &f->ctx);
      if (l->failed) return -1;
      progress = 1;
    }
  }
  for (unsigned i = 0; i < l->nthreads; i++)
    if (l->fibers[i].state != EXITED) {
      describe_deadlock(l, b);
      return -1;
    }
  return 0;
}

const char *check_geometry(const unsigned grid[3], const unsigned block[3], unsigned smem, char *buf, size_t cap) {
  unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
  if (!grid[0] || !grid[1] || !grid[2] || grid[1] > 65535 || grid[2] > 65535 || grid[0] > 0x7fffffffu)
    snprintf(buf, cap, "grid (%u,%u,%u) is outside CUDA's limits", grid[0], grid[1], grid[2]);
  else if (!threads || threads > 1024 || block[0] > 1024 || block[1] > 1024 || block[2] > 64)
    snprintf(buf, cap, "block (%u,%u,%u) is outside CUDA's limits (1..1024 threads)", block[0], block[1], block[2]);
  else if (smem > SMEM_MAX)
    snprintf(buf, cap, "%u bytes of dynamic shared memory exceed the %llu a block may have", smem, SMEM_MAX);
  else
    return nullptr;
  return buf;
}

int launch_init(launch *l, const unsigned block[3], unsigned smem) {
  l->nthreads = block[0] * block[1] * block[2];
  l->nwarps = (l->nthreads + 31) / 32;
  l->fibers = (fiber *)calloc(l->nthreads, sizeof *l->fibers);
  l->warps = (warp *)calloc(l->nwarps, sizeof *l->warps);
  l->smem_bytes = smem;
  l->smem = smem ? (unsigned char *)aligned_alloc(128, (smem + 127) / 128 * 128) : nullptr;
  if (!l->fibers || !l->warps || (smem && !l->smem) || stacks_map(l)) return -1;
  for (unsigned w = 0; w < l->nwarps; w++) l->warps[w].nlanes = w + 1 < l->nwarps || l->nthreads % 32 == 0 ? 32 : (int)(l->nthreads % 32);
  return 0;
}

void launch_deinit(launch *l) {
  if (l->stacks) munmap(l->stacks, l->map_bytes);
  for (unsigned i = 0; l->fibers && i < l->nthreads; i++) free(l->fibers[i].copies);
  free(l->fibers);
  free(l->warps);
  free(l->smem);
}

void set_thread_ids(launch *l, const unsigned grid[3], const unsigned block[3]) {
  for (unsigned i = 0; i < l->nthreads; i++) {
    fiber *f = &l->fibers[i];
    f->linear = i;
    f->ids.threadIdx = {i % block[0], i / block[0] % block[1], i / (block[0] * block[1])};
    f->ids.blockDim = {block[0], block[1], block[2]};
    f->ids.gridDim = {grid[0], grid[1], grid[2]};
  }
}

}  // namespace

DC_EMU_API int dc_emu_run(const unsigned grid[3], const unsigned block[3], unsigned smem, void (*entry)(void **params),
                          void **params, char *err, size_t errcap) {
  char buf[200];
  const char *bad = check_geometry(grid, block, smem, buf, sizeof buf);
  if (bad) {
    snprintf(err, errcap, "%s", bad);
    return -1;
  }
  pthread_mutex_lock(&run_lock);
  launch l;
  memset((void *)&l, 0, sizeof l);
  l.entry = entry;
  l.params = params;
  L = &l;
  int rc = launch_init(&l, block, smem);
  if (rc) snprintf(l.err, sizeof l.err, "out of memory for %u threads' stacks (%s)", l.nthreads, strerror(errno));
  if (!rc) set_thread_ids(&l, grid, block);
  unsigned long long nblock = 0;
  for (unsigned z = 0; !rc && z < grid[2]; z++)
    for (unsigned y = 0; !rc && y < grid[1]; y++)
      for (unsigned x = 0; !rc && x < grid[0]; x++) rc = run_block(&l, {x, y, z}, (int)(nblock++ & 1));
  if (rc) snprintf(err, errcap, "%s", l.err);
  launch_deinit(&l);
  L = nullptr;
  dc_emu_cur = nullptr;
  pthread_mutex_unlock(&run_lock);
  return rc ? -1 : 0;
}
