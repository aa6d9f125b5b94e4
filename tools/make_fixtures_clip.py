"""make_fixtures' CLIP text encoders (tools/make_fixtures.py): transformers' CLIPTextModel and
CLIPTextModelWithProjection built from a CLIPTextConfig dict, their inputs (token ids from the real
CLIP tokenizer, padded to 77, or ids given as lists), one reference forward with the outputs diffc
compiles (last_hidden_state, pooler_output or text_embeds, and hidden_states[k] when a run asks), and
the checkpoint layout the released SD text encoders have (transformers 4: the "text_model." prefix
and the position_ids buffer), which transformers 5 still reads but no longer writes.
"""

import os
import tempfile

import torch

CLIP_CLASSES = ("CLIPTextModel", "CLIPTextModelWithProjection")


def is_clip(cls_name):
    return cls_name in CLIP_CLASSES


def clip_class(name):
    import transformers
    transformers.utils.logging.set_verbosity_error()  # quiet the tiny vocabularies' token id notes
    return getattr(transformers, name)


def build_clip(cls_name, config):
    from transformers import CLIPTextConfig
    return clip_class(cls_name)(CLIPTextConfig(**config))


_tokenizers = {}


def clip_tokenizer(pad):
    """The real CLIP tokenizer (make_fixtures_clip_vocab), padding with `pad`: "<|endoftext|>" as SD1.x's,
    "!" as SDXL's tokenizer_2.  Made once per pad token, in a folder thrown away."""
    if pad not in _tokenizers:
        from make_fixtures_clip_vocab import write_clip_tokenizer
        with tempfile.TemporaryDirectory() as d:
            _tokenizers[pad] = write_clip_tokenizer(os.path.join(d, "tokenizer"), pad_token=pad)
    return _tokenizers[pad]


def clip_inputs(prompts=None, pad="<|endoftext|>", ids=None):
    """input_ids [B,77] int64: the prompts tokenized as SD pipelines do (padding to max_length 77,
    truncation), or the given ids."""
    if ids is not None:
        return {"input_ids": torch.tensor(ids, dtype=torch.int64)}
    tok = clip_tokenizer(pad)
    x = tok(prompts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
    return {"input_ids": x.to(torch.int64)}


def run_clip(model, inputs, hidden=None):
    """The outputs in transformers' names; hidden = [k, final_norm]: also out.hidden_state =
    hidden_states[k], through final_layer_norm when final_norm (SD's clip_skip; SDXL takes
    hidden_states[-2] without it)."""
    out = model(inputs["input_ids"], output_hidden_states=hidden is not None)
    d = {}
    if getattr(out, "text_embeds", None) is not None:
        d["out.text_embeds"] = out.text_embeds
    d["out.last_hidden_state"] = out.last_hidden_state
    if getattr(out, "pooler_output", None) is not None:
        d["out.pooler_output"] = out.pooler_output
    if hidden is not None:
        k, final_norm = hidden
        h = out.hidden_states[k]
        if final_norm:
            h = getattr(model, "text_model", model).final_layer_norm(h)
        d["out.hidden_state"] = h
    return d


def reinit_embeddings(model, g, randn, done):
    """nn.Embedding tables (token and position): N(0, 1)."""
    from torch import nn
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            m.weight.copy_(randn(g, *m.weight.shape))
            done.add(id(m.weight))


def legacy_layout(model_dir, max_pos):
    """Rewrites a CLIPTextModel's model.safetensors as transformers 4 saved it (the layout of the released
    SD1.x/SD2.x text encoders): every name under "text_model.", plus the position_ids buffer [1, max_pos]
    that transformers before 4.31 kept in the state dict (transformers 5 drops it on load)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(model_dir, "model.safetensors")
    sd = {"text_model." + k: v for k, v in load_file(path).items()}
    sd["text_model.embeddings.position_ids"] = torch.arange(max_pos, dtype=torch.int64).unsqueeze(0)
    save_file(sd, path, metadata={"format": "pt"})
