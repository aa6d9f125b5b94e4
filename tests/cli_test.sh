#!/usr/bin/env bash
# cli_test.sh BUILD_DIR SOURCE_DIR — diffc and diffrun as a user runs them:
# the happy path end to end, --help covering every option, and bad input
# giving one clear message, a non-zero exit and no output file left behind.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-cli

# ---- happy path ----
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/u.dplan" --input sample=4x4x16x16 --input timestep=4 \
     --input encoder_hidden_states=4x4x8 --dump-ir "$tmp/u.ir" 2>/dev/null &&
   "$diffrun" "$tmp/u.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/o.safetensors" >"$tmp/run.txt"; then
  ok "compile and run unet_tiny"
else
  bad "compile and run unet_tiny"
fi
[ -s "$tmp/o.safetensors" ] && ok "outputs written" || bad "no outputs file"
grep -q "device arena peak: .* measured" "$tmp/run.txt" && ok "diffrun reports the device peak" || bad "no peak line"
# the resident weights in bytes too (bench/cost_model.sh adds them to the arena's peak): unet_tiny's 54416
grep -q "^weights: 53.1 KiB resident (54416 bytes); host peak RSS: " "$tmp/run.txt" && ok "resident weights in bytes" ||
  bad "weights line: $(grep '^weights:' "$tmp/run.txt")"
grep -q "^# peak activations:" "$tmp/u.ir" && ok "IR dump has the peak" || bad "IR dump lacks the peak"
"$diffrun" "$tmp/u.dplan" --random-inputs --seed 3 --repeat 2 | grep -q "^run 2:" && ok "--random-inputs --repeat 2" || bad "--repeat"
"$diffrun" "$tmp/u.dplan" --random-inputs --profile | grep -q "^slowest steps:" && ok "--profile" || bad "--profile"
# --trace: Chrome trace JSON; a path that cannot be written fails before the run, leaving nothing
if "$diffrun" "$tmp/u.dplan" --random-inputs --trace "$tmp/t.json" -q && python3 -m json.tool "$tmp/t.json" >/dev/null &&
   grep -q '"ph":"X","name":"conv2d","cat":"conv3x3"' "$tmp/t.json"; then
  ok "--trace writes valid Chrome trace JSON"
else
  bad "--trace"
fi
"$diffrun" "$tmp/u.dplan" --random-inputs --trace "$tmp/no/such/t.json" >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err.txt")" -eq 1 ] && grep -q "trace: .*no/such/t.json: cannot create: no folder" "$tmp/err.txt" &&
   ! grep -q "^run 1" "$tmp/out.txt"; then
  ok "--trace to an unwritable path: one error, non-zero exit, nothing run"
else
  bad "--trace to an unwritable path (rc $rc): $(cat "$tmp/err.txt")"
fi
"$diffrun" "$tmp/u.dplan" --random-inputs --backend reference | grep -q "backend reference" && ok "--backend reference" || bad "--backend reference"
"$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/d.dplan" --input z=1x4x8x8 2>/dev/null && ok "vae decode compiles" || bad "vae decode"
"$diffrun" "$tmp/d.dplan" --info | grep -q "output sample .*f32\[1,3,16,16\]" && ok "diffrun --info" || bad "diffrun --info"
"$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/v3.dplan" --input z=1x4x8x8 --cpu x86-64-v3 2>/dev/null &&
  "$diffrun" "$tmp/v3.dplan" --info | grep -q "cpu x86-64-v3" && ok "--cpu x86-64-v3 (AVX2 kernels)" || bad "--cpu x86-64-v3"
# a text encoder: token ids (int64) in, its outputs and SD's clip-skip hidden state out
if "$diffc" "$fx/clip_sd15/model" -o "$tmp/t.dplan" --input input_ids=2x77 --clip-hidden-state 2 --clip-final-norm 2>/dev/null &&
   "$diffrun" "$tmp/t.dplan" --info | grep -q "^input  *input_ids  *i64\[2,77\]" &&
   "$diffrun" "$tmp/t.dplan" --inputs "$fx/clip_sd15/io_clip_skip.safetensors" --outputs "$tmp/t.safetensors" -q &&
   [ -s "$tmp/t.safetensors" ]; then
  ok "compile and run a text encoder from token ids, with --clip-hidden-state"
else
  bad "compile and run clip_sd15"
fi
expect_fail "clip option on a UNet" "--clip-hidden-state and --clip-final-norm apply to a CLIPTextModel, CLIPTextModelWithProjection" \
  "$tmp/c.dplan" -- "$diffc" "$fx/unet_tiny/model" -o "$tmp/c.dplan" --clip-hidden-state 1

# ---- the memory report: diffc --memory-report, diffc inspect, diffrun --info ----
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/g.dplan" --offload group --group-level block --prefetch \
     --memory-report="$tmp/g.report" 2>/dev/null && grep -q "^device 0 peak: " "$tmp/g.report" &&
   grep -q "^host: offloaded weights .*host_memory pinned" "$tmp/g.report"; then
  ok "diffc --memory-report=FILE writes the report"
else
  bad "diffc --memory-report=FILE"
fi
# the report's peak is the dump's: weights + arena, as both print it
peak=$(sed -n 's/^# peak device memory: \([^=]*\) = .*/\1/p' "$tmp/u.ir")
"$diffc" inspect "$tmp/u.dplan" | grep -q "^device 0 peak: $peak = weights" && ok "diffc inspect: the dump's peak ($peak)" ||
  bad "diffc inspect's peak differs from the dump's $peak"
"$diffc" "$fx/unet_tiny/model" -o "$tmp/j.dplan" --memory-report --format json 2>/dev/null | python3 -m json.tool >/dev/null &&
  ok "diffc --memory-report --format json parses" || bad "diffc --memory-report --format json"
"$diffc" inspect "$tmp/g.dplan" --format json | python3 -c 'import json,sys; r=json.load(sys.stdin); d=r["devices"][0]
assert d["peak_bytes"] == d["weight_bytes"] + d["arena_bytes"] and r["host"]["host_memory"] == "pinned"
assert sum(d["by_kind"][k] for k in ("in_flight", "held", "activations")) == d["live_at_peak_bytes"]' &&
  ok "diffc inspect --format json: the documented fields add up" || bad "diffc inspect --format json"
"$diffrun" "$tmp/g.dplan" --info | grep -q "^copies per run of the schedule: .* uploaded" && ok "diffrun --info shows the report" ||
  bad "diffrun --info lacks the memory report"
"$diffrun" "$tmp/g.dplan" --info --format json | python3 -m json.tool >/dev/null && ok "diffrun --info --format json parses" ||
  bad "diffrun --info --format json"
expect_fail "diffc inspect missing plan" "missing.plan" -- "$diffc" inspect "$tmp/missing.plan"
expect_fail "diffc inspect --format xml" "--format xml: expected text or json" -- "$diffc" inspect "$tmp/g.dplan" --format xml
expect_fail "diffc --format without the report" "give --memory-report too" "$tmp/f.dplan" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$tmp/f.dplan" --format json
expect_fail "diffrun --format without --info" "applies to --info" -- "$diffrun" "$tmp/g.dplan" --random-inputs --format json
expect_fail "diffrun --format xml" "--format xml: expected text or json" -- "$diffrun" "$tmp/g.dplan" --info --format xml

# ---- the progress line: on a terminal only ----
# stderr to a file: the one "wrote" line, no carriage returns or escapes
if "$diffc" "$fx/vae_tiny/model" --entry decode --input z=1x4x8x8 -o "$tmp/pg.dplan" 2>"$tmp/pg.txt" &&
   [ "$(wc -l <"$tmp/pg.txt")" -eq 1 ] && grep -q "^diffc: wrote " "$tmp/pg.txt" && ! grep -q $'[\r\033]' "$tmp/pg.txt"; then
  ok "stderr not a terminal: no progress output"
else
  bad "progress output on a non-terminal stderr: $(od -c "$tmp/pg.txt" | head -5)"
fi
if command -v script >/dev/null; then # util-linux: runs diffc on a pseudo-terminal
  pg="$diffc $fx/vae_tiny/model --entry decode --input z=1x4x8x8 -o $tmp/pg.dplan"
  script -qec "$pg" /dev/null >"$tmp/pg_tty.txt" 2>&1
  if grep -q $'\r\033\[Kbuilding graph' "$tmp/pg_tty.txt" && grep -q $'\r\033\[Kkernels [0-9]*/[0-9]* ([0-9]* cached)' "$tmp/pg_tty.txt" &&
     grep -q $'\r\033\[Kwriting plan\r\033\[Kdiffc: wrote ' "$tmp/pg_tty.txt"; then
    ok "on a terminal: the stages in place, kernels counted, the line cleared before the last line"
  else
    bad "progress line on a terminal: $(od -c "$tmp/pg_tty.txt" | head -8)"
  fi
  script -qec "$pg --no-progress" /dev/null >"$tmp/pg_off.txt" 2>&1
  ! grep -q $'\033' "$tmp/pg_off.txt" && grep -q "diffc: wrote " "$tmp/pg_off.txt" && ok "--no-progress on a terminal" ||
    bad "--no-progress still drew: $(od -c "$tmp/pg_off.txt" | head -5)"
else
  echo "  skip: no script(1) (util-linux) here, the progress line on a terminal not checked"
fi

# ---- help tells the truth: every option the parser knows is documented ----
for opt in -o --output --component --variant --entry --input --target --cpu --dump-ir --dump-after --debug --list-passes --no-progress --verbose --help --version --clip-hidden-state --clip-final-norm --memory-report --format --memory-budget --allow-cast --calibration inspect; do
  "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"
done
for opt in --inputs --random-inputs --seed --outputs --repeat --backend --threads --check-finite --profile --trace --print-ir --info --calibrate --format --no-cuda-graphs --verbose --quiet --help --video --fps; do
  "$diffrun" --help | grep -q -- "$opt" || bad "diffrun --help lacks $opt"
done
ok "--help lists every option"

# ---- bad input: diffc ----
out=$tmp/plan.dplan
expect_fail "missing folder" "no such directory" "$out" -- "$diffc" "$tmp/nope" -o "$out"
mkdir -p "$tmp/empty"
expect_fail "missing config.json" "no config.json" "$out" -- "$diffc" "$tmp/empty" -o "$out"
copy_model() { rm -rf "$tmp/m"; cp -r "$fx/unet_tiny/model" "$tmp/m"; }
copy_model; printf '{\n  "_class_name": "UNet2DConditionModel",\n  oops\n}\n' >"$tmp/m/config.json"
expect_fail "config not JSON" "config.json:3:" "$out" -- "$diffc" "$tmp/m" -o "$out"
copy_model; sed -i 's/"UNet2DConditionModel"/"FancyNet"/' "$tmp/m/config.json"
expect_fail "unknown class" '"_class_name" is "FancyNet"' "$out" -- "$diffc" "$tmp/m" -o "$out"
copy_model; sed -i 's/"CrossAttnDownBlock2D"/"SimpleCrossAttnDownBlock2D"/' "$tmp/m/config.json"
expect_fail "unsupported block" "SimpleCrossAttnDownBlock2D" "$out" -- "$diffc" "$tmp/m" -o "$out"
copy_model; sed -i 's/"cross_attention_dim": 8/"cross_attention_dim": 16/' "$tmp/m/config.json"
expect_fail "weight shape differs from the config" "has shape [4,8] but the config implies [4,16]" "$out" -- "$diffc" "$tmp/m" -o "$out"
copy_model; f=$tmp/m/diffusion_pytorch_model.safetensors; head -c $(($(stat -c %s "$f") - 100)) "$f" >"$f.cut"; mv "$f.cut" "$f"
expect_fail "truncated safetensors" "truncated" "$out" -- "$diffc" "$tmp/m" -o "$out"
copy_model; printf '\xff\xff\xff\xff\xff\x00\x00\x00' | dd of="$tmp/m/diffusion_pytorch_model.safetensors" conv=notrunc 2>/dev/null
expect_fail "header length too large" "header length" "$out" -- "$diffc" "$tmp/m" -o "$out"
expect_fail "bad --input" "--input sample=2xQ" "$out" -- "$diffc" "$fx/unet_tiny/model" -o "$out" --input sample=2xQ
expect_fail "unknown input name" 'no input "latents"' "$out" -- "$diffc" "$fx/unet_tiny/model" -o "$out" --input latents=1x4x8x8
expect_fail "unknown option" "unknown option --fast" "$out" -- "$diffc" "$fx/unet_tiny/model" -o "$out" --fast
if [ -d "$fx/unet_sdxl/model" ]; then
  rm -rf "$tmp/s"; cp -r "$fx/unet_sdxl/model" "$tmp/s"; rm "$(ls "$tmp"/s/*-00002-of-*.safetensors | head -1)"
  expect_fail "index names a missing shard" "does not exist" "$out" -- "$diffc" "$tmp/s" -o "$out"
fi

# ---- bad input: diffrun ----
outs=$tmp/outs.safetensors
head -c 100 "$tmp/u.dplan" >"$tmp/trunc.dplan"
expect_fail "truncated plan" "truncated" "$outs" -- "$diffrun" "$tmp/trunc.dplan" --random-inputs --outputs "$outs"
cp "$tmp/u.dplan" "$tmp/corrupt.dplan"; printf 'X' | dd of="$tmp/corrupt.dplan" bs=1 seek=2000 conv=notrunc 2>/dev/null
expect_fail "corrupted plan" "checksum mismatch" "$outs" -- "$diffrun" "$tmp/corrupt.dplan" --random-inputs --outputs "$outs"
cp "$tmp/u.dplan" "$tmp/v.dplan"; printf '\x08' | dd of="$tmp/v.dplan" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_fail "other format version" "plan format version 8" "$outs" -- "$diffrun" "$tmp/v.dplan" --random-inputs --outputs "$outs"
expect_fail "input file missing a tensor" 'no tensor "z"' "$outs" -- "$diffrun" "$tmp/d.dplan" --inputs "$tmp/o.safetensors" --outputs "$outs"
"$diffc" "$fx/unet_tiny/model" -o "$tmp/u2.dplan" --input sample=2x4x16x16 2>/dev/null
expect_fail "input with the wrong shape" "has shape [4,4,16,16] but the plan was compiled for [2,4,16,16]" "$outs" -- \
  "$diffrun" "$tmp/u2.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$outs"
# A one-tensor safetensors file by hand: z as BF16 [1,4,8,8] (512 bytes of zeros).
header='{"z":{"dtype":"BF16","shape":[1,4,8,8],"data_offsets":[0,512]}}'
while [ $(( ${#header} % 8 )) -ne 0 ]; do header="$header "; done
{ printf "$(printf '\\x%02x' ${#header} 0 0 0 0 0 0 0)"; printf '%s' "$header"; head -c 512 /dev/zero; } >"$tmp/bf16.safetensors"
expect_fail "input with the wrong dtype" 'tensor "z" has dtype BF16, but the plan'"'"'s input z is f32[1,4,8,8]: expected F32' "$outs" -- \
  "$diffrun" "$tmp/d.dplan" --inputs "$tmp/bf16.safetensors" --outputs "$outs"
cp -r "$fx/unet_tiny/model" "$tmp/w"
"$diffc" "$tmp/w" -o "$tmp/w.dplan" 2>/dev/null
"$diffc" "$fx/vae_tiny/model" -o "$tmp/other.dplan" 2>/dev/null
cp "$fx/vae_tiny/model/diffusion_pytorch_model.safetensors" "$tmp/w/diffusion_pytorch_model.safetensors"
expect_fail "weights changed since compile" "changed since compile" "$outs" -- "$diffrun" "$tmp/w.dplan" --random-inputs --outputs "$outs"

# ---- the cuda target (no GPU needed to compile) ----
for opt in --cuda-arch --compute-dtype --cuda-sm-count --kernel-cache --no-kernel-cache; do
  "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"
done
expect_fail "unknown target" "--target tpu: expected cpu or cuda" "$out" -- "$diffc" "$fx/vae_tiny/model" -o "$out" --target tpu
expect_fail "unknown --cpu" "--cpu pentium: expected native, generic, x86-64, x86-64-v2, x86-64-v3" "$out" -- \
    "$diffc" "$fx/vae_tiny/model" -o "$out" --cpu pentium
expect_fail "bf16 on the cpu target" "--compute-dtype bf16: the cpu target computes in f32 only for now" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --compute-dtype bf16
expect_fail "--cuda-arch without --target cuda" "--cuda-arch sm_90: only for --target cuda" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --cuda-arch sm_90
expect_fail "--cuda-sm-count without --target cuda" "--cuda-sm-count 108: only for --target cuda" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --cuda-sm-count 108
expect_fail "--cuda-sm-count 0" "--cuda-sm-count 0: expected an integer from 1 to 4096" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --target cuda --cuda-sm-count 0
expect_fail "no NVRTC" "--target cuda: NVRTC, the CUDA toolkit's runtime compiler, was not found: tried /nonexistent/libnvrtc.so.13" \
  "$out" -- env DIFFC_NVRTC=/nonexistent/libnvrtc.so.13 "$diffc" "$fx/vae_tiny/model" -o "$out" --target cuda
msg=$("$diffc" "$fx/vae_tiny/model" -o "$out" --target cuda --cuda-arch sm_91 2>&1 >/dev/null)
case "$msg" in
  *"was not found"*) echo "  skip: no NVRTC here, --target cuda compiles not checked" ;;
  *)
    expect_fail "unsupported --cuda-arch" "--cuda-arch sm_91: NVRTC" "$out" -- \
      "$diffc" "$fx/vae_tiny/model" -o "$out" --target cuda --cuda-arch sm_91
    kc=$tmp/kcache
    # the same output path twice: a bf16 plan names the weights file written beside it
    if DIFFC_CACHE_DIR=$kc "$diffc" "$fx/vae_tiny/model" --entry decode --input z=1x4x8x8 -o "$tmp/c2.dplan" \
         --target cuda --cuda-arch sm_90 --compute-dtype bf16 2>"$tmp/c1.txt" && cp "$tmp/c2.dplan" "$tmp/c.dplan" &&
       DIFFC_CACHE_DIR=$kc "$diffc" "$fx/vae_tiny/model" --entry decode --input z=1x4x8x8 -o "$tmp/c2.dplan" \
         --target cuda --cuda-arch sm_90 --compute-dtype bf16 -v 2>"$tmp/c2.txt"; then
      ok "vae_tiny decode compiles for --target cuda"
    else
      bad "vae_tiny decode --target cuda: $(cat "$tmp/c1.txt" "$tmp/c2.txt")"
    fi
    grep -q "CUDA kernels (\([0-9]*\) compiles, \1 from the cache)" "$tmp/c2.txt" && ok "second compile: every kernel from the cache" ||
      bad "second compile did not use the cache: $(tail -2 "$tmp/c2.txt")"
    cmp -s "$tmp/c.dplan" "$tmp/c2.dplan" && ok "cached compile gives a byte-identical plan" || bad "cached plan differs"
    ;;
esac

# A CUDA plan where there is no driver: one clear message; the reference backend still runs it.
msg=$("$diffc" "$fx/vae_tiny/model" --entry decode --input z=1x4x8x8 -o "$tmp/cu.dplan" --target cuda --cuda-arch compute_90 2>&1 >/dev/null)
if [ -f "$tmp/cu.dplan" ]; then
  if [ ! -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] && ! ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
    expect_fail "CUDA plan without a driver" "this plan targets CUDA, and no NVIDIA driver was found (libcuda.so.1" "$outs" -- \
      "$diffrun" "$tmp/cu.dplan" --random-inputs --outputs "$outs"
  fi
  "$diffrun" "$tmp/cu.dplan" --random-inputs --backend reference >/dev/null 2>&1 && ok "CUDA plan on --backend reference" ||
    bad "a CUDA plan did not run on --backend reference"
  "$diffrun" "$tmp/cu.dplan" --info | grep -q "target: cuda" && ok "diffrun --info on a CUDA plan" || bad "--info lacks the cuda target"
fi
expect_fail "--backend cuda on a CPU plan" "--backend cuda needs a plan compiled for CUDA" "$outs" -- \
  "$diffrun" "$tmp/d.dplan" --random-inputs --backend cuda --outputs "$outs"

# ---- memory options ----
for opt in --offload --group-level --blocks-per-group --prefetch --offload-dir --host-memory --vae-slicing --vae-tiling --tile-size --tile-overlap; do
  "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"
done
expect_fail "unknown --offload value" "--offload disk: expected none, model, sequential or group" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --offload disk
expect_fail "group size at leaf level" "--blocks-per-group applies to --group-level block only" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --offload group --group-level leaf --blocks-per-group 2
expect_fail "prefetch without offload" "--prefetch needs --offload group (nothing is offloaded)" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --prefetch
expect_fail "tiling options on a UNet" "apply to an AutoencoderKL" "$out" -- "$diffc" "$fx/unet_tiny/model" -o "$out" --vae-tiling
expect_fail "--tile-size without --vae-tiling" "--tile-size and --tile-overlap need --vae-tiling" "$out" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$out" --tile-size 64
touch "$tmp/notadir"
expect_fail "offload dir that is a file" "--offload-dir $tmp/notadir" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --offload sequential --offload-dir "$tmp/notadir"
expect_fail "offload dir without offload" "--offload-dir $tmp/od0: nothing is offloaded" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --offload-dir "$tmp/od0"
expect_fail "unknown --host-memory value" "--host-memory mapped: expected pinned or on-demand" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --offload sequential --host-memory mapped
expect_fail "host memory without offload" "--host-memory on-demand needs --offload model|sequential|group" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --host-memory on-demand
expect_fail "pinned host memory with an offload dir" "--host-memory pinned contradicts --offload-dir $tmp/od1" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --offload sequential --offload-dir "$tmp/od1" --host-memory pinned
[ ! -e "$tmp/od1" ] && ok "nothing written to the offload dir after that" || bad "--host-memory pinned --offload-dir wrote $tmp/od1"
# Disk offload: group files named by content; a damaged one is detected and rewritten, never used.
od=$tmp/od
tiny_shapes="--input sample=4x4x16x16 --input timestep=4 --input encoder_hidden_states=4x4x8"
"$diffc" "$fx/unet_tiny/model" -o "$tmp/off.dplan" $tiny_shapes --offload group --group-level block --blocks-per-group 1 --prefetch \
  --offload-dir "$od" --dump-ir "$tmp/off.ir" 2>/dev/null && ok "group offload to disk compiles" || bad "group offload to disk failed"
grep -q "^# host_memory = on-demand$" "$tmp/off.ir" && ok "dump: --offload-dir reads weights on demand" ||
  bad "dump of a disk offload lacks '# host_memory = on-demand'"
"$diffrun" "$tmp/off.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/off.safetensors" >"$tmp/off.txt" 2>&1 &&
  "$diffrun" "$tmp/u.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/plain.safetensors" >/dev/null 2>&1 &&
  cmp -s "$tmp/off.safetensors" "$tmp/plain.safetensors" && ok "disk offload: outputs bit-identical to no offload" ||
  bad "disk offload changed the outputs"
grep -q "^host memory: on-demand, .* held for the offloaded weights (a bounce buffer" "$tmp/off.txt" &&
  ok "diffrun: disk offload runs on demand through a bounce buffer" || bad "diffrun on a disk offload: $(grep host "$tmp/off.txt")"
# --host-memory without a dir: the dump says which; both run to the same bits as no offload.
for hm in pinned on-demand; do
  "$diffc" "$fx/unet_tiny/model" -o "$tmp/hm.dplan" $tiny_shapes --offload sequential --host-memory $hm \
    --dump-ir "$tmp/hm.ir" 2>/dev/null && grep -q "^# host_memory = $hm$" "$tmp/hm.ir" &&
    "$diffrun" "$tmp/hm.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/hm.safetensors" >"$tmp/hm.txt" &&
    grep -q "^host memory: $hm, " "$tmp/hm.txt" && cmp -s "$tmp/hm.safetensors" "$tmp/plain.safetensors" &&
    ok "--host-memory $hm: in the dump, in diffrun's report, outputs bit-identical" || bad "--host-memory $hm"
done
"$diffc" "$fx/unet_tiny/model" -o "$tmp/hm.dplan" $tiny_shapes --offload sequential --dump-ir "$tmp/hm.ir" 2>/dev/null &&
  grep -q "^# host_memory = pinned$" "$tmp/hm.ir" && ok "dump: offload without --offload-dir defaults to pinned" ||
  bad "default --host-memory is not pinned in the dump"
first=$(ls "$od"/group_*.safetensors | head -1)
printf 'X' | dd of="$first" bs=1 seek=200 conv=notrunc 2>/dev/null
"$diffc" "$fx/unet_tiny/model" -o "$tmp/off2.dplan" $tiny_shapes --offload group --group-level block --blocks-per-group 1 --prefetch \
  --offload-dir "$od" -v 2>"$tmp/off2.txt" && grep -q "1 group file(s) written" "$tmp/off2.txt" &&
  ok "a damaged group file is rewritten, not reused" || bad "damaged group file: $(grep offload-dir "$tmp/off2.txt")"
printf 'X' | dd of="$first" bs=1 seek=200 conv=notrunc 2>/dev/null
head -c 300 "$first" >"$first.cut" && mv "$first.cut" "$first"
expect_fail "truncated group file at run time" "changed since compile" "$outs" -- "$diffrun" "$tmp/off2.dplan" --random-inputs --outputs "$outs"

# A plan over a modelled device's memory fails before running and names what fits.
expect_fail "plan over --device-memory" "(--device-memory); nothing was run; these diffc options fit: --offload" "$outs" -- \
  "$diffrun" "$tmp/u.dplan" --random-inputs --device-memory 150KiB --outputs "$outs"
expect_fail "bad --device-memory" "--device-memory lots: expected a size such as 4GiB" "$outs" -- \
  "$diffrun" "$tmp/u.dplan" --random-inputs --device-memory lots --outputs "$outs"
"$diffrun" "$tmp/u.dplan" --random-inputs --device-memory 1GB -q && ok "a plan within --device-memory runs" || bad "--device-memory 1GB"
# --calibrate: the profile in the cache root by default, a table of what was measured; bad uses refused at once.
if DIFFC_CACHE_DIR="$tmp/cal" "$diffrun" "$tmp/u.dplan" --calibrate --repeat 2 >"$tmp/cal.txt" &&
   grep -q '"format":[[:space:]]*"diffc-calibration"' "$tmp/cal/calibration-cpu.json" &&
   grep -q "^wrote $tmp/cal/calibration-cpu.json\$" "$tmp/cal.txt" && grep -q "^  conv3x3 .* GFLOP/s\$" "$tmp/cal.txt" &&
   grep -q "^  memory .* GB/s\$" "$tmp/cal.txt" && grep -q "^copy bandwidth: host->device .* disk reads" "$tmp/cal.txt" &&
   ! ls "$tmp/cal" | grep -q -e '\.tmp\.' -e diffc-calibrate; then
  ok "--calibrate writes calibration-cpu.json in the cache root and prints its table"
else
  bad "--calibrate: $(cat "$tmp/cal.txt")"
fi
expect_fail "--calibrate into a missing folder" "$tmp/nodir/c.json: cannot create: no folder" "$tmp/nodir" -- \
  "$diffrun" "$tmp/u.dplan" --calibrate="$tmp/nodir/c.json"
expect_fail "--calibrate with inputs" "--calibrate runs the plan on random inputs by itself" "$outs" -- \
  "$diffrun" "$tmp/u.dplan" --calibrate --random-inputs
expect_fail "--calibrate= without a file" "--calibrate=: name the profile's FILE" "$outs" -- "$diffrun" "$tmp/u.dplan" --calibrate=
# --memory-budget: the fastest plan within the budget, the choice and runners-up on stderr, the plan runs within it.
tiny_in="--input sample=4x4x16x16 --input timestep=4 --input encoder_hidden_states=4x4x8"
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/b.dplan" $tiny_in --memory-budget 150KiB 2>"$tmp/b.err" &&
   grep -q "^diffc: --memory-budget 150.0 KiB: chose --offload " "$tmp/b.err" &&
   grep -q "^diffc:   runner-up --offload .*: \(slower by\|over budget by\)" "$tmp/b.err" &&
   grep -q "^diffc:   [0-9]* candidates tried in" "$tmp/b.err" &&
   "$diffrun" "$tmp/b.dplan" --info | grep -q "^memory budget: 150.0 KiB: chose --offload " &&
   "$diffrun" "$tmp/b.dplan" --random-inputs --device-memory 150KiB -q; then
  ok "--memory-budget: choice and runners-up printed, in --info, the plan runs within the budget"
else
  bad "--memory-budget 150KiB: $(cat "$tmp/b.err")"
fi
"$diffc" "$fx/unet_tiny/model" -o "$tmp/b4.dplan" $tiny_in --memory-budget 1GiB --max-memory 0=170KiB,1=170KiB 2>"$tmp/b4.err" &&
  grep -q "^diffc: --memory-budget 1.0 GiB (the GPUs --max-memory names: its budgets): chose " "$tmp/b4.err" &&
  "$diffrun" "$tmp/b4.dplan" --random-inputs --device-memory 170KiB -q &&
  ok "--memory-budget with two GPUs' budgets: each within its own" || bad "two GPUs: $(cat "$tmp/b4.err")"
"$diffc" "$fx/unet_tiny/model" -o "$tmp/b5.dplan" $tiny_in --memory-budget 150KiB --max-memory cpu=10KiB 2>"$tmp/b5.err" &&
  grep -q "^diffc: --memory-budget 150.0 KiB: chose --offload .* --host-memory on-demand$" "$tmp/b5.err" &&
  "$diffrun" "$tmp/b5.dplan" --random-inputs --device-memory 150KiB | grep -q "^host memory: on-demand" &&
  ok "--memory-budget with a host budget below the offloaded weights reads them on demand" || bad "cpu=10KiB: $(cat "$tmp/b5.err")"
expect_fail "budget below every plan" "no plan fits; the smallest device peak diffc can reach is" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" $tiny_in --memory-budget 100KiB
expect_fail "budget with --offload" "--offload with --memory-budget: the budget search chooses" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --memory-budget 1GiB --offload sequential
expect_fail "bad --memory-budget" "--memory-budget lots: expected a size such as 6GiB" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --memory-budget lots
expect_fail "bad --allow-cast" "--allow-cast int4: expected storage dtypes from fp8_e4m3" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --memory-budget 1GiB --allow-cast int4
expect_fail "--allow-cast without a budget" "--allow-cast applies to --memory-budget" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --allow-cast bf16
printf '{"format": "diffc-calibration", "version": 1, "target": "cpu", "overhead_us": 2,\n "copy": {"h2d_gbps": -1, "disk_gbps": 1, "d2d_gbps": 1}}\n' >"$tmp/cal.json"
expect_fail "bad calibration profile" "cal.json: \"copy.h2d_gbps\" must be a positive number" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --memory-budget 1GiB --calibration "$tmp/cal.json"
sed -i 's/-1/9/' "$tmp/cal.json"
"$diffc" "$fx/unet_tiny/model" -o "$tmp/b2.dplan" $tiny_in --memory-budget 1GiB --calibration "$tmp/cal.json" 2>"$tmp/b2.err" &&
  grep -q "cost model: $tmp/cal.json)" "$tmp/b2.err" && ! grep -q "uncalibrated" "$tmp/b2.err" &&
  ok "--calibration FILE: the budget's times use it, not the defaults" || bad "--calibration: $(cat "$tmp/b2.err")"
mkdir -p "$tmp/cache" && printf '{"format": "other"}\n' >"$tmp/cache/calibration-cpu.json"
DIFFC_CACHE_DIR="$tmp/cache" "$diffc" "$fx/unet_tiny/model" -o "$tmp/b3.dplan" $tiny_in --memory-budget 1GiB 2>"$tmp/b3.err" &&
  grep -q "^diffc: warning: .*calibration-cpu.json: \"format\" must be \"diffc-calibration\".*; using the built-in defaults" "$tmp/b3.err" &&
  ok "a bad profile in the default place is a warning, and the defaults apply" || bad "default profile: $(cat "$tmp/b3.err")"
# Layerwise casting: weights stored in fp8 beside the plan, the plan runs, bad values are named.
for opt in --storage-dtype --skip-cast; do "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"; done
expect_fail "unknown storage dtype" "--storage-dtype int4: expected fp8_e4m3, fp8_e5m2, bf16, fp16 or fp32" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --storage-dtype int4
expect_fail "skip-cast without a storage dtype" "--skip-cast needs --storage-dtype" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --skip-cast norm
expect_fail "bad skip pattern" "--skip-cast \"(\": not a valid pattern" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --storage-dtype bf16 --skip-cast "("
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/f8.dplan" $tiny_shapes --storage-dtype fp8_e4m3 2>/dev/null &&
   [ -f "$tmp/f8.dplan.weights.safetensors" ] &&
   "$diffrun" "$tmp/f8.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" -q; then
  ok "--storage-dtype fp8_e4m3 writes PLAN.weights.safetensors and runs"
else
  bad "--storage-dtype fp8_e4m3"
fi
grep -q "f8e4m3" "$tmp/f8.dplan.weights.safetensors" 2>/dev/null || grep -q "F8_E4M3" "$tmp/f8.dplan.weights.safetensors" &&
  ok "the weights file holds F8_E4M3 tensors" || bad "no F8_E4M3 tensors in the weights file"
# with every weight offloaded to --offload-dir, the plan reads none from PLAN.weights.safetensors: no copy left
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/f8od.dplan" $tiny_shapes --storage-dtype fp8_e4m3 --offload group \
     --group-level leaf --offload-dir "$tmp/f8od" 2>/dev/null && [ ! -e "$tmp/f8od.dplan.weights.safetensors" ] &&
   ls "$tmp/f8od"/group_*.safetensors >/dev/null 2>&1 &&
   "$diffrun" "$tmp/f8od.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/f8od.safetensors" -q &&
   "$diffrun" "$tmp/f8.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/f8r.safetensors" -q &&
   cmp -s "$tmp/f8od.safetensors" "$tmp/f8r.safetensors"; then
  ok "--storage-dtype with --offload-dir: the converted weights only in the offload dir, the same outputs"
else
  bad "--storage-dtype with --offload-dir left PLAN.weights.safetensors or changed the outputs"
fi

# channels_last and placement
for opt in --layout --device-map --max-memory; do "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"; done
expect_fail "unknown --layout" "--layout chw: expected nhwc (channels_last) or nchw" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --layout chw
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/nhwc.dplan" $tiny_shapes --layout nhwc --dump-ir "$tmp/nhwc.ir" 2>/dev/null &&
   grep -q "^# layout = nhwc" "$tmp/nhwc.ir" && grep -q ", nhwc, dev0," "$tmp/nhwc.ir" &&
   "$diffrun" "$tmp/nhwc.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/nhwc.safetensors" -q; then
  ok "--layout nhwc: the dump shows each value's layout, the plan runs"
else
  bad "--layout nhwc"
fi
expect_fail "device map without budgets" "--device-map balanced needs --max-memory" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --device-map balanced
expect_fail "unknown --device-map" "--device-map everywhere: expected balanced, auto, sequential or a FILE.json" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --device-map everywhere
expect_fail "bad --max-memory" "\"0=lots\" is not DEVICE=SIZE" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --device-map sequential --max-memory 0=lots
printf '{"": 0, "up_blocks.7": 1}' >"$tmp/map.json"
expect_fail "device map naming a missing module" "module \"up_blocks.7\" does not exist" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" --device-map "$tmp/map.json"
expect_fail "budgets too small for the weights" "fits on no device after those before it" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" $tiny_shapes --device-map balanced --max-memory 0=1MiB,1=40KiB
printf '{"": 0, "up_blocks.1": 1}' >"$tmp/map.json"
expect_fail "device over its budget" "device 0 needs 173.1 KiB (weights 44.4 KiB + activations 128.8 KiB) but its budget is 150.0 KiB: over by" "$out" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$out" $tiny_shapes --device-map "$tmp/map.json" --max-memory 0=150KiB,1=1GiB
if "$diffc" "$fx/unet_tiny/model" -o "$tmp/two.dplan" $tiny_shapes --device-map "$tmp/map.json" --dump-ir "$tmp/two.ir" 2>/dev/null &&
   grep -q "^# device_map = .*map.json: 0 = .*; 1 = up_blocks.1" "$tmp/two.ir" && grep -q "^#   device 1: " "$tmp/two.ir" &&
   "$diffrun" "$tmp/two.dplan" --inputs "$fx/unet_tiny/io_forward.safetensors" --outputs "$tmp/two.safetensors" >"$tmp/two.txt" &&
   grep -q "^  device 1: arena .* measured, .* planned" "$tmp/two.txt" && cmp -s "$tmp/two.safetensors" "$tmp/o.safetensors"; then
  ok "--device-map FILE.json: the dump prints the map and each device's peak; two arenas, the same outputs"
else
  bad "--device-map FILE.json: $(tail -2 "$tmp/two.txt" 2>/dev/null)"
fi

# ---- the dump and the notes tell what was done (issue 11, items 10 and 11) ----
# vae_tiled (factor 2): a 32 px tile is 16 latents, and z 16x16 fits it, as diffusers sees it too
"$diffc" "$fx/vae_tiled/model" --entry decode --input z=1x4x16x16 --vae-tiling --vae-slicing --tile-size 32 \
  -o "$tmp/vt0.dplan" --dump-ir "$tmp/vt0.ir" 2>"$tmp/vt0.err"
if [ "$(grep -c '^diffc: note: ' "$tmp/vt0.err")" -eq 2 ] &&
   grep -q '^diffc: note: --vae-tiling has no effect: z 16x16 latents fits one tile of 16 latents (--tile-size 32 px)' "$tmp/vt0.err" &&
   grep -q '^diffc: note: --vae-slicing has no effect: batch 1' "$tmp/vt0.err" &&
   grep -q '^# vae_tiling = requested, no effect: ' "$tmp/vt0.ir" && grep -q '^# vae_slicing = requested, no effect: ' "$tmp/vt0.ir"; then
  ok "--vae-tiling/--vae-slicing with no effect at this size: one note each on stderr and in the dump"
else
  bad "no-effect tiling notes: $(cat "$tmp/vt0.err")"
fi
"$diffc" "$fx/vae_tiled/model" --entry decode --input z=1x4x16x16 --vae-tiling --tile-size 16 \
  -o "$tmp/vt.dplan" --dump-ir "$tmp/vt.ir" 2>"$tmp/vt.err"
if ! grep -q 'note' "$tmp/vt.err" && grep -q '^# vae_tiling = tiles of 8x8 latents (16 px) every 6 latents, overlap 0.25, blended over 4 px: 3x3 = 9 tiles$' "$tmp/vt.ir" &&
   "$diffrun" "$tmp/vt.dplan" --random-inputs | grep -q "(12 steps on reference kernels, for ops with no LLVM kernel yet: blend)"; then
  ok "--vae-tiling that tiles: its tiles in the dump, no note; diffrun names the op that ran on reference kernels"
else
  bad "tiling dump or reference-kernel note: $(cat "$tmp/vt.err"; grep '^# vae' "$tmp/vt.ir")"
fi
"$diffc" "$fx/vae_tiny/model" --entry decode --offload group --group-level leaf --offload-dir "$tmp/offdir" \
  -o "$tmp/od.dplan" --dump-ir "$tmp/od.ir" 2>"$tmp/od.err"
if grep -q 'wrote .*: 183 steps, weights 7.5 KiB (resident 0 B, offloaded 7.5 KiB), peak activations' "$tmp/od.err" &&
   grep -q '^# weights: 70 tensors, 7.5 KiB (7724 bytes) in 35 file(s): resident 0 B, offloaded 7.5 KiB$' "$tmp/od.ir" &&
   grep -q '^# offload_dir = .*offdir (35 group files)$' "$tmp/od.ir" &&
   grep -q '^# offloaded: 7.5 KiB of weights, on disk in the offload_dir group files, read at every upload' "$tmp/od.ir" &&
   ! grep -q 'host memory' "$tmp/od.ir"; then
  ok "--offload-dir: diffc and the dump count the offloaded weights, and the dump says they stay on disk"
else
  bad "--offload-dir dump: $(grep -E '^# (weights|offload)' "$tmp/od.ir")"
fi
# a tiled decoder runs once per tile, its groups once each: --offload-dir crashed on the second run
if "$diffc" "$fx/vae_tiled/model" --entry decode --input z=1x4x16x16 --vae-tiling --tile-size 16 --offload group \
     --group-level leaf --offload-dir "$tmp/offtiled" -o "$tmp/vto.dplan" 2>/dev/null &&
   [ "$(ls "$tmp/offtiled" | wc -l)" -eq 35 ] &&
   "$diffrun" "$tmp/vto.dplan" --random-inputs --seed 4 --outputs "$tmp/vto.safetensors" -q &&
   "$diffrun" "$tmp/vt.dplan" --random-inputs --seed 4 --outputs "$tmp/vt.safetensors" -q &&
   cmp -s "$tmp/vto.safetensors" "$tmp/vt.safetensors"; then
  ok "tiled VAE with --offload-dir: one file per group, outputs bit-identical to the resident plan"
else
  bad "tiled VAE with --offload-dir"
fi
cli_finish
