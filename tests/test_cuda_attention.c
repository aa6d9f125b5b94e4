/* test_cuda_attention.c — what of the CUDA flash-attention kernel has no
 * analogue on another backend; its emulated cases (SD head sizes, partial
 * tiles, peaky softmax; f32, bf16, f16) are rows of the op case table
 * (tests/op_cases_attention.c).  Here, without emulation: the launch
 * geometry of full-size SD shapes (grid, block, shared memory within the
 * 160 KiB one kernel may use on sm_80 and sm_90), some of them compiled
 * with NVRTC for sm_80 and sm_90 when NVRTC is found (no error, no
 * warning), which kernel each compute and head size gets (FMA, mma.sync up
 * to D = 160, wmma above), the empty case, and the errors for what the
 * kernels cannot take. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/nvrtc.h"
#include "cuda_harness.h"
#include "testutil.h"

typedef struct {
  int64_t b, h, d, sq, sk;
  double data_scale; /* inputs are normal(0, data_scale) */
} attn_case;

/* A module holding q, k, v and the attention node (scale 1/sqrt(D)); returns its id. */
static int32_t build(dc_module *m, const attn_case *c) {
  int64_t dq[3] = {c->b, c->sq, c->h * c->d}, dk[3] = {c->b, c->sk, c->h * c->d};
  int32_t ins[3] = {kh_input(m, 3, dq), kh_input(m, 3, dk), kh_input(m, 3, dk)};
  dc_node n = dc_node_make(OP_ATTENTION, 3, ins);
  dc_node_set_int(&n, "heads", c->h);
  dc_node_set_float(&n, "scale", 1.0 / sqrt((double)c->d));
  return kh_node(m, n);
}


/* ---- launch geometry at full size (no emulation) ------------------------- */
/* Compiles k with NVRTC for sm_80 and sm_90: no error and no warning. */
static void check_nvrtc(const dc_nvrtc *nv, const dc_cuda_kernel *k) {
  dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
  int narchs = 0;
  dc_status *st = dc_nvrtc_parse_archs(nv, "sm_80,sm_90", archs, &narchs);
  CHECK_OK(st);
  for (int i = 0; !st && i < narchs; i++) {
    dc_nvrtc_output o = {0};
    dc_status *cst = dc_nvrtc_compile(nv, k->name, k->source, &archs[i], &o);
    CHECK_OK(cst);
    CHECK(o.log == NULL);
    if (o.log) printf("NVRTC warnings for %s: %s\n", archs[i].name, o.log);
    if (!cst) printf("  NVRTC %s: %zu-byte cubin, no warnings\n", archs[i].name, o.image.len);
    dc_nvrtc_output_deinit(&o);
  }
}

/* nv (NULL when NVRTC is absent): also compile the kernel for the GPU. */
static void check_geometry(const dc_nvrtc *nv, dc_cuda_compute compute, int64_t b, int64_t h, int64_t d, int64_t sq,
                           int64_t sk) {
  attn_case c = {b, h, d, sq, sk, 1};
  dc_cuda_options o = {.compute = compute};
  dc_module *m = dc_module_create();
  int32_t y = build(m, &c);
  dc_cuda_kernel k;
  dc_status *st = dc_cuda_gen_node(m, y, &o, "k0_attention", &k);
  CHECK_OK(st);
  if (!st) {
    /* f32: FMA; bf16/f16 up to D = 160: mma.sync (g_flash.c); wider: wmma, 8 warps */
    const int tensor = compute != DC_CUDA_COMPUTE_F32, flash = tensor && d <= 160;
    CHECK(k.block[0] == (tensor && !flash ? 256u : 128u) && k.block[1] == 1 && k.block[2] == 1);
    CHECK(k.grid[1] == (uint32_t)h && k.grid[2] == (uint32_t)b);
    CHECK(k.grid[0] >= 1 && (int64_t)k.grid[0] * 64 >= sq && (int64_t)k.grid[0] <= (sq + 15) / 16);
    CHECK(k.smem_bytes > 0 && k.smem_bytes <= 160u << 10);
    CHECK(strstr(k.source, "#include \"dc_cuda.cuh\"") == k.source);
    CHECK(strstr(k.source, "k0_attention(") != NULL);
    CHECK((tensor && !flash) == (strstr(k.source, "wmma::") != NULL));
    CHECK(flash == (strstr(k.source, "#include \"dc_mma.cuh\"") != NULL));
    printf("geometry %-4s B=%lld H=%-2lld D=%-3lld Sq=%-4lld Sk=%-4lld: grid %u x %u x %u, %u threads, %u bytes of "
           "shared memory\n",
           dc_cuda_compute_name(compute), (long long)b, (long long)h, (long long)d, (long long)sq, (long long)sk,
           k.grid[0], k.grid[1], k.grid[2], k.block[0], k.smem_bytes);
    if (nv) check_nvrtc(nv, &k);
    dc_cuda_kernel_deinit(&k);
  }
  dc_module_destroy(m);
}

/* Full-size SD shapes.  With NVRTC at hand a few are also compiled for the
 * GPU (each compile is ~0.3 s): both variants' shortest and widest heads,
 * the 8-warp wmma kernel, and f16 once. */
static void test_geometry(void) {
  dc_nvrtc *nv = NULL;
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("NVRTC not found, generated kernels are not compiled for the GPU here: %s\n", dc_status_message(st));
    dc_status_free(st);
  }
  for (int c = DC_CUDA_COMPUTE_F32; c <= DC_CUDA_COMPUTE_F16; c++) {
    dc_cuda_compute cc = (dc_cuda_compute)c;
    const dc_nvrtc *f32 = cc == DC_CUDA_COMPUTE_F32 ? nv : NULL, *bf16 = cc == DC_CUDA_COMPUTE_BF16 ? nv : NULL;
    check_geometry(f32 ? f32 : bf16, cc, 2, 8, 40, 4096, 4096); /* SD1.5 64x64 latents */
    check_geometry(NULL, cc, 2, 8, 40, 4096, 77);
    check_geometry(cc == DC_CUDA_COMPUTE_F16 ? nv : NULL, cc, 2, 5, 64, 4096, 77); /* SD2 */
    check_geometry(NULL, cc, 2, 10, 64, 4096, 77); /* SDXL */
    check_geometry(NULL, cc, 2, 20, 80, 1024, 1024);
    check_geometry(bf16, cc, 2, 10, 160, 1024, 77);
    check_geometry(f32 ? f32 : bf16, cc, 1, 1, 512, 4096, 4096); /* VAE mid-block at 512x512 */
    check_geometry(NULL, cc, 1, 1, 512, 16384, 16384);
  }
  dc_nvrtc_unload(nv);
}

/* No keys (or no queries): the reference writes nothing, and so does the kernel. */
static void test_empty(void) {
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_BF16};
  dc_module *m = dc_module_create();
  int32_t y = build(m, &(attn_case){2, 2, 40, 37, 0, 1});
  dc_cuda_kernel k;
  dc_status *st = dc_cuda_gen_node(m, y, &o, "k0_attention", &k);
  CHECK_OK(st);
  if (!st) {
    CHECK(k.grid[0] == 1 && k.grid[1] == 1 && k.grid[2] == 1 && k.block[0] == 32 && k.smem_bytes == 0);
    CHECK(strstr(k.source, "nothing to write") != NULL);
    dc_cuda_kernel_deinit(&k);
  }
  dc_module_destroy(m);
}

/* ---- what the kernel refuses ------------------------------------------- */
static void test_errors(void) {
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_BF16};
  dc_cuda_kernel k;
  /* a head too wide for shared memory */
  dc_module *m = dc_module_create();
  int32_t y = build(m, &(attn_case){1, 1, 4096, 64, 64, 1});
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k0_attention", &k),
            "attention head size D=4096 needs");
  dc_module_destroy(m);
  /* an fp8 operand: activations reach either attention kernel as f32, bf16 or f16 */
  m = dc_module_create();
  dc_type t = {DT_F8_E4M3, 3, {1, 8, 16}};
  int32_t ins[3] = {dc_module_add_input(m, "q", &t, INIT_NORMAL), dc_module_add_input(m, "k", &t, INIT_NORMAL),
                    dc_module_add_input(m, "v", &t, INIT_NORMAL)};
  dc_node n = dc_node_make(OP_ATTENTION, 3, ins);
  dc_node_set_int(&n, "heads", 2);
  dc_node_set_float(&n, "scale", 0.25);
  n.type = (dc_type){DT_F32, 3, {1, 8, 16}}; /* added as is: type inference rejects it before codegen */
  y = dc_module_add_node(m, &n);
  CHECK(y >= 0);
  if (y >= 0)
    CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k0_attention", &k),
              "attention input 0 is f8e4m3[rank 3]; the kernel takes rank-3 f32, bf16 or f16 activations");
  if (y >= 0)
    CHECK_ERR(dc_cuda_gen_node(m, y, &(dc_cuda_options){DC_CUDA_COMPUTE_F32}, "k0_attention", &k),
              "attention input 0 is f8e4m3[rank 3]; the kernel takes rank-3 f32, bf16 or f16 activations");
  dc_module_destroy(m);
  /* a scale that is not a finite float */
  m = dc_module_create();
  y = build(m, &(attn_case){1, 1, 8, 4, 4, 1});
  m->nodes[y].attrs[dc_op_attr_index(OP_ATTENTION, "scale")].f = 1e39;
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k0_attention", &k), "attention scale 1e+39 is not a finite float");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  test_geometry();
  test_empty();
  test_errors();
  return tu_finish();
}
