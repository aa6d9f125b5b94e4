"""The real CLIP tokenizer files, made offline from the vocabulary that ships inside the
open-clip-torch wheel (open_clip/bpe_simple_vocab_16e6.txt.gz, found without importing open_clip,
which would need torchvision).

merges.txt = the header line and lines 1..48894 of that file; vocab.json = the 256 byte-unicode
characters, the same with "</w>", one token per merge (the pair joined), then <|startoftext|> and
<|endoftext|> (49408 tokens), the layout transformers' CLIPTokenizer reads.  Written identically by
every caller, so git stores one copy however many fixture folders hold it.
"""
import gzip
import importlib.util
import json
import os


def clip_bpe_path():
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("make_fixtures: open-clip-torch is not installed (tools/python-env.sh installs it)")
    return os.path.join(list(spec.submodule_search_locations)[0], "bpe_simple_vocab_16e6.txt.gz")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def clip_vocab_and_merges():
    lines = gzip.open(clip_bpe_path()).read().decode("utf-8").split("\n")
    merges = lines[1 : 49152 - 256 - 2 + 1]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return vocab, merges


def write_clip_tokenizer(folder, pad_token="<|endoftext|>", max_length=77, tokenizer_json=False):
    """A diffusers pipeline's tokenizer folder as the released SD repositories ship it: vocab.json,
    merges.txt and tokenizer_config.json (SD1.x pads with <|endoftext|>, SDXL's tokenizer_2 with "!"),
    plus tokenizer.json (3.6 MB, what transformers 5 saves) only when asked.  Returns the loaded
    transformers CLIPTokenizer."""
    from transformers import CLIPTokenizer

    os.makedirs(folder, exist_ok=True)
    vocab, merges = clip_vocab_and_merges()
    tmp = os.path.join(folder, ".raw")
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = CLIPTokenizer(os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt"), pad_token=pad_token,
                        model_max_length=max_length)
    tok.save_pretrained(folder)
    if not tokenizer_json:
        os.remove(os.path.join(folder, "tokenizer.json"))
    for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(folder, name))
    os.rmdir(tmp)
    return CLIPTokenizer.from_pretrained(folder)
