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
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
