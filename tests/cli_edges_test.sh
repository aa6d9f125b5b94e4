#!/usr/bin/env bash
# cli_edges_test.sh BUILD_DIR SOURCE_DIR — the rough edges a new user hit
# (issue 11): each check fails on the behaviour before its fix.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-edges

"$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/d.dplan" --input z=4x4x16x16 2>/dev/null || bad "vae_tiny compiles"

# ---- item 3: NaN outputs are not written silently ----
# The fixture's inputs with the first element of z made NaN (safetensors:
# u64 header length, JSON header, then data; z's data_offsets give its place).
io=$fx/vae_tiny/io_decode.safetensors
cp "$io" "$tmp/nan.safetensors"
hlen=$(od -An -t u8 -N8 "$io" | tr -d ' ')
zoff=$(head -c $((8 + hlen)) "$io" | tail -c "$hlen" | grep -o '"z":{[^}]*}' | grep -o '"data_offsets":\[[0-9]*' | grep -o '[0-9]*$')
printf '\x00\x00\xc0\x7f' | dd of="$tmp/nan.safetensors" bs=1 seek=$((8 + hlen + zoff)) conv=notrunc 2>/dev/null
warn=$("$diffrun" "$tmp/d.dplan" --inputs "$tmp/nan.safetensors" --outputs "$tmp/nan-out.safetensors" 2>&1 >/dev/null)
case "$warn" in
  *'warning: output "sample" holds'*NaN*--check-finite*) ok "NaN output warns: $warn" ;;
  *) bad "NaN output: no warning on stderr ($warn)" ;;
esac
[ -s "$tmp/nan-out.safetensors" ] && ok "the NaN output is still written" || bad "NaN output not written"
clean=$("$diffrun" "$tmp/d.dplan" --inputs "$io" 2>&1 >/dev/null)
[ -z "$clean" ] && ok "finite outputs: no warning" || bad "finite outputs warned: $clean"
expect_fail "--check-finite keeps its per-step meaning" "produced NaN" -- \
  "$diffrun" "$tmp/d.dplan" --inputs "$tmp/nan.safetensors" --check-finite

# ---- item 4: --outputs with another format's extension ----
expect_fail "--outputs img.png refused" 'writes outputs as safetensors, not as the "png"' -- \
  "$diffrun" "$tmp/d.dplan" --random-inputs --outputs "$tmp/img.png"
ls "$tmp"/img.png* >/dev/null 2>&1 && bad "img.png left behind" || ok "nothing written for img.png"
"$diffrun" "$tmp/d.dplan" --random-inputs --outputs "$tmp/plain" -q && [ -s "$tmp/plain" ] &&
  ok "--outputs without an extension writes safetensors" || bad "--outputs without an extension"

# ---- item 5: unwritable -o names the user's path; a repeated option is refused ----
expect_fail "-o in a missing folder" "$tmp/nodir/x.dplan: cannot create the plan: no folder $tmp/nodir" -- \
  "$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/nodir/x.dplan"
expect_fail "-o a folder" "is a folder" -- "$diffc" "$fx/vae_tiny/model" -o "$tmp"
expect_fail "-o twice" "-o given twice ($tmp/a.dplan and $tmp/b.dplan)" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$tmp/a.dplan" -o "$tmp/b.dplan"
expect_fail "--offload twice" "--offload given twice" -- \
  "$diffc" "$fx/vae_tiny/model" -o "$tmp/a.dplan" --offload model --offload sequential
expect_fail "--outputs twice" "--outputs given twice" -- \
  "$diffrun" "$tmp/d.dplan" --random-inputs --outputs "$tmp/1.safetensors" --outputs "$tmp/2.safetensors"
expect_fail "--trace twice" "--trace given twice ($tmp/1.json and $tmp/2.json)" -- \
  "$diffrun" "$tmp/d.dplan" --random-inputs --trace "$tmp/1.json" --trace "$tmp/2.json"
"$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/s.dplan" --skip-cast norm --skip-cast conv_in \
  --storage-dtype bf16 2>/dev/null && ok "--skip-cast stays repeatable" || bad "--skip-cast repeated refused"

# ---- item 6: a pipeline folder suggests only what diffc compiles ----
pipe=$fx/pipeline_sd/model
msg=$("$diffc" "$pipe" -o "$tmp/p.dplan" 2>&1)
case "$msg" in
  *'"text_encoder" is null, so it cannot run whole; compile one of its components with --component NAME (those diffc compiles: unet, vae)'*) ok "pipeline suggestions: $msg" ;;
  *) bad "pipeline suggestions: $msg" ;;
esac
expect_fail "--component scheduler" 'component "scheduler" is the diffusers class PNDMScheduler, which diffc does not compile yet' -- \
  "$diffc" "$pipe" --component scheduler -o "$tmp/p.dplan"
mkdir -p "$tmp/pipe"
sed 's/"text_encoder": \[/"text_encoder": ["transformers", "T5ForConditionalGeneration"], "unused_te": [/' "$pipe/model_index.json" >"$tmp/pipe/model_index.json"
mkdir -p "$tmp/pipe/text_encoder"
expect_fail "transformers text_encoder" 'component "text_encoder" is the transformers class T5ForConditionalGeneration, which diffc does not compile yet' -- \
  "$diffc" "$tmp/pipe" --component text_encoder -o "$tmp/p.dplan"
# a CLIP text encoder is a component diffc compiles (transformers' file names inside)
sed 's/"text_encoder": \[/"text_encoder": ["transformers", "CLIPTextModel"], "unused_te": [/' "$pipe/model_index.json" >"$tmp/pipe/model_index.json"
rm -rf "$tmp/pipe/text_encoder" && cp -r "$fx/clip_sd15/model" "$tmp/pipe/text_encoder"
if "$diffc" "$tmp/pipe" --component text_encoder -o "$tmp/te.dplan" --input input_ids=2x77 2>/dev/null &&
   "$diffrun" "$tmp/te.dplan" --random-inputs -q; then
  ok "a pipeline's CLIPTextModel text_encoder compiles and runs"
else
  bad "--component text_encoder (CLIPTextModel)"
fi

# ---- item 7: a config that makes the graph impossible names file, key and value ----
mkdir -p "$tmp/g"
sed 's/"norm_num_groups": [0-9]*/"norm_num_groups": 3/' "$fx/unet_tiny/model/config.json" >"$tmp/g/config.json"
ln -s "$fx/unet_tiny/model/diffusion_pytorch_model.safetensors" "$tmp/g/"
expect_fail "norm_num_groups that does not split" "$tmp/g/config.json: \"norm_num_groups\" 3 does not divide \"block_out_channels\"[0]" -- \
  "$diffc" "$tmp/g" -o "$tmp/g.dplan"

# ---- item 8: messages show the path typed, not where a symlink leads ----
ln -s "$fx/unet_tiny/model" "$tmp/linked-model"
expect_fail "symlinked folder named as typed" "$tmp/linked-model: no weights for variant" -- \
  "$diffc" "$tmp/linked-model" --variant nope -o "$tmp/l.dplan"
(cd "$tmp" && "$diffc" linked-model -o l.dplan --input sample=1x4x16x16 --input timestep=1 \
   --input encoder_hidden_states=1x4x8 2>"$tmp/l.err") && (cd / && "$diffrun" "$tmp/l.dplan" --random-inputs -q) &&
  ok "a plan compiled from a relative, symlinked folder runs from another folder" || bad "relative plan from elsewhere: $(cat "$tmp/l.err")"

# ---- item 9: --help tells the truth ----
h=$("$diffc" --help)
for want in "--layout nchw|nhwc" "fp8_e4m3|fp8_e5m2|bf16|fp16|fp32" "blocks per group (default 1)" "required with it"; do
  case "$h" in *"$want"*) ok "diffc --help: $want" ;; *) bad "diffc --help lacks '$want'" ;; esac
done
"$diffc" "$fx/unet_tiny/model" -o "$tmp/b.dplan" --offload group --group-level block 2>/dev/null &&
  grep -q "block level, 1 block(s) per group" <("$diffrun" "$tmp/b.dplan" --print-ir) &&
  ok "--group-level block defaults to 1 block per group" || bad "--group-level block without --blocks-per-group"
lp=$("$diffc" --list-passes)
[ "$(printf '%s\n' "$lp" | head -1 | cut -d' ' -f1)" = frontend ] && ok "--list-passes starts with frontend" || bad "--list-passes lacks frontend"
printf '%s\n' "$lp" | awk '{ if (substr($0, 17, 1) != " " || substr($0, 18, 1) == " ") exit 1 }' &&
  ok "--list-passes is aligned" || bad "--list-passes misaligned: $lp"
for p in $(printf '%s\n' "$lp" | cut -d' ' -f1); do
  "$diffc" "$fx/vae_tiny/model" --entry decode -o "$tmp/dp.dplan" --dump-after "$p" >/dev/null 2>&1 ||
    bad "--dump-after $p (listed by --list-passes) refused"
done
ok "--dump-after accepts every listed pass"

# ---- item 12: --profile's per-op table is sorted by time ----
"$diffrun" "$tmp/d.dplan" --random-inputs --profile --repeat 3 >"$tmp/prof.txt"
awk '/^per op, slowest first:/ {on = 1; next} /^(per cost-model class|slowest steps):/ {on = 0} on { t = $(NF - 2); if (seen && t > last + 1e-9) bad = 1; last = t; seen = 1 }
     END { exit !(seen && !bad) }' "$tmp/prof.txt" && ok "--profile per-op table sorted by time" || bad "--profile not sorted: $(cat "$tmp/prof.txt")"
# the per-class table covers the same steps as the per-op table, its shares add up to 100 %
awk '/^per op, slowest first:/ {s = 1; next} /^per cost-model class:/ {s = 2; next} /^slowest steps:/ {s = 0}
     s == 1 { ops += $2 } s == 2 { cls += $2; pct += $6; n++ }
     END { exit !(n >= 2 && ops > 0 && ops == cls && pct > 99 && pct < 101) }' "$tmp/prof.txt" &&
  ok "--profile per-class table: every step once, shares add up" || bad "--profile per-class table: $(cat "$tmp/prof.txt")"

# ---- a DiT's transformer in one file (issue 14) compiles as one model: pipeline options refused ----
sfd=$fx/single_file_dit
expect_fail "a Flux file takes no --component" "single-file checkpoint: --component and --variant apply to folders" -- \
  "$diffc" "$sfd/flux-dev.safetensors" --config "$sfd/flux-dev" --component transformer -o "$tmp/f.dplan"
expect_fail "a Flux file takes no --height" "for one model, give its input shapes with --input NAME=DIMS" -- \
  "$diffc" "$sfd/flux-dev.safetensors" --config "$sfd/flux-dev" --height 64 -o "$tmp/f.dplan"
expect_fail "a Flux file with the schnell config" "a FLUX.1-dev transformer (it has guidance_in)" -- \
  "$diffc" "$sfd/flux-dev.safetensors" --config "$sfd/flux-schnell" -o "$tmp/f.dplan"
expect_fail "--config on a model folder" "--config $sfd/flux-dev applies to a single-file checkpoint" -- \
  "$diffc" "$fx/vae_tiny/model" --entry decode --config "$sfd/flux-dev" -o "$tmp/f.dplan"

# ---- item 14: the quick start's out/ is ignored ----
grep -qx "/out/" "$src/.gitignore" && ok "out/ is ignored by git" || bad "out/ not in .gitignore"

cli_finish
