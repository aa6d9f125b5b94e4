/* embed.c — the smallest program that embeds the diffc runtime: load a plan,
 * fill its inputs, run it, and print a summary of each output.
 *
 *   diffc samples/unet-sd15-tiny -o unet.dplan
 *   ./embed unet.dplan
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/diffrun.h"

static int fail(dc_status *st) {
  fprintf(stderr, "embed: %s\n", dc_status_message(st));
  dc_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: embed PLAN\n");
    return 2;
  }
  drt_plan *plan;
  dc_status *st = drt_load(argv[1], NULL, &plan);
  if (st) return fail(st);

  /* Inputs: a ramp for every tensor, so the program needs no files. */
  for (int i = 0; i < drt_input_count(plan); i++) {
    const drt_tensor_info *in = drt_input_info(plan, i);
    float *data = malloc(in->numel * sizeof *data);
    for (size_t k = 0; k < in->numel; k++) data[k] = (float)((double)(k % 17) / 8.0 - 1.0);
    st = drt_set_input(plan, in->name, data, in->numel);
    free(data);
    if (st) return drt_destroy(plan), fail(st);
  }

  drt_stats stats;
  if ((st = drt_run(plan, &stats))) return drt_destroy(plan), fail(st);
  for (int i = 0; i < drt_output_count(plan); i++) {
    const drt_tensor_info *out = drt_output_info(plan, i);
    const float *y = drt_output(plan, out->name, NULL);
    double sum = 0, sum2 = 0;
    for (size_t k = 0; k < out->numel; k++) sum += y[k], sum2 += (double)y[k] * y[k];
    double mean = sum / (double)out->numel;
    printf("%s: %zu values, mean %.6f, std %.6f\n", out->name, out->numel, mean,
           sqrt(fmax(0.0, sum2 / (double)out->numel - mean * mean)));
  }
  printf("%.3f s, device peak %llu bytes\n", stats.seconds, (unsigned long long)stats.device_peak_bytes);
  drt_destroy(plan);
  return 0;
}
