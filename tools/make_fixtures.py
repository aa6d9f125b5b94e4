#!/usr/bin/env python3
"""Generate diffc's reference fixtures with diffusers itself as the oracle.

Every model is built from a config dict (nothing is downloaded), its weights are
re-initialised from a seeded generator, it is saved with ``save_pretrained`` and
then, in a fresh child process per run, loaded back with ``from_pretrained`` and
run in float32 on the CPU (``torch.no_grad()``, ``eval()``, 2 threads).  The
child writes the io file (inputs + ``out.*`` outputs) and reports wall time and
peak RSS, which go into ``case.json``.

Usage:  python tools/make_fixtures.py --out tests/fixtures [--only NAME ...]
(normally through tools/make_fixtures.sh, which sets up the virtual environment).
The name "pipelines" stands for the whole-pipeline fixtures in <out>/pipelines, made by
tools/make_fixtures_pipeline.py (text-to-image runs of tiny SD, SD2-v and SDXL folders).

Everything written is deterministic except the measured fields of case.json
(``diffusers_seconds*``, ``diffusers_*_rss_bytes``).
"""

# The generator is split by part, in modules beside this file: make_fixtures_table.py (configs,
# input specs, the FIXTURES table), make_fixtures_models.py (building, running and saving models),
# make_fixtures_worker.py (the --worker child: load, run, time, RSS), make_fixtures_fixture.py (one
# fixture: model folder, io files, checks, case.json), make_fixtures_readme.py (the fixtures'
# README), make_fixtures_common.py (threads, io files).  This file keeps main and the worker dispatch.
# The pipeline fixtures have their own pair: make_fixtures_pipeline_table.py (configs, cases) and
# make_fixtures_pipeline.py (folders, runs, its own --worker child).

import argparse
import os

import torch

from make_fixtures_common import NUM_THREADS, dir_size
from make_fixtures_fixture import make_fixture
from make_fixtures_pipeline import make_pipelines
from make_fixtures_readme import write_readme
from make_fixtures_table import FIXTURES
from make_fixtures_worker import worker

PIPELINES = "pipelines"  # the --only name (and subfolder) of the pipeline fixtures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", help="make only these fixtures")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return

    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    import diffusers
    print(f"diffusers {diffusers.__version__}, torch {torch.__version__}, {NUM_THREADS} threads")
    os.makedirs(args.out, exist_ok=True)
    names = [fx["name"] for fx in FIXTURES] + [PIPELINES]
    for n in args.only or []:
        if n not in names:
            raise SystemExit(f"unknown fixture {n}; known: {names}")
    table = []
    for fx in FIXTURES:
        if args.only and fx["name"] not in args.only:
            continue
        make_fixture(fx, args.out, table)
    if not args.only or PIPELINES in args.only:
        make_pipelines(os.path.join(args.out, PIPELINES))
    write_readme(args.out)

    print()
    hdr = ["fixture", "run", "output", "shape", "std", "diffusers s", "fixture MB"]
    rows = [[r[0], r[1], r[2], r[3], f"{r[4]:.4f}", f"{r[5]:.6f}", f"{r[6]/1e6:.3f}"] for r in table]
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    for r in [hdr] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print(f"total size of {args.out}: {dir_size(args.out)/1e6:.3f} MB")


if __name__ == "__main__":
    main()
