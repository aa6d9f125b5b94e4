#!/usr/bin/env bash
# The README's first command: install dependencies, build, compile the
# bundled sample model (an SD1.5-shaped UNet at reduced width, in samples/)
# into a plan, and run it on seeded random inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"

mkdir -p out
./build/diffc samples/unet-sd15-tiny -o out/unet.dplan \
  --input sample=2x4x32x32 --input encoder_hidden_states=2x77x32 --dump-ir out/unet.ir
./build/diffrun out/unet.dplan --random-inputs --seed 0 --outputs out/unet-out.safetensors --repeat 2
echo "quickstart: plan in out/unet.dplan, IR dump in out/unet.ir, outputs in out/unet-out.safetensors"
