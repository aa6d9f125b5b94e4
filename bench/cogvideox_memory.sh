#!/usr/bin/env bash
# The CogVideoX-5b memory table of issue 17 (not CTest): the full-size transformer (5.57 B parameters),
# the VAE (215.6 M) and the whole CogVideoXPipeline (+ T5-v1.1-XXL's encoder), seeded random bf16
# weights made by tools/make_model from bench/configs, compiled with --target cuda (NVRTC; no GPU is
# needed) for the released setting: 49 frames at 480x720, i.e. 13 latent frames of 60x90 latents,
# 226 T5 tokens and a CFG batch of 2. Each technique's predicted device peak is read from the plan's
# IR dump ("peak device memory"); nothing runs on a device. diffusers' published figures for the same
# technique stand beside each row (bench/results-cogvideox-memory.md lists their sources).
#
#   bench/cogvideox_memory.sh [--only LIST] [--e2e] [--keep]
#     --only   compile only these of transformer,vae,pipeline (comma-separated; default all three;
#              none: no model, e.g. with --e2e); the other models' rows are kept from the last run
#              ($DIFFC_CVX_DATA/rows-MODEL.md)
#     --e2e    also generate a reduced CogVideoX video end to end on this machine (cpu target): a
#              2-block transformer at full head width, a 2-layer T5, a narrow VAE, 9 frames at 256x384,
#              2 steps with CFG; wall time and peak RSS from /usr/bin/time -v
#     --keep   keep the plans' fp8 weight files instead of deleting them after reading
#
# Environment: DIFFC_CVX_DATA (models, plans; default /work/bench-data/cogvideox, outside the
# repository: the checkpoints take 21 GB, an fp8 plan 6 GB more), DIFFC_BIN (folder with diffc,
# diffrun and make_model; default build-bench, built here). Kernels go to a cache of their own
# ($DIFFC_CVX_DATA/kcache), so the compile times show what a cold and a warm cache cost.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$repo/bench/bench_lib.sh"
data="${DIFFC_CVX_DATA:-/work/bench-data/cogvideox}"
args="$*"
e2e=0
keep=0
only=transformer,vae,pipeline
while [ $# -gt 0 ]; do
  a=$1
  shift
  case "$a" in
    --only) only=${1:?--only needs a list}; shift ;;
    --e2e) e2e=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cogvideox_memory.sh: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done
for m in ${only//,/ }; do
  case "$m" in transformer|vae|pipeline|none) ;; *) echo "cogvideox_memory.sh: --only $m: expected transformer, vae, pipeline or none" >&2; exit 2 ;; esac
done

if [ -z "${DIFFC_BIN:-}" ]; then
  bench_build cogvideox_memory.sh diffc diffrun make_model
fi
bin="${DIFFC_BIN:-$repo/build-bench}"
pipe="$data/pipe"
plans="$data/plans"
export DIFFC_CACHE_DIR="$data/kcache"
mkdir -p "$pipe" "$plans"

component() { # CONFIG FOLDER [PIPE]: a random bf16 checkpoint, made once
  local dest="${3:-$pipe}/$2"
  if [ ! -f "$dest/config.json" ]; then
    echo "cogvideox_memory.sh: making $2 from $1 (seeded random bf16 weights)"
    "$bin/make_model" "$1" "$dest" --dtype bf16 --seed 1 -q
  fi
}

# The pipeline folder around the components (PIPE): CogVideoXPipeline's index, CogVideoX-5b's
# scheduler, and the T5 tokenizer of the repository's Flux pipeline fixture (a small trained unigram
# model: the tokenizer changes no device memory, only which ids a prompt gets).
pipeline_folder() {
  local dir=$1
  [ -d "$dir/tokenizer" ] || cp -rL "$repo/tests/fixtures/pipelines/flux/tokenizer_2" "$dir/tokenizer"
  mkdir -p "$dir/scheduler"
  cp "$repo/bench/configs/cogvideox_5b_scheduler.json" "$dir/scheduler/scheduler_config.json"
  cp "$repo/bench/configs/cogvideox_5b_model_index.json" "$dir/model_index.json"
}

make_pipeline() {
  component "$repo/bench/configs/cogvideox_5b_transformer.json" transformer
  component "$repo/bench/configs/cogvideox_5b_vae.json" vae
  component "$repo/bench/configs/flux_text_encoder_2.json" text_encoder # T5-v1.1-XXL's encoder
  pipeline_folder "$pipe"
}

# diffusers' figure for a row's technique (CogVideoX-5b unless it says 2b; sources in the results file)
diffusers_figure() {
  case "$1" in
    "transformer|no offload") echo "13.5 GB peak allocated, 10.8 GB before the run [A]" ;;
    "pipeline|no offload") echo "24.4 GB inference, 19.7 GB weights [B]; 2b: 33 GB [C]" ;;
    "pipeline|model offload") echo "20.7 GB with VAE tiling [D]; 2b: 19 GB, 11 GB with tiling [C]" ;;
    "pipeline|sequential") echo "from 5 GB with VAE slicing + tiling [D]; 2b: < 4 GB [C]" ;;
    *) echo "—" ;;
  esac
}

# Each model's rows go to $data/rows-MODEL.md (started afresh when the model's cases run), so a
# run with --only keeps the others' rows.
wanted() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
row() { printf '%s\n' "$2" >>"$data/rows-$1.md"; }
# case_ WHAT LABEL "OPTIONS": compile for cuda, read the dump's peak, note compile time
case_() {
  local what=$1 label=$2 opts=$3 plan="$plans/p.dplan" ir="$plans/p.ir" log="$plans/compile.txt"
  local src inputs=()
  case "$what" in
    transformer)
      src="$pipe/transformer"
      inputs=(--input hidden_states=2x13x16x60x90 --input encoder_hidden_states=2x226x4096 --input timestep=2) ;;
    vae)
      src="$pipe/vae"
      inputs=(--entry decode --input z=1x16x13x60x90) ;;
    pipeline)
      src="$pipe"
      inputs=(--height 480 --width 720 --num-frames 49 --max-sequence-length 226) ;;
  esac
  rm -f "$plan" "$plan".weights.safetensors
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! "$bin/diffc" "$src" -o "$plan" "${inputs[@]}" --target cuda --compute-dtype bf16 $opts \
      --dump-ir "$ir" -v >"$log" 2>&1; then
    row "$what" "| $what | $label | \`${opts:-none}\` | compile failed: $(tail -1 "$log" | tr '|' '/') | | $(diffusers_figure "$what|$label") | |"
    echo "  $what $label: compile failed: $(tail -1 "$log")"
    return
  fi
  t1=$(date +%s.%N)
  local peak host secs
  peak=$(sed -n 's/^# peak device memory: //p' "$ir" | head -1)
  host=$(sed -n 's/^# weights: .* file(s)[,:] //p' "$ir" | head -1)
  secs=$(echo "$t1 - $t0" | bc)
  [ "$keep" = 1 ] || rm -f "$plan".weights.safetensors
  row "$what" "| $what | $label | \`${opts:-none}\` | $peak | ${host:-?} | $(diffusers_figure "$what|$label") | $(printf '%.1f' "$secs") |"
  echo "  $what $label ${opts:-none}: $peak ($(printf '%.1f' "$secs") s)"
}

# The reduced generation: configs derived from the released ones (python3 edits the JSON), made
# under $data/reduced, run on the cpu target with /usr/bin/time -v.
e2e_rows=()
reduced_generation() {
  local red="$data/reduced" cfg="$data/reduced-configs"
  mkdir -p "$red" "$cfg"
  python3 - "$repo/bench/configs" "$cfg" <<'EOF'
import json, sys
src, out = sys.argv[1], sys.argv[2]
def derive(name, edits, dest):
    c = json.load(open(f"{src}/{name}"))
    c.update(edits)
    json.dump(c, open(f"{out}/{dest}", "w"), indent=2)
# Same head width (64) and RoPE as 5b, 2 blocks of 4 heads; T5 of 2 layers at d_model 256.
# 256x384 pixels: latents of 32x48, whole 2x2 patches.
derive("cogvideox_5b_transformer.json",
       {"num_layers": 2, "num_attention_heads": 4, "text_embed_dim": 256, "sample_height": 32,
        "sample_width": 48, "sample_frames": 9}, "transformer.json")
derive("flux_text_encoder_2.json",
       {"d_model": 256, "d_kv": 64, "d_ff": 512, "num_heads": 4, "num_layers": 2,
        "num_decoder_layers": 2}, "text_encoder.json")
derive("cogvideox_5b_vae.json",
       {"block_out_channels": [32, 64, 64, 64], "layers_per_block": 1, "norm_num_groups": 16,
        "sample_height": 256, "sample_width": 384}, "vae.json")
EOF
  component "$cfg/transformer.json" transformer "$red"
  component "$cfg/text_encoder.json" text_encoder "$red"
  component "$cfg/vae.json" vae "$red"
  pipeline_folder "$red"
  local plan="$plans/reduced.dplan" out="$data/reduced-out" t
  rm -rf "$out"
  mkdir -p "$out"
  t="$plans/reduced-compile.time"
  /usr/bin/time -v "$bin/diffc" "$red" -o "$plan" --height 256 --width 384 --num-frames 9 \
    --max-sequence-length 226 >"$plans/reduced-compile.txt" 2>"$t"
  e2e_rows+=("| diffc (compile, cpu) | $(time_field "$t" 'Elapsed (wall clock)') | $(rss "$t") |")
  t="$plans/reduced-run.time"
  /usr/bin/time -v "$bin/diffrun" "$plan" --prompt "a panda playing a guitar by a stream" --steps 2 \
    --seed 42 -o "$out/out.png" --video "$out/out.apng" >"$plans/reduced-run.txt" 2>"$t"
  e2e_rows+=("| diffrun (2 steps, CFG, 9 frames 256x384) | $(time_field "$t" 'Elapsed (wall clock)') | $(rss "$t") |")
  e2e_frames=$(find "$out" -name 'out-*.png' | wc -l)
}
time_field() { awk -F': ' -v key="$2" 'index($0, key) {print $NF}' "$1" | tail -1; }
rss() { awk '/Maximum resident set size/ {printf "%.1f MiB", $NF / 1024}' "$1"; }

make_pipeline
echo "cogvideox_memory.sh: CogVideoX-5b, 49 frames at 480x720, target cuda"
if wanted transformer; then
  : >"$data/rows-transformer.md"
  case_ transformer "no offload" ""
  case_ transformer "sequential" "--offload sequential"
  case_ transformer "group, block (1 per group) + prefetch" "--offload group --group-level block --blocks-per-group 1 --prefetch"
  case_ transformer "group, leaf + prefetch" "--offload group --group-level leaf --prefetch"
  case_ transformer "fp8 storage" "--storage-dtype fp8_e4m3"
  case_ transformer "fp8 storage + leaf + prefetch" "--storage-dtype fp8_e4m3 --offload group --group-level leaf --prefetch"
fi
if wanted vae; then
  : >"$data/rows-vae.md"
  case_ vae "decode, frame batching (diffusers' default)" ""
  case_ vae "decode, one pass over all frames" "--no-vae-frame-batching"
  case_ vae "decode, tiling" "--vae-tiling"
  case_ vae "decode, tiling + leaf + prefetch" "--vae-tiling --offload group --group-level leaf --prefetch"
fi
if wanted pipeline; then
  : >"$data/rows-pipeline.md"
  case_ pipeline "no offload" ""
  case_ pipeline "model offload" "--offload model"
  case_ pipeline "sequential" "--offload sequential --vae-tiling"
  case_ pipeline "group, block (1 per group) + prefetch" "--offload group --group-level block --blocks-per-group 1 --prefetch"
  case_ pipeline "group, leaf + prefetch" "--offload group --group-level leaf --prefetch --vae-tiling"
fi
if [ "$e2e" = 1 ]; then
  reduced_generation
  {
    echo
    echo "Reduced generation on this machine (cpu target, configs derived from the released ones by"
    echo "the script: 2 transformer blocks of 4 heads x 64, a 2-layer T5 at d_model 256, the VAE at"
    echo "widths 32/64/64/64 with one layer per block; seeded random weights): 9 frames at 256x384"
    echo "(3 latent frames of 32x48), 226 tokens, 2 DDIM steps with CFG, $e2e_frames frames written."
    echo
    echo "| step | wall time | peak RSS |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${e2e_rows[@]}"
    echo
    echo "diffrun's summary of the run (the kernel cache was warm for the compile when it says well under a"
    echo "second; a cold cache compiles the LLVM kernels first):"
    echo
    echo '```'
    grep -E '^[0-9]+ video|^device arena peak' "$plans/reduced-run.txt"
    echo '```'
  } >"$data/rows-e2e.md"
fi

out="$repo/bench/results-cogvideox-memory.md"
figures="$repo/bench/cogvideox-diffusers-figures.md"
{
  echo "Produced by \`bench/cogvideox_memory.sh${args:+ $args}\` on $(date -u +%Y-%m-%d) (rows of a model left"
  echo "out by --only, and the reduced generation when --e2e is not given, are those of an earlier run)"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, flags:"
  echo "$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512bw|avx512_bf16|fma|f16c' | paste -sd ' '),"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; NVRTC compiles, no GPU)."
  echo "Predicted device peak = the IR dump's \"peak device memory\" (resident weights + the plan's arena),"
  echo "every plan compiled with \`--target cuda --compute-dtype bf16\` (bf16 weights and activations, as"
  echo "diffusers runs CogVideoX-5b). Transformer: \`hidden_states\` 2x13x16x60x90, 226 text tokens, the CFG"
  echo "batch of 2. VAE: one decode of 13 latent frames to 49 frames at 480x720. Pipeline: T5 + the"
  echo "denoising loop + the decode. Compile time is diffc's wall time: hashing the checkpoint (once; later"
  echo "plans reuse the hash), compiling kernels (one cache for the run: the first plan of a kind compiles"
  echo "most of them) and, for fp8, writing the converted weights beside the plan."
  echo
  echo "| model | technique | diffc options | predicted device peak | weights | diffusers | compile s |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for m in transformer vae pipeline; do [ -f "$data/rows-$m.md" ] && cat "$data/rows-$m.md"; done
  [ -f "$data/rows-e2e.md" ] && cat "$data/rows-e2e.md"
  echo
  cat "$figures"
} >"$out"
cat "$out"
