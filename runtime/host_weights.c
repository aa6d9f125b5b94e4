/* host_weights.c — see host_weights.h: the offloaded weights' host side,
 * pinned (one block read at load) or on-demand (read at each upload
 * through a bounce buffer). */
#include "host_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define NOT_HERE UINT64_MAX

dc_status *dc_host_memory_mode(const dc_module *m, const char *plan_path, int *on_demand) {
  const char *v = dc_module_get_meta(m, "host_memory");
  *on_demand = v && !strcmp(v, "on-demand");
  if (!v || *on_demand || !strcmp(v, "pinned")) return NULL;
  return dc_error(DC_ERR_FORMAT, "%s: host_memory \"%s\": expected pinned or on-demand (a plan from a newer diffc?)",
                  plan_path, v);
}

/* offloaded[w]: some node of w is read by uploads and none by a kernel. */
static void mark_offloaded(dc_host_weights *hw) {
  const dc_module *m = hw->m;
  char *kernel_reads = hw->offloaded + m->nweights; /* scratch: the second half of the allocation */
  for (int32_t s = 0; s < m->nnodes; s++) {
    if (m->nodes[s].op != OP_WEIGHT) continue;
    if (dc_weight_offloaded(m, s)) hw->offloaded[m->nodes[s].ref] = 1;
    else kernel_reads[m->nodes[s].ref] = 1;
  }
  for (int w = 0; w < m->nweights; w++) {
    hw->offloaded[w] &= !kernel_reads[w];
    if (!hw->offloaded[w]) continue;
    hw->offloaded_bytes += m->weights[w].bytes;
    if (m->weights[w].bytes > hw->largest) hw->largest = m->weights[w].bytes;
  }
}

static dc_status *open_files(dc_host_weights *hw) {
  const dc_module *m = hw->m;
  for (int w = 0; w < m->nweights; w++) {
    int f = m->weights[w].file;
    if (!hw->offloaded[w] || hw->fd[f] >= 0) continue;
    hw->fd[f] = open(m->files[f].path, O_RDONLY | O_CLOEXEC);
    if (hw->fd[f] < 0)
      return dc_error(DC_ERR_IO, "%s: weight file %s: cannot open: %s (moved or deleted since compile?)", hw->plan_path,
                      m->files[f].path, strerror(errno));
  }
  return NULL;
}

dc_status *dc_host_weights_init(dc_host_weights *hw, const char *plan_path, const dc_module *m) {
  memset(hw, 0, sizeof *hw);
  hw->m = m;
  hw->plan_path = plan_path;
  DC_TRY(dc_host_memory_mode(m, plan_path, &hw->on_demand));
  hw->offloaded = dc_calloc(2 * (size_t)m->nweights + 1, 1);
  hw->fd = dc_malloc(((size_t)m->nfiles + 1) * sizeof *hw->fd);
  if (!hw->offloaded || !hw->fd) return dc_nomem("binding offloaded weights");
  for (int f = 0; f <= m->nfiles; f++) hw->fd[f] = -1;
  mark_offloaded(hw);
  return open_files(hw);
}

void dc_host_weights_close_files(dc_host_weights *hw) {
  for (int f = 0; hw->fd && f < hw->m->nfiles; f++)
    if (hw->fd[f] >= 0) close(hw->fd[f]), hw->fd[f] = -1;
}

void dc_host_weights_deinit(dc_host_weights *hw) {
  if (!hw->m) return;
  dc_host_weights_close_files(hw);
  dc_free(hw->offloaded);
  dc_free(hw->fd);
  dc_free(hw->offset);
  dc_free(hw->block);
  dc_free(hw->bounce);
  memset(hw, 0, sizeof *hw);
}

dc_status *dc_host_weights_read(const dc_host_weights *hw, int w, uint64_t at, void *dst, uint64_t len) {
  const dc_module *m = hw->m;
  const dc_weight *wt = &m->weights[w];
  const char *file = m->files[wt->file].path;
  uint64_t pos = wt->offset + at, done = 0;
  int fd = hw->fd[wt->file];
  if (fd < 0) return dc_error(DC_ERR_INTERNAL, "weight file %s is not open for reading", file);
  while (done < len) {
    ssize_t n = pread(fd, (uint8_t *)dst + done, (size_t)(len - done), (off_t)(pos + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return dc_error(DC_ERR_IO, "weight file %s: tensor \"%s\": reading %llu bytes at file offset %llu: %s", file,
                      wt->name, (unsigned long long)len, (unsigned long long)pos, strerror(errno));
    if (n == 0)
      return dc_error(DC_ERR_IO,
                      "weight file %s: tensor \"%s\": reading %llu bytes at file offset %llu got only %llu (the file "
                      "ends there; it changed since the plan was loaded?)",
                      file, wt->name, (unsigned long long)len, (unsigned long long)pos, (unsigned long long)done);
    done += (uint64_t)n;
  }
  return NULL;
}

/* pinned: every offloaded weight in one block, packed (uploads memcpy
 * them; nothing reads them in place, so no alignment is needed). */
static dc_status *stage_block(dc_host_weights *hw) {
  const dc_module *m = hw->m;
  hw->offset = dc_malloc(((size_t)m->nweights + 1) * sizeof *hw->offset);
  if (!hw->offset) return dc_nomem("laying out offloaded weights");
  uint64_t top = 0;
  for (int w = 0; w < m->nweights; w++) {
    hw->offset[w] = NOT_HERE;
    if (!hw->offloaded[w]) continue;
    hw->offset[w] = top;
    top += m->weights[w].bytes;
  }
  hw->block_bytes = top;
  hw->block = dc_malloc(top ? (size_t)top : 1);
  if (!hw->block) return dc_nomem("reading the offloaded weights into host memory");
  for (int w = 0; w < m->nweights; w++)
    if (hw->offloaded[w])
      DC_TRY(dc_status_annotate(dc_host_weights_read(hw, w, 0, hw->block + hw->offset[w], m->weights[w].bytes),
                                "%s: reading the offloaded weights into host memory (host_memory pinned)",
                                hw->plan_path));
  dc_host_weights_close_files(hw); /* everything is in the block now */
  return NULL;
}

dc_status *dc_host_weights_stage(dc_host_weights *hw, uint64_t bounce_bytes) {
  if (!hw->offloaded_bytes) return NULL;
  if (!hw->on_demand) return stage_block(hw);
  uint64_t chunk = bounce_bytes ? bounce_bytes : DC_CPU_BOUNCE_BYTES;
  hw->bounce_bytes = chunk < hw->largest ? chunk : hw->largest;
  hw->bounce = dc_malloc((size_t)hw->bounce_bytes);
  return hw->bounce ? NULL : dc_nomem("allocating the bounce buffer for on-demand weights");
}

dc_status *dc_host_weights_upload(dc_host_weights *hw, int w, void *dst) {
  uint64_t bytes = hw->m->weights[w].bytes;
  if (!hw->on_demand) {
    memcpy(dst, hw->block + hw->offset[w], (size_t)bytes);
    return NULL;
  }
  for (uint64_t at = 0; at < bytes; at += hw->bounce_bytes) {
    uint64_t len = bytes - at < hw->bounce_bytes ? bytes - at : hw->bounce_bytes;
    DC_TRY(dc_host_weights_read(hw, w, at, hw->bounce, len));
    memcpy((uint8_t *)dst + at, hw->bounce, (size_t)len);
  }
  return NULL;
}

uint64_t dc_host_weights_held(const dc_host_weights *hw) { return hw->on_demand ? hw->bounce_bytes : hw->block_bytes; }
