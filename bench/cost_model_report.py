#!/usr/bin/env python3
"""The arithmetic and the tables of bench/cost_model.sh (python3's stdlib only).

  cost_model_report.py --chosen-bytes PLAN      the device peak the budget search chose (OPTS "budget")
  cost_model_report.py --smallest-peak LOG      the smallest reachable peak a failed budget compile named,
                                                rounded up to the next tenth of its unit, in bytes
  cost_model_report.py --budgets LO HIPLAN    the budgets to time: LO, the stored options' peaks between,
                                                midpoints where they are few, the largest peak
  cost_model_report.py --same-choice A B        exit 0 when both plans' budget choices are the same options
  cost_model_report.py --check-peak RUNLOG B    exit 1 (saying why) when the measured device peak is over B
  cost_model_report.py --report RUNS OUT.md     the results file from the bench's work folder

A plan's OPTS section (plan/plan_format.h) holds the compile options as JSON; with --memory-budget its
"budget" object has the choice's flags, device bytes, predicted seconds and per-class seconds.
"""
import json
import math
import os
import re
import statistics
import struct
import sys

CLASSES = ["conv3x3", "conv", "linear", "attention", "memory", "copy"]
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def read_opts(plan):
    with open(plan, "rb") as f:
        data = f.read()
    if data[:8] != b"DIFFCPLN":
        raise SystemExit(f"{plan}: not a diffc plan (magic {data[:8]!r})")
    (n,) = struct.unpack_from("<I", data, 16)
    for i in range(n):
        tag, _, off, size, _ = struct.unpack_from("<4sIQQQ", data, 32 + 32 * i)
        if tag == b"OPTS":
            return json.loads(data[off:off + size].decode().rstrip("\0"))
    raise SystemExit(f"{plan}: no OPTS section")


def budget_of(plan):
    b = read_opts(plan).get("budget")
    if not b or "chosen" not in b:
        raise SystemExit(f"{plan}: no --memory-budget choice in its options")
    return b


def budgets(lo, hi_plan, between=3):
    """lo, the peaks of the options diffc stores in the plan (OPTS "fit": none, block offload, leaf offload,
    ...) strictly between lo and the largest, then midpoints of the widest gaps until there are `between`
    budgets between lo and the largest, and the largest: so each budget is where some option just fits."""
    hi = budget_of(hi_plan)["chosen"]["device_bytes"]
    fit = read_opts(hi_plan).get("fit", [])
    mid = sorted({f["device_bytes"] for f in fit if lo < f["device_bytes"] < hi})[:between]
    while len(mid) < between:
        points = [lo] + mid + [hi]
        gap = max(range(len(points) - 1), key=lambda i: points[i + 1] - points[i])
        mid = sorted(mid + [(points[gap] + points[gap + 1]) // 2])
    return [lo] + mid + [hi]


def smallest_peak(log):
    text = open(log).read()
    m = re.search(r"smallest device peak diffc can reach is ([0-9.]+) (B|KiB|MiB|GiB|TiB)", text)
    if not m:
        raise SystemExit(f"{log}: no 'smallest device peak' in diffc's error: {text.strip()}")
    return math.ceil((float(m.group(1)) + 0.1) * UNITS[m.group(2)])


def parse_run(log):
    text = open(log).read()
    r = {"runs": [float(x) for x in re.findall(r"^run \d+: ([0-9.]+) s", text, re.M)], "classes": {}}
    m = re.search(r"^device arena peak: .* \((\d+) bytes\)", text, re.M)
    w = re.search(r"^weights: .* resident \((\d+) bytes\)", text, re.M)
    t = re.search(r"on (\d+) thread\(s\)", text)
    if not (r["runs"] and m and w):
        raise SystemExit(f"{log}: no run times, arena peak or resident weights in diffrun's output")
    r["peak"] = int(m.group(1)) + int(w.group(1))
    r["threads"] = int(t.group(1)) if t else 0
    section = text.split("per cost-model class:\n", 1)
    if len(section) == 2:
        for line in section[1].splitlines():
            c = re.match(r"^  (\S+)\s+(\d+) steps\s+([0-9.]+) ms/run", line)
            if not c:
                break
            r["classes"][c.group(1)] = {"steps": int(c.group(2)), "seconds": float(c.group(3)) / 1e3}
    return r


def check_peak(log, budget):
    r = parse_run(log)
    if r["peak"] > budget:
        print(f"{log}: measured device peak {r['peak']} bytes is over the budget {budget}", file=sys.stderr)
        return 1
    return 0


def fmt_bytes(b):
    for u in ["TiB", "GiB", "MiB", "KiB"]:
        if b >= UNITS[u]:
            return f"{b / UNITS[u]:.1f} {u}"
    return f"{b} B"


def err(pred, meas):
    return (pred - meas) / meas * 100 if meas > 0 else float("nan")


def pct(e):
    return "—" if e is None or math.isnan(e) else f"{e:+.1f} %"


def cpu_line():
    model, flags = "unknown CPU", []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    simd = [f for f in flags if re.match(r"^(sse4_2|avx|fma|f16c|amx)", f)]
    return model, simd


def load_machine(runs):
    info = {}
    for line in open(os.path.join(runs, "machine.txt")):
        k, _, v = line.strip().partition("=")
        info[k] = v
    return info


def profile_row(name, path):
    p = json.load(open(path))
    load_file = path[:-len(".json")] + ".load"
    load = open(load_file).read().strip() if os.path.exists(load_file) else "?"
    c = p.get("classes", {})
    rate = lambda k, f: f"{c[k][f]:.1f}" if k in c else "default"
    copy = p["copy"]
    return (f"| {name} | {p.get('threads', '')} | {p['overhead_us']:.2f} | {rate('conv3x3', 'gflops')} | "
            f"{rate('conv', 'gflops')} | {rate('linear', 'gflops')} | {rate('attention', 'gflops')} | "
            f"{rate('memory', 'gbps')} | {copy['h2d_gbps']:.2f} | {copy['disk_gbps']:.2f} | {load} |")


class Row:
    """One budget of one model: the choice with each profile and what was measured."""

    def __init__(self, runs, m, i):
        base = os.path.join(runs, f"{m}-b{i}")
        self.budget = int(open(base + ".budget").read())
        self.load = open(base + "-in.load").read().strip() if os.path.exists(base + "-in.load") else "?"
        self.choice = {s: budget_of(f"{base}-{s}.dplan")["chosen"] for s in ("in", "out")}
        self.run = {"in": parse_run(f"{base}-in.run.txt")}
        self.run["out"] = parse_run(f"{base}-out.run.txt") if os.path.exists(f"{base}-out.run.txt") else self.run["in"]
        for s in ("in", "out"):
            if self.run[s]["peak"] > self.budget:
                raise SystemExit(f"{base}-{s}: measured device peak {self.run[s]['peak']} bytes is over "
                                 f"the budget {self.budget}")

    def kernel_seconds(self):
        """The kernel classes' measured seconds (--profile, mean of the runs): the same kernels at every
        budget, so their spread over the budgets is the machine's noise, not the plan's."""
        return sum(v["seconds"] for c, v in self.run["in"]["classes"].items() if c != "copy")

    def error(self, s):
        return err(self.choice[s]["seconds"], min(self.run[s]["runs"]))


def model_rows(runs, m):
    rows, i = [], 1
    while os.path.exists(os.path.join(runs, f"{m}-b{i}.budget")):
        rows.append(Row(runs, m, i))
        i += 1
    return rows


def class_table(rows, out):
    """Per class: compute classes at the largest budget (no uploads), copy at the smallest."""
    top, low = rows[-1], rows[0]
    errs = {"in": [], "out": []}
    out.append("| class | steps | predicted s (own profile) | predicted s (other model's) | measured s | error | "
               "error (other's) |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for c in CLASSES:
        row = low if c == "copy" else top
        meas = row.run["in"]["classes"].get(c)
        if not meas:
            continue
        pin = row.choice["in"]["class_seconds"][c]
        same = row.choice["out"]["flags"] == row.choice["in"]["flags"]
        pout = row.choice["out"]["class_seconds"][c] if same else None
        e_in = err(pin, meas["seconds"])
        e_out = err(pout, meas["seconds"]) if pout is not None else None
        errs["in"].append((c, e_in))
        if e_out is not None:
            errs["out"].append((c, e_out))
        label = c + (f" (at {fmt_bytes(row.budget)}: `{row.choice['in']['flags']}`)" if c == "copy" else "")
        out.append(f"| {label} | {meas['steps']} | {pin:.3f} | {'—' if pout is None else f'{pout:.3f}'} | "
                   f"{meas['seconds']:.3f} | {pct(e_in)} | {pct(e_out)} |")
    return errs


def spread(errors):
    """'median X %, worst Y % (what)' over (label, error) pairs, by absolute error."""
    if not errors:
        return "no data"
    med = statistics.median(abs(e) for _, e in errors)
    worst = max(errors, key=lambda x: abs(x[1]))
    return f"median {med:.1f} %, worst {worst[1]:+.1f} % ({worst[0]})"


def report(runs, out_path):
    machine = load_machine(runs)
    model, simd = cpu_line()
    names = {"unet": "SD1.5 UNet, 2×4×64×64 latents, 77 tokens, f32", "vae": "SD VAE decoder, z 1×4×64×64 → 512², f32"}
    other = {"unet": "vae", "vae": "unet"}
    all_rows = {m: model_rows(runs, m) for m in ("unet", "vae")}
    threads = sorted({r.run["in"]["threads"] for rows in all_rows.values() for r in rows})
    o = ["# The cost model's error, measured", ""]
    o.append(f"Produced by `bench/cost_model.sh` on {machine.get('date', '?')}, CPU backend (llvm), "
             f"{'/'.join(map(str, threads))} worker thread(s) on {machine.get('nproc', '?')} CPUs: "
             f"{model} ({' '.join(simd)}).")
    o.append(f"Load average (1, 5, 15 min) when timing started: {machine.get('load_start', '?')} "
             f"(after waiting {machine.get('waited_s', '?')} s for the 1-minute figure to drop below 1.5); "
             f"at the end: {machine.get('load_end', '?')}.")
    o.append("")
    o.append("Models: the full-size SD1.5 UNet and SD VAE from `bench/configs/`, seeded random fp32 weights. "
             "Each was compiled without memory options and calibrated (`diffrun --calibrate=FILE --repeat 2`). "
             "Every budget was then compiled with `--memory-budget B --calibration` the model's own profile "
             "(in-sample) and the other model's (out-of-sample), and run with `--random-inputs --repeat 2 "
             "--device-memory B --profile`. Predicted = the choice's time in the plan's budget JSON; measured "
             "= the faster of the two runs; error = (predicted − measured) / measured. Device peak = resident "
             "weights + the arena's high-water mark; every run stayed within its budget (the bench fails "
             "otherwise). The smallest budget is the smallest peak diffc can reach (named by its error for a "
             "1-byte budget, rounded up to the next 0.1 of its unit); the largest is the peak of the fastest plan.")
    o.append("")
    o.append("The profiles (kernel rates in GFLOP/s, memory and copies in GB/s; load: the 1-minute load average "
             "when each calibration or run started):")
    o.append("")
    o.append("| profile | threads | overhead µs | conv3x3 | conv | linear | attention | memory | h2d | disk | load |")
    o.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in ("unet", "vae"):
        o.append(profile_row(f"calibrated on the {m.upper()}", os.path.join(runs, f"cal-{m}.json")))
    o.append("")
    flat = [r for m in ("unet", "vae") for r in all_rows[m]]
    whole = {"in": [], "out": []}
    classes = {"in": [], "out": []}
    for m in ("unet", "vae"):
        rows = all_rows[m]
        o.append(f"## {names[m]}")
        o.append("")
        o.append("| budget | chosen options | predicted peak | measured peak | predicted s | measured s | error | "
                 f"choice with the {other[m].upper()}'s profile | its predicted s | its measured s | its error | load |")
        o.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            ci, co = r.choice["in"], r.choice["out"]
            same = co["flags"] == ci["flags"]
            whole["in"].append((f"{m} at {fmt_bytes(r.budget)}", r.error("in")))
            whole["out"].append((f"{m} at {fmt_bytes(r.budget)}", r.error("out")))
            o.append(f"| {fmt_bytes(r.budget)} | `{ci['flags']}` | {fmt_bytes(ci['device_bytes'])} | "
                     f"{fmt_bytes(r.run['in']['peak'])} | {ci['seconds']:.2f} | {min(r.run['in']['runs']):.2f} | "
                     f"{pct(r.error('in'))} | {'same' if same else '`' + co['flags'] + '`'} | {co['seconds']:.2f} | "
                     f"{min(r.run['out']['runs']):.2f} | {pct(r.error('out'))} | {r.load} |")
        plain = [r.kernel_seconds() for r in rows if "copy" not in r.run["in"]["classes"]]
        copied = [r.kernel_seconds() for r in rows if "copy" in r.run["in"]["classes"]]
        o.append("")
        o.append("The same kernels ran at every budget (offload adds only uploads, run by the copy thread); their "
                 "measured time (the kernel classes' sum) was " +
                 (f"{min(plain):.2f} s without uploads" if plain else "") + (" and " if plain and copied else "") +
                 (f"{min(copied):.2f} to {max(copied):.2f} s with uploads" if copied else "") +
                 ": on the CPU backend the copy thread shares the cores with the kernels' threads, which the cost "
                 "model (copies overlap compute for free) does not count.")
        o.append("")
        o.append("Per kernel class, seconds per forward (measured: `diffrun --profile`'s per-class table, the mean "
                 "of the two runs; the copy class is the copy stream's busy time, which overlaps kernels):")
        o.append("")
        e = class_table(rows, o)
        for s in ("in", "out"):
            classes[s] += [(f"{m} {c}", x) for c, x in e[s]]
        o.append("")
    o.append("## Summary")
    o.append("")
    o.append(f"Whole plan, {len(whole['in'])} budgets over both models: with the model's own profile "
             f"{spread(whole['in'])}; with the other model's profile {spread(whole['out'])}. "
             f"Per kernel class (absolute error): own profile {spread(classes['in'])}; other model's profile "
             f"{spread(classes['out'])}. Plans without offload: own profile " +
             spread([(w, e) for (w, e), r in zip(whole["in"], flat) if "copy" not in r.run["in"]["classes"]]) +
             "; plans with offload: own profile " +
             spread([(w, e) for (w, e), r in zip(whole["in"], flat) if "copy" in r.run["in"]["classes"]]) +
             ". A positive error is a prediction slower than the run.")
    o.append("")
    tmp = out_path + ".tmp." + str(os.getpid())
    with open(tmp, "w") as f:
        f.write("\n".join(o))
    os.replace(tmp, out_path)


def main(argv):
    if len(argv) == 3 and argv[1] == "--chosen-bytes":
        print(budget_of(argv[2])["chosen"]["device_bytes"])
    elif len(argv) == 4 and argv[1] == "--budgets":
        print(" ".join(map(str, budgets(int(argv[2]), argv[3]))))
    elif len(argv) == 3 and argv[1] == "--smallest-peak":
        print(smallest_peak(argv[2]))
    elif len(argv) == 4 and argv[1] == "--same-choice":
        return 0 if budget_of(argv[2])["chosen"]["flags"] == budget_of(argv[3])["chosen"]["flags"] else 1
    elif len(argv) == 4 and argv[1] == "--check-peak":
        return check_peak(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "--report":
        report(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
