"""The bench's report (bench/bench.py): the machine and the commit, the markdown table and
per-case details, the note on a busy machine, and bench/results*.md.
"""

import os
import platform
import subprocess

import bench_common as common
from bench_common import ISA_DIFFC_CPU, ISA_TORCH_ENV, REPO, fmt_bytes


def machine_info():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in ("model name", "cpu family", "model", "stepping") and k not in info:
                    info[k] = v.strip()
                if not line.strip():
                    break
    except OSError:
        pass
    model = info.get("model name", "?")
    if "cpu family" in info:
        model += f" (family {info['cpu family']}, model {info.get('model', '?')}, stepping {info.get('stepping', '?')})"
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = " ".join(x for x in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                                 "amx_tile") if x in have)
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "mem": mem, "flags": flags,
            "kernel": platform.release(), "load": os.getloadavg()}


def git_info():
    def q(*a):
        try:
            return subprocess.run(["git", "--no-optional-locks", "-C", REPO] + list(a), capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    head = q("rev-parse", "--short", "HEAD")
    dirty = q("status", "--porcelain", "--untracked-files=no")
    return f"{head}{' + uncommitted changes' if dirty else ''}" if head else "?"


def fmt_s(x):
    if x is None:
        return "n/a"
    return f"{x:.3f}" if x < 100 else f"{x:.0f}"


def table_rows(results):
    head = ["case", "torch s/forward", "diffrun s/forward", "ratio", "GFLOP", "torch GFLOP/s",
            "diffrun GFLOP/s", "torch peak RSS", "diffrun device arena peak + host RSS", "rel L2"]
    rows = []
    for r in results:
        t, d = r["torch"], r.get("diffrun")
        gflop = t["flops"] / 1e9
        tsec = t["median_s"]
        torch_mem = (f"{fmt_bytes(t['hwm_process'] - t['rss_after_imports'])} "
                     f"(HWM {fmt_bytes(t['hwm_process'])} − {fmt_bytes(t['rss_after_imports'])} after imports)")
        if d is None:
            dcell, ratio, dgf, dmem, rel = "not run", "", "", "", ""
        else:
            dsec = d["median_s"]
            if dsec:
                dcell = fmt_s(dsec)
                if d["status"] == "too slow":
                    dcell += " (too slow: 1 run)"
                elif d["status"] != "ok":
                    dcell += f" ({'1 run; ' if len(d['times']) <= 1 else ''}{d['status']})"
                ratio = f"{tsec / dsec:.2f}"
                dgf = f"{gflop / dsec:.1f}"
            else:
                dcell, ratio, dgf = d["status"], "", ""
            dmem = (f"{fmt_bytes(d['arena_peak'])} + {fmt_bytes(d['host_rss'])}"
                    if d.get("arena_peak") is not None else "n/a")
            rel = f"{d['rel_l2']:.2e}" if d.get("rel_l2") is not None else "n/a"
        rows.append([f"{r['case']['name']} ({r['case']['desc']})", fmt_s(tsec), dcell, ratio, f"{gflop:.1f}",
                     f"{gflop / tsec:.1f}", dgf, torch_mem, dmem, rel])
    return head, rows


def markdown_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    return "\n".join(lines)


def details(results):
    out = []
    for r in results:
        t, d, c = r["torch"], r.get("diffrun"), r["case"]
        out.append(f"- **{c['name']}** — {c['desc']}; inputs "
                   + ", ".join(f"{k} {'x'.join(map(str, s))}" for k, s in c["inputs"].items()) + ".")
        top = sorted(t["flops_by_op"].items(), key=lambda kv: -kv[1])
        out.append(f"  - load average when the case started: {r['load']:.2f}")
        out.append(f"  - PyTorch: {len(t['times'])} timed forwards after 2 warm-ups (one under "
                   f"FlopCounterMode): " + ", ".join(f"{x:.3f}" for x in t["times"]) + " s; median "
                   f"{t['median_s']:.3f} s; {t['cpus_used']:.2f} CPUs used on average. FLOPs by op: "
                   + ", ".join(f"{k} {v / 1e9:.1f} G" for k, v in top) + ".")
        out.append(f"  - PyTorch attention: processors {', '.join(t['attention_processors']) or 'none'}; "
                   f"aten ops {', '.join(f'{k} ×{v}' for k, v in t['attention_ops'].items()) or 'none'}.")
        out.append(f"  - PyTorch memory: RSS after imports {fmt_bytes(t['rss_after_imports'])}, after "
                   f"from_pretrained {fmt_bytes(t['rss_after_load'])} (HWM {fmt_bytes(t['hwm_after_load'])}), "
                   f"HWM during the forwards only {fmt_bytes(t['hwm_forward'])}; model load {t['load_s']:.1f} s; "
                   f"output std {t['out_std']:.3f}.")
        if d is None:
            continue
        if d.get("compile_s") is not None:
            out.append(f"  - diffc compile {d['compile_s']:.2f} s: `{d.get('diffc_cmd', '')}`")
        if d.get("first_run_s") is not None:
            out.append(f"  - diffrun check run (PyTorch's inputs): {d['first_run_s']:.3f} s, rel L2 "
                       + (f"{d['rel_l2']:.3g}" if d.get("rel_l2") is not None else "n/a")
                       + f": `{d.get('check_cmd', '')}`")
        if d.get("all_runs"):
            out.append(f"  - diffrun timed: runs " + ", ".join(f"{x:.3f}" for x in d["all_runs"])
                       + " s (run 1 is the warm-up, not counted); the process used "
                       + f"{d['time_proc_cpu_s'] / max(d['time_proc_s'], 1e-9):.2f} CPUs on average over "
                       + f"{d['time_proc_s']:.1f} s: `{d.get('time_cmd', '')}`")
        if d.get("arena_peak") is not None:
            out.append(f"  - diffrun memory: device arena peak {fmt_bytes(d['arena_peak'])}"
                       + (" (MISMATCH with the plan's prediction)" if d.get("arena_mismatch") else "")
                       + f", weights resident {fmt_bytes(d.get('weights'))}, host peak RSS {fmt_bytes(d['host_rss'])}.")
        if d.get("status") != "ok" or d.get("note"):
            out.append(f"  - diffrun status: {d['status']}{': ' + d['note'] if d.get('note') else ''}")
    return "\n".join(out)


def busy_line(results, args):
    low = [f"{r['case']['name']} {r['torch']['cpus_used']:.2f}" for r in results
           if r["torch"]["cpus_used"] < 0.85 * args.threads]
    pin = f"children pinned to CPUs {sorted(common.PIN_CPUS)}; " if common.PIN_CPUS else ""
    if low:
        return (f"- {pin}**the machine was busy**: PyTorch got fewer than {args.threads} CPUs on average "
                f"({', '.join(low)}), so these timings are inflated and not a measurement of either side")
    return f"- {pin}PyTorch got {args.threads} CPUs throughout (no sign of other load)"


def write_results(path, args, results, machine, started, wall, command, feats, isa):
    t = results[0]["torch"] if results else {}
    head, rows = table_rows(results)
    lines = [
        "# diffc bench: diffrun vs PyTorch/diffusers on the CPU",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}; bench wall time {wall / 60:.1f} min"
        + (" (--quick)" if args.quick else ""),
        f"- command: `{command}`",
        f"- machine: {machine['cpu']}, nproc {machine['nproc']}, {fmt_bytes(machine['mem'])} RAM, "
        f"flags {machine['flags']}, Linux {machine['kernel']}; load average at start "
        f"{machine['load'][0]:.2f} / end {os.getloadavg()[0]:.2f}",
        f"- instruction set: --isa {args.isa}; PyTorch ran ATen {isa['aten']} kernels, oneDNN "
        f"{isa['onednn']} (convolution {isa['conv_impl']}), MKL for {isa['mkl']}"
        + (f" (environment {' '.join(f'{k}={v}' for k, v in ISA_TORCH_ENV[args.isa].items())})"
           if ISA_TORCH_ENV[args.isa] else "")
        + "; diffrun's kernels: " + (", ".join(sorted({r['diffrun'].get('target') or '?' for r in results
                                                       if r.get('diffrun')})) or "not run")
        + (f" (diffc --cpu {ISA_DIFFC_CPU[args.isa]})" if ISA_DIFFC_CPU[args.isa] else " (diffc --cpu native)"),
        f"- PyTorch {t.get('torch_version', '?')} ({t.get('cpu_capability', '?')} kernels; "
        f"{'; '.join(t.get('parallel_info', []))}), diffusers {t.get('diffusers_version', '?')}, "
        f"fp32, torch.no_grad(), torch.set_num_threads({args.threads})",
        f"- diffc {machine['git']}, Release build (build-bench/); diffrun "
        + (f"--threads {args.threads}" if feats["threads"] else
           f"has no --threads option (uses every online CPU: {machine['nproc']})")
        + (f", --backend {args.backend}" if args.backend else "")
        + (f", extra diffrun args `{args.diffrun_args}`" if args.diffrun_args else "")
        + (f", extra diffc args `{args.diffc_args}`" if args.diffc_args else ""),
        busy_line(results, args),
        "- times are medians of N forwards after warm-up; ratio = PyTorch time / diffrun time (> 1: "
        "diffrun is faster); GFLOP counted by torch.utils.flop_counter.FlopCounterMode for one PyTorch "
        "forward (conv, matmul, attention; 1 multiply-add = 2 FLOP) and used for both; rel L2 = "
        "‖diffrun − PyTorch‖ / ‖PyTorch‖ on the same inputs",
        "",
        markdown_table(head, rows),
        "",
        "## Details",
        "",
        details(results),
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))
