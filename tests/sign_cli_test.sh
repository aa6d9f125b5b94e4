#!/usr/bin/env bash
# sign_cli_test.sh BUILD_DIR SOURCE_DIR — plan trust from the command line
# (issue 11, items 1 and 18): diffc keygen, diffc --sign, diffrun
# --trusted-keys and --no-verify-weights as a user runs them; every refusal
# is one line naming the plan (or file) and why, with a non-zero exit.
set -u
. "$(dirname "$0")/cli_lib.sh"
cli_init "$1" "$2" diffc-sign

cp -r "$src/tests/fixtures/vae_tiny/model" "$tmp/vae"
cd "$tmp" || exit 1

# ---- keys ----
"$diffc" keygen me.key me.pub 2>/dev/null && ok "keygen" || bad "keygen"
[ "$(stat -c %a me.key)" = 600 ] && ok "secret key is mode 600" || bad "secret key mode $(stat -c %a me.key)"
grep -Eq '^[0-9a-f]{64} ' me.pub && ok "public key: one line of 64 hex digits and a comment" || bad "public key format: $(cat me.pub)"
"$diffc" keygen other.key other.pub 2>/dev/null || bad "second keygen"
expect_fail "keygen never overwrites" "me.key exists: diffc keygen never overwrites a key file" -- "$diffc" keygen me.key new.pub
[ ! -e new.pub ] && ok "nothing written when keygen refuses" || bad "keygen left new.pub"
expect_fail "keygen arguments" "usage: diffc keygen SECRETFILE PUBFILE" -- "$diffc" keygen only-one

# ---- signing ----
if "$diffc" vae -o signed.dplan --input z=1x4x8x8 --sign me.key 2>"$tmp/c.txt"; then ok "diffc --sign"; else bad "diffc --sign: $(cat "$tmp/c.txt")"; fi
grep -q "signed signed.dplan with key" "$tmp/c.txt" && ok "diffc says it signed" || bad "no signing line"
"$diffc" vae -o plain.dplan --input z=1x4x8x8 2>/dev/null || bad "unsigned compile"
cp me.key loose.key && chmod 644 loose.key
expect_fail "--sign with a key others can read" "the secret key may be read or written by others (mode 0644)" -- "$diffc" vae -o x.dplan --sign loose.key
[ ! -e x.dplan ] && ok "no plan written with a refused key" || bad "x.dplan written"
cp me.pub pub-as-secret && chmod 600 pub-as-secret
expect_fail "--sign with a public key" "pub-as-secret: not a diffc secret key" -- "$diffc" vae -o x.dplan --sign pub-as-secret

# ---- running ----
"$diffrun" signed.dplan --random-inputs --trusted-keys me.pub >run.txt 2>&1 && ok "signed plan runs with its key" || bad "signed run: $(cat run.txt)"
grep -q "^signature: Ed25519 key .*, verified against --trusted-keys me.pub" run.txt && ok "run says who signed" || bad "no signature line"
cat other.pub me.pub >team.pub
"$diffrun" signed.dplan --random-inputs --trusted-keys team.pub >/dev/null 2>&1 && ok "key among several" || bad "team.pub"
"$diffrun" signed.dplan --random-inputs >/dev/null 2>&1 && ok "signed plan runs without --trusted-keys" || bad "signed, no keys"
"$diffrun" signed.dplan --info | grep -q "^signature: Ed25519 key .*(not verified: no --trusted-keys)" && ok "--info shows the signer" || bad "--info signature"
"$diffrun" plain.dplan --info | grep -q "^signature: none" && ok "--info: unsigned" || bad "--info unsigned"
expect_fail "another key" "signed.dplan: refused: the plan is signed by key" -- "$diffrun" signed.dplan --random-inputs --trusted-keys other.pub
expect_fail "unsigned plan" "plain.dplan: refused: the plan is not signed (no SIGN section)" -- "$diffrun" plain.dplan --random-inputs --trusted-keys me.pub
size=$(wc -c <signed.dplan)
cp signed.dplan tampered.dplan
printf '\001' | dd of=tampered.dplan bs=1 seek=$((size - 60)) conv=notrunc 2>/dev/null
expect_fail "flipped signature byte" "tampered.dplan: section SIGN checksum mismatch" -- "$diffrun" tampered.dplan --random-inputs --trusted-keys me.pub
printf 'not a key\n' >junk.pub
expect_fail "malformed key file" "junk.pub:1: expected an Ed25519 public key as 64 hex digits" -- "$diffrun" signed.dplan --random-inputs --trusted-keys junk.pub
expect_fail "secret key as trusted key" "this is a diffc secret key; --trusted-keys takes public keys" -- "$diffrun" signed.dplan --random-inputs --trusted-keys me.key
expect_fail "missing key file" "--trusted-keys: nothere.pub: cannot open" -- "$diffrun" signed.dplan --random-inputs --trusted-keys nothere.pub
expect_fail "--trusted-keys twice" "--trusted-keys given twice" -- "$diffrun" signed.dplan --random-inputs --trusted-keys me.pub --trusted-keys other.pub

# ---- weights changed since compile (item 1) ----
python3 - vae/diffusion_pytorch_model.safetensors <<'EOF'
import json, struct, sys
p = sys.argv[1]
d = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', d[:8])[0]
at = 8 + n + json.loads(d[8:8 + n])['decoder.conv_in.weight']['data_offsets'][0] + 40
d[at:at + 4] = struct.pack('<f', 3.5)
open(p, 'wb').write(d)
EOF
expect_fail "changed weight bytes" "changed since compile: the bytes of tensor decoder.conv_in.weight" -- "$diffrun" plain.dplan --random-inputs
"$diffrun" plain.dplan --random-inputs --no-verify-weights >nv.txt 2>&1 && ok "--no-verify-weights runs it" || bad "--no-verify-weights: $(cat nv.txt)"
grep -q "weights not verified at load (--no-verify-weights)" nv.txt && ok "--no-verify-weights says so" || bad "no not-verified line"

# ---- help ----
for opt in keygen --sign; do "$diffc" --help | grep -q -- "$opt" || bad "diffc --help lacks $opt"; done
for opt in --trusted-keys --no-verify-weights "Security: a plan is an executable"; do
  "$diffrun" --help | grep -q -- "$opt" || bad "diffrun --help lacks $opt"
done
ok "--help documents keygen, --sign, --trusted-keys, --no-verify-weights and the security note"

cli_finish
