#!/usr/bin/env bash
# gpu_deps.sh — fetches, as .deb files, the libraries a -DDIFFC_LLVM=OFF build
# needs that the GPU machine lacks, so that they travel with the working tree
# (the device tool's carry must name .gpu-deps) and tools/gpu_check.sh can
# unpack them there with `dpkg -x` into a prefix of its own and build against
# it.  Run it on a machine with Debian's (or Ubuntu's) archive:
#
#   bash tools/gpu_deps.sh [DIR]        (default DIR: .gpu-deps in the repository)
#
# What and why: the runtime library and its -dev package (headers and the
# unversioned .so link CMake's find_library looks for) of cJSON, xxHash,
# libsodium, utf8proc and libpng; libpng's headers include zlib.h, so
# zlib1g-dev too (its libz.so link points to the zlib runtime every system
# has, which is therefore not fetched: a second zlib on LD_LIBRARY_PATH
# would shadow the machine's own; gpu_check.sh points the link at the
# machine's libz.so.1).  LLVM is not fetched: libLLVM alone is far bigger
# than what may travel, which is why that build leaves it out.  DIR/SOURCE
# records the distribution the files come from (their libraries need its C
# library version or newer).  Prints the folder's size; fails when a
# package cannot be fetched or the folder reaches 16 MiB.
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-$ROOT/.gpu-deps}
PACKAGES=(libcjson1 libcjson-dev libxxhash0 libxxhash-dev libsodium23 libsodium-dev libutf8proc2 libutf8proc-dev
  libpng16-16 libpng-dev zlib1g-dev)
LIMIT_KIB=16384

case "${1:-}" in -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
command -v apt-get >/dev/null 2>&1 || { echo "gpu_deps: no apt-get here; run this on a Debian or Ubuntu machine" >&2; exit 1; }

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
rm -f "$DEST"/*.deb "$DEST/SOURCE"
# apt-get download writes into the current directory (as root, the _apt
# sandbox user may not be able to: apt then warns and downloads unsandboxed).
(cd "$DEST" && apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "Download is performed unsandboxed") || true
missing=()
versions=()
for p in "${PACKAGES[@]}"; do
  f=$(ls "$DEST/${p}_"*.deb 2>/dev/null | head -1)
  if [ -z "$f" ]; then missing+=("$p"); continue; fi
  # a plain name: the archive's file names hold the epoch as "%3a"
  versions+=("$p $(dpkg-deb -f "$f" Version 2>/dev/null || echo "?")")
  mv "$f" "$DEST/$p.deb"
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_deps: could not fetch ${missing[*]} (apt-get update first? another distribution may name them otherwise)" >&2
  exit 1
fi

libc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$' || echo "?")
{
  echo "$(. /etc/os-release && echo "${PRETTY_NAME:-unknown}"), $(dpkg --print-architecture 2>/dev/null || uname -m), glibc $libc"
  echo "fetched $(date -u '+%Y-%m-%d %H:%M UTC') by tools/gpu_deps.sh:"
  printf '  %s\n' "${versions[@]}"
} > "$DEST/SOURCE"

kib=$(du -sk "$DEST" | cut -f1)
ls -1 "$DEST"
echo "gpu_deps: ${#PACKAGES[@]} packages in $DEST, $(awk -v k="$kib" 'BEGIN { printf "%.1f MiB", k / 1024 }')"
if [ "$kib" -ge "$LIMIT_KIB" ]; then
  echo "gpu_deps: $DEST holds ${kib} KiB, over the ${LIMIT_KIB} KiB this script allows (64 MiB travel in all)" >&2
  exit 1
fi
