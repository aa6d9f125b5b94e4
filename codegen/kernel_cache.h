/* kernel_cache.h — compiled kernels cached on disk, so compiling the same
 * model again (or the same blocks in another model, or with other memory
 * options) takes no compiler time.  Two kinds share one directory: CUDA
 * images keyed by dc_nvrtc_cache_key (xxh64 of source, dc_cuda.cuh, options,
 * NVRTC version and arch), and CPU object files keyed by
 * dc_llvm_kernel_key (xxh64 of the kernel's LLVM IR before optimization,
 * the target, the optimization pipeline and LLVM's version).  Either key is
 * a hash of everything the compiler's output depends on, so an entry never
 * goes stale: a changed generator gives a changed source and a new key.
 * An entry lives in DIR/<kind>-<key as 16 hex digits>.bin:
 *
 *   offset 0   char[8] magic "DCKCACHE"
 *          8   u32     entry format (1)
 *         12   u32     reserved, 0
 *         16   u64     key
 *         24   u64     payload size
 *         32   u64     xxh64 of the payload
 *         40   payload: u64 log size, log bytes (the compiler's warnings, so
 *              that a cached compile reports them again), u64 image size,
 *              image
 *
 * All integers little-endian.  Every read is verified; an entry that is
 * truncated, corrupt or holds another key is ignored (counted in
 * `rejected`) and the fresh compile replaces it.  Entries are written
 * atomically (temporary name, then rename), so readers never see half of
 * one.  DIR is --kernel-cache DIR, else $DIFFC_CACHE_DIR, else
 * $XDG_CACHE_HOME/diffc, else ~/.cache/diffc, created as needed.  A cache
 * that cannot be created or written is a warning: compiling goes on
 * without it.  Safe to use from several threads. */
#ifndef DC_KERNEL_CACHE_H
#define DC_KERNEL_CACHE_H

#include <pthread.h>

#include "support/support.h"

/* A compiler's output: the image (a cubin, PTX text with its NUL, or an
 * ELF object) and its log when it said anything although it succeeded. */
typedef struct {
  dc_buf image;
  char *log; /* NULL when empty */
} dc_kernel_image;
void dc_kernel_image_deinit(dc_kernel_image *k);

typedef struct {
  char *dir;     /* NULL when the cache is off */
  char kind[8];  /* "cuda" or "cpu": the entries' file name prefix */
  char *warning; /* the first reason the cache could not be used, or NULL */
  int read_only; /* a write failed: entries are still read, no more written */
  int hits, misses, rejected, written;
  pthread_mutex_t lock; /* guards the counters and warning */
} dc_kcache;

/* dir NULL = the default location; disabled = --no-kernel-cache; kind
 * "cuda" or "cpu".  Fails only when memory runs out. */
dc_status *dc_kcache_open(const char *dir, int disabled, const char *kind, dc_kcache *out);
void dc_kcache_close(dc_kcache *c);

/* The default directory (see above), dc_malloc'd; NULL when neither
 * $DIFFC_CACHE_DIR, $XDG_CACHE_HOME nor $HOME is set. */
char *dc_kcache_default_dir(void);

/* 1 with *out filled when a valid entry for key exists, else 0. */
int dc_kcache_get(dc_kcache *c, uint64_t key, dc_kernel_image *out);
/* Stores o under key; a failure becomes c->warning and turns writing off. */
void dc_kcache_put(dc_kcache *c, uint64_t key, const dc_kernel_image *o);

/* The entry file of key, dc_malloc'd (tests corrupt entries through it). */
char *dc_kcache_entry_path(const dc_kcache *c, uint64_t key);

#endif
