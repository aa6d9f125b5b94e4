#!/usr/bin/env bash
# kill_test.sh BUILD_DIR SOURCE_DIR — outputs are never left half-written:
# diffc and diffrun are killed with SIGKILL at moments spread over their run;
# afterwards the final path either does not exist or holds a complete file
# that loads (temporary names may remain; nothing ever reads them).
# diffc spends nearly all its time compiling kernels and writes its files in
# a short window (the plan at the end, offloaded groups near the start), so
# besides one kill mid-compile the kills are aimed at those windows: each
# waits for the first file of the write to appear, then kills after a delay.
# (Kills at fixed fractions of a whole compile landed mostly in the kernels'
# compile, each one testing the same thing again.)
set -u
build=$1
src=$2
tmp=$(mktemp -d /tmp/diffc-kill-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
model=$src/tests/fixtures/unet_sd15/model
io=$src/tests/fixtures/unet_sd15/io_forward.safetensors
args=(--input sample=2x4x16x24 --input encoder_hidden_states=2x77x32 --input timestep=2)

# nap SECONDS: sleep without starting a process (a read that times out), so
# that polling for a file every half millisecond costs little CPU.
mkfifo "$tmp/never"
exec 9<>"$tmp/never"
nap() { read -r -t "$1" -u 9 || true; }
# running PID: whether PID is still a running child of this script.  Bash
# reaps a finished job at once, and on a busy machine (pid_max 32768, the
# suite starting thousands of processes) the kernel can give its number to
# another process soon after: a bare `kill -9 $pid` may then hit a process of
# another test (a diffrun of the cli test beside this one failed so, once).
# /proc/PID/stat is read with builtins, so polling it forks nothing.
running() {
  local pid comm state ppid
  read -r pid comm state ppid _ 2>/dev/null <"/proc/$1/stat" || return 1
  [ "$ppid" = "$$" ] && [ "$state" != Z ]
}
kill_job() { if running "$1"; then kill -9 "$1" 2>/dev/null; fi; }
# await_file PID GLOB: returns once a file matches GLOB (0) or PID has exited (1).
await_file() {
  while running "$1"; do
    compgen -G "$2" >/dev/null && return 0
    nap 0.0005
  done
  return 1
}

# How long one compile takes here, to place the mid-compile kill.
start=$(date +%s%N)
"$build/diffc" "$model" -o "$tmp/ref.dplan" "${args[@]}" 2>/dev/null || { echo "FAIL: reference compile"; exit 1; }
total_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "one compile takes ${total_ms} ms"

check_plan() { # WHEN
  if [ ! -e "$tmp/k.dplan" ]; then
    passed=$((passed + 1)); echo "  ok: diffc killed $1: no plan under the final name"
  elif "$build/diffrun" "$tmp/k.dplan" --info >/dev/null 2>&1; then  # every section checksum verified
    passed=$((passed + 1)); echo "  ok: diffc killed $1: the plan is complete"
  else
    failed=$((failed + 1)); echo "FAIL: diffc killed $1: a broken plan sits under the final name"
  fi
}
rm -f "$tmp/k.dplan"
"$build/diffc" "$model" -o "$tmp/k.dplan" "${args[@]}" 2>/dev/null &
pid=$!
nap "$(awk -v t="$total_ms" 'BEGIN { printf "%.3f", t / 2000 }')"
kill_job "$pid"
wait "$pid" 2>/dev/null
check_plan "half way through"
# While the plan is written (a few milliseconds): the temporary file exists,
# then it is renamed.
for delay in 0 0.0005 0.002; do
  rm -f "$tmp/k.dplan" "$tmp"/k.dplan.tmp.*
  "$build/diffc" "$model" -o "$tmp/k.dplan" "${args[@]}" 2>/dev/null &
  pid=$!
  if await_file "$pid" "$tmp/k.dplan.tmp.*"; then
    nap "$delay"
    when="${delay} s after the plan's temporary file appeared"
  else
    when="after it finished (its write was too quick to catch)"
  fi
  kill_job "$pid"
  wait "$pid" 2>/dev/null
  check_plan "$when"
done

"$build/diffrun" "$tmp/ref.dplan" --inputs "$io" --outputs "$tmp/ref.safetensors" -q || { echo "FAIL: reference run"; exit 1; }
for delay in 0.01 0.03 0.06 0.1 0.2; do
  rm -f "$tmp/o.safetensors"
  "$build/diffrun" "$tmp/ref.dplan" --inputs "$io" --outputs "$tmp/o.safetensors" --repeat 3 -q &
  pid=$!
  sleep "$delay"
  kill_job "$pid"
  wait "$pid" 2>/dev/null
  if [ ! -e "$tmp/o.safetensors" ] || cmp -s "$tmp/o.safetensors" "$tmp/ref.safetensors"; then
    passed=$((passed + 1)); echo "  ok: diffrun killed after ${delay} s: outputs absent or complete"
  else
    failed=$((failed + 1)); echo "FAIL: diffrun killed after ${delay} s: a partial outputs file"
  fi
done
# Disk offload: group files are written to a temporary name and renamed, and
# a later compile re-hashes every file it finds, so a kill leaves nothing a
# later run would trust wrongly.  The group files are written early in the
# compile: each kill goes into a fresh dir once its first file appears, and
# a compile into the dir one of them left must run bit-identically.
tm=$src/tests/fixtures/unet_tiny/model
tio=$src/tests/fixtures/unet_tiny/io_forward.safetensors
targs=(--input sample=4x4x16x16 --input timestep=4 --input encoder_hidden_states=4x4x8)
od=$tmp/od
"$build/diffc" "$tm" -o "$tmp/plain.dplan" "${targs[@]}" 2>/dev/null &&
  "$build/diffrun" "$tmp/plain.dplan" --inputs "$tio" --outputs "$tmp/plain.safetensors" -q || { echo "FAIL: unet_tiny reference"; exit 1; }
for delay in 0 0.01 0.05 0.15 0.4; do
  d=$od-$delay
  "$build/diffc" "$tm" -o "$tmp/od.dplan" "${targs[@]}" --offload group --group-level leaf --offload-dir "$d" 2>/dev/null &
  pid=$!
  await_file "$pid" "$d/*" && nap "$delay"
  kill_job "$pid"
  wait "$pid" 2>/dev/null
  n=$(find "$d" -name 'group_*' ! -name '*.tmp.*' 2>/dev/null | wc -l)
  stray=$(find "$d" -regextype posix-extended -name 'group_*' ! -regex '.*/group_[0-9a-f]{16}\.safetensors' \
    ! -name '*.tmp.*' 2>/dev/null | wc -l)
  if [ "$stray" -eq 0 ]; then
    passed=$((passed + 1)); echo "  ok: diffc --offload-dir killed ${delay} s after its first group file: $n complete, no stray names"
  else
    failed=$((failed + 1)); echo "FAIL: diffc --offload-dir killed ${delay} s after its first group file: unexpected files in the offload dir"
  fi
done
od=$od-0.05
if "$build/diffc" "$tm" -o "$tmp/od.dplan" "${targs[@]}" --offload group --group-level leaf --offload-dir "$od" 2>/dev/null &&
   "$build/diffrun" "$tmp/od.dplan" --inputs "$tio" --outputs "$tmp/od.safetensors" -q &&
   cmp -s "$tmp/od.safetensors" "$tmp/plain.safetensors"; then
  passed=$((passed + 1)); echo "  ok: after the kills, a compile into the same offload dir runs bit-identically"
else
  failed=$((failed + 1)); echo "FAIL: the offload dir left by killed compiles was trusted wrongly"
fi

# The kernel cache: entries are written to a temporary name and renamed, so
# a compile killed while it fills an empty cache leaves only whole entries
# (or temporaries nothing reads), and a compile with that cache afterwards
# writes the same plan as one with no cache at all.  The kills wait for the
# first entry, then go in while the rest are being compiled and written.
"$build/diffc" "$model" -o "$tmp/nocache.dplan" "${args[@]}" --no-kernel-cache 2>/dev/null ||
  { echo "FAIL: uncached reference compile"; exit 1; }
for delay in 0 0.02 0.2; do
  kc=$tmp/kc-$delay
  "$build/diffc" "$model" -o "$tmp/kc.dplan" "${args[@]}" --kernel-cache "$kc" 2>/dev/null &
  pid=$!
  await_file "$pid" "$kc/cpu-*.bin" && nap "$delay"
  kill_job "$pid"
  wait "$pid" 2>/dev/null
  n=$(find "$kc" -name 'cpu-*.bin' 2>/dev/null | wc -l)
  if "$build/diffc" "$model" -o "$tmp/kc.dplan" "${args[@]}" --kernel-cache "$kc" 2>/dev/null &&
     cmp -s "$tmp/kc.dplan" "$tmp/nocache.dplan"; then
    passed=$((passed + 1)); echo "  ok: diffc killed ${delay} s after its first kernel cache entry ($n whole entries): a compile with that cache writes the uncached plan"
  else
    failed=$((failed + 1)); echo "FAIL: diffc killed ${delay} s after its first kernel cache entry: a compile with that cache differs"
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
