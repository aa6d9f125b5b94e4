"""make_fixtures' T5 text encoders (tools/make_fixtures.py): transformers' T5EncoderModel built from a
T5Config dict, its inputs (seeded token ids of a given batch and length, with the tokenizer's eos and
padding), one reference forward (last_hidden_state, no attention mask as the Flux and SD3 pipelines run
it), the re-initialisation of T5LayerNorm (an RMS norm with a weight only, which the generic
re-initialisation does not know), and checkpoint layouts other than what transformers 5 writes: the
token table under "encoder.embed_tokens.weight" instead of, or besides, "shared.weight".
"""

import os

import torch

T5_CLASSES = ("T5EncoderModel",)
PAD, EOS = 0, 1  # T5's tokenizer: pad 0, eos 1 (appended), unk 2


def is_t5(cls_name):
    return cls_name in T5_CLASSES


def t5_class(name):
    import transformers
    transformers.utils.logging.set_verbosity_error()
    return getattr(transformers, name)


def build_t5(cls_name, config):
    from transformers import T5Config
    return t5_class(cls_name)(T5Config(**config))


def t5_inputs(seed, batch, seq, vocab, padded=0):
    """input_ids [batch, seq] int64: seeded ids in [3, vocab) (past pad, eos and unk; the largest id
    always present), each row ending in eos; the last `padded` positions of the last row are pad,
    as a tokenizer padding to max_length writes them (the pipelines pass no mask: padding is
    attended to)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=g, dtype=torch.int64)
    ids[0, 0] = vocab - 1
    ids[:, -1] = EOS
    if padded:
        ids[-1, seq - padded - 1] = EOS
        ids[-1, seq - padded:] = PAD
    return {"input_ids": ids}


def run_t5(model, inputs):
    return {"out.last_hidden_state": model(inputs["input_ids"]).last_hidden_state}


def reinit_t5_norms(model, g, randn, done):
    """T5LayerNorm weights: 1 + 0.1*N(0,1), as the generic re-initialisation gives nn.LayerNorm's."""
    for m in model.modules():
        if type(m).__name__ == "T5LayerNorm":
            m.weight.copy_(1.0 + 0.1 * randn(g, *m.weight.shape))
            done.add(id(m.weight))


def embed_tokens_layout(model_dir, keep_shared):
    """Rewrites model.safetensors with the token table (also) under "encoder.embed_tokens.weight", as
    other writers of T5 checkpoints store it: without "shared.weight" when not keep_shared, else both
    (equal tensors, which transformers ties)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(model_dir, "model.safetensors")
    sd = load_file(path)
    sd["encoder.embed_tokens.weight"] = sd["shared.weight"].clone()
    if not keep_shared:
        del sd["shared.weight"]
    save_file(sd, path, metadata={"format": "pt"})
