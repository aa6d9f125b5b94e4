/* plan_writer.c — lays out a plan file (plan/plan_format.h): header,
 * section table with xxHash64 checksums, 64-byte aligned payloads, written
 * to a temporary name and renamed into place.  The KERN section holds LLVM
 * objects for a CPU plan (format 1) and CUDA images for a CUDA one (2).
 *
 * Every weight's content hash (XXH3 of its bytes in the file it names) is
 * taken here, from the files as they are when the plan is written, so no
 * plan can carry a hash of anything but what it will read: the original
 * checkpoints, and the files diffc wrote beside the plan (storage dtype,
 * NHWC repack, --offload-dir groups) alike.
 *
 * With a secret key (diffc --sign) a SIGN section comes last; it is signed
 * once the rest of the file is on disk, over the bytes written, with the
 * digest the reader computes (plan/plan_sign.h). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <xxhash.h>

#include "plan/plan_format.h"
#include "plan/plan_sign.h"

typedef struct {
  char tag[4];
  dc_buf data;
} section;

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_kernels(const dc_plan_kernels *k, dc_buf *b) {
  if (k->nobjects == 0) {
    dc_buf_u32(b, 0); /* no compiled kernels: every node runs its reference kernel */
    return;
  }
  dc_buf_u32(b, 1);
  dc_buf_str(b, k->triple);
  dc_buf_str(b, k->cpu);
  dc_buf_str(b, k->features);
  dc_buf_u32(b, (uint32_t)k->nobjects);
  for (int i = 0; i < k->nobjects; i++) {
    dc_buf_u64(b, k->objects[i].size);
    dc_buf_append(b, k->objects[i].data, k->objects[i].size);
  }
  dc_buf_u32(b, (uint32_t)k->nentries);
  for (int i = 0; i < k->nentries; i++) {
    dc_buf_u32(b, (uint32_t)k->entries[i].node);
    dc_buf_str(b, k->entries[i].symbol);
    dc_buf_u64(b, k->entries[i].scratch_bytes);
  }
}

/* KERN format 2 (plan/plan_format.h). */
static void put_cuda(const dc_plan_cuda *c, dc_buf *b) {
  dc_buf_u32(b, 2);
  dc_buf_str(b, c->compute);
  dc_buf_str(b, c->nvrtc_version);
  dc_buf_u32(b, (uint32_t)c->nkernels);
  for (int i = 0; i < c->nkernels; i++) {
    const dc_plan_cuda_kernel *k = &c->kernels[i];
    dc_buf_str(b, k->name);
    dc_buf_str(b, k->source);
    for (int d = 0; d < 3; d++) dc_buf_u32(b, k->grid[d]);
    for (int d = 0; d < 3; d++) dc_buf_u32(b, k->block[d]);
    dc_buf_u32(b, k->smem_bytes);
    dc_buf_u32(b, (uint32_t)k->nimages);
    for (int j = 0; j < k->nimages; j++) {
      dc_buf_str(b, k->images[j].arch);
      dc_buf_u32(b, k->images[j].kind);
      dc_buf_u64(b, k->images[j].size);
      dc_buf_append(b, k->images[j].data, k->images[j].size);
    }
  }
  dc_buf_u32(b, (uint32_t)c->nnodes);
  for (int i = 0; i < c->nnodes; i++) dc_buf_u32(b, (uint32_t)c->kernel_of_node[i]);
}

/* Sets each weight's content_hash from the bytes its file holds now. */
static dc_status *hash_weights(dc_module *m) {
  for (int32_t f = 0; f < m->nfiles; f++) {
    int used = 0;
    for (int32_t w = 0; w < m->nweights && !used; w++) used = m->weights[w].file == f;
    if (!used) continue;
    dc_mapped_file map;
    DC_TRY(dc_file_map(m->files[f].path, &map));
    dc_status *st = NULL;
    for (int32_t w = 0; w < m->nweights && !st; w++) {
      dc_weight *wt = &m->weights[w];
      if (wt->file != f) continue;
      if (wt->offset > map.size || wt->bytes > map.size - wt->offset)
        st = dc_error(DC_ERR_IO, "%s: tensor %s [%" PRIu64 ", +%" PRIu64 ") lies past the end (%zu bytes): the file changed",
                      m->files[f].path, wt->name, wt->offset, wt->bytes, map.size);
      else
        wt->content_hash = XXH3_64bits(map.data + wt->offset, (size_t)wt->bytes);
    }
    dc_file_unmap(&map);
    DC_TRY(st);
  }
  return NULL;
}

static dc_status *build_sections(const dc_plan *plan, section *s) {
  memcpy(s[0].tag, "OPTS", 4);
  dc_buf_append(&s[0].data, plan->options_json, strlen(plan->options_json));
  memcpy(s[1].tag, "WREF", 4);
  DC_TRY(hash_weights(plan->module));
  DC_TRY(dc_serialize_weights(plan->module, &s[1].data));
  memcpy(s[2].tag, "SCHD", 4);
  DC_TRY(dc_serialize(plan->module, &s[2].data));
  memcpy(s[3].tag, "KERN", 4);
  if (plan->target == DC_TARGET_CUDA) put_cuda(&plan->cuda, &s[3].data);
  else put_kernels(&plan->kernels, &s[3].data);
  memcpy(s[4].tag, "IRTX", 4);
  dc_buf_append(&s[4].data, plan->ir_text, strlen(plan->ir_text));
  for (int i = 0; i < 5; i++) DC_TRY(dc_buf_status(&s[i].data, "building the plan"));
  return NULL;
}

static dc_status *build_pipe_section(const dc_plan *plan, section *s) {
  memcpy(s->tag, "PIPE", 4);
  dc_buf_str(&s->data, plan->pipeline_json);
  const dc_text_files *fs = &plan->pipeline_files;
  dc_buf_u32(&s->data, (uint32_t)fs->nfiles);
  for (int i = 0; i < fs->nfiles; i++) {
    dc_buf_str(&s->data, fs->files[i].name);
    dc_buf_u64(&s->data, fs->files[i].size);
    dc_buf_append(&s->data, fs->files[i].data, fs->files[i].size);
  }
  return dc_buf_status(&s->data, "building the pipeline section");
}

/* The SIGN section, its signature zero until the file around it exists. */
static dc_status *build_sign_section(const uint8_t *sk, section *s) {
  memcpy(s->tag, "SIGN", 4);
  dc_buf_u32(&s->data, DC_SIGN_ALG_ED25519_BLAKE2B);
  dc_buf_append(&s->data, sk + DC_SIGN_SECRET_BYTES - DC_SIGN_PUBLIC_BYTES, DC_SIGN_PUBLIC_BYTES);
  static const uint8_t zero_sig[DC_SIGN_BYTES];
  dc_buf_append(&s->data, zero_sig, sizeof zero_sig);
  return dc_buf_status(&s->data, "building the signature");
}

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

static void put_head_checksum(uint8_t *head, size_t hsize) { put_le(head + hsize, dc_hash64(head, hsize), 8); }

/* Signs the file written so far (its last section is SIGN, at sign_offset)
 * as the reader will check it: the digest is taken over the bytes on disk,
 * then the signature, SIGN's checksum and the header checksum are patched
 * in.  The reader computes the same digest with the same function. */
static dc_status *sign_file(dc_atomic_file *f, uint8_t *head, size_t hsize, int sign_index, uint64_t sign_offset,
                            section *sign, const uint8_t *sk) {
  if (f->failed || fflush(f->fp) != 0) return NULL; /* dc_atomic_commit reports the write error */
  dc_mapped_file m;
  DC_TRY(dc_file_map(f->tmp_path, &m));
  dc_span zero[3];
  dc_plan_sign_spans(hsize, (uint32_t)sign_index, sign_offset, zero);
  uint8_t digest[DC_SIGN_DIGEST_BYTES];
  int bad = dc_plan_digest(m.data, m.size, zero, 3, digest) != 0;
  dc_file_unmap(&m);
  uint8_t *sig = sign->data.data + 4 + DC_SIGN_PUBLIC_BYTES;
  if (bad || dc_sign_digest(sig, digest, sk) != 0)
    return dc_error(DC_ERR_INTERNAL, "%s: signing failed (libsodium)", f->path);
  uint8_t *e = head + DC_PLAN_HEADER_SIZE + (size_t)sign_index * DC_PLAN_ENTRY_SIZE;
  put_le(e + 24, dc_hash64(sign->data.data, sign->data.len), 8);
  put_head_checksum(head, hsize);
  if (fseek(f->fp, 0, SEEK_SET) != 0) return dc_error(DC_ERR_IO, "%s: cannot seek: %s", f->path, strerror(errno));
  dc_atomic_write(f, head, hsize + 8);
  if (fseek(f->fp, (long)(sign_offset + 4 + DC_SIGN_PUBLIC_BYTES), SEEK_SET) != 0)
    return dc_error(DC_ERR_IO, "%s: cannot seek: %s", f->path, strerror(errno));
  dc_atomic_write(f, sig, DC_SIGN_BYTES);
  return NULL;
}

static dc_status *write_file(const char *path, uint32_t target, section *s, int n, const uint8_t *sign_secret) {
  uint64_t table_end = DC_PLAN_HEADER_SIZE + (uint64_t)n * DC_PLAN_ENTRY_SIZE + 8;
  uint64_t offsets[DC_PLAN_MAX_SECTIONS], pos = align64(table_end);
  for (int i = 0; i < n; i++) {
    offsets[i] = pos;
    pos = align64(pos + s[i].data.len);
  }
  uint8_t head[DC_PLAN_HEADER_SIZE + DC_PLAN_MAX_SECTIONS * DC_PLAN_ENTRY_SIZE + 8];
  memset(head, 0, sizeof head);
  memcpy(head, DC_PLAN_MAGIC, 8);
  put_le(head + 8, DC_PLAN_VERSION, 4);
  put_le(head + 12, target, 4);
  put_le(head + 16, (uint64_t)n, 4);
  put_le(head + 24, pos, 8);
  for (int i = 0; i < n; i++) {
    uint8_t *e = head + DC_PLAN_HEADER_SIZE + i * DC_PLAN_ENTRY_SIZE;
    memcpy(e, s[i].tag, 4);
    put_le(e + 8, offsets[i], 8);
    put_le(e + 16, s[i].data.len, 8);
    put_le(e + 24, dc_hash64(s[i].data.data, s[i].data.len), 8);
  }
  size_t hsize = DC_PLAN_HEADER_SIZE + (size_t)n * DC_PLAN_ENTRY_SIZE;
  put_head_checksum(head, hsize);

  dc_atomic_file f;
  DC_TRY(dc_atomic_open(path, &f));
  static const uint8_t zeros[64];
  dc_atomic_write(&f, head, hsize + 8);
  uint64_t at = hsize + 8;
  for (int i = 0; i < n; i++) {
    dc_atomic_write(&f, zeros, offsets[i] - at);
    dc_atomic_write(&f, s[i].data.data, s[i].data.len);
    at = offsets[i] + s[i].data.len;
  }
  dc_atomic_write(&f, zeros, pos - at);
  if (sign_secret) {
    dc_status *st = sign_file(&f, head, hsize, n - 1, offsets[n - 1], &s[n - 1], sign_secret);
    if (st) {
      dc_atomic_abort(&f);
      return st;
    }
  }
  return dc_atomic_commit(&f);
}

dc_status *dc_plan_write(const char *path, const dc_plan *plan) {
  section s[7];
  int n = 5;
  memset(s, 0, sizeof s);
  for (int i = 0; i < 7; i++) dc_buf_init(&s[i].data);
  dc_status *st = build_sections(plan, s);
  if (!st && plan->pipeline_json) st = build_pipe_section(plan, &s[n++]);
  if (!st && plan->sign_secret) st = build_sign_section(plan->sign_secret, &s[n++]); /* SIGN last */
  if (!st) st = write_file(path, plan->target, s, n, plan->sign_secret);
  for (int i = 0; i < 7; i++) dc_buf_deinit(&s[i].data);
  return st;
}
