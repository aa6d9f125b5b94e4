#!/usr/bin/env bash
# skip_test.sh SOURCE_DIR — a skipped test's reason reaches the README's test
# command output (issue 11, item 15): a scratch CTest project with
# tests/skip_reasons.cmake, one test that skips with a reason and one that
# passes, run as `ctest --output-on-failure -j2`; the reason must be printed
# (CTest alone shows only "Skipped") and the skip must still count as one.
set -u
src=$1
tmp=$(mktemp -d /tmp/diffc-skip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/p"
cat >"$tmp/p/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(skipcheck NONE)
enable_testing()
include($src/tests/skip_reasons.cmake)
add_test(NAME skipper COMMAND sh -c "echo 'checked what runs here'; echo 'SKIP: no frobnicator on this machine'; exit 77")
set_tests_properties(skipper PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME passer COMMAND sh -c "echo 'all good'")
CMAKE
cmake -S "$tmp/p" -B "$tmp/b" >/dev/null || { echo "FAIL: cmake on the scratch project"; exit 1; }
out=$(ctest --test-dir "$tmp/b" --output-on-failure -j2 2>&1)
rc=$?
echo "$out"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: ctest exited $rc"; fail=1; }
grep -q 'skipper .*\*\*\*Skipped' <<<"$out" || { echo "FAIL: the test no longer counts as skipped"; fail=1; }
grep -qx $'\t  skipper: no frobnicator on this machine' <<<"$out" ||
  { echo "FAIL: the skip reason is not in ctest's output"; fail=1; }
grep -q 'passer:' <<<"$out" && { echo "FAIL: a passing test is listed as skipped"; fail=1; }
[ $fail -eq 0 ] && echo "ok: ctest --output-on-failure shows why a test skipped"
exit $fail
