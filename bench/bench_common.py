"""Bench helpers shared by the parent and its children (bench/bench.py): the repository's paths,
reading /proc, printing commands and byte counts, the log; and running a child: the environment
of --threads and --isa, pinning to CPUs, the timeout, its CPU seconds and why it failed.  ISA and
PIN_CPUS are set by bench.main() (read them as bench_common.ISA, bench_common.PIN_CPUS).
"""

import os
import re
import resource
import shlex
import signal
import subprocess
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, "bench")
BENCH_SCRIPT = os.path.join(BENCH_DIR, "bench.py")  # the children run it again: --make-model, --torch-child
MODELS_DIR = os.path.join(BENCH_DIR, "models")
WORK_DIR = os.path.join(REPO, "build-bench", "bench")


def proc_status_bytes(field):
    """A memory field of /proc/self/status (VmRSS, VmHWM, ...) in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def show_cmd(argv):
    """A command line as text, with paths inside the repository relative to its root."""
    return " ".join(shlex.quote(a) for a in argv).replace(REPO + os.sep, "")


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def parse_bytes(text):
    """'1.5 GiB' / '123 B' / '12.0 MiB' -> bytes (approximate for the rounded human forms)."""
    m = re.match(r"\s*([\d.]+)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b", text)
    if not m:
        return None
    mult = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
            "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)]
    return int(float(m.group(1)) * mult)


def log(msg=""):
    print(msg, flush=True)


# --isa: the instruction set both sides may use.  PyTorch's three kernel libraries each take their own
# variable (ATen's dispatch, oneDNN's JIT, MKL's BLAS); diffc takes a --cpu target.  "native" sets
# nothing: each side uses everything this CPU has.
ISA_TORCH_ENV = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
ISA_DIFFC_CPU = {"native": None, "avx2": "x86-64-v3"}
ISA = "native"  # set by main()


def child_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **ISA_TORCH_ENV[ISA])


PIN_CPUS = None  # set by main(): the CPUs every child is pinned to, when the machine has more than --threads


def _pin():
    if PIN_CPUS:
        os.sched_setaffinity(0, PIN_CPUS)


def run_proc(argv, timeout, log_path, env=None):
    """Run argv with a hard timeout (its whole process group is killed).  Returns
    (rc or None on timeout, stdout+stderr text, seconds).  The child's CPU seconds (user + sys)
    go to LAST_CPU[0]."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log_path, "w") as logf:
        logf.write("$ " + show_cmd(argv) + "\n")
        logf.flush()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, env=env, preexec_fn=_pin)
        try:
            out, _ = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            rc = None
        logf.write(out or "")
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return rc, out or "", time.perf_counter() - t0


LAST_CPU = [0.0]


def failure_note(rc, out):
    """One line on why a child failed: the signal that killed it, or its last line of output."""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return f"killed by {sig}" + (f" (last output: {last})" if last else "")
    return last or f"exit {rc}"
