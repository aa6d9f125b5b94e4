"""make_fixtures shared pieces (tools/make_fixtures.py): the thread count every diffusers run uses,
the path of the entry point (its --worker child runs it again), and the io .safetensors files
(writing, reading) and the size of a fixture folder.
"""

import os

import torch

NUM_THREADS = 2
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_fixtures.py")  # run again with --worker


def save_io(path, tensors):
    """Float tensors as float32; integer ones (token ids) keep their dtype."""
    from safetensors.torch import save_file
    save_file({k: (v.detach() if not v.is_floating_point() else v.detach().to(torch.float32)).contiguous()
               for k, v in tensors.items()}, path)


def load_io(path):
    from safetensors.torch import load_file
    return load_file(path)


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total
