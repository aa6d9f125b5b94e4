/* k_text.c — the kernels that read token ids: embedding (rows of a table
 * gathered by id) and eos_pool (one row per sequence, at its eos or largest
 * id).  Both move whole rows with memcpy (a 16-bit or fp8 table is decoded
 * element by element, exactly), so they are bit-exact; the ids are i32 or
 * i64 and read as i64.  An id outside the table gives a row of zeros
 * (ops.def): the table is never read out of bounds, whatever the ids. */
#include "k_gemm.h" /* kg_load_f32_from: a stored dtype read as f32 */

/* Id i (an i64 value) of buffer buf, whose ids have dtype t, as i64. */
static LLVMValueRef load_id(dc_kgen *g, int buf, dc_dtype t, LLVMValueRef i) {
  LLVMTypeRef it = t == DT_I32 ? g->i32 : g->i64;
  LLVMValueRef v = LLVMBuildLoad2(g->b, it, kg_gep_t(g, it, kg_buf_as(g, buf, it), i), "id");
  return t == DT_I32 ? LLVMBuildSExt(g->b, v, g->i64, "") : v;
}

static LLVMValueRef row_ptr(dc_kgen *g, int buf, LLVMValueRef row, int64_t d) {
  return kg_gep_t(g, g->i8, kg_buf_as(g, buf, g->i8), LLVMBuildNSWMul(g->b, row, kg_i64(g, d * 4), ""));
}

static dc_status *need_ids(const dc_type *ids, const char *op) {
  if (dc_dtype_is_int(ids->dtype)) return NULL;
  return dc_error(DC_ERR_UNSUPPORTED, "%s: the LLVM kernel reads i32 or i64 ids, got %s", op, dc_dtype_name(ids->dtype));
}

/* ---- embedding ------------------------------------------------------------ */
/* Row id of a table stored in dtype t into dst (d floats): copied whole
 * when f32, else each element decoded (kg_load_f32_from, exact). */
static void copy_row(dc_kgen *g, dc_dtype t, LLVMValueRef id, int64_t d, LLVMValueRef dst) {
  if (t == DT_F32) {
    LLVMBuildMemCpy(g->b, dst, 4, row_ptr(g, 2, id, d), 4, kg_i64(g, d * 4));
    return;
  }
  LLVMValueRef base = LLVMBuildNSWMul(g->b, id, kg_i64(g, d), ""), y = LLVMBuildBitCast(g->b, dst, g->pf32, "");
  kg_loop c;
  kg_for(g, &c, kg_i64(g, 0), kg_i64(g, d), 1, "col");
  LLVMValueRef v = kg_load_f32_from(g, t, kg_buf_as(g, 2, kg_elem_type(g, t)), LLVMBuildNSWAdd(g->b, base, c.i, ""));
  kg_store(g, v, kg_gep(g, y, c.i));
  kg_end(g, &c);
}

/* Threads split the ids; each writes its id's row (d floats) or zeros. */
dc_status *dc_k_embedding(dc_kgen *g) {
  const dc_type *ids = kg_type(g, 1), *table = kg_type(g, 2);
  int64_t count = (int64_t)dc_type_numel(ids), rows = table->dims[0], d = table->dims[1];
  DC_TRY(need_ids(ids, "embedding"));
  if (dc_dtype_is_int(table->dtype))
    return dc_error(DC_ERR_UNSUPPORTED, "embedding: the LLVM kernel reads a float table, got %s", dc_dtype_name(table->dtype));
  if (count == 0 || d == 0) return NULL;
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, count), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "id");
  LLVMValueRef id = load_id(g, 1, ids->dtype, it.i), dst = row_ptr(g, 0, it.i, d);
  /* one unsigned compare: a negative id is a huge unsigned one */
  LLVMValueRef in = LLVMBuildICmp(g->b, LLVMIntULT, id, kg_i64(g, rows), "in_table");
  kg_cond c;
  kg_if(g, &c, in);
  copy_row(g, table->dtype, id, d, dst);
  kg_endif(g, &c);
  kg_if(g, &c, LLVMBuildNot(g->b, in, ""));
  LLVMBuildMemSet(g->b, dst, LLVMConstInt(g->i8, 0, 0), kg_i64(g, d * 4), 4);
  kg_endif(g, &c);
  kg_end(g, &it);
  return NULL;
}

/* ---- eos_pool --------------------------------------------------------------- */
/* The pooled position of sequence b: the first id equal to eos (0 when
 * none), or with argmax the first of the largest id, as the reference
 * scans (every id looked at; the selects keep the first hit). */
static LLVMValueRef pool_position(dc_kgen *g, dc_dtype t, LLVMValueRef b, int64_t s, int argmax, int64_t eos) {
  LLVMValueRef pos = kg_var(g, g->i64, "pos"), best = kg_var(g, g->i64, "best"), found = kg_var(g, g->i1, "found");
  LLVMBuildStore(g->b, kg_i64(g, 0), pos);
  LLVMBuildStore(g->b, load_id(g, 2, t, LLVMBuildNSWMul(g->b, b, kg_i64(g, s), "")), best);
  LLVMBuildStore(g->b, LLVMConstInt(g->i1, 0, 0), found);
  kg_loop j;
  kg_for(g, &j, kg_i64(g, 0), kg_i64(g, s), 1, "pos");
  LLVMValueRef id = load_id(g, 2, t, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, b, kg_i64(g, s), ""), j.i, ""));
  LLVMValueRef p = LLVMBuildLoad2(g->b, g->i64, pos, ""), hit;
  if (argmax) {
    LLVMValueRef bv = LLVMBuildLoad2(g->b, g->i64, best, "");
    hit = LLVMBuildICmp(g->b, LLVMIntSGT, id, bv, "");
    LLVMBuildStore(g->b, LLVMBuildSelect(g->b, hit, id, bv, ""), best);
  } else {
    LLVMValueRef f = LLVMBuildLoad2(g->b, g->i1, found, "");
    LLVMValueRef eq = LLVMBuildICmp(g->b, LLVMIntEQ, id, kg_i64(g, eos), "");
    hit = LLVMBuildAnd(g->b, eq, LLVMBuildNot(g->b, f, ""), "");
    LLVMBuildStore(g->b, LLVMBuildOr(g->b, f, eq, ""), found);
  }
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, hit, j.i, p, ""), pos);
  kg_end(g, &j);
  return LLVMBuildLoad2(g->b, g->i64, pos, "p");
}

/* Threads split the sequences; each copies the row at its pooled position. */
dc_status *dc_k_eos_pool(dc_kgen *g) {
  const dc_type *x = kg_type(g, 1), *ids = kg_type(g, 2);
  int64_t batch = x->dims[0], s = x->dims[1], d = x->dims[2];
  int argmax = dc_node_int(g->n, "argmax") != 0;
  DC_TRY(need_ids(ids, "eos_pool"));
  if (x->dtype != DT_F32)
    return dc_error(DC_ERR_UNSUPPORTED, "eos_pool: the LLVM kernel reads f32 rows, got %s", dc_dtype_name(x->dtype));
  if (batch == 0 || s == 0 || d == 0) return NULL;
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, batch), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "seq");
  LLVMValueRef p = pool_position(g, ids->dtype, it.i, s, argmax, dc_node_int(g->n, "eos"));
  LLVMValueRef src = row_ptr(g, 1, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, it.i, kg_i64(g, s), ""), p, ""), d);
  LLVMBuildMemCpy(g->b, row_ptr(g, 0, it.i, d), 4, src, 4, kg_i64(g, d * 4));
  kg_end(g, &it);
  return NULL;
}
