#!/usr/bin/env bash
# kill_test.sh BUILD_DIR SOURCE_DIR — outputs are never left half-written:
# diffc and diffrun are killed with SIGKILL at moments spread over their run;
# afterwards the final path either does not exist or holds a complete file
# that loads (temporary names may remain; nothing ever reads them).
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

# How long one compile takes here, to spread the kills over it.
start=$(date +%s%N)
"$build/diffc" "$model" -o "$tmp/ref.dplan" "${args[@]}" 2>/dev/null || { echo "FAIL: reference compile"; exit 1; }
total_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "one compile takes ${total_ms} ms"

for frac in 5 20 40 60 80 90 95 98 99 100 105; do
  rm -f "$tmp/k.dplan"
  "$build/diffc" "$model" -o "$tmp/k.dplan" "${args[@]}" 2>/dev/null &
  pid=$!
  sleep "$(awk -v t="$total_ms" -v f="$frac" 'BEGIN { printf "%.3f", t * f / 100000 }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ ! -e "$tmp/k.dplan" ]; then
    passed=$((passed + 1)); echo "  ok: diffc killed at ${frac}%: no plan under the final name"
  elif "$build/diffrun" "$tmp/k.dplan" --info >/dev/null 2>&1; then  # every section checksum verified
    passed=$((passed + 1)); echo "  ok: diffc killed at ${frac}%: the plan is complete"
  else
    failed=$((failed + 1)); echo "FAIL: diffc killed at ${frac}%: a broken plan sits under the final name"
  fi
done

"$build/diffrun" "$tmp/ref.dplan" --inputs "$io" --outputs "$tmp/ref.safetensors" -q || { echo "FAIL: reference run"; exit 1; }
for delay in 0.01 0.03 0.06 0.1 0.2; do
  rm -f "$tmp/o.safetensors"
  "$build/diffrun" "$tmp/ref.dplan" --inputs "$io" --outputs "$tmp/o.safetensors" --repeat 3 -q &
  pid=$!
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ ! -e "$tmp/o.safetensors" ] || cmp -s "$tmp/o.safetensors" "$tmp/ref.safetensors"; then
    passed=$((passed + 1)); echo "  ok: diffrun killed after ${delay} s: outputs absent or complete"
  else
    failed=$((failed + 1)); echo "FAIL: diffrun killed after ${delay} s: a partial outputs file"
  fi
done
# Disk offload: group files are written to a temporary name and renamed, and
# a later compile re-hashes every file it finds, so a kill leaves nothing a
# later run would trust wrongly.
tm=$src/tests/fixtures/unet_tiny/model
tio=$src/tests/fixtures/unet_tiny/io_forward.safetensors
targs=(--input sample=4x4x16x16 --input timestep=4 --input encoder_hidden_states=4x4x8)
od=$tmp/od
"$build/diffc" "$tm" -o "$tmp/plain.dplan" "${targs[@]}" 2>/dev/null &&
  "$build/diffrun" "$tmp/plain.dplan" --inputs "$tio" --outputs "$tmp/plain.safetensors" -q || { echo "FAIL: unet_tiny reference"; exit 1; }
start=$(date +%s%N)
"$build/diffc" "$tm" -o "$tmp/od.dplan" "${targs[@]}" --offload group --group-level leaf --offload-dir "$tmp/od-ref" 2>/dev/null ||
  { echo "FAIL: disk offload compile"; exit 1; }
od_ms=$(( ($(date +%s%N) - start) / 1000000 ))
for frac in 10 30 50 70 90; do
  "$build/diffc" "$tm" -o "$tmp/od.dplan" "${targs[@]}" --offload group --group-level leaf --offload-dir "$od" 2>/dev/null &
  pid=$!
  sleep "$(awk -v t="$od_ms" -v f="$frac" 'BEGIN { printf "%.3f", t * f / 100000 }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  stray=$(find "$od" -regextype posix-extended -name 'group_*' ! -regex '.*/group_[0-9a-f]{16}\.safetensors' \
    ! -name '*.tmp.*' 2>/dev/null | wc -l)
  if [ "$stray" -eq 0 ]; then
    passed=$((passed + 1)); echo "  ok: diffc --offload-dir killed at ${frac}%: only complete names or temporary files"
  else
    failed=$((failed + 1)); echo "FAIL: diffc --offload-dir killed at ${frac}%: unexpected files in the offload dir"
  fi
done
if "$build/diffc" "$tm" -o "$tmp/od.dplan" "${targs[@]}" --offload group --group-level leaf --offload-dir "$od" 2>/dev/null &&
   "$build/diffrun" "$tmp/od.dplan" --inputs "$tio" --outputs "$tmp/od.safetensors" -q &&
   cmp -s "$tmp/od.safetensors" "$tmp/plain.safetensors"; then
  passed=$((passed + 1)); echo "  ok: after the kills, a compile into the same offload dir runs bit-identically"
else
  failed=$((failed + 1)); echo "FAIL: the offload dir left by killed compiles was trusted wrongly"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
