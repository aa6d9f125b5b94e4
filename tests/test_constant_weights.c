/* test_constant_weights.c — pass constant-weights (passes/constant_weights.c)
 * and its store (driver/weight_store.c): for the CUDA target every f32
 * constant becomes a weight with the same bytes, written beside the plan.
 *  - off (the CPU targets): constants stay constants;
 *  - on: no f32 constant is left, each is a pending weight in the pseudo
 *    file "<constants>" that reads the constant's bytes; an integer constant
 *    stays (no kernel reads integer weights);
 *  - the store writes the bytes as they are, repoints the weights at the
 *    written file (nothing pending, the pseudo file gone), and the module
 *    still verifies;
 *  - the CogVideoX pipeline fixture as --target cuda compiles it (its RoPE
 *    position tables, one constant per CFG half, become weights) passes the
 *    verifier under every offload mode: an upload never serves another
 *    loop phase (passes/offload.c ends an invocation where the phase
 *    changes; it once gave the uncond half's table the cond half's upload). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "driver/weight_store.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "testutil.h"

static const float TABLE[6] = {0.5f, -1.25f, 3.0f, 1e-7f, -0.0f, 65504.0f};
static const int64_t IDS[3] = {0, 2, 1};

/* y = x + table; ids is a second output so that dce keeps it. */
static dc_module *build(void) {
  dc_module *m = dc_module_create();
  dc_type t = {DT_F32, 2, {2, 3}}, ti = {DT_I64, 1, {3}};
  int32_t x = dc_module_add_input(m, "x", &t, INIT_NORMAL);
  int32_t c = dc_module_add_constant(m, "pos_embed.table", &t, TABLE);
  int32_t ids = dc_module_add_constant(m, "ids", &ti, IDS);
  int32_t in[2] = {x, c};
  dc_node add = dc_node_make(OP_ADD, 2, in);
  add.type = t;
  int32_t y = dc_module_add_node(m, &add);
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_module_add_output(m, "ids", ids));
  return m;
}

static int count_op(const dc_module *m, dc_op op, dc_dtype t) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == op && m->nodes[i].type.dtype == t;
  return n;
}

static dc_status *run(dc_module *m, int on) {
  dc_memory_options mem;
  memset(&mem, 0, sizeof mem);
  mem.constants_as_weights = on;
  dc_pipeline_options po;
  memset(&po, 0, sizeof po);
  po.memory = &mem;
  return dc_pipeline_run(m, &po);
}

static void test_off(void) {
  dc_module *m = build();
  CHECK_OK(run(m, 0));
  CHECK(count_op(m, OP_CONSTANT, DT_F32) == 1);
  CHECK(m->nweights == 0);
  dc_module_destroy(m);
}

static void test_on_and_store(void) {
  dc_module *m = build();
  CHECK_OK(run(m, 1));
  CHECK(count_op(m, OP_CONSTANT, DT_F32) == 0);
  CHECK(count_op(m, OP_CONSTANT, DT_I64) == 1);
  CHECK(count_op(m, OP_WEIGHT, DT_F32) == 1);
  CHECK(m->nweights == 1 && m->nfiles == 1);
  if (m->nweights != 1 || m->nfiles != 1) return;
  const dc_weight *w = &m->weights[0];
  CHECK(dc_weight_pending(w));
  CHECK(strcmp(m->files[w->file].path, "<constants>") == 0);
  CHECK(strstr(w->name, "pos_embed.table") != NULL);
  CHECK(w->bytes == sizeof TABLE && memcmp(w->inline_bytes, TABLE, sizeof TABLE) == 0);

  char *path = tu_path("constants.weights.safetensors");
  CHECK_OK(dc_store_cast_weights(m, path, 0, NULL));
  CHECK(!dc_weight_pending(&m->weights[0]));
  CHECK(m->nfiles == 1 && strcmp(m->files[m->weights[0].file].path, path) == 0);
  CHECK_OK(dc_verify(m, "after the store"));
  dc_st_file f;
  dc_status *st = dc_st_open(path, &f);
  CHECK_OK(st);
  if (!st) {
    const dc_st_tensor *t = dc_st_find(&f, m->weights[0].name);
    CHECK(t && t->dtype == DT_F32 && t->bytes == sizeof TABLE);
    CHECK(t && memcmp((const uint8_t *)f.file.data + t->offset, TABLE, sizeof TABLE) == 0);
    CHECK(t && t->offset == m->weights[0].offset);
    dc_st_close(&f);
  }
  remove(path);
  free(path);
  dc_module_destroy(m);
}

static void pipeline_case(dc_offload_kind offload, dc_group_level level, int prefetch) {
  char *model = dc_asprintf("%s/fixtures/pipelines/cogvideox", tu_source_dir);
  dc_compile_options co = {.model = model};
  co.memory.offload = offload, co.memory.group_level = level, co.memory.prefetch = prefetch;
  co.memory.blocks_per_group = level == DC_GROUP_BLOCK;
  co.memory.constants_as_weights = 1;
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_module *m = NULL;
  dc_status *st = dc_compile_module(&co, &f, &m);
  if (st) printf("  offload %s: %s\n", dc_offload_name(offload), dc_status_message(st));
  CHECK_OK(st);
  if (m) CHECK(count_op(m, OP_CONSTANT, DT_F32) == 0);
  dc_module_destroy(m);
  dc_free(model);
}

static void test_pipeline_offload(void) {
  pipeline_case(DC_OFFLOAD_NONE, DC_GROUP_NONE, 0);
  pipeline_case(DC_OFFLOAD_SEQUENTIAL, DC_GROUP_NONE, 0);
  pipeline_case(DC_OFFLOAD_GROUP, DC_GROUP_LEAF, 1);
  pipeline_case(DC_OFFLOAD_GROUP, DC_GROUP_BLOCK, 1);
  pipeline_case(DC_OFFLOAD_MODEL, DC_GROUP_NONE, 0);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_off();
  test_on_and_store();
  test_pipeline_offload();
  return tu_finish();
}
