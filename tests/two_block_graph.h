/* two_block_graph.h — a planned-looking IR text both the offload and the
 * cost-model tests start from: x -> down_blocks.0 (linear) ->
 * down_blocks.1 (linear) -> out_proj, each linear 2x4 @ 4x4 (64 flops),
 * weights 64 B, biases 16 B, two entries of a block list. */
#ifndef DC_TWO_BLOCK_GRAPH_H
#define DC_TWO_BLOCK_GRAPH_H
static const char *const small_graph =
    "# diffc IR\n"
    "# class = Test\n"
    "# weights: 6 tensors\n"
    "#   file 0: /nonexistent/w.safetensors (1000 bytes, header xxh64 0000000000000001)\n"
    "%0 = input \"x\" : f32[2,4]  # row, dev0, 32 B, live 0..2\n"
    "%1 = weight @down_blocks.0.proj.weight : f32[4,4]  # row, dev0, 64 B, resident, file 0 @ 8\n"
    "%2 = weight @down_blocks.0.proj.bias : f32[4]  # row, dev0, 16 B, resident, file 0 @ 72\n"
    "%3 = linear(%0, %1, %2) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]  # down_blocks.0.proj, row, dev0, 32 B, live 3..6\n"
    "%4 = weight @down_blocks.1.proj.weight : f32[4,4]  # row, dev0, 64 B, resident, file 0 @ 88\n"
    "%5 = weight @down_blocks.1.proj.bias : f32[4]  # row, dev0, 16 B, resident, file 0 @ 152\n"
    "%6 = linear(%3, %4, %5) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]  # down_blocks.1.proj, row, dev0, 32 B, live 6..8\n"
    "%7 = weight @out_proj.weight : f32[4,4]  # row, dev0, 64 B, resident, file 0 @ 168\n"
    "%8 = linear(%6, %7) {act=none, bias=0, gate=0, gate_at=0, residual=0} : f32[2,4]  # out_proj, row, dev0, 32 B, live 8..8\n"
    "output y = %8\n";
#endif
