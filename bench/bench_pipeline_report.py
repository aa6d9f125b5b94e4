"""The pipeline cases' run and report (bench/bench.py with pipeS cases): runs diffusers and the diffrun
plan variants per case (bench_pipeline.py), prints the tables and writes bench/results-pipeline.md.
"""

import datetime
import json
import os
import time

import bench_common as common
from bench_common import REPO, WORK_DIR, fmt_bytes, log
from bench_pipeline import (GUIDANCE, NEGATIVE_PROMPT, PROMPT, SEED, VARIANTS, bench_pipe_diffrun,
                            bench_pipe_torch, ensure_pipeline, parse_pipe_case)
from bench_report import git_info, machine_info, markdown_table


def _s(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "n/a"


def torch_rss(t):
    return t["hwm_process"] - t["rss_after_imports"]


def run_pipeline_bench(args, names):
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    machine = machine_info()
    machine["git"] = git_info()
    command = os.environ.get("DIFFC_BENCH_COMMAND") or "bench/bench.py " + " ".join(names)
    cases = [parse_pipe_case(n) for n in names]
    variants = [v for v in VARIANTS if v[0] in args.pipe_variants]
    os.makedirs(WORK_DIR, exist_ok=True)
    loads = [("start", os.getloadavg())]
    log(f"bench: {machine['cpu']}, nproc {machine['nproc']}, load average {machine['load'][0]:.2f}; "
        f"pipeline cases {' '.join(names)}; {args.threads} threads; {args.steps} steps")
    if machine["load"][0] > args.threads + 0.5:
        log(f"bench: note: the load average is {machine['load'][0]:.2f}: other work on this machine will "
            "perturb the timings")
    model_dir = ensure_pipeline(args.python)
    results = []
    for case in cases:
        load = os.getloadavg()
        loads.append((f"{case['name']} start", load))
        log(f"== {case['name']}: {case['desc']} (load average {load[0]:.2f})")
        io_path = os.path.join(WORK_DIR, f"{case['name']}.torch_out.safetensors")
        t = bench_pipe_torch(case, model_dir, io_path, args, args.python)
        tt = t["timed"]
        loads.append((f"{case['name']} after diffusers", os.getloadavg()))
        log(f"  diffusers: {tt['total_s']:.2f} s/image (text {tt['text_s']:.2f} s, denoise "
            f"{tt['denoise_s'] / tt['iterations']:.3f} s/step, decode {tt['decode_s']:.2f} s; {tt['cpus_used']:.2f} CPUs), "
            f"{tt['unet_calls']} UNet calls of batch {tt['unet_batch']}; peak RSS {fmt_bytes(torch_rss(t))} "
            f"(HWM {fmt_bytes(t['hwm_process'])} − {fmt_bytes(t['rss_after_imports'])} after imports); "
            f"image std {t['image_std']:.3f}, {100 * t['image_saturated']:.1f}% of pixels clamped to 0 or 1")
        if tt["cpus_used"] < 0.85 * args.threads:
            log(f"  WARNING: diffusers got only {tt['cpus_used']:.2f} of {args.threads} CPUs on average: the machine "
                "is busy and the timings are inflated")
        r = {"case": case, "torch": t, "diffrun": None, "load": load[0]}
        if not args.torch_only:
            r["diffrun"] = bench_pipe_diffrun(case, model_dir, args, variants)
            d = r["diffrun"].get("default", {})
            if d.get("outputs") and os.path.isfile(d["outputs"]):
                from safetensors.numpy import load_file
                from bench_diffrun import rel_l2
                a, b = load_file(d["outputs"]), load_file(io_path)
                d["vs_torch"] = {k: rel_l2(a[k], b[k]) for k in ("image", "latents")}
                log(f"  default plan vs diffusers: image rel L2 {d['vs_torch']['image']:.3g}, latents rel L2 "
                    f"{d['vs_torch']['latents']:.3g}")
            loads.append((f"{case['name']} after diffrun", os.getloadavg()))
        results.append(r)
        with open(os.path.join(WORK_DIR, "results-pipeline.json"), "w") as f:
            json.dump({"results": results, "loads": loads}, f, indent=1)
    wall = time.perf_counter() - t_start
    loads.append(("end", os.getloadavg()))
    meta = {"machine": machine, "started": started.isoformat(), "wall": wall, "command": command,
            "args": {k: getattr(args, k) for k in REPORT_ARGS}}
    with open(os.path.join(WORK_DIR, "results-pipeline.json"), "w") as f:
        json.dump({"results": results, "loads": loads, "meta": meta}, f, indent=1)
    text = pipeline_markdown(args, results, machine, started, wall, command, loads)
    log("")
    log(text)
    if args.results:
        with open(args.results, "w") as f:
            f.write(text)
        log(f"\nbench: wrote {os.path.relpath(args.results, os.getcwd())} (and "
            f"{os.path.relpath(os.path.join(WORK_DIR, 'results-pipeline.json'), os.getcwd())}); {wall / 60:.1f} min")
    bad = [r["case"]["name"] for r in results if r["diffrun"] and
           (r["diffrun"].get("default", {}).get("vs_torch", {}).get("image") or 1) > 1e-4]
    failed = [f"{r['case']['name']}/{v}" for r in results if r["diffrun"] for v, d in r["diffrun"].items()
              if d["status"] != "ok"]
    if bad:
        log(f"bench: WARNING: image rel L2 above 1e-4 (or not measured) on {' '.join(bad)}")
    if failed:
        log(f"bench: diffc or diffrun failed on {' '.join(failed)} (logs in {os.path.relpath(WORK_DIR, os.getcwd())})")
    return 1 if bad or failed else 0


REPORT_ARGS = ("threads", "steps", "pipe_warmup_steps", "diffc_args", "diffrun_args")


def rerender(out_path, json_paths):
    """bench.py --pipe-report OUT.md JSON...: the markdown again from runs' results-pipeline.json files;
    several runs (e.g. pipe256 from one, pipe512 from another) are merged case by case, each case from
    the last file that has it, and the header lists every run's command, start and load."""
    import argparse
    runs = []
    for path in json_paths:
        with open(path) as f:
            runs.append(json.load(f))
    by_case, loads, commands = {}, [], []
    for i, data in enumerate(runs):
        meta = data["meta"]
        names = [r["case"]["name"] for r in data["results"]]
        for r in data["results"]:
            by_case[r["case"]["name"]] = r
        tag = f"run {i + 1}: " if len(runs) > 1 else ""
        loads += [(tag + k, v) for k, v in data["loads"]]
        commands.append((meta["command"], f"{', '.join(names)}; started {meta['started'][:19].replace('T', ' ')} UTC; "
                                          f"{meta['wall'] / 60:.1f} min"))
    meta = runs[-1]["meta"]
    for data in runs:
        if data["meta"]["args"] != meta["args"]:
            raise SystemExit(f"bench: --pipe-report: the runs differ in {data['meta']['args']} vs {meta['args']}")
    args = argparse.Namespace(**meta["args"])
    started = min(datetime.datetime.fromisoformat(d["meta"]["started"]) for d in runs)
    wall = sum(d["meta"]["wall"] for d in runs)
    command = commands if len(runs) > 1 else commands[0][0]
    results = [by_case[n] for n in sorted(by_case, key=lambda n: (by_case[n]["case"]["height"] * by_case[n]["case"]["width"], n))]
    machine = dict(runs[0]["meta"]["machine"])
    machine["git"] = " / ".join(sorted({d["meta"]["machine"]["git"] for d in runs}))
    text = pipeline_markdown(args, results, machine, started, wall, command, loads)
    with open(out_path, "w") as f:
        f.write(text)
    log(f"bench: wrote {out_path}")


def summary_rows(results, steps):
    head = ["case", "diffusers s/image", "diffrun s/image", "speedup", "diffusers s/step", "diffrun s/step",
            "speedup", "diffusers peak RSS", "diffrun peak RSS", "image rel L2", "latents rel L2",
            "CPUs used (diffusers / diffrun)", "CPU-s per image (diffusers / diffrun)", "speedup per CPU-s"]
    rows = []
    for r in results:
        t, tt = r["torch"], r["torch"]["timed"]
        d = (r.get("diffrun") or {}).get("default", {})
        ts, tstep = tt["total_s"], tt["denoise_s"] / tt["iterations"]
        vs = d.get("vs_torch", {})
        t_cpu = tt["total_s"] * tt["cpus_used"]
        rows.append([r["case"]["name"], _s(ts), _s(d.get("total_s")), _ratio(ts, d.get("total_s")), _s(tstep, 3),
                     _s(d.get("step_s"), 3), _ratio(tstep, d.get("step_s")), fmt_bytes(torch_rss(t)),
                     fmt_bytes(d.get("host_rss")),
                     f"{vs['image']:.2e}" if vs.get("image") is not None else "n/a",
                     f"{vs['latents']:.2e}" if vs.get("latents") is not None else "n/a",
                     f"{tt['cpus_used']:.2f} / {_s(d.get('cpus_used'))}",
                     f"{_s(t_cpu, 1)} / {_s(d.get('proc_cpu_s'), 1)}", _ratio(t_cpu, d.get("proc_cpu_s"))])
    return head, rows


def phase_rows(results, steps):
    head = ["case", "side", "s/image (text + denoise + decode)", "text s", "denoise s", "s/step", "decode s",
            "UNet calls × batch", "CPUs used", "load avg before → after", "peak RSS", "device peak"]
    rows = []
    for r in results:
        t, tt = r["torch"], r["torch"]["timed"]
        rows.append([r["case"]["name"], "diffusers", _s(tt["total_s"]), _s(tt["text_s"]), _s(tt["denoise_s"]),
                     _s(tt["denoise_s"] / tt["iterations"], 3), _s(tt["decode_s"]),
                     f"{tt['unet_calls']} × {tt['unet_batch']}",
                     _s(tt["cpus_used"]), f"{t['load_before']:.2f} → {tt['load']:.2f}",
                     f"{fmt_bytes(torch_rss(t))} (HWM {fmt_bytes(t['hwm_process'])} − "
                     f"{fmt_bytes(t['rss_after_imports'])})", "n/a (CPU)"])
        for vname, d in (r.get("diffrun") or {}).items():
            if d.get("status") != "ok":
                rows.append([r["case"]["name"], f"diffrun {vname}", d.get("status", "?")] + [""] * 9)
                continue
            rows.append([r["case"]["name"], f"diffrun {vname}", _s(d["total_s"]), _s(d["text_s"]),
                         _s(d["denoise_s"]), _s(d["step_s"], 3), _s(d["decode_s"]),
                         f"{d['unet_runs']} × 1", _s(d["cpus_used"]),
                         f"{d['load_before']:.2f} → {d['load_after']:.2f}", fmt_bytes(d.get("host_rss")),
                         f"arena {fmt_bytes(d.get('arena_peak'))}"])
    return head, rows


def device_line(d):
    for line in d.get("ir_lines", []):
        if line.startswith("# peak device memory"):
            return line[2:]
    return None


def memory_rows(results):
    head = ["case", "plan", "device arena peak (measured)", "plan's device total (IR dump)", "uploaded per image",
            "host peak RSS"]
    rows = []
    for r in results:
        for vname, d in (r.get("diffrun") or {}).items():
            if vname == "no-hoist" or d.get("status") != "ok":
                continue
            rows.append([r["case"]["name"], vname, d.get("arena_peak_text") or "n/a", device_line(d) or "n/a",
                         fmt_bytes(d.get("uploaded")), fmt_bytes(d.get("host_rss"))])
    return head, rows


def hoist_rows(results):
    head = ["case", "hoist (IR dump of the default plan)", "s/step default", "s/step --no-hoist", "saved s/step",
            "saved %", "CPUs used (default / --no-hoist)", "--no-hoist image vs default"]
    rows = []
    for r in results:
        dr = r.get("diffrun") or {}
        d, n = dr.get("default", {}), dr.get("no-hoist", {})
        if not d.get("step_s") or not n.get("step_s"):
            continue
        diff = n["step_s"] - d["step_s"]
        same = n.get("vs_default", {}).get("image", {})
        cd, cn = d.get("cpus_used") or 0, n.get("cpus_used") or 0
        comparable = abs(cd - cn) <= 0.15 * max(cd, cn, 1e-9)
        rows.append([r["case"]["name"], (d.get("hoist") or "n/a").lstrip("# "), _s(d["step_s"], 3),
                     _s(n["step_s"], 3), f"{diff:+.3f}", f"{100 * diff / n['step_s']:+.1f}%"
                     + ("" if comparable else " (not comparable: the runs got different CPUs)"),
                     f"{cd:.2f} / {cn:.2f}",
                     "bit-identical" if same.get("identical") else
                     (f"rel L2 {same['rel_l2']:.2e}" if same.get("rel_l2") is not None else "n/a")])
    return head, rows


def pipeline_markdown(args, results, machine, started, wall, command, loads):
    t = results[0]["torch"] if results else {}
    steps = args.steps
    sched = t.get("scheduler_config", {})
    lines = [
        "# diffc bench: the SD1.5 pipeline, diffrun vs diffusers on the CPU",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}; bench wall time {wall / 60:.1f} min",
        (f"- command: `{command}`" if isinstance(command, str) else
         "- commands (the cases come from separate runs, each case from one run): "
         + "; ".join(f"`{c}` ({note})" for c, note in command)),
        f"- machine: {machine['cpu']}, nproc {machine['nproc']}, {fmt_bytes(machine['mem'])} RAM, "
        f"flags {machine['flags']}, Linux {machine['kernel']}",
        "- load average (1 min) through the run: " + "; ".join(f"{k} {v[0]:.2f}" for k, v in loads),
        f"- PyTorch {t.get('torch_version', '?')} ({t.get('cpu_capability', '?')} kernels; "
        f"{'; '.join(t.get('parallel_info', []))}), diffusers {t.get('diffusers_version', '?')}, transformers "
        f"{t.get('transformers_version', '?')}; fp32, torch.no_grad(), torch.set_num_threads({args.threads}); "
        f"attention {', '.join(t.get('attention_processors', []))}",
        f"- diffc {machine['git']}, Release build (build-bench/), `diffc --cpu native`; diffrun --threads "
        f"{args.threads}" + (f"; extra diffc args `{args.diffc_args}`" if args.diffc_args else "")
        + (f"; extra diffrun args `{args.diffrun_args}`" if args.diffrun_args else ""),
        f"- pipeline: `bench/models/pipe-sd15`, StableDiffusionPipeline from the released SD1.5 configs "
        "(`bench/configs/sd15_unet.json`, `sd15_vae.json`, `sd15_text_encoder.json`, and the released "
        f"scheduler config `sd15_scheduler.json`: {t.get('scheduler', '?')} "
        + ", ".join(f"{k}={json.dumps(sched[k])}" for k in ("beta_schedule", "beta_start", "beta_end",
                                                             "skip_prk_steps", "steps_offset", "set_alpha_to_one",
                                                             "timestep_spacing") if k in sched)
        + "), the real CLIP tokenizer, seeded random fp32 weights (1066 M parameters), no safety checker",
        f"- generation: prompt \"{PROMPT}\", negative prompt \"{NEGATIVE_PROMPT}\", {steps} steps, guidance "
        f"{GUIDANCE}, seed {SEED} (torch.Generator().manual_seed; diffrun --seed draws the same noise), "
        "output_type=\"pt\"",
        "- **s/image** is the whole call after loading: diffusers' `pipe(...)` (after a warm-up call of "
        f"{args.pipe_warmup_steps} steps in the same process; its cold first call is not counted), diffrun's "
        "text + denoise + decode as it prints them (its first and only call in the process: diffrun cannot "
        "repeat a pipeline, so diffrun's figure includes any first-run cost). Loading (from_pretrained; "
        "diffrun's plan load and weight check) is not in either.",
        "- **s/step** is the denoising loop only, divided by its iterations: PNDM with skip_prk_steps runs "
        "steps + 1 of them (21 for 20 steps; diffusers and diffrun alike, diffrun prints \"over 21 steps\"). "
        "For diffusers from a forward pre-hook on the UNet (its first call) to the last `callback_on_step_end` "
        "timestamp (so it includes the scheduler steps and the guidance arithmetic); for diffrun its printed "
        "denoise time / iterations. diffusers runs the UNet once per iteration on a batch of 2 (unconditional + "
        "conditional); diffrun runs it twice per iteration on a batch of 1 (phases denoise.uncond and "
        "denoise.cond).",
        "- **peak RSS**: each side in its own process: diffusers' VmHWM minus its RSS after the imports (as "
        "`bench/results.md`), diffrun's printed host peak RSS (ru_maxrss of the whole process, its weights "
        "mmapped from the checkpoint files and its device arena included).",
        "- **CPUs used**: CPU seconds / wall seconds, for diffusers over the timed call, for diffrun over its "
        "whole process (plan load and weight check included); **CPU-s per image**: diffusers' CPU seconds in the "
        "timed call, diffrun's whole process's (so diffrun's includes its load). With other work on the machine "
        "each side gets fewer than its threads and the wall times are inflated; the CPU-second ratio is the "
        "fairer comparison then (a thread pool's spinning counts as used).",
        "- **rel L2** = ‖diffrun − diffusers‖ / ‖diffusers‖ of the `output_type=\"pt\"` image ([0, 1], from "
        "`diffrun --outputs`) and of the final latents (diffusers' from the last step's callback), same seed.",
        "",
        "## Summary",
        "",
        markdown_table(*summary_rows(results, steps)),
        "",
        "## Phases",
        "",
        markdown_table(*phase_rows(results, steps)),
        "",
        "## Device memory: `--offload model`",
        "",
        "diffrun on the CPU models a device: its arena is separate from host memory, so these are what a GPU "
        "would hold. Without offload the weights are resident on the device next to the arena; with "
        "`--offload model` they wait in host memory and are uploaded into the arena when their component "
        "runs, so the arena peak includes them.",
        "",
        markdown_table(*memory_rows(results)),
        "",
        offload_note(results),
        "",
        "## Hoisting",
        "",
        "The default plan computes the loop-invariant work (the text embeddings' cross-attention keys and "
        "values) once before the denoising loop; `diffc --no-hoist` computes it in every UNet run.",
        "",
        markdown_table(*hoist_rows(results)),
        "",
        "## Details",
        "",
        details(results, steps),
        "",
    ]
    return "\n".join(lines)


def offload_note(results):
    t = results[0]["torch"] if results else None
    if not t:
        return ""
    w = t["weights"]
    big = max(w, key=w.get)
    return ("diffusers' `enable_model_cpu_offload()` needs a CUDA (accelerator) device, so its device peak "
            "cannot be measured on this machine and none is reported. Computed, not measured: it keeps one "
            f"component on the device at a time, so its peak is at least the largest component's fp32 weights, "
            f"the {big}'s {fmt_bytes(w[big])} (text encoder {fmt_bytes(w['text_encoder'])}, VAE "
            f"{fmt_bytes(w['vae'])}), plus that component's activations on the GPU, which were not measured.")


def details(results, steps):
    out = []
    for r in results:
        c, t = r["case"], r["torch"]
        tt, w = t["timed"], t.get("warmup")
        out.append(f"- **{c['name']}** — {c['desc']}.")
        out.append(f"  - diffusers: from_pretrained {t['load_s']:.1f} s; warm-up call "
                   + (f"({w['unet_calls']} UNet calls) {w['total_s']:.2f} s" if w else "none")
                   + f"; timed call {tt['total_s']:.2f} s, text encoder forwards {_s(tt.get('text_encoder_s'))} s; "
                   "steps " + ", ".join(f"{x:.2f}" for x in tt["step_s"]) + " s; "
                   f"the child process ran {t['proc_s']:.0f} s. RSS after imports "
                   f"{fmt_bytes(t['rss_after_imports'])}, after from_pretrained {fmt_bytes(t['rss_after_load'])}, "
                   f"HWM {fmt_bytes(t['hwm_process'])}. Image std {t['image_std']:.3f}, "
                   f"{100 * t['image_saturated']:.1f}% of its values clamped to 0 or 1; latents std "
                   f"{t['latents_std']:.3f}.")
        for vname, d in (r.get("diffrun") or {}).items():
            out.append(f"  - diffrun {vname}: compile {d.get('compile_s', 0):.1f} s `{d.get('diffc_cmd', '')}`"
                       + (f"; {d['target']}" if d.get("target") else "") + ".")
            if d.get("status") != "ok":
                out.append(f"    - {d.get('status')}: {d.get('note', '')}")
                continue
            out.append(f"    - run: `{d['run_cmd']}`; the process ran {d['proc_s']:.1f} s "
                       f"({d['cpus_used']:.2f} CPUs on average, plan load and weight check included).")
            for line in d.get("ir_lines", []):
                out.append(f"    - IR: `{line}`")
            for line in d.get("output_lines", []):
                out.append(f"    - printed: `{line}`")
            if d.get("vs_default"):
                out.append("    - against the default plan: " + ", ".join(
                    f"{k} " + ("bit-identical" if v["identical"] else f"rel L2 {v['rel_l2']:.3g}")
                    for k, v in d["vs_default"].items()))
    return "\n".join(out)
