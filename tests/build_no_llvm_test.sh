#!/usr/bin/env bash
# build_no_llvm_test.sh SOURCE_DIR — the -DDIFFC_LLVM=OFF build (the one the
# GPU machine makes, tools/gpu_check.sh) still builds and tells the truth:
# configure it in a scratch directory, build diffc and diffrun only (not the
# tests: time), then
#   - diffc --version names no cpu target, and compiling for the cpu target
#     (the default) fails with the one message that says why and what to use;
#   - diffc --target cuda compiles the tiny UNet (NVRTC; without NVRTC this
#     step is skipped with its reason) and diffrun runs that plan with the
#     reference backend;
#   - given BUILD_DIR (the CTest build's, with LLVM): a CPU plan its diffc
#     compiles is refused by this diffrun with the message naming
#     --backend reference, and runs with --backend reference.
# Exits 77 (skip) only when the cuda step cannot run and all else passed.
# usage: build_no_llvm_test.sh SOURCE_DIR [BUILD_DIR]
set -u
src=$(cd "$1" && pwd)
llvm_diffc=${2:+$2/diffc}
tmp=$(mktemp -d /tmp/diffc-nollvm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
skip=""
ok() { passed=$((passed + 1)); echo "  ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
t0=$(date +%s)
if cmake -S "$src" -B "$tmp/b" -DDIFFC_LLVM=OFF -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >"$tmp/configure.log" 2>&1 &&
  cmake --build "$tmp/b" -j2 --target diffc diffrun >"$tmp/build.log" 2>&1; then
  ok "configured and built diffc, diffrun with -DDIFFC_LLVM=OFF in $(($(date +%s) - t0)) s"
else
  tail -30 "$tmp/configure.log" "$tmp/build.log" 2>/dev/null
  bad "the -DDIFFC_LLVM=OFF build failed"
  echo "$passed passed, $failed failed"
  exit 1
fi
diffc=$tmp/b/diffc
diffrun=$tmp/b/diffrun
warnings=$(grep -E "warning:" "$tmp/build.log")
[ -z "$warnings" ] && ok "no compiler warnings" || bad "warnings in the no-LLVM build: $warnings"
if ldd "$diffc" 2>/dev/null | grep -qi llvm; then bad "diffc links LLVM: $(ldd "$diffc" | grep -i llvm)"
else ok "diffc does not link LLVM"; fi

version=$("$diffc" --version)
grep -q "no cpu target: built without LLVM (-DDIFFC_LLVM=OFF)" <<<"$version" && ok "--version says: $(tail -1 <<<"$version")" ||
  bad "--version does not say the build has no cpu target: $version"
"$diffc" --help | grep -q "^targets of this build: cuda" && ok "--help names the targets" || bad "--help does not name the targets"

fx=$src/tests/fixtures/unet_tiny/model
want="this diffc was built without LLVM (-DDIFFC_LLVM=OFF): it has no CPU code generator; use --target cuda, or a build with LLVM"
for args in "" "--target cpu" "--target cpu --cpu generic"; do
  # shellcheck disable=SC2086
  msg=$("$diffc" "$fx" -o "$tmp/cpu.dplan" $args 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ "$(wc -l <<<"$msg")" -eq 1 ] && grep -qF -- "$want" <<<"$msg" && [ ! -e "$tmp/cpu.dplan" ]; then
    ok "diffc ${args:-(no --target)} refused: $msg"
  else
    bad "diffc ${args:-(no --target)}: rc $rc, wanted one line with \"$want\", got: $msg"
  fi
done

msg=$("$diffc" "$fx" -o "$tmp/cuda.dplan" --target cuda --cuda-arch sm_90 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "NVRTC, the CUDA toolkit's runtime compiler, was not found" <<<"$msg"; then
  skip="no NVRTC here, --target cuda not checked: $msg"
elif [ $rc -eq 0 ] && [ -s "$tmp/cuda.dplan" ]; then
  ok "diffc --target cuda compiled the tiny UNet: $(tail -1 <<<"$msg")"
  out=$("$diffrun" "$tmp/cuda.dplan" --backend reference --random-inputs 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q "backend reference" <<<"$out"; then ok "diffrun ran the CUDA plan with --backend reference"
  else bad "diffrun --backend reference on the CUDA plan: rc $rc: $out"; fi
else
  bad "diffc --target cuda: rc $rc: $msg"
fi

if [ -n "$llvm_diffc" ] && "$llvm_diffc" --version | grep -q "targets: cpu"; then
  "$llvm_diffc" "$fx" -o "$tmp/cpu.dplan" >/dev/null 2>&1 || bad "the LLVM build's diffc could not compile a CPU plan"
  msg=$("$diffrun" "$tmp/cpu.dplan" --random-inputs 2>&1)
  rc=$?
  want="a CPU plan with compiled kernels, and this diffrun was built without LLVM (-DDIFFC_LLVM=OFF): it cannot link them; run it with --backend reference"
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$msg"; then ok "diffrun refused the CPU plan: $msg"
  else bad "diffrun on a CPU plan: rc $rc, wanted \"$want\", got: $msg"; fi
  out=$("$diffrun" "$tmp/cpu.dplan" --random-inputs --backend reference 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q "backend reference" <<<"$out"; then ok "diffrun ran the CPU plan with --backend reference"
  else bad "diffrun --backend reference on the CPU plan: rc $rc: $out"; fi
else
  echo "  note: no diffc with a cpu target given, the refusal of a CPU plan not checked"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ] || exit 1
if [ -n "$skip" ]; then echo "SKIP: $skip"; exit 77; fi
exit 0
