#!/usr/bin/env bash
# cuda_microbench_test.sh BUILD_DIR SOURCE_DIR — tools/cuda_microbench at
# small shapes of every case kind (conv NCHW and NHWC, linear, attention;
# bf16 and f32): it builds the one-op IR module, compiles its kernels with
# NVRTC and writes a plan that loads; without a GPU every row says "no GPU"
# and it exits 77 after compiling, with a GPU every row is timed.  Bad
# arguments are refused with one line before any work.  Skipped (77)
# without NVRTC.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-microbench
mb=$build/cuda_microbench

"$mb" --help | grep -q -- "--op conv|linear|attention" && ok "--help documents --op" || bad "--help lacks --op"
expect_fail "a shape of the wrong rank" "linear takes MxKxN" -- "$mb" --op linear --shape 4x8
expect_fail "an unknown op" "expected conv, linear or attention" -- "$mb" --op matmul --shape 4x8x8
expect_fail "--layout on a linear" "--layout applies to --op conv" -- "$mb" --op linear --shape 4x8x8 --layout nhwc
expect_fail "--all with --op" "--all runs its own table" -- "$mb" --all --op conv --shape 1x8x6x6x8
expect_fail "--compute f16" "expected bf16 or f32" -- "$mb" --op linear --shape 4x8x8 --compute f16

# name shape compute [layout]: rows, exit code, and the plan the case left
check_case() {
  local op=$1 shape=$2 compute=$3 layout=${4:-} out rc n want
  local work=$tmp/$op-$compute$layout
  out=$("$mb" --op "$op" --shape "$shape" --compute "$compute" ${layout:+--layout "$layout"} --work "$work" \
    --repeat 3 --warmup 1 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 77 ] && printf '%s\n' "$out" | grep -q "NVRTC.*was not found"; then
    echo "SKIP: no NVRTC here ($(printf '%s\n' "$out" | tail -1 | cut -c1-120))"
    exit 77
  fi
  want=1
  [ "$op" = linear ] && want=2 # the generated kernel, and the cuBLASLt row
  n=$(printf '%s\n' "$out" | grep -c "^BENCH impl=diffc.* shape=$shape compute=$compute act=")
  if [ $rc -eq 77 ]; then
    [ "$n" -eq "$want" ] && printf '%s\n' "$out" | grep -q "kernel(s), .* compile(s)" &&
      ! printf '%s\n' "$out" | grep "^BENCH" | grep -v "status=no GPU$" | grep -qv "status=cuBLASLt" &&
      ok "$op $shape $compute $layout: compiled, $n row(s) say no GPU, exit 77" ||
      bad "$op $shape $compute $layout: rc 77 but rows or compile line wrong: $out"
  elif [ $rc -eq 0 ]; then
    printf '%s\n' "$out" | grep "^BENCH" | grep -v "status=cuBLASLt" | grep -q "tflops=[0-9.]* pct_peak=[0-9.]* status=ok$" &&
      [ "$n" -eq "$want" ] && ok "$op $shape $compute $layout: timed on the GPU" ||
      bad "$op $shape $compute $layout: rc 0 but rows wrong: $out"
  else
    bad "$op $shape $compute $layout: exit $rc: $out"
    return
  fi
  # the plan it compiled loads and runs on the reference backend
  "$diffrun" "$work/case0.dplan" --backend reference --random-inputs -q >/dev/null 2>&1 &&
    ok "$op $shape $compute $layout: the plan runs on the reference backend" ||
    bad "$op $shape $compute $layout: the plan does not run on the reference backend"
}
check_case conv 1x8x6x6x16 bf16
check_case conv 1x8x6x6x16 bf16 nhwc
check_case linear 40x24x48 bf16
check_case linear 40x24x48 f32
check_case attention 1x2x24x64 bf16
cli_finish
