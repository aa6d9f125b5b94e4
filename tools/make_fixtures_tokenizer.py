#!/usr/bin/env python3
"""The CLIP tokenizer fixture: real CLIP tokenizer folders and the ids transformers' CLIPTokenizer
gives for a corpus of awkward prompts, which tests/test_tokenizer.c must reproduce id for id.

Usage:  /work/venv-fixtures/bin/python tools/make_fixtures_tokenizer.py [--out tests/fixtures/tokenizer]

Writes (nothing is downloaded; the vocabulary comes from the open-clip-torch wheel):
  clip/           vocab.json, merges.txt, tokenizer_config.json (pad <|endoftext|>: SD1.x, CLIP-L)
  clip_pad_bang/  the same vocab.json and merges.txt bytes, pad "!" (SDXL's tokenizer_2, SD2)
  clip_json/      tokenizer.json + tokenizer_config.json only (the layout transformers 5 saves)
  clip_legacy/    vocab.json, merges.txt, tokenizer_config.json and special_tokens_map.json as the
                  released SD 1.x repositories ship them (AddedToken objects, "normalized": true)
  corpus.json     [{prompt, ids, ids_pad_bang, ids_legacy, truncated_text?, truncated_text_pad_bang?,
                  truncated_text_legacy?}]: ids padded to 77 (clip_json must equal clip's, checked
                  here); truncated_text as diffusers logs it (decode of the cut ids)
  variants.json   [{name, files: {name: text}, cases: [{prompt, ids}]}]: tokenizer_config.json /
                  special_tokens_map.json variants read beside clip/'s vocab.json and merges.txt,
                  each probing how transformers resolves special and added tokens

The folders are not named by any case.json, so the diffusers fixture tooling leaves them alone.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures_clip_vocab import write_clip_tokenizer  # noqa: E402

MAX_LEN = 77

LONG = "a highly detailed painting of " + ", ".join(["a red fox in the snow"] * 20)

PROMPTS = [
    # plain text and case
    "a photo of an astronaut riding a horse on mars",
    "A Photo Of An ASTRONAUT Riding A HORSE",
    "The quick brown fox jumps over the lazy dog 0123456789",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 300,
    # empty and whitespace
    "",
    " ",
    "     ",
    "\n\n\t \r\n",
    "  leading and trailing  ",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em space\u3000ideographic space",
    "tab\t\t\ttabs   and    runs",
    "line\u2028separator\u2029paragraph\x85next line",
    "\x1c\x1d\x1e\x1f information separators (not \\s in Oniguruma)",
    "zero\u200bwidth\u200djoiner\ufeffbom\u180emongolian",
    # punctuation and symbols
    "hello!!! world??? ... --- ***",
    "!!!!!!!!!!!!!!!!!!!!",
    "hello!! wow! amazing!",
    "a,b;c:d",
    "(masterpiece:1.2), [bad hands], {best quality}, <lora:x:0.8>",
    "email@example.com https://example.com/path?q=1&x=2",
    "#hashtag @mention $100 50% 3+4=7 ~tilde~ `code`",
    "</w> literal </w>",
    "ⓐⓑⓒ ⒶⒷⒸ circled",
    # numbers
    "1234567890",
    "3.14159 and 2024-12-01 and 1,000,000",
    "½ ² ① Ⅷ ٣ ४ ௰",
    "Ⅻ ⅻ roman numerals",
    # contractions
    "it's don't they're we've i'm you'll he'd",
    "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D",
    "It\u2019s don\u2019t they\u2019re",
    "'s 't ''s x's's 'S",
    "rock'n'roll o'clock ma'am",
    # accents and normalization
    "Café",
    "Cafe\u0301",
    "naïve résumé façade",
    "Ångström \u212b \u0041\u030a",
    "e\u0301\u0323 reordered marks",
    "\u0301 starts with a combining mark",
    "\u1112\u1161\u11ab\u1100\u1173\u11af conjoining jamo",
    "ﬁ ﬀ ﬃ ℌ ℍ compatibility",
    "üpper ÜBER ÄÖÜ",
    # case mapping
    "Straße STRASSE ß ẞ",
    "İstanbul ISTANBUL ı i\u0307",
    "Ǆ ǅ ǆ Ǳ titlecase",
    "ΣΊΣΥΦΟΣ σίσυφος ς Σ",
    "Ꭰ Ꮳ cherokee 𐐀 deseret",
    "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ１２３！",
    # scripts
    "東京タワーの夜景",
    "日本語とEnglishの混合text123",
    "한국어 텍스트",
    "Привет мир ЁЖИК",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "ქართული ᲥᲐᲠᲗᲣᲚᲘ",
    "𝐁𝐨𝐥𝐝 𝕕𝕠𝕦𝕓𝕝𝕖",
    # emoji
    "😀 😂 🎨",
    "👩\u200d👩\u200d👧\u200d👦 family",
    "🇺🇸 🇯🇵 flags",
    "👍🏽 skin tone ❤️ heart",
    # control characters
    "control\x01\x07\x1b[0m chars\x7f",
    "bell\x07bell",
    # special token strings typed in the prompt
    "<|startoftext|>",
    "<|endoftext|>",
    "a cat <|endoftext|> a dog",
    "<|StartOfText|> mixed case <|ENDOFTEXT|>",
    "<|startoftext|><|endoftext|><|startoftext|>",
    "<<|startoftext|>> and <|startoftext",
    "x<|endoftext|>!y",
    # truncation
    LONG,
    "a " * 75,
    "a " * 76,
    "a " * 74 + "😀 tail",
    "a " * 74 + "b <|endoftext|> c!! d\x1c e",
    "a " * 75 + "\x1c zz",
    "a " * 70 + "supercalifragilisticexpialidocious " * 3,
]

# tokenizer_config.json as the released SD 1.x repositories ship it (openai/clip-vit-large-patch14's)
LEGACY_CONFIG = {
    "add_prefix_space": False,
    "bos_token": {"__type": "AddedToken", "content": "<|startoftext|>", "lstrip": False, "normalized": True,
                  "rstrip": False, "single_word": False},
    "do_lower_case": True,
    "eos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False, "normalized": True,
                  "rstrip": False, "single_word": False},
    "errors": "replace",
    "model_max_length": 77,
    "name_or_path": "openai/clip-vit-large-patch14",
    "pad_token": "<|endoftext|>",
    "special_tokens_map_file": "./special_tokens_map.json",
    "tokenizer_class": "CLIPTokenizer",
    "unk_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False, "normalized": True,
                  "rstrip": False, "single_word": False},
}
LEGACY_MAP = {
    "bos_token": {"content": "<|startoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                  "single_word": False},
    "eos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                  "single_word": False},
    "pad_token": "<|endoftext|>",
    "unk_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                  "single_word": False},
}


def tok_entry(content, normalized, special=True):
    return {"content": content, "lstrip": False, "normalized": normalized, "rstrip": False, "single_word": False,
            "special": special}


# Each variant: files written beside clip/'s vocab.json and merges.txt.
VARIANTS = [
    ("decoder_normalized_bos", {"tokenizer_config.json": {
        "added_tokens_decoder": {"49406": tok_entry("<|startoftext|>", True),
                                 "49407": tok_entry("<|endoftext|>", False)},
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 77, "tokenizer_class": "CLIPTokenizer"}}),
    ("decoder_bang_normalized", {"tokenizer_config.json": {
        "added_tokens_decoder": {"0": tok_entry("!", True), "49406": tok_entry("<|startoftext|>", False),
                                 "49407": tok_entry("<|endoftext|>", False)},
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "!",
        "unk_token": "<|endoftext|>", "model_max_length": 77, "tokenizer_class": "CLIPTokenizer"}}),
    ("map_overrides_config", {
        "tokenizer_config.json": {"pad_token": "<|endoftext|>", "model_max_length": 77,
                                  "tokenizer_class": "CLIPTokenizer"},
        "special_tokens_map.json": {"pad_token": "!", "bos_token": tok_entry("<|startoftext|>", True)}}),
    ("additional_special", {"tokenizer_config.json": {
        "additional_special_tokens": ["cat", {"__type": "AddedToken", "content": "dog</w>", "normalized": True,
                                              "lstrip": False, "rstrip": False, "single_word": False}],
        "model_max_length": 77, "tokenizer_class": "CLIPTokenizer"}}),
    ("short_max_length", {"tokenizer_config.json": {"model_max_length": 8, "pad_token": "!",
                                                    "tokenizer_class": "CLIPTokenizer"}}),
]

VARIANT_PROMPTS = [
    "<|StartOfText|> a <|ENDOFTEXT|>! b <|startoftext|>",
    "hi!! there!",
    "a cat and a dog, CAT and DOG, cats and dogs, dog</w>",
    "Wow!!! Ünïcödé <|endoftext|>",
    "one two three four five six seven eight nine ten",
]


def encode(tok, prompt):
    """ids padded to 77 as diffusers asks, and the cut text as diffusers logs it (or None)."""
    ml = tok.model_max_length
    ids = tok(prompt, padding="max_length", max_length=ml, truncation=True)["input_ids"]
    full = tok(prompt)["input_ids"]
    cut = tok.batch_decode([full[ml - 1:-1]])[0] if len(full) > ml else None
    return ids, cut


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def make_folders(out):
    """The four tokenizer folders; returns {name: loaded CLIPTokenizer}."""
    from transformers import CLIPTokenizer

    toks = {"clip": write_clip_tokenizer(os.path.join(out, "clip")),
            "clip_pad_bang": write_clip_tokenizer(os.path.join(out, "clip_pad_bang"), pad_token="!")}
    js = os.path.join(out, "clip_json")
    write_clip_tokenizer(js, tokenizer_json=True)
    for name in ("vocab.json", "merges.txt"):
        os.remove(os.path.join(js, name))
    with open(os.path.join(js, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    with open(os.path.join(js, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)  # one line: the same content in half the bytes
    toks["clip_json"] = CLIPTokenizer.from_pretrained(js)
    leg = os.path.join(out, "clip_legacy")
    os.makedirs(leg, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(out, "clip", name), os.path.join(leg, name))
    write_json(os.path.join(leg, "tokenizer_config.json"), LEGACY_CONFIG)
    write_json(os.path.join(leg, "special_tokens_map.json"), LEGACY_MAP)
    toks["clip_legacy"] = CLIPTokenizer.from_pretrained(leg)
    return toks


def make_corpus(toks):
    corpus = []
    for p in PROMPTS:
        case = {"prompt": p}
        ids, cut = encode(toks["clip"], p)
        ids_json, cut_json = encode(toks["clip_json"], p)
        assert (ids, cut) == (ids_json, cut_json), f"clip_json differs from clip on {p!r}"
        case["ids"] = ids
        if cut is not None:
            case["truncated_text"] = cut
        for folder, suffix in (("clip_pad_bang", "_pad_bang"), ("clip_legacy", "_legacy")):
            ids, cut = encode(toks[folder], p)
            case["ids" + suffix] = ids
            if cut is not None:
                case["truncated_text" + suffix] = cut
        corpus.append(case)
    return corpus


def make_variants(out):
    from transformers import CLIPTokenizer

    variants = []
    for name, files in VARIANTS:
        with tempfile.TemporaryDirectory() as d:
            for f in ("vocab.json", "merges.txt"):
                shutil.copyfile(os.path.join(out, "clip", f), os.path.join(d, f))
            texts = {}
            for fname, obj in files.items():
                texts[fname] = json.dumps(obj, ensure_ascii=False, indent=2)
                with open(os.path.join(d, fname), "w", encoding="utf-8") as f:
                    f.write(texts[fname])
            tok = CLIPTokenizer.from_pretrained(d)
            cases = []
            for p in VARIANT_PROMPTS:
                ids, cut = encode(tok, p)
                cases.append({"prompt": p, "ids": ids, **({"truncated_text": cut} if cut is not None else {})})
        variants.append({"name": name, "files": texts, "cases": cases})
    return variants


def dump_cases(path, items):
    """A JSON list with one item per line: readable diffs, no 77-line id columns."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in items))
        f.write("\n]\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    toks = make_folders(args.out)
    dump_cases(os.path.join(args.out, "corpus.json"), make_corpus(toks))
    dump_cases(os.path.join(args.out, "variants.json"), make_variants(args.out))
    print(f"wrote {len(PROMPTS)} prompts and {len(VARIANTS)} variants to {args.out}")


if __name__ == "__main__":
    main()
