#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the two
# commands a user runs on the bundled tiny Stable Diffusion pipeline
# (samples/sd-tiny: random weights, the real CLIP tokenizer): compile it to
# one plan, then prompt to PNG.  Then the single-model path on the bundled
# UNet (samples/unet-sd15-tiny) with seeded random inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"

mkdir -p out
./build/diffc samples/sd-tiny -o out/sd-tiny.dplan --dump-ir out/sd-tiny.ir
./build/diffrun out/sd-tiny.dplan --prompt "an astronaut riding a horse on mars" --steps 20 --guidance 7.5 --seed 0 \
  -o out/astronaut.png

./build/diffc samples/unet-sd15-tiny -o out/unet.dplan \
  --input sample=2x4x32x32 --input encoder_hidden_states=2x77x32 --dump-ir out/unet.ir
./build/diffrun out/unet.dplan --random-inputs --seed 0 --outputs out/unet-out.safetensors --repeat 2
echo "quickstart: out/astronaut.png from the pipeline plan out/sd-tiny.dplan (IR dump out/sd-tiny.ir);"
echo "quickstart: the single UNet's plan out/unet.dplan, its IR dump out/unet.ir, outputs out/unet-out.safetensors"
