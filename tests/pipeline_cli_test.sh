#!/usr/bin/env bash
# pipeline_cli_test.sh BUILD_DIR SOURCE_DIR — prompt to PNG from the command
# line (issue 13): diffc on a pipeline folder and on single-file
# checkpoints, diffrun's generation options, its outputs, and every bad
# input a user can give, each a one-line message, a non-zero exit and
# nothing left behind.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-pipeline
sd=$fx/pipelines/sd
sf=$fx/single_file

"$diffc" "$sd" -o "$tmp/sd.dplan" 2>/dev/null && ok "the sd pipeline compiles" || bad "the sd pipeline compiles"

# ---- a PNG with its parameters ----
"$diffrun" "$tmp/sd.dplan" --prompt "an astronaut riding a horse on mars" --steps 3 --seed 0 -o "$tmp/out.png" \
  >"$tmp/run.out" 2>"$tmp/run.err" && ok "diffrun --prompt writes an image" || bad "diffrun --prompt: $(cat "$tmp/run.err")"
[ "$(head -c 8 "$tmp/out.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok "out.png is a PNG" ||
  bad "out.png is not a PNG"
grep -aq "parameters" "$tmp/out.png" && grep -aq "an astronaut riding a horse on mars" "$tmp/out.png" &&
  grep -aq "Seed: 0" "$tmp/out.png" && ok "the parameters chunk holds the prompt and seed" || bad "no parameters chunk"
grep -q "s/step" "$tmp/run.out" && grep -q "device arena peak" "$tmp/run.out" && ok "the summary: $(head -1 "$tmp/run.out")" ||
  bad "no summary: $(cat "$tmp/run.out")"
grep -q $'\r' "$tmp/run.err" && bad "progress written to a non-terminal" || ok "no progress line when stderr is not a terminal"
ls "$tmp"/out.png.* >/dev/null 2>&1 && bad "a temporary file left beside out.png" || ok "no temporary left"
[ -z "$("$diffrun" "$tmp/sd.dplan" --prompt x --steps 1 -o "$tmp/q.png" -q 2>&1)" ] && ok "-q prints nothing" ||
  bad "-q printed something"

# ---- the same seed, the same image; another seed, another ----
# (traced: the trace changes nothing, and the generation is one trace with a span per phase run)
"$diffrun" "$tmp/sd.dplan" --prompt "an astronaut riding a horse on mars" --steps 3 --seed 0 -o "$tmp/again.png" -q \
  --trace "$tmp/gen.json"
cmp -s "$tmp/out.png" "$tmp/again.png" && ok "a seed gives the same PNG" || bad "the same seed gave another PNG"
python3 -m json.tool "$tmp/gen.json" >/dev/null && grep -q '"name":"text","cat":"phase"' "$tmp/gen.json" &&
  [ "$(grep -c '"name":"denoise.cond","cat":"phase"' "$tmp/gen.json")" -ge 3 ] && ok "--trace of a generation" ||
  bad "--trace of a generation"
"$diffrun" "$tmp/sd.dplan" --prompt "an astronaut riding a horse on mars" --steps 3 --seed 1 -o "$tmp/other.png" -q
cmp -s "$tmp/out.png" "$tmp/other.png" && bad "another seed gave the same PNG" || ok "another seed, another image"

# ---- --batch: one PNG per image ----
"$diffc" "$sd" --batch 2 -o "$tmp/sd2.dplan" 2>/dev/null &&
  "$diffrun" "$tmp/sd2.dplan" --prompt cat --steps 2 -o "$tmp/b.png" -q && [ -s "$tmp/b-0.png" ] && [ -s "$tmp/b-1.png" ] &&
  [ ! -e "$tmp/b.png" ] && ok "--batch 2 writes b-0.png and b-1.png" || bad "--batch 2 images"

# ---- memory options across components ----
echo '{"text_encoder": "cpu", "unet": 0, "vae": 0}' > "$tmp/map.json"
for opts in "--offload group --group-level block --prefetch --layout nhwc" "--offload sequential --storage-dtype bf16" \
            "--device-map $tmp/map.json"; do
  # shellcheck disable=SC2086
  "$diffc" "$sd" $opts -o "$tmp/m.dplan" 2>/dev/null &&
    "$diffrun" "$tmp/m.dplan" --prompt "an astronaut riding a horse on mars" --steps 3 --seed 0 -o "$tmp/m.png" >"$tmp/m.out" &&
    grep -q "uploaded [1-9]" "$tmp/m.out" && ok "pipeline with $opts: $(grep arena "$tmp/m.out")" ||
    bad "pipeline with $opts: $(cat "$tmp/m.out")"
done
# the memory report of a pipeline plan (the last one: the text encoder uploaded from the cpu):
# per phase, per component, per image at the default 50 steps
"$diffrun" "$tmp/m.dplan" --info | grep -q "^  per image (50 steps, the pipeline's default): " &&
  "$diffrun" "$tmp/m.dplan" --info | grep -q "^    text_encoder .* 0 B " &&
  "$diffrun" "$tmp/m.dplan" --info --format json | python3 -c 'import json,sys; r=json.load(sys.stdin); ph=r["phases"]
assert r["per_image"]["steps"] == 50 and len(r["components"]) == 3 and len(ph) == 5
assert r["per_image"]["uploaded_bytes"] == sum(p["uploaded_bytes"] * (50 if p["loop"] else 1) for p in ph) > 0' &&
  ok "diffrun --info on a pipeline plan: phases, components, per image" || bad "diffrun --info's pipeline report"

# ---- a single-file checkpoint gives the folder's image ----
for f in sd1 sdxl; do
  "$diffc" "$sf/$f.safetensors" --config "$sf/$f" -o "$tmp/sf.dplan" 2>/dev/null &&
    "$diffc" "$sf/$f" -o "$tmp/fo.dplan" 2>/dev/null &&
    "$diffrun" "$tmp/sf.dplan" --prompt "a red cube" --steps 2 --seed 5 --outputs "$tmp/sf.safetensors" -q &&
    "$diffrun" "$tmp/fo.dplan" --prompt "a red cube" --steps 2 --seed 5 --outputs "$tmp/fo.safetensors" -q &&
    cmp -s "$tmp/sf.safetensors" "$tmp/fo.safetensors" && ok "$f.safetensors gives the folder's image, bit for bit" ||
    bad "$f single file vs folder"
done

# ---- the CUDA target compiles a whole pipeline (NVRTC; no GPU needed) ----
if msg=$("$diffc" "$sd" --target cuda --cuda-arch sm_90 -o "$tmp/cuda.dplan" 2>&1); then # one arch: the NVRTC work of a cold cache
  "$diffrun" "$tmp/cuda.dplan" --info | grep -q "target: cuda" && ok "--target cuda: ${msg##*$'\n'}" ||
    bad "the CUDA pipeline plan's --info"
  # the reference kernels run any plan: the CUDA plan's schedule gives the CPU plan's image
  "$diffrun" "$tmp/cuda.dplan" --backend reference --prompt "an astronaut riding a horse on mars" --steps 3 --seed 0 \
    -o "$tmp/cuda-ref.png" -q && ok "the CUDA pipeline plan runs on the reference backend" || bad "CUDA plan on reference"
else
  case "$msg" in *NVRTC*|*nvrtc*) echo "  (skipped: no NVRTC here: $msg)" ;; *) bad "--target cuda: $msg" ;; esac
fi

# ---- compile-time errors ----
bad_pipe() { rm -rf "$tmp/p"; cp -rL "$sd" "$tmp/p"; } # -L: a copy, never links into the fixture
bad_pipe; rm -r "$tmp/p/tokenizer"
expect_fail "missing tokenizer folder" "tokenizer folder is missing" "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
bad_pipe; rm -r "$tmp/p/unet"
expect_fail "missing unet folder" "unet" "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
bad_pipe; sed -i '5s/.*/thisisnotamerge/' "$tmp/p/tokenizer/merges.txt"
expect_fail "a malformed merges.txt line" "merges.txt:5" "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
bad_pipe; sed -i 's/"StableDiffusionPipeline"/"StableVideoDiffusionPipeline"/' "$tmp/p/model_index.json"
expect_fail "an unknown pipeline class" "pipeline class StableVideoDiffusionPipeline is not one diffc compiles" \
  "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
bad_pipe; sed -i 's/"PNDMScheduler"/"UniPCMultistepScheduler"/' "$tmp/p/scheduler/scheduler_config.json"
expect_fail "an unknown scheduler class" "UniPCMultistepScheduler" "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
bad_pipe; sed -i 's/"beta_schedule": *"[a-z_]*"/"beta_schedule": "sigmoid"/' "$tmp/p/scheduler/scheduler_config.json"
expect_fail "an unsupported scheduler option" "beta_schedule" "$tmp/p.dplan" -- "$diffc" "$tmp/p" -o "$tmp/p.dplan"
expect_fail "--height not a multiple of 8" "--height 60: must be a positive multiple of 8" "$tmp/h.dplan" -- \
  "$diffc" "$sd" --height 60 -o "$tmp/h.dplan"
expect_fail "--input on a pipeline" "a pipeline's inputs come from --height" "$tmp/h.dplan" -- \
  "$diffc" "$sd" --input sample=1x4x8x8 -o "$tmp/h.dplan"

# ---- run-time errors ----
expect_fail "--steps 0" "--steps 0: expected an integer >= 1" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --steps 0 -o "$tmp/e.png"
expect_fail "--scheduler unknown" "NoSuchScheduler" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --steps 1 --scheduler NoSuchScheduler -o "$tmp/e.png"
expect_fail "--scheduler of the other kind of model" "samples flow-matching models, but the config is a" \
  "$tmp/e.png" -- "$diffrun" "$tmp/sd.dplan" --prompt x --steps 1 --scheduler FlowMatchEulerDiscreteScheduler \
  -o "$tmp/e.png"
expect_fail "a prompt that is not UTF-8" "UTF-8" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt "$(printf 'caf\xe9')" --steps 1 -o "$tmp/e.png"
expect_fail "-o image.jpg" "name the file *.png" "$tmp/e.jpg" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x -o "$tmp/e.jpg"
expect_fail "--video out.gif" "--video $tmp/e.gif: diffrun writes videos as animated PNG: name the file *.apng" \
  "$tmp/e.gif" -- "$diffrun" "$tmp/sd.dplan" --prompt x --video "$tmp/e.gif"
expect_fail "--fps without --video" "--fps 12: the frame rate is --video's" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --fps 12 -o "$tmp/e.png"
expect_fail "--fps 0" "--fps 0: expected an integer >= 1" "$tmp/e.apng" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --fps 0 --video "$tmp/e.apng"
expect_fail "--fps 70000" "--fps 70000: an animated PNG takes 1 to 65535 frames per second" "$tmp/e.apng" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --fps 70000 --video "$tmp/e.apng"
expect_fail "--video on an image pipeline" "this pipeline makes images, not videos" "$tmp/e.apng" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --steps 1 --video "$tmp/e.apng"
expect_fail "--inputs on a pipeline plan" "is a pipeline plan" -- \
  "$diffrun" "$tmp/sd.dplan" --random-inputs
"$diffc" "$fx/unet_tiny/model" -o "$tmp/unet.dplan" 2>/dev/null
expect_fail "--prompt on one model's plan" "is one model's plan, not a pipeline" "$tmp/e.png" -- \
  "$diffrun" "$tmp/unet.dplan" --prompt x -o "$tmp/e.png"
"$diffrun" "$tmp/sd2.dplan" --prompt x --steps 1 --outputs "$tmp/gen2.safetensors" -q # latents [2,4,8,8]
expect_fail "--latents of another shape" "is F32[2,4,8,8], but the plan's latents are F32[1,4,8,8]" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --latents "$tmp/gen2.safetensors" -o "$tmp/e.png"
expect_fail "--latents without the tensor" "no tensor \"latents\"" "$tmp/e.png" -- \
  "$diffrun" "$tmp/sd.dplan" --prompt x --latents "$fx/unet_tiny/io_forward.safetensors" -o "$tmp/e.png"
"$diffrun" "$tmp/sd.dplan" --prompt x --steps 1 --outputs "$tmp/lat.safetensors" -q
"$diffrun" "$tmp/sd.dplan" --prompt x --steps 2 --latents "$tmp/lat.safetensors" -o "$tmp/fromlat.png" -q &&
  [ -s "$tmp/fromlat.png" ] && ok "--latents reads a file's \"latents\" tensor" || bad "--latents"
# ---- the DiT pipelines: Flux (no CFG) and SD3 ----
fl=$fx/pipelines/flux
"$diffc" "$fl" --height 32 --width 48 --max-sequence-length 16 -o "$tmp/flux.dplan" 2>/dev/null &&
  "$diffrun" "$tmp/flux.dplan" --prompt "a red cube on a table" --steps 2 --seed 3 -o "$tmp/flux.png" >"$tmp/flux.out" &&
  [ "$(head -c 8 "$tmp/flux.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
  grep -q "FlowMatchEulerDiscreteScheduler" "$tmp/flux.out" && ok "a Flux pipeline: $(head -1 "$tmp/flux.out")" ||
  bad "the Flux pipeline: $(cat "$tmp/flux.out")"
"$diffc" "$fx/pipelines/sd3" --height 32 --width 32 --max-sequence-length 8 --offload model -o "$tmp/sd3.dplan" \
  2>/dev/null && "$diffrun" "$tmp/sd3.dplan" --prompt "a red cube" --negative-prompt blurry --steps 2 -o "$tmp/sd3.png" -q &&
  [ -s "$tmp/sd3.png" ] && ok "an SD3 pipeline with --offload model" || bad "the SD3 pipeline"
# every memory technique on a DiT pipeline gives the same image, bit for bit
"$diffrun" "$tmp/flux.dplan" --prompt "a red cube on a table" --steps 2 --seed 3 --outputs "$tmp/flux0.safetensors" -q
echo '{"text_encoder": "cpu", "text_encoder_2": 1, "transformer": 0, "vae": 1}' > "$tmp/fmap.json"
for opts in "--offload sequential" "--offload group --group-level block --blocks-per-group 1 --prefetch" \
            "--offload group --group-level leaf --prefetch --offload-dir $tmp/offl --host-memory on-demand" \
            "--device-map $tmp/fmap.json --max-memory 0=64MiB,1=64MiB,cpu=1GiB"; do
  # shellcheck disable=SC2086
  "$diffc" "$fl" --height 32 --width 48 --max-sequence-length 16 $opts -o "$tmp/fm.dplan" 2>/dev/null &&
    "$diffrun" "$tmp/fm.dplan" --prompt "a red cube on a table" --steps 2 --seed 3 --outputs "$tmp/fm.safetensors" -q &&
    cmp -s "$tmp/flux0.safetensors" "$tmp/fm.safetensors" && ok "Flux with $opts: the same image" ||
    bad "Flux with $opts"
done
"$diffc" "$fl" --height 32 --width 48 --max-sequence-length 16 --storage-dtype fp8_e4m3 -o "$tmp/f8.dplan" 2>/dev/null &&
  "$diffrun" "$tmp/f8.dplan" --prompt "a red cube on a table" --steps 2 --seed 3 -o "$tmp/f8.png" -q && [ -s "$tmp/f8.png" ] &&
  ok "Flux with fp8 weight storage" || bad "Flux with fp8 weight storage"
expect_fail "--negative-prompt on Flux" "true_cfg_scale" "$tmp/e.png" -- \
  "$diffrun" "$tmp/flux.dplan" --prompt x --negative-prompt y --steps 1 -o "$tmp/e.png"
expect_fail "--guidance-rescale on Flux" "FluxPipeline has no guidance_rescale" "$tmp/e.png" -- \
  "$diffrun" "$tmp/flux.dplan" --prompt x --guidance-rescale 0.5 --steps 1 -o "$tmp/e.png"
expect_fail "--scheduler of a noise-prediction kind on Flux" "flow" "$tmp/e.png" -- \
  "$diffrun" "$tmp/flux.dplan" --prompt x --steps 1 --scheduler EulerDiscreteScheduler -o "$tmp/e.png"
expect_fail "Flux at a size its packing cannot take" "--height 40: must be a positive multiple of 16" "$tmp/h.dplan" -- \
  "$diffc" "$fl" --height 40 -o "$tmp/h.dplan"
expect_fail "--max-sequence-length 600" "--max-sequence-length" "$tmp/h.dplan" -- \
  "$diffc" "$fl" --max-sequence-length 600 -o "$tmp/h.dplan"
expect_fail "--max-sequence-length on SD" "has no T5 text encoder" "$tmp/h.dplan" -- \
  "$diffc" "$sd" --max-sequence-length 64 -o "$tmp/h.dplan"
cli_finish
