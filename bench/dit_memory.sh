#!/usr/bin/env bash
# The DiT memory table of issue 14 (not CTest): the full-size FLUX.1-dev transformer (11.9 B
# parameters) and the whole FLUX.1-dev pipeline (that transformer + T5-v1.1-XXL + CLIP-L + the
# 16-channel VAE), seeded random bf16 weights made by tools/make_model from bench/configs, compiled
# for a 1024x1024 image (4096 packed image tokens + 512 T5 tokens) under each memory technique; the
# device peak each plan predicts is read from its IR dump ("peak device memory" line).  Nothing runs:
# the figures are the plans' (what diffrun would allocate on a device: resident weights + the
# arena, copies in flight included).  Prints a markdown table and writes bench/results-dit-memory.md.
#
#   bench/dit_memory.sh [--cuda | --cuda-only] [--keep]
#     --cuda       also compile each transformer case with --target cuda (NVRTC; no GPU needed)
#     --cuda-only  only the transformer cases for --target cuda (writes bench/results-dit-memory-cuda.md)
#     --keep   keep the plans' fp8 weight files (12 GB each) instead of deleting them after reading
#
# Environment: DIFFC_DIT_DATA (models, plans; default /work/bench-data, outside the repository:
# the checkpoints take 34 GB, an fp8 plan 12 GB more), DIFFC_BIN (folder with diffc and make_model;
# default build-bench, built here).  Kernels go to a cache of their own ($DIFFC_DIT_DATA/kcache), so
# the compile times show what a cold and a warm cache cost.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$repo/bench/bench_lib.sh"
data="${DIFFC_DIT_DATA:-/work/bench-data}"
cuda=0
keep=0
for a in "$@"; do
  case "$a" in
    --cuda) cuda=1 ;;
    --cuda-only) cuda=2 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "dit_memory.sh: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "${DIFFC_BIN:-}" ]; then
  bench_build dit_memory.sh diffc make_model
fi
bin="${DIFFC_BIN:-$repo/build-bench}"
pipe="$data/flux_pipe"
plans="$data/plans"
export DIFFC_CACHE_DIR="$data/kcache"
mkdir -p "$pipe" "$plans"

component() { # CONFIG FOLDER: a random bf16 checkpoint, made once
  if [ ! -f "$pipe/$2/config.json" ]; then
    echo "dit_memory.sh: making $2 from bench/configs/$1 (seeded random bf16 weights)"
    "$bin/make_model" "$repo/bench/configs/$1" "$pipe/$2" --dtype bf16 --seed 1 -q
  fi
}

# The pipeline folder around the components: FluxPipeline's index, FLUX.1-dev's scheduler settings
# (dynamic shifting between 256 and 4096 image tokens), and the tokenizers of the repository's Flux
# pipeline fixture (CLIP-L's real vocabulary; a small trained unigram model for T5: the tokenizer
# changes no device memory, only which ids a prompt gets).
make_pipeline() {
  component flux1_dev_transformer.json transformer
  component flux_text_encoder_2.json text_encoder_2
  component sd15_text_encoder.json text_encoder   # CLIP-L: the same model FLUX.1-dev ships
  component flux_vae.json vae
  local fx="$repo/tests/fixtures/pipelines/flux"
  for t in tokenizer tokenizer_2; do [ -d "$pipe/$t" ] || cp -rL "$fx/$t" "$pipe/$t"; done
  cp -L "$fx/model_index.json" "$pipe/model_index.json"
  mkdir -p "$pipe/scheduler"
  cat >"$pipe/scheduler/scheduler_config.json" <<'EOF'
{
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "base_image_seq_len": 256,
  "base_shift": 0.5,
  "max_image_seq_len": 4096,
  "max_shift": 1.15,
  "num_train_timesteps": 1000,
  "shift": 3.0,
  "use_dynamic_shifting": true
}
EOF
}

rows=()
# case WHAT LABEL TARGET "OPTIONS": compile, read the dump's peak, note compile time and kernel reuse
case_() {
  local what=$1 label=$2 target=$3 opts=$4 plan="$plans/p.dplan" ir="$plans/p.ir" log="$plans/compile.txt"
  local src inputs=()
  if [ "$what" = transformer ]; then
    src="$pipe/transformer"
    inputs=(--input hidden_states=1x4096x64 --input encoder_hidden_states=1x512x4096
            --input img_ids=4096x3 --input txt_ids=512x3)
  else
    src="$pipe"
    inputs=(--height 1024 --width 1024 --max-sequence-length 512)
  fi
  rm -rf "$plans/od" "$plan" "$plan".weights.safetensors
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! "$bin/diffc" "$src" -o "$plan" "${inputs[@]}" --target "$target" $opts --dump-ir "$ir" -v >"$log" 2>&1; then
    rows+=("| $what | $label | $target | \`${opts:-none}\` | compile failed: $(tail -1 "$log") | | | | |")
    echo "  $what $label ($target): compile failed: $(tail -1 "$log")"
    return
  fi
  t1=$(date +%s.%N)
  local peak host secs kernels hoist
  peak=$(sed -n 's/^# peak device memory: //p' "$ir" | head -1)
  host=$(sed -n 's/^# weights: .* file(s)[,:] //p' "$ir" | head -1)
  secs=$(echo "$t1 - $t0" | bc)
  hoist=$(sed -n 's/^# hoist = //p' "$ir" | head -1)
  kernels=$(grep -o '[0-9]* from the kernel cache[^;]*' "$log" | paste -sd ';' | sed 's/;/; /g' || true)
  [ "$keep" = 1 ] || rm -f "$plan".weights.safetensors
  rows+=("| $what | $label | $target | \`${opts:-none}\` | $peak | ${host:-?} | ${hoist:-n/a} | $(printf '%.1f' "$secs") | ${kernels:-} |")
  echo "  $what $label ($target) ${opts:-none}: $peak (${secs%.*} s)"
}

make_pipeline

targets=(cpu)
[ "$cuda" = 1 ] && targets+=(cuda)
[ "$cuda" = 2 ] && targets=(cuda)
for target in "${targets[@]}"; do
  echo "dit_memory.sh: FLUX.1-dev transformer at 1024², target $target"
  case_ transformer "no offload" "$target" ""
  case_ transformer "fp8 storage" "$target" "--storage-dtype fp8_e4m3"
  case_ transformer "sequential" "$target" "--offload sequential"
  case_ transformer "group, block (1 per group)" "$target" "--offload group --group-level block --blocks-per-group 1"
  case_ transformer "group, block (1 per group) + prefetch" "$target" "--offload group --group-level block --blocks-per-group 1 --prefetch"
  case_ transformer "group, leaf + prefetch" "$target" "--offload group --group-level leaf --prefetch"
  case_ transformer "fp8 storage + leaf + prefetch" "$target" "--storage-dtype fp8_e4m3 --offload group --group-level leaf --prefetch"
done
if [ "$cuda" != 2 ]; then
echo "dit_memory.sh: FLUX.1-dev pipeline at 1024² (T5 512 tokens), target cpu"
case_ pipeline "no offload" cpu ""
case_ pipeline "model offload" cpu "--offload model"
# Hoisting moves loop-invariant work before the denoising loop; under --offload model that includes
# the f32 casts of the transformer's held bf16 uploads, which then stay live (see the results)
case_ pipeline "model offload, no hoisting" cpu "--offload model --no-hoist"
case_ pipeline "sequential" cpu "--offload sequential"
case_ pipeline "group, block (1 per group) + prefetch" cpu "--offload group --group-level block --blocks-per-group 1 --prefetch"
case_ pipeline "group, leaf + prefetch" cpu "--offload group --group-level leaf --prefetch"
fi

out="$repo/bench/results-dit-memory$([ "$cuda" = 2 ] && echo -cuda).md"
{
  echo "Produced by \`bench/dit_memory.sh$([ "$cuda" = 1 ] && echo ' --cuda')$([ "$cuda" = 2 ] && echo ' --cuda-only')\` on $(date -u +%Y-%m-%d)"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)."
  echo "Predicted device peak = the IR dump's \"peak device memory\" (resident weights + the plan's arena)."
  echo "Compile time is wall time of diffc (hashing the 22 GiB checkpoint included); kernels are cached in one"
  echo "cache for the whole run, so only the first plan of a kind compiles most of them."
  echo "The \"hoist\" column is the dump's hoist line: the values the pipeline computes once before the"
  echo "denoising loop and holds through it."
  echo
  echo "| model | technique | target | diffc options | predicted device peak | weights | hoist | compile s | kernels (cache) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
