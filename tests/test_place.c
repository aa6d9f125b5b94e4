/* test_place.c — --device-map / --max-memory (passes/place.c) on the
 * SD1.5-shaped UNet fixture: --max-memory parsing; sequential, balanced and
 * file maps place whole units and move data between devices only through
 * transfers; every device's weights + arena stay within its budget, or the
 * error says by how much; bad maps get one clear message; the dump prints
 * the map and round-trips; and the CPU backend runs the multi-device plan,
 * each device its own arena, bit-identical to the one-device plan with each
 * device's measured peak equal to the planned one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../driver/compile.h"
#include "../runtime/diffrun.h"
#include "testutil.h"

static char *fixture(const char *leaf) {
  char *dir = dc_path_join(tu_source_dir, "fixtures/unet_sd15"), *p = dc_path_join(dir, leaf);
  dc_free(dir);
  return p;
}

static void test_max_memory(void) {
  dc_max_memory mm;
  CHECK_OK(dc_parse_max_memory("0=4GiB,1=4GB,cpu=32GiB", &mm));
  CHECK(mm.ngpus == 2 && mm.gpu[0] == 4ull << 30 && mm.gpu[1] == 4000000000ull && mm.has_cpu &&
        mm.cpu == 32ull << 30 && !mm.has_disk);
  CHECK_OK(dc_parse_max_memory("0=1000,disk=1TB", &mm));
  CHECK(mm.ngpus == 1 && mm.gpu[0] == 1000 && mm.has_disk && mm.disk == 1000000000000ull);
  CHECK_ERR(dc_parse_max_memory("0=4XB", &mm), "\"0=4XB\" is not DEVICE=SIZE");
  CHECK_ERR(dc_parse_max_memory("1=1GiB", &mm), "GPU 0 is missing");
  CHECK_ERR(dc_parse_max_memory("0=1GiB,0=2GiB", &mm), "GPU 0 given twice");
  CHECK_ERR(dc_parse_max_memory("gpu=1GiB", &mm), "device \"gpu\": expected a GPU number 0..7, cpu or disk");
  CHECK_ERR(dc_parse_max_memory("0=1GiB,,1=2GiB", &mm), "expected DEVICE=SIZE entries");
  printf("--max-memory: GiB = 2^30, GB = 10^9 (accelerate's units); 5 bad lists, one message each\n");
}

static dc_compile_options options(char *model, const dc_input_shape *shapes, int n) {
  dc_compile_options o = {.model = model, .entry = "forward", .shapes = shapes, .nshapes = n};
  return o;
}

static dc_status *compile_module(const dc_compile_options *o, dc_module **m) {
  dc_folder f;
  dc_status *st = dc_compile_module(o, &f, m);
  dc_folder_close(&f);
  return st;
}

/* Data crosses devices only through transfers (the verifier checks it
 * too); every scope of a unit is on one device. */
static int count_transfers(const dc_module *m) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == OP_TRANSFER;
  return n;
}

static int device_of(const dc_module *m, const char *scope_prefix) {
  int d = -1;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!n->scope || strncmp(n->scope, scope_prefix, strlen(scope_prefix)) != 0 || n->op == OP_TRANSFER) continue;
    if (d >= 0 && n->device != d) return -2; /* split */
    d = n->device;
  }
  return d;
}

static void check_round_trip(const dc_module *m) {
  dc_buf a, b;
  dc_buf_init(&a), dc_buf_init(&b);
  CHECK_OK(dc_print(m, &a));
  dc_module *back = NULL;
  CHECK_OK(dc_parse((const char *)a.data, a.len, "placed dump", &back));
  if (back) CHECK_OK(dc_print(back, &b));
  CHECK(back && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
  CHECK(strstr((const char *)a.data, "#   device 1: ") != NULL);
  dc_module_destroy(back);
  dc_buf_deinit(&a), dc_buf_deinit(&b);
}

static void test_strategies(const dc_input_shape *shapes, int nshapes) {
  char *model = fixture("model");
  dc_compile_options o = options(model, shapes, nshapes);
  dc_module *m = NULL;
  /* sequential: GPU 0 takes units in run order up to 4 MiB of weights. */
  o.memory.device_map = DC_MAP_SEQUENTIAL;
  CHECK_OK(dc_parse_max_memory("0=4MiB,1=8MiB", &o.memory.max_memory));
  CHECK_OK(compile_module(&o, &m));
  if (m) {
    dc_liveness l;
    CHECK_OK(dc_liveness_compute(m, &l));
    CHECK(l.ndevices == 2 && l.dev_weights[0] + l.dev_peak[0] <= 4u << 20 && l.dev_weights[1] > 0);
    CHECK(device_of(m, "conv_in") == 0 && device_of(m, "down_blocks.0") == 0 && device_of(m, "conv_out") == 1);
    CHECK(device_of(m, "up_blocks.2.resnets.0") >= 0 && device_of(m, "down_blocks.1.attentions.0.transformer_blocks.0") >= 0); /* a unit is never split */
    CHECK(count_transfers(m) > 0);
    CHECK(dc_module_get_meta(m, "device_map") && strstr(dc_module_get_meta(m, "device_map"), "sequential: 0 = "));
    printf("sequential 0=4MiB,1=8MiB: device 0 %llu + %llu B, device 1 %llu + %llu B, %d transfers\n",
           (unsigned long long)l.dev_weights[0], (unsigned long long)l.dev_peak[0], (unsigned long long)l.dev_weights[1],
           (unsigned long long)l.dev_peak[1], count_transfers(m));
    dc_liveness_deinit(&l);
    check_round_trip(m);
  }
  dc_module_destroy(m), m = NULL;
  /* balanced: each GPU gets about half of the weights. */
  o.memory.device_map = DC_MAP_BALANCED;
  CHECK_OK(dc_parse_max_memory("0=1GiB,1=1GiB", &o.memory.max_memory));
  CHECK_OK(compile_module(&o, &m));
  if (m) {
    dc_liveness l;
    CHECK_OK(dc_liveness_compute(m, &l));
    uint64_t total = l.dev_weights[0] + l.dev_weights[1];
    CHECK(l.ndevices == 2 && l.dev_weights[0] >= total * 2 / 5 && l.dev_weights[1] >= total * 2 / 5); /* near even */
    printf("balanced 0=1GiB,1=1GiB: weights %llu / %llu B\n", (unsigned long long)l.dev_weights[0],
           (unsigned long long)l.dev_weights[1]);
    dc_liveness_deinit(&l);
  }
  dc_module_destroy(m), m = NULL;
  /* Budgets too small: one message with the shortfall. */
  o.memory.device_map = DC_MAP_SEQUENTIAL;
  CHECK_OK(dc_parse_max_memory("0=1MiB,1=1MiB", &o.memory.max_memory));
  CHECK_ERR(compile_module(&o, &m), "fits on no device after those before it");
  dc_module_destroy(m), m = NULL;
  /* The strategies keep room for activations; a map file says where things
   * go, and the budgets are checked on the planned arenas: device 0 holds
   * all but the up blocks, 3,511,296 B of weights plus a 462,592 B arena,
   * 373,888 B over a 3,600,000 B budget. */
  char *json = tu_path("budget.json");
  const char *text = "{\"\": 0, \"up_blocks\": 1, \"conv_norm_out\": 1, \"conv_out\": 1}";
  tu_write_file(json, text, strlen(text));
  dc_map_entry *map = NULL;
  int nmap = 0;
  CHECK_OK(dc_load_device_map(json, &map, &nmap));
  o.memory.device_map = DC_MAP_FILE, o.memory.device_map_file = json, o.memory.map = map, o.memory.nmap = nmap;
  CHECK_OK(dc_parse_max_memory("0=3600000,1=8MiB", &o.memory.max_memory));
  CHECK_ERR(compile_module(&o, &m), "device 0 needs 3.8 MiB (weights 3.3 MiB + activations 451.8 KiB) but its budget is "
                                    "3.4 MiB: over by 365.1 KiB (373888 bytes)");
  dc_module_destroy(m), m = NULL;
  dc_free(map), free(json);
  o.memory.map = NULL, o.memory.nmap = 0, o.memory.device_map_file = NULL;
  o.memory.device_map = DC_MAP_SEQUENTIAL;
  o.memory.max_memory.ngpus = 0;
  CHECK_ERR(compile_module(&o, &m), "--device-map sequential needs --max-memory");
  dc_module_destroy(m);
  dc_free(model);
}

static void test_map_file(const dc_input_shape *shapes, int nshapes) {
  char *model = fixture("model"), *path = tu_path("map.json");
  dc_compile_options o = options(model, shapes, nshapes);
  dc_module *m = NULL;
  dc_map_entry *map = NULL;
  int n = 0;
  const char *good = "{\"\": 0, \"up_blocks.1\": 1, \"up_blocks.2.resnets\": \"cuda:1\"}";
  tu_write_file(path, good, strlen(good));
  CHECK_OK(dc_load_device_map(path, &map, &n));
  CHECK(n == 3 && map && !strcmp(map[1].module, "up_blocks.1") && map[1].device == 1 && map[2].device == 1);
  o.memory.device_map = DC_MAP_FILE;
  o.memory.device_map_file = path;
  o.memory.map = map;
  o.memory.nmap = n;
  CHECK_OK(compile_module(&o, &m));
  if (m) {
    CHECK(device_of(m, "up_blocks.1") == 1 && device_of(m, "up_blocks.2.resnets") == 1);
    CHECK(device_of(m, "up_blocks.2.attentions") == 0 && device_of(m, "down_blocks") == 0);
  }
  dc_module_destroy(m), m = NULL;
  dc_free(map);
  /* a module that does not exist, one with no device, a bad device */
  static const struct {
    const char *json, *want;
  } bad[] = {
      {"{\"\": 0, \"up_blocks.9\": 1}", "module \"up_blocks.9\" does not exist in this UNet2DConditionModel"},
      {"{\"down_blocks\": 0}", "has no device (map it, or a module containing it)"},
      {"{\"\": \"gpu0\"}", "module \"\": expected a device"},
      {"[0, 1]", "expected a JSON object at the top level, got a list"},
      {"{\"\": 0, \"conv_in\": 9}", "expected a device"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_write_file(path, bad[i].json, strlen(bad[i].json));
    dc_status *st = dc_load_device_map(path, &map, &n);
    if (!st) {
      o.memory.map = map, o.memory.nmap = n;
      st = compile_module(&o, &m);
      dc_module_destroy(m), m = NULL;
      dc_free(map), map = NULL;
    }
    CHECK_ERR(st, bad[i].want);
  }
  printf("device map file: module paths to devices, longest path wins; 5 bad maps, one message each\n");
  free(path);
  dc_free(model);
}

/* The two-device plan on the CPU backend: the same numbers as one device,
 * each device's arena measured = planned. */
static float *run(const char *plan, const char *backend, const dc_st_file *io, size_t *numel, drt_stats *s) {
  drt_plan *p = tu_load_with_inputs(plan, backend, io);
  float *out = NULL;
  if (p) {
    CHECK_OK(drt_run(p, s));
    const float *y = drt_output(p, "sample", numel);
    out = malloc(*numel * sizeof(float) + 1);
    if (y) memcpy(out, y, *numel * sizeof(float));
  }
  drt_destroy(p);
  return out;
}

static void test_run(const dc_st_file *io, const dc_input_shape *shapes, int nshapes) {
  char *model = fixture("model"), *one = tu_path("one.dplan"), *two = tu_path("two.dplan");
  dc_compile_options o = options(model, shapes, nshapes);
  CHECK_OK(dc_compile(&o, one, NULL));
  o.memory.device_map = DC_MAP_BALANCED;
  CHECK_OK(dc_parse_max_memory("0=1GiB,1=1GiB", &o.memory.max_memory));
  CHECK_OK(dc_compile(&o, two, NULL));
  for (int b = 0; b < 2; b++) {
    const char *backend = b ? "llvm" : "reference";
    size_t n1 = 0, n2 = 0;
    drt_stats s1 = {0}, s2 = {0};
    float *a = run(one, backend, io, &n1, &s1), *c = run(two, backend, io, &n2, &s2);
    int same = a && c && n1 == n2 && memcmp(a, c, n1 * sizeof(float)) == 0;
    CHECK(same);
    CHECK(s2.ndevices == 2);
    for (int d = 0; d < s2.ndevices; d++) CHECK(s2.dev_peak_bytes[d] == s2.dev_predicted_bytes[d]);
    printf("%-9s two devices vs one: %s; device 0 arena %llu = planned %llu, device 1 %llu = %llu; %llu B transferred\n",
           backend, same ? "bit-identical" : "DIFFER", (unsigned long long)s2.dev_peak_bytes[0],
           (unsigned long long)s2.dev_predicted_bytes[0], (unsigned long long)s2.dev_peak_bytes[1],
           (unsigned long long)s2.dev_predicted_bytes[1], (unsigned long long)s2.transferred_bytes);
    free(a), free(c);
  }
  free(one), free(two);
  dc_free(model);
}

static int count_files(const char *dir) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '^group_.*\\.safetensors$'", dir);
  FILE *f = popen(cmd, "r");
  int n = -1;
  if (f && fscanf(f, "%d", &n) != 1) n = -1;
  if (f) pclose(f);
  return n;
}

/* cpu and disk placements: those modules run on GPU 0 with their weights
 * uploaded before each use (from host memory, or from --offload-dir files);
 * the numbers stay those of the one-device plan. */
static void test_cpu_disk(const dc_st_file *io, const dc_input_shape *shapes, int nshapes) {
  char *model = fixture("model"), *one = tu_path("one.dplan"), *plan = tu_path("cpu.dplan");
  char *dir = tu_path("disk"), *json = tu_path("cpu.json");
  dc_compile_options o = options(model, shapes, nshapes);
  CHECK_OK(dc_compile(&o, one, NULL));
  size_t n1 = 0, n2 = 0;
  drt_stats s1 = {0}, s2 = {0};
  float *base = run(one, "reference", io, &n1, &s1);
  /* sequential with a cpu budget: what does not fit GPU 0 waits in host memory */
  o.memory.device_map = DC_MAP_SEQUENTIAL;
  CHECK_OK(dc_parse_max_memory("0=4MiB,cpu=1GiB", &o.memory.max_memory));
  CHECK_OK(dc_compile(&o, plan, NULL));
  float *y = run(plan, "reference", io, &n2, &s2);
  CHECK(y && base && n1 == n2 && memcmp(y, base, n1 * sizeof(float)) == 0);
  CHECK(s2.ndevices == 1 && s2.host_weight_bytes > 0 && s2.weight_bytes + s2.host_weight_bytes == s1.weight_bytes);
  CHECK(s2.weight_bytes + s2.device_peak_bytes <= 4u << 20);
  printf("sequential 0=4MiB,cpu=1GiB: %llu B of weights on the cpu, uploaded per run; bit-identical\n",
         (unsigned long long)s2.host_weight_bytes);
  free(y);
  /* a map with disk: up_blocks.3's weights in group files, nothing else there */
  const char *map_text = "{\"\": 0, \"up_blocks.3\": \"disk\", \"up_blocks.2\": \"cpu\"}";
  tu_write_file(json, map_text, strlen(map_text));
  dc_map_entry *map = NULL;
  int n = 0;
  CHECK_OK(dc_load_device_map(json, &map, &n));
  o.memory.device_map = DC_MAP_FILE;
  o.memory.device_map_file = json;
  o.memory.map = map, o.memory.nmap = n;
  o.memory.max_memory.ngpus = 0;
  CHECK_ERR(dc_compile(&o, plan, NULL), "--device-map put modules on disk: add --offload-dir DIR");
  CHECK(mkdir(dir, 0755) == 0);
  o.offload_dir = dir;
  CHECK_OK(dc_compile(&o, plan, NULL));
  int files = count_files(dir);
  y = run(plan, "reference", io, &n2, &s2);
  CHECK(y && base && n1 == n2 && memcmp(y, base, n1 * sizeof(float)) == 0);
  dc_module *m = NULL;
  dc_folder f; /* the module alone: which weights are uploaded (the dir's files are reused) */
  CHECK_OK(dc_compile_module(&o, &f, &m));
  dc_folder_close(&f);
  int up3 = 0, up2 = 0, other = 0;
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    const dc_node *u = &m->nodes[i];
    if (u->op != OP_UPLOAD) continue;
    if (u->scope && !strncmp(u->scope, "up_blocks.3.", 12)) up3++;
    else if (u->scope && !strncmp(u->scope, "up_blocks.2.", 12)) up2++;
    else other++;
  }
  CHECK(up3 > 0 && up2 > 0 && other == 0);
  CHECK(files > 0 && files <= up3 && count_files(dir) == files); /* one per up_blocks.3 leaf module with weights */
  printf("map with disk and cpu: %d uploads from %d group files (up_blocks.3), %d from host memory (up_blocks.2); "
         "bit-identical\n", up3, files, up2);
  dc_module_destroy(m);
  free(y), free(base);
  dc_free(map);
  free(one), free(plan), free(dir), free(json);
  dc_free(model);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *io_path = fixture("io_forward.safetensors");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int nshapes = tu_io_shapes(&io, shapes, 8);
  test_max_memory();
  test_strategies(shapes, nshapes);
  test_map_file(shapes, nshapes);
  test_run(&io, shapes, nshapes);
  test_cpu_disk(&io, shapes, nshapes);
  dc_st_close(&io);
  dc_free(io_path);
  return tu_finish();
}
