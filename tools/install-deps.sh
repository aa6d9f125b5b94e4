#!/usr/bin/env bash
# Installs what diffc needs to build and test on Debian (12, bookworm), and
# only what is missing.  Run as root (or with sudo available).
set -euo pipefail

packages=(build-essential cmake pkg-config libcjson-dev libxxhash-dev libsodium-dev libutf8proc-dev libpng-dev llvm-14-dev
          librsvg2-bin) # rsvg-convert: tests render the memory timeline SVG to PNG
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present (${packages[*]})"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
