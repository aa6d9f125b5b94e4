"""make_fixtures' fixture maker (tools/make_fixtures.py): for one FIXTURES entry, builds and saves the
model (or pipeline folder), writes each run's inputs, runs the --worker child on them, checks its
outputs against the in-memory model (and same_as files), and writes case.json.
"""

import copy
import json
import os
import shutil

import torch

from make_fixtures_common import SCRIPT, dir_size, load_io, run_worker_job, save_io
from make_fixtures_dit import dit_diffc_options
from make_fixtures_models import (apply_vae_options, build_model, has_model_options, make_inputs, model_class,
                                  run_model, save_model, write_model_index)
from make_fixtures_clip import is_clip as model_class_is_clip
from make_fixtures_table import SCHEDULER_SD15


def diffc_options(run):
    """The diffc flags that ask for the same as the run's diffusers options (a text encoder's
    hidden_states[k]: --clip-hidden-state k, with final_layer_norm --clip-final-norm)."""
    clip = []
    if run.get("clip_hidden"):
        clip = ["--clip-hidden-state", str(run["clip_hidden"][0])] + (["--clip-final-norm"] if run["clip_hidden"][1] else [])
    return ((["--vae-tiling"] if run.get("tiling") else []) + (["--vae-slicing"] if run.get("slicing") else []) + clip +
            dit_diffc_options(run))


def check_upcast_no_effect(fx, model, run):
    """upcast_attention must not change the fp32 output (the default processor ignores it)."""
    cfg = dict(fx["config"])
    cfg["upcast_attention"] = False
    other = model_class(fx["cls"])(**cfg)
    other.load_state_dict(model.state_dict())
    other.eval()
    x = make_inputs(run["inputs"])
    a = run_model(model, run["kind"], run["entry"], x)["out.sample"]
    b = run_model(other, run["kind"], run["entry"], x)["out.sample"]
    d = (a - b).abs().max().item()
    print(f"  upcast_attention true vs false: max |diff| = {d:.3g}")
    if d > 1e-6:
        raise SystemExit("upcast_attention changes the fp32 output; drop it from the config")


def make_fixture(fx, out_root, table):
    name = fx["name"]
    fdir = os.path.join(out_root, name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    model_dir = os.path.join(fdir, "model")
    os.makedirs(model_dir)
    print(f"== {name}")

    models = {}
    if fx.get("pipeline"):
        from diffusers import PNDMScheduler
        for comp, (cls_name, cfg, seed) in fx["components"].items():
            m = build_model(cls_name, cfg, seed)
            m.save_pretrained(os.path.join(model_dir, comp))
            models[comp] = (cls_name, m)
        PNDMScheduler(**SCHEDULER_SD15).save_pretrained(os.path.join(model_dir, "scheduler"))
        write_model_index(model_dir)
    else:
        m = build_model(fx["cls"], fx["config"], fx["seed"])
        nparams = sum(p.numel() for p in m.parameters())
        print(f"  {fx['cls']}: {nparams} parameters")
        save_model(m, model_dir, fx)
        models[None] = (fx["cls"], m)
        if fx.get("max_shard_size"):
            stem = "model" if model_class_is_clip(fx["cls"]) else "diffusion_pytorch_model"
            idx = os.path.join(model_dir, stem + ".safetensors.index.json")
            assert os.path.isfile(idx), "sharded save did not write an index.json"
            shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
            print(f"  sharded into {len(shards)} files + index.json")
            assert len(shards) >= 2
        if fx.get("check_upcast"):
            check_upcast_no_effect(fx, m, fx["runs"][0])

    case_runs = []
    for run in fx["runs"]:
        cls_name, m = models[run["component"]]
        if run["variant"] in ("bf16", "fp16"):
            # reference model in memory: fp32 model holding the bf16- (fp16-) rounded weights
            rounded = torch.bfloat16 if run["variant"] == "bf16" else torch.float16
            m = build_model(cls_name, fx["config"], fx["seed"])
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(p.to(rounded).to(torch.float32))
        inputs = make_inputs(run["inputs"])
        io_path = os.path.join(fdir, run["io"])
        save_io(io_path, inputs)  # inputs only; the worker adds the outputs

        job = {
            "cls": cls_name,
            "model_dir": os.path.join(model_dir, run["component"]) if run["component"] else model_dir,
            "variant": run["variant"],
            "kind": run["kind"],
            "entry": run["entry"],
            "io_path": io_path,
            "tiling": run.get("tiling", False),
            "slicing": run.get("slicing", False),
            "clip_hidden": run.get("clip_hidden"),
            "group_offload": run.get("group_offload"),
            "layerwise_casting": run.get("layerwise_casting"),
        }
        res = run_worker_job(SCRIPT, job, io_path)

        # the child's output (from the saved folder) must equal the in-memory model's output
        io = load_io(io_path)
        if has_model_options(run):  # the options hook into the model: the later runs need it plain
            m = copy.deepcopy(m)
        apply_vae_options(m, run)
        ref = run_model(m, run["kind"], run["entry"], inputs, run.get("clip_hidden"))
        for k, v in ref.items():
            rel = ((io[k] - v).norm() / v.norm()).item()
            if rel > 1e-6:
                raise SystemExit(f"{name}/{run['io']}: {k} from the saved model differs from the in-memory "
                                 f"model by relative L2 {rel:.3g}")
        if "same_as" in fx and run["io"] in fx["same_as"]:
            other = os.path.join(out_root, fx["same_as"][run["io"]])
            if os.path.isfile(other):
                o = load_io(other)
                assert set(o) == set(io), (sorted(o), sorted(io))
                for k in io:
                    if not torch.equal(o[k], io[k]):
                        raise SystemExit(f"{name}/{run['io']}: {k} differs from {fx['same_as'][run['io']]}")
                print(f"  {run['io']} is identical to {fx['same_as'][run['io']]}")

        procs = sorted({(a[3], a[4]) for a in res["attention"]})
        heads = sorted({(a[1], a[2]) for a in res["attention"]})
        print(f"  {run['io']}: {res['diffusers_seconds']*1e3:.2f} ms/forward mean "
              f"({res['diffusers_seconds_median']*1e3:.2f} median) over {res['repeats']} calls, "
              f"peak RSS {res['diffusers_peak_rss_bytes']/2**20:.0f} MiB "
              f"(after imports {res['diffusers_baseline_rss_bytes']/2**20:.0f} MiB), attention (heads, head_dim) {heads}, "
              f"processors (class, upcast_attention flag) {procs}")
        for k, v in io.items():
            if k.startswith("out."):
                std = v.std().item()
                table.append([name, run["io"], k, "x".join(map(str, v.shape)), std, res["diffusers_seconds"]])
                if not (0.05 < std < 20.0) or not torch.isfinite(v).all():
                    raise SystemExit(f"{name}/{run['io']}: {k} std {std} is out of the sensible range")
        case_runs.append({
            "entry": run["entry"],
            "io": run["io"],
            "tolerance": run["tolerance"],
            "component": run["component"],
            "variant": run["variant"],
            **({"diffc_options": diffc_options(run)} if diffc_options(run) else {}),
            "diffusers_seconds": round(res["diffusers_seconds"], 6),
            "diffusers_seconds_median": round(res["diffusers_seconds_median"], 6),
            "diffusers_peak_rss_bytes": res["diffusers_peak_rss_bytes"],
            "diffusers_baseline_rss_bytes": res["diffusers_baseline_rss_bytes"],
        })

    with open(os.path.join(fdir, "case.json"), "w") as f:
        json.dump({"runs": case_runs, "description": fx["description"]}, f, indent=2)
        f.write("\n")
    size = dir_size(fdir)
    for row in table:
        if row[0] == name:
            row.append(size)
    print(f"  size on disk: {size/1e6:.3f} MB")
