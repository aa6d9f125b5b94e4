/* test_llvm_elementwise.c — the generated elementwise kernels against the
 * reference kernels, at sizes that are and are not multiples of the vector
 * width, on 1, 2 and 3 threads. */
#include "kernel_harness.h"
#include "testutil.h"

static void check_unary(dc_op op, int rank, const int64_t *dims) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, rank, dims);
  int32_t y = kh_node(m, dc_node_make(op, 1, &x));
  for (int threads = 1; threads <= 3; threads++) {
    kh_result r;
    dc_status *st = kh_compare(m, y, threads, 42 + (uint64_t)threads, 3.0, &r);
    CHECK_OK(st);
    if (st) break;
    CHECK(r.rel_l2 <= 1e-6);
    char b[64];
    printf("%-8s %-16s %d thread(s): rel L2 %.2g, max abs %.2g%s\n", dc_op_get(op)->name,
           dc_dims_str(dims, rank, b, sizeof b), threads, r.rel_l2, r.max_abs, r.bit_exact ? " (bit-exact)" : "");
  }
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  check_unary(OP_SILU, 1, (int64_t[]){16});
  check_unary(OP_SILU, 1, (int64_t[]){1});
  check_unary(OP_SILU, 4, (int64_t[]){3, 5, 7, 9});
  check_unary(OP_SILU, 2, (int64_t[]){64, 1000});
  return tu_finish();
}
