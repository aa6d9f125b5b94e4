#!/usr/bin/env python3
"""The T5 tokenizer fixture: a small real unigram sentencepiece model, trained here offline, saved
the way transformers 5 saves T5's tokenizer, and the ids T5TokenizerFast gives for a corpus of
awkward prompts, which tests/test_tokenizer_t5.c must reproduce id for id.

Usage:  /work/venv-fixtures/bin/python tools/make_fixtures_t5_tokenizer.py [--out tests/fixtures/tokenizer_t5]
        [--fuzz-seeds tests/fuzz/corpus/tokenizer_t5]   (also the fuzz target's small seeds)

Nothing is downloaded: the training text is the Python standard library's own source files (in the
interpreter's lib folder) plus prompt-like sentences written here.  Writes:
  t5/           spiece.model (sentencepiece ModelProto, nmt_nfkc normalization, pad 0, eos 1,
                unk 2) and what T5TokenizerFast.from_pretrained + save_pretrained make of it:
                tokenizer.json (Unigram + <extra_id_0..99>), tokenizer_config.json,
                special_tokens_map.json.  A reader given the folder uses tokenizer.json; one given
                only spiece.model (+ the two config files) must give the same ids, which is checked
                here against transformers on a temporary spiece.model-only folder.
  corpus.json   [{prompt, ids_77, ids_16, ids_spm_77, ids_spm_16, ntokens, removed_77?, removed_16?}]:
                ids with padding="max_length", truncation=True at 77 and 16; ntokens = pieces
                before truncation (without eos); removed_N = the cut text as diffusers logs it
                (batch_decode of untruncated ids [N-1:-1]), only when something was cut.
  hub_style.json  {normalizer, pre_tokenizer, tokenizer_config.json, special_tokens_map.json}: what
                T5's released folders hold: tokenizer.json's pipeline (Precompiled + Replace of space
                runs + Strip; Metaspace prepend "first"; "@charsmap" stands for t5/'s map) and the
                configs (added_tokens_decoder, additional_special_tokens, legacy,
                clean_up_tokenization_spaces true).  transformers 5.24 rebuilds T5's pipeline and
                ignores the first two, which is checked here: t5/ with all four swapped in gives the
                corpus ids; its cut texts (cleaned up) are corpus.json's removed_hub_N where they differ.
"""
import argparse
import glob
import json
import os
import shutil
import sys
import sysconfig
import tempfile

LENGTHS = (77, 16)

LONG = "a highly detailed painting of " + ", ".join(["a red fox in the snow"] * 20)

TRAIN_SENTENCES = [
    "a photo of an astronaut riding a horse on mars",
    "a highly detailed painting of a red fox in the snow, trending on artstation",
    "portrait of a young woman with long hair, soft light, 85mm lens, bokeh",
    "a cozy cabin in the mountains at sunset, volumetric lighting, 4k",
    "Café naïve résumé façade Ångström über straße",
    "東京の夜景 写真 高品質 美しい 風景",
    "the quick brown fox jumps over the lazy dog 0123456789",
    "a watercolor of a lighthouse by the sea, blue and white, minimalist",
]

PROMPTS = [
    # plain text
    "a photo of an astronaut riding a horse on mars",
    "A Photo Of An ASTRONAUT Riding A HORSE",
    "The quick brown fox jumps over the lazy dog 0123456789",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 200,
    LONG,
    # empty and whitespace
    "",
    " ",
    "     ",
    "\n\n\t \r\n",
    "  leading and trailing  ",
    "multiple    spaces   between     words",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em space\u3000ideographic space",
    "line\u2028separator\u2029paragraph\x85next line",
    "\x1c\x1d\x1e\x1f information separators",
    "zero\u200bwidth\u200djoiner\ufeffbom\u180emongolian",
    "control\x01\x02\x7fchars and \x08 backspace",  # no NUL: a C prompt ends at one
    # punctuation and symbols
    "hello!!! world??? ... --- ***",
    "(masterpiece:1.2), [bad hands], {best quality}, <lora:x:0.8>",
    "email@example.com https://example.com/path?q=1&x=2",
    "#hashtag @mention $100 50% 3+4=7 ~tilde~ `code`",
    "a,b;c:d",
    # numbers
    "1234567890",
    "3.14159 and 2024-12-01 and 1,000,000",
    "½ ² ① Ⅷ ٣ ४ ¼ ⅞",
    # NFKC and the precompiled map's grapheme rule
    "ＦＵＬＬ－ｗｉｄｔｈ ｌｅｔｔｅｒｓ １２３",
    "ﬁnance ﬂower ﬀ ﬃ ligatures",
    "ﬁ\u0301 ligature with a combining accent",
    "Ａ\u0301 full-width with a combining accent",
    "™ © ® ℃ № ㎏ ㍿",
    "ｶﾞｷﾞ half-width katakana ｱｲｳ",
    # accents
    "Café naïve résumé façade",
    "Cafe\u0301 decomposed",
    "Ångström \u212b \u0041\u030a",
    "e\u0301\u0323 reordered marks",
    "Ｃａｆé ｍｉｘｅｄ",
    "ŻÓŁĆ gęślą jaźń",
    "Ελληνικά κείμενο and кириллица",
    # CJK and other scripts
    "東京の夜景 写真",
    "東京の夜景写真高品質美しい風景",
    "中文提示词：一只猫",
    "한국어 프롬프트",
    "مرحبا بالعالم",
    "हिन्दी पाठ",
    "ภาษาไทย",
    # emoji and unknown characters
    "a cat 🐱 and a dog 🐶",
    "👍🏽 👨‍👩‍👧 🇫🇷 flags and modifiers",
    "🐱🐶🐭 three unknowns fused",
    "unknown ☃ snowman and ⚡ bolt",
    "𝕳𝖊𝖑𝖑𝖔 math letters",
    "█▓▒░ blocks",
    # the metaspace character itself
    "▁already ▁metaspace▁inside",
    "▁▁ double ▁",
    "word▁",
    # special and added tokens in the text
    "</s>",
    "hello </s> world",
    "wo</s>rld",
    "<extra_id_3>",
    "fill <extra_id_0> and <extra_id_99> here",
    "<extra_id_3><extra_id_4>",
    "<pad> <unk> </s>",
    "＜unk＞ full-width brackets normalize into <unk>",
    "＜extra_id_5＞ normalized sentinel",
    "<extra_id_100> is not a sentinel",
    "<extra_id_3 unfinished",
    " <extra_id_1> spaces around ",
    # mixed and long
    "def main():\n    return {'key': [1, 2, 3]}",
    "import os, sys; print(sys.version)",
    "Mixed CASE and 混合 text with numbers 42 and émojis 🎉",
    "a" + " b" * 100,
    "spaced , before . punctuation ! is n't it ? it 's we 've they 're i 'm a ' quoted ' end .",
]


def python_sources():
    """Training text: the standard library's .py files (deterministic order), plus prompt-like lines."""
    lib = sysconfig.get_paths()["stdlib"]
    lines = []
    for path in sorted(glob.glob(os.path.join(lib, "*.py")))[:80]:
        with open(path, encoding="utf-8", errors="ignore") as f:
            lines += [ln.strip() for ln in f if len(ln.strip()) > 20]
    return lines + TRAIN_SENTENCES * 40


def copy_reproducible(src, dst):
    """Copies a trained spiece.model without the temporary paths sentencepiece records in it, so a
    rerun writes the same bytes."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    with open(src, "rb") as f:
        proto.ParseFromString(f.read())
    del proto.trainer_spec.input[:]
    proto.trainer_spec.model_prefix = "spiece"
    proto.normalizer_spec.normalization_rule_tsv = ""
    with open(dst, "wb") as f:
        f.write(proto.SerializeToString())


def train(model_dir):
    import sentencepiece as spm

    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(python_sources()))
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(d, "sp"), model_type="unigram", vocab_size=1000,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=0.9995,
            input_sentence_size=30000, shuffle_input_sentence=False, num_threads=1, minloglevel=2)
        copy_reproducible(os.path.join(d, "sp.model"), os.path.join(model_dir, "spiece.model"))


def save_like_transformers(out_dir):
    """spiece.model -> T5TokenizerFast.from_pretrained -> save_pretrained, in out_dir."""
    from transformers import T5TokenizerFast

    tok = T5TokenizerFast.from_pretrained(out_dir)
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            src = os.path.join(d, name)
            if not os.path.exists(src):
                continue
            with open(src, encoding="utf-8") as f:
                data = json.load(f)
            if name == "tokenizer_config.json":
                for k in ("is_local", "local_files_only", "name_or_path"):  # machine-specific
                    data.pop(k, None)
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                if name == "tokenizer.json":
                    json.dump(data, f, ensure_ascii=False)  # one line: half the bytes
                else:
                    json.dump(data, f, ensure_ascii=False, indent=2)
                    f.write("\n")


def encode(tok, prompt, n):
    ids = tok(prompt, padding="max_length", max_length=n, truncation=True)["input_ids"]
    full = tok(prompt)["input_ids"]
    removed = tok.batch_decode([full[n - 1:-1]])[0] if len(full) > n else None
    return ids, full, removed


def make_corpus(folder):
    from transformers import T5TokenizerFast

    tok = T5TokenizerFast.from_pretrained(folder)
    with tempfile.TemporaryDirectory() as d:
        for name in ("spiece.model", "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(os.path.join(folder, name)):
                shutil.copyfile(os.path.join(folder, name), os.path.join(d, name))
        tok_spm = T5TokenizerFast.from_pretrained(d)
        corpus = []
        for p in PROMPTS:
            case = {"prompt": p}
            for n in LENGTHS:
                ids, full, removed = encode(tok, p, n)
                ids_spm, full_spm, removed_spm = encode(tok_spm, p, n)
                assert len(ids) == n and ids[-1] in (0, 1), (p, ids)
                case[f"ids_{n}"] = ids
                case[f"ids_spm_{n}"] = ids_spm
                case["ntokens"] = len(full) - 1
                if len(full_spm) != len(full):
                    case["ntokens_spm"] = len(full_spm) - 1
                if removed is not None:
                    case[f"removed_{n}"] = removed
                if removed_spm != removed:
                    case[f"removed_spm_{n}"] = removed_spm
            corpus.append(case)
    same = sum(c["ids_77"] == c["ids_spm_77"] for c in corpus)
    print(f"{len(corpus)} prompts; spiece.model-only ids equal tokenizer.json ids on {same}")
    return corpus


def hub_config():
    """tokenizer_config.json and special_tokens_map.json as T5's released folders have them."""
    def added(content):
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}
    extra = [f"<extra_id_{i}>" for i in range(100)]
    decoder = {"0": added("<pad>"), "1": added("</s>"), "2": added("<unk>")}
    decoder.update({str(1099 - i): added(f"<extra_id_{i}>") for i in range(100)})
    config = {"added_tokens_decoder": decoder, "additional_special_tokens": extra,
              "clean_up_tokenization_spaces": True, "eos_token": "</s>", "extra_ids": 100,
              "legacy": True, "model_max_length": 512, "pad_token": "<pad>", "sp_model_kwargs": {},
              "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>"}
    tokens_map = {"additional_special_tokens": extra, "eos_token": added("</s>"),
                  "pad_token": added("<pad>"), "unk_token": added("<unk>")}
    return config, tokens_map


HUB_CONFIG, HUB_TOKENS_MAP = hub_config()
HUB_STYLE = {
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": "@charsmap"},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        {"type": "Strip", "strip_left": True, "strip_right": True}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
                      "prepend_scheme": "first", "split": True},
    "tokenizer_config.json": HUB_CONFIG,
    "special_tokens_map.json": HUB_TOKENS_MAP,
}


def check_hub_style(folder, corpus):
    """t5/ with HUB_STYLE's pipeline and configs must give the same ids in transformers; records
    the cut texts where they differ (clean_up_tokenization_spaces)."""
    from transformers import T5TokenizerFast

    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    charsmap = data["normalizer"]["precompiled_charsmap"]
    for key in ("normalizer", "pre_tokenizer"):
        data[key] = json.loads(json.dumps(HUB_STYLE[key]).replace("@charsmap", charsmap))
    with tempfile.TemporaryDirectory() as d:
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                json.dump(HUB_STYLE[name], f)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        tok = T5TokenizerFast.from_pretrained(d)
        assert tok.clean_up_tokenization_spaces
        for case in corpus:
            for n in LENGTHS:
                ids, _, removed = encode(tok, case["prompt"], n)
                assert ids == case[f"ids_{n}"], f"hub-style tokenizer.json differs on {case['prompt']!r}"
                if removed != case.get(f"removed_{n}"):
                    case[f"removed_hub_{n}"] = removed

# A few sentencepiece normalization rules (code points, hex): compiled by sentencepiece into a
# precompiled charsmap of a few hundred bytes, so fuzz seeds can carry a real one.
TINY_RULES = "FB01\t66 69\nFF21\t41\nFF41\t61\n9\t20\n41 301\tC1\n3000\t20\n"
SEP = b"\n#--#\n"


def tiny_folder(d, json_too):
    """A tiny unigram model with TINY_RULES in d (spiece.model, tokenizer_config.json, and
    tokenizer.json when json_too); returns the loaded T5TokenizerFast."""
    import sentencepiece as spm
    from transformers import T5TokenizerFast

    with open(os.path.join(d, "rules.tsv"), "w") as f:
        f.write(TINY_RULES)
    with open(os.path.join(d, "text.txt"), "w") as f:
        f.write("\n".join(TRAIN_SENTENCES[:4] * 4))  # ASCII: few required characters
    spm.SentencePieceTrainer.train(
        input=os.path.join(d, "text.txt"), model_prefix=os.path.join(d, "sp"), model_type="unigram",
        vocab_size=80, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, num_threads=1,
        normalization_rule_tsv=os.path.join(d, "rules.tsv"), minloglevel=2)
    os.makedirs(os.path.join(d, "out"))
    copy_reproducible(os.path.join(d, "sp.model"), os.path.join(d, "out", "spiece.model"))
    with open(os.path.join(d, "out", "tokenizer_config.json"), "w") as f:
        json.dump({"extra_ids": 2}, f)
    tok = T5TokenizerFast.from_pretrained(os.path.join(d, "out"))
    if json_too:
        tok.save_pretrained(os.path.join(d, "saved"))
        shutil.copyfile(os.path.join(d, "saved", "tokenizer.json"), os.path.join(d, "out", "tokenizer.json"))
    return os.path.join(d, "out")


def write_seeds(seed_dir):
    """Inputs for tests/fuzz/fuzz_tokenizer_t5.c: parts cut at SEP (tokenizer.json, spiece.model,
    tokenizer_config.json, prompt, max length byte)."""
    os.makedirs(seed_dir, exist_ok=True)
    prompt = "ﬁne Ａ\u0301 tab\there <extra_id_1> unknown 🐱☃ ▁▁x</s>".encode()
    with tempfile.TemporaryDirectory() as d:
        folder = tiny_folder(d, json_too=True)
        files = {}
        for name in ("tokenizer.json", "spiece.model", "tokenizer_config.json"):
            with open(os.path.join(folder, name), "rb") as f:
                files[name] = f.read()
    data = json.loads(files["tokenizer.json"])
    hub = json.loads(json.dumps(HUB_STYLE).replace("@charsmap", data["normalizer"]["precompiled_charsmap"]))
    hub_json = json.dumps({**data, "normalizer": hub["normalizer"], "pre_tokenizer": hub["pre_tokenizer"]},
                          ensure_ascii=False).encode()
    seeds = {
        "json": [files["tokenizer.json"], b"", files["tokenizer_config.json"], prompt, bytes([15])],
        "spm": [b"", files["spiece.model"], files["tokenizer_config.json"], prompt, bytes([15])],
        "spm_truncated": [b"", files["spiece.model"][:len(files["spiece.model"]) // 2], b"", prompt, bytes([3])],
        "hub_style": [hub_json, b"", files["tokenizer_config.json"], prompt, bytes([76])],
        "json_no_config": [files["tokenizer.json"], b"", b"", b"a b  c", bytes([0])],
    }
    for name, parts in seeds.items():
        with open(os.path.join(seed_dir, name), "wb") as f:
            f.write(SEP.join(parts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/tokenizer_t5")
    ap.add_argument("--fuzz-seeds", help="also write the fuzz target's seeds into this folder")
    args = ap.parse_args()
    if args.fuzz_seeds:
        write_seeds(args.fuzz_seeds)
    folder = os.path.join(args.out, "t5")
    os.makedirs(folder, exist_ok=True)
    train(folder)
    save_like_transformers(folder)
    corpus = make_corpus(folder)
    check_hub_style(folder, corpus)
    with open(os.path.join(args.out, "hub_style.json"), "w", encoding="utf-8") as f:
        json.dump(HUB_STYLE, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "corpus.json"), "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in corpus) + "\n]\n")  # a case a line
    print(f"wrote {folder} and corpus.json ({len(PROMPTS)} prompts)", file=sys.stderr)


if __name__ == "__main__":
    main()
