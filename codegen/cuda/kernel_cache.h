/* kernel_cache.h — compiled CUDA kernels cached on disk, so compiling the
 * same model again takes no NVRTC time.  An entry is keyed by
 * dc_nvrtc_cache_key (xxh64 of source, dc_cuda.cuh, options, NVRTC version
 * and arch) and lives in DIR/cuda-<key as 16 hex digits>.bin:
 *
 *   offset 0   char[8] magic "DCKCACHE"
 *          8   u32     entry format (1)
 *         12   u32     reserved, 0
 *         16   u64     key
 *         24   u64     payload size
 *         32   u64     xxh64 of the payload
 *         40   payload: u64 log size, log bytes (NVRTC's warnings, so that a
 *              cached compile reports them again), u64 image size, image
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

#include "nvrtc.h"

typedef struct {
  char *dir;     /* NULL when the cache is off */
  char *warning; /* the first reason the cache could not be used, or NULL */
  int read_only; /* a write failed: entries are still read, no more written */
  int hits, misses, rejected, written;
  pthread_mutex_t lock; /* guards the counters and warning */
} dc_kcache;

/* dir NULL = the default location; disabled = --no-kernel-cache.  Fails
 * only when memory runs out. */
dc_status *dc_kcache_open(const char *dir, int disabled, dc_kcache *out);
void dc_kcache_close(dc_kcache *c);

/* The default directory (see above), dc_malloc'd; NULL when neither
 * $DIFFC_CACHE_DIR, $XDG_CACHE_HOME nor $HOME is set. */
char *dc_kcache_default_dir(void);

/* 1 with *out filled when a valid entry for key exists, else 0. */
int dc_kcache_get(dc_kcache *c, uint64_t key, dc_nvrtc_output *out);
/* Stores o under key; a failure becomes c->warning and turns writing off. */
void dc_kcache_put(dc_kcache *c, uint64_t key, const dc_nvrtc_output *o);

/* The entry file of key, dc_malloc'd (tests corrupt entries through it). */
char *dc_kcache_entry_path(const dc_kcache *c, uint64_t key);

#endif
