/* tokenizer_spm_proto.c — a small reader of sentencepiece's ModelProto
 * (spiece.model), protobuf wire format, for the fields T5's tokenizer uses:
 *   1 pieces (repeated): 1 piece (string), 2 score (float), 3 type (enum)
 *   2 trainer_spec: 3 model_type, 35 byte_fallback, 40 unk_id
 *   3 normalizer_spec: 2 precompiled_charsmap (bytes)
 * Other fields are skipped by wire type; groups and truncated fields are
 * errors naming the file and the byte offset. */
#include "tokenizer_t5_impl.h"

#include <string.h>

typedef struct {
  const uint8_t *p;
  size_t n, at;  /* at: offset of p within the file, for messages */
  const char *path;
} pb_span;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static dc_status *truncated(const pb_span *s, size_t i, const char *what) {
  return dc_error(DC_ERR_FORMAT, "%s: truncated protobuf: %s at byte %zu runs past the end of its message", s->path,
                  what, s->at + i);
}

static dc_status *varint(const pb_span *s, size_t *i, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*i >= s->n) return truncated(s, *i, "a varint");
    uint8_t b = s->p[(*i)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return NULL;
  }
  return dc_error(DC_ERR_FORMAT, "%s: bad protobuf: a varint longer than 10 bytes at byte %zu", s->path, s->at + *i);
}

/* One field: its number and wire type; for WT_LEN *sub is its payload, for
 * scalars *v (I32/I64 as raw bits). */
typedef struct {
  uint32_t num;
  int wt;
  uint64_t v;
  pb_span sub;
} pb_field;

static dc_status *next_field(const pb_span *s, size_t *i, pb_field *f) {
  size_t start = *i;
  uint64_t key;
  DC_TRY(varint(s, i, &key));
  f->num = (uint32_t)(key >> 3);
  f->wt = (int)(key & 7);
  if (f->num == 0 || key >> 3 > 0x1fffffff)
    return dc_error(DC_ERR_FORMAT, "%s: bad protobuf: field number %llu at byte %zu", s->path,
                    (unsigned long long)(key >> 3), s->at + start);
  switch (f->wt) {
  case WT_VARINT: return varint(s, i, &f->v);
  case WT_I64:
  case WT_I32: {
    size_t k = f->wt == WT_I32 ? 4 : 8;
    if (s->n - *i < k) return truncated(s, *i, "a fixed-size field");
    f->v = 0;
    for (size_t b = 0; b < k; b++) f->v |= (uint64_t)s->p[*i + b] << (8 * b);
    *i += k;
    return NULL;
  }
  case WT_LEN: {
    uint64_t len;
    DC_TRY(varint(s, i, &len));
    if (len > s->n - *i) return truncated(s, start, "a length-delimited field");
    f->sub = (pb_span){s->p + *i, (size_t)len, s->at + *i, s->path};
    *i += (size_t)len;
    return NULL;
  }
  default:
    return dc_error(DC_ERR_FORMAT, "%s: bad protobuf: field %u at byte %zu has wire type %d (groups are not read)",
                    s->path, f->num, s->at + start, f->wt);
  }
}

static dc_status *want_type(const pb_span *s, const pb_field *f, int wt, const char *name) {
  if (f->wt == wt) return NULL;
  return dc_error(DC_ERR_FORMAT, "%s: bad protobuf: %s (field %u) has wire type %d, expected %d", s->path, name,
                  f->num, f->wt, wt);
}

static dc_status *read_piece(dc_t5_tokenizer *t, const pb_span *s, int index) {
  const uint8_t *text = NULL;
  size_t len = 0;
  float score = 0;
  int have_text = 0;
  pb_field f;
  for (size_t i = 0; i < s->n;) {
    DC_TRY(next_field(s, &i, &f));
    if (f.num == 1) {
      DC_TRY(want_type(s, &f, WT_LEN, "pieces.piece"));
      text = f.sub.p, len = f.sub.n, have_text = 1;
    } else if (f.num == 2) {
      DC_TRY(want_type(s, &f, WT_I32, "pieces.score"));
      uint32_t bits = (uint32_t)f.v;
      memcpy(&score, &bits, 4);
    }
  }
  if (!have_text)
    return dc_error(DC_ERR_FORMAT, "%s: piece %d (byte %zu) has no text", s->path, index, s->at);
  char where[600];
  snprintf(where, sizeof where, "%s: piece %d", s->path, index);
  return dc_t5_add_piece(t, (const char *)(text ? text : (const uint8_t *)""), len, (double)score, where);
}

static dc_status *read_trainer(const pb_span *s, dc_spm_info *info) {
  pb_field f;
  for (size_t i = 0; i < s->n;) {
    DC_TRY(next_field(s, &i, &f));
    if (f.num == 3 || f.num == 35 || f.num == 40) {
      DC_TRY(want_type(s, &f, WT_VARINT, "a trainer_spec field"));
      int v = (int)(int32_t)(uint32_t)f.v; /* int32 fields: negative values are 10-byte varints */
      if (f.num == 3) info->model_type = v;
      else if (f.num == 35) info->byte_fallback = v != 0;
      else info->unk_id = v;
    }
  }
  return NULL;
}

static dc_status *read_normalizer(const pb_span *s, dc_spm_info *info) {
  pb_field f;
  for (size_t i = 0; i < s->n;) {
    DC_TRY(next_field(s, &i, &f));
    if (f.num == 2) {
      DC_TRY(want_type(s, &f, WT_LEN, "normalizer_spec.precompiled_charsmap"));
      info->charsmap = f.sub.p;
      info->charsmap_len = f.sub.n;
    }
  }
  return NULL;
}

dc_status *dc_spm_read(dc_t5_tokenizer *t, const uint8_t *data, size_t n, const char *path, dc_spm_info *info) {
  memset(info, 0, sizeof *info);
  info->model_type = 1; /* sentencepiece's defaults when the field is absent */
  pb_span top = {data, n, 0, path};
  pb_field f;
  int npieces = 0;
  for (size_t i = 0; i < n;) {
    DC_TRY(next_field(&top, &i, &f));
    if (f.num >= 1 && f.num <= 3) DC_TRY(want_type(&top, &f, WT_LEN, "a ModelProto message"));
    if (f.num == 1) DC_TRY(read_piece(t, &f.sub, npieces++));
    else if (f.num == 2) DC_TRY(read_trainer(&f.sub, info));
    else if (f.num == 3) DC_TRY(read_normalizer(&f.sub, info));
  }
  if (!npieces) return dc_error(DC_ERR_FORMAT, "%s: no pieces: not a sentencepiece model", path);
  return NULL;
}
