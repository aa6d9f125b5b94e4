"""make_fixtures shared pieces (tools/make_fixtures.py): the thread count every diffusers run uses,
the path of the entry point (its --worker child runs it again), and the io .safetensors files
(writing, reading) and the size of a fixture folder.
"""

import json
import os
import subprocess
import sys

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


def run_worker_job(script, job, io_path):
    """Runs `script --worker JOB` in a fresh Python process (the reference run loads the saved
    folder, as a user would), with job["result_path"] set beside io_path; returns the result the
    worker wrote and removes both temporary files."""
    job = dict(job, result_path=io_path + ".result.tmp.json")
    job_path = io_path + ".job.tmp.json"
    with open(job_path, "w") as f:
        json.dump(job, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(NUM_THREADS), MKL_NUM_THREADS=str(NUM_THREADS))
    subprocess.run([sys.executable, script, "--worker", job_path], check=True, env=env)
    with open(job["result_path"]) as f:
        res = json.load(f)
    os.remove(job_path)
    os.remove(job["result_path"])
    return res
