#!/usr/bin/env bash
# memory_timeline_test.sh BUILD_DIR SOURCE_DIR — --memory-timeline end to
# end: diffc draws the compiled plan, diffrun draws the same picture from
# the plan after running it (single model and pipeline), both --help lines
# are there, bad names are refused before any work, and the SVG renders
# headless (rsvg-convert, Debian package librsvg2-bin) to a PNG that is
# neither tiny nor one colour.  Without rsvg-convert the rendering part is
# skipped (exit 77) after the rest has run.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-timeline

"$diffc" --help | grep -q -- "--memory-timeline FILE.svg" && ok "diffc --help documents --memory-timeline" ||
  bad "diffc --help lacks --memory-timeline"
"$diffrun" --help | grep -q -- "--memory-timeline FILE.svg" && ok "diffrun --help documents --memory-timeline" ||
  bad "diffrun --help lacks --memory-timeline"

expect_fail "diffc: a name that is not .svg" "name the file *.svg" "$tmp/g.dplan" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$tmp/g.dplan" --memory-timeline "$tmp/t.png"
expect_fail "diffc: a missing folder" "no folder $tmp/nodir" "$tmp/g.dplan" -- \
  "$diffc" "$fx/unet_tiny/model" -o "$tmp/g.dplan" --memory-timeline "$tmp/nodir/t.svg"

# single model: group offload with prefetch (uploads in flight)
"$diffc" "$fx/unet_tiny/model" --offload group --group-level block --prefetch -o "$tmp/g.dplan" \
  --memory-timeline "$tmp/c.svg" 2>/dev/null && [ -s "$tmp/c.svg" ] && ok "diffc wrote the timeline" || bad "diffc --memory-timeline"
ls "$tmp"/*.tmp.* >/dev/null 2>&1 && bad "a temporary file was left" || ok "no temporary left"
# after a run: the plan's prediction (diffc's picture) with the memory the run observed over it
"$diffrun" "$tmp/g.dplan" --random-inputs -q --memory-timeline "$tmp/r.svg" && ! cmp -s "$tmp/c.svg" "$tmp/r.svg" &&
  grep -q '<path class="measured" d="M' "$tmp/r.svg" && ! grep -q '<path class="measured"' "$tmp/c.svg" &&
  ok "diffrun draws the plan's timeline with the measured line" || bad "diffrun --memory-timeline lacks the measured series"
"$diffrun" "$tmp/g.dplan" --info --memory-timeline "$tmp/i.svg" >/dev/null && cmp -s "$tmp/c.svg" "$tmp/i.svg" &&
  ok "diffrun --info draws it without running" || bad "diffrun --info --memory-timeline"
n=$(grep -c '<path class="upload"' "$tmp/c.svg")
want=$(grep -o 'uploads" data-count="[0-9]*' "$tmp/c.svg" | grep -o '[0-9]*$')
[ "$n" -gt 0 ] && [ "$n" = "$want" ] && ok "$n upload ticks" || bad "upload ticks: $n, data-count $want"

# a pipeline plan: written after the prompt's run
"$diffc" "$fx/pipelines/sd" --offload model -o "$tmp/sd.dplan" --memory-timeline "$tmp/sdc.svg" 2>/dev/null ||
  bad "diffc compiles the sd pipeline with --memory-timeline"
"$diffrun" "$tmp/sd.dplan" --prompt "a cat" --steps 2 -o "$tmp/cat.png" -q --memory-timeline "$tmp/sdr.svg" &&
  grep -q '<path class="measured" d="M' "$tmp/sdr.svg" && ok "pipeline: diffrun --prompt draws the timeline with the measured line" ||
  bad "pipeline: diffrun --memory-timeline"
for phase in text prologue denoise.uncond denoise.cond decode; do
  grep -q "<title>$phase: steps " "$tmp/sdr.svg" || bad "pipeline timeline lacks phase $phase"
done
ok "the pipeline's phases are drawn"

if command -v xmllint >/dev/null; then
  xmllint --noout "$tmp/c.svg" "$tmp/sdr.svg" && ok "xmllint: well-formed" || bad "xmllint rejects the SVG"
fi

if ! command -v rsvg-convert >/dev/null; then
  echo "SKIP: rsvg-convert is not installed (Debian package librsvg2-bin; tools/install-deps.sh installs it): the SVG was not rendered"
  cli_finish || exit 1
  exit 77
fi
for f in c sdr; do
  rsvg-convert -w 1200 "$tmp/$f.svg" -o "$tmp/$f.png" 2>"$tmp/rsvg.err" || bad "rsvg-convert $f.svg: $(cat "$tmp/rsvg.err")"
  size=$(stat -c %s "$tmp/$f.png" 2>/dev/null || echo 0)
  [ "$size" -gt 20000 ] && ok "$f.png: $size bytes" || bad "$f.png is $size bytes: nothing drawn?"
  if command -v python3 >/dev/null; then
    # the PNG's pixels (8-bit RGB or RGBA, non-interlaced, as rsvg-convert writes): more than a few colours
    colours=$(python3 - "$tmp/$f.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
pos, idat, w, h, ctype = 8, b"", 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    if kind == b"IDAT": idat += body
    pos += 12 + n
raw, bpp = zlib.decompress(idat), {2: 3, 6: 4}.get(ctype, 4)
stride, prev, seen = w * bpp, bytearray(w * bpp), set()
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if y % 7 == 0: seen.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 5))
    prev = line
print(len(seen))
PY
)
    [ "${colours:-0}" -gt 6 ] && ok "$f.png has $colours colours (sampled)" || bad "$f.png: ${colours:-?} colours"
  fi
done
cli_finish
