#!/bin/sh
# replay_plan.sh DIFFC REPLAY MODEL PIPELINE DIR... — compiles MODEL with diffc to a
# fresh plan (plans are version-specific, so none is committed), signed with
# the fuzz key that fuzz_plan.c trusts, and replays it, a truncated copy and
# copies with changed bytes (the signature among them), together with the
# stored corpus and crashers, through the plan fuzz target.  PIPELINE (a
# pipeline folder) is compiled too: a plan in phases with a PIPE section,
# whole and with bytes changed in its last section (PIPE).
set -e
diffc=$1 replay=$2 model=$3 pipeline=$4
shift 4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/diffc-fuzz-plan.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# git keeps the test-only key 0644; diffc --sign wants a secret key 0600
cp "$(dirname "$0")/fuzz_sign.key" "$tmp/fuzz.key"
chmod 600 "$tmp/fuzz.key"
"$diffc" "$model" -o "$tmp/tiny.dplan" --cpu generic --sign "$tmp/fuzz.key" 2>/dev/null
size=$(wc -c <"$tmp/tiny.dplan")
head -c $((size / 2)) "$tmp/tiny.dplan" >"$tmp/tiny-truncated.dplan"
# Flip a byte in the section table (the table checksum must catch it).
cp "$tmp/tiny.dplan" "$tmp/tiny-flipped.dplan"
printf '\377' | dd of="$tmp/tiny-flipped.dplan" bs=1 seek=40 conv=notrunc 2>/dev/null
# Bytes changed inside the first sections (OPTS, WREF, SCHD in a small plan) (the target also runs each input with
# its checksums recomputed, so these reach the section parsers).
for at in 400 1500 6000 20000 45000; do
  cp "$tmp/tiny.dplan" "$tmp/tiny-payload$at.dplan"
  printf '\001\377' | dd of="$tmp/tiny-payload$at.dplan" bs=1 seek=$at conv=notrunc 2>/dev/null
done
# The SIGN section is last: 100 bytes at size - 128 (then padding to 64).
for at in $((size - 128)) $((size - 118)) $((size - 60)); do
  cp "$tmp/tiny.dplan" "$tmp/tiny-sign$at.dplan"
  printf '\001' | dd of="$tmp/tiny-sign$at.dplan" bs=1 seek=$at conv=notrunc 2>/dev/null
done
"$diffc" "$pipeline" -o "$tmp/pipe.dplan" --cpu generic 2>/dev/null
psize=$(wc -c <"$tmp/pipe.dplan")
for back in 40 3000 600000; do # PIPE is last: its JSON, file table and tokenizer bytes
  [ "$back" -lt "$psize" ] || continue
  cp "$tmp/pipe.dplan" "$tmp/pipe-$back.dplan"
  printf '\377\001' | dd of="$tmp/pipe-$back.dplan" bs=1 seek=$((psize - back)) conv=notrunc 2>/dev/null
done
rc=0
"$replay" "$tmp"/tiny*.dplan "$tmp"/pipe*.dplan "$@" || rc=$?
exit $rc
