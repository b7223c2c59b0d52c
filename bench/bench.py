#!/usr/bin/env python3
"""bench/bench.py: kiln's benchmark. Runs every benchmark model on every kiln
backend the plugin offers and on onnxruntime's CPU provider, checks kiln's
outputs against onnxruntime's, times both interleaved, and measures compile
time and peak memory. `bench/run` is the entry point (it builds kiln and the
Python environment first); bench/README.md explains what is measured and how.

The work is split over processes so that each measurement is clean:
  _discover   which backends the plugin offers (KILN_DEVICE is honoured)
  _probe      one model on one engine in a fresh process: cold and warm
              compile time, one run, its outputs (for the check), peak RSS
  _time       one model on all engines that passed the check, in one
              process: a warm-up round, then rounds that alternate engines
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Thread counts each kiln backend is timed at (one row per count; kiln gets
# KILN_NUM_THREADS=N in its processes); onnxruntime is run with the same
# intra_op_num_threads when compared with it. `reference` is single-threaded;
# `cpu` runs at 1 thread and at every core (0 = every core). A backend
# missing here gets every core. --threads NAME=N[,M...] overrides.
BACKEND_THREADS = {"reference": [1], "cpu": [1, 0]}

# Repetitions: by default the timed rounds of a model fill about
# --budget seconds (estimated from the warm-up round), clamped to these.
MIN_REPS, MAX_REPS = 5, 40
DEFAULT_BUDGET_S = 30.0

MEMCPY_BYTES = 256 << 20
MEMCPY_REPS = 9

MODEL_ORDER = ["ew_chain", "mlp", "small_cnn", "resnet18", "mobilenetv2", "transformer", "detection_post",
               "embedding_bag"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------ measurements

def proc_status_kb(field):
    """A /proc/self/status field in KiB (VmRSS, VmHWM), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def stats(times_ms):
    import numpy as np
    a = np.asarray(times_ms, dtype=np.float64)
    return dict(n=int(a.size), median=float(np.median(a)), mean=float(a.mean()), min=float(a.min()),
                max=float(a.max()), q1=float(np.percentile(a, 25)), q3=float(np.percentile(a, 75)))


def compare(got, ref, rtol, atol):
    """Checks got against ref (onnxruntime's): each element must satisfy
    |got - ref| <= atol + rtol * |ref| (NaN only where ref is NaN; other
    dtypes exactly). Returns a dict: ok, max_abs, worst (the largest
    |got-ref| / (atol + rtol*|ref|), <= 1 passes), where (first failing
    index) and n_bad."""
    import numpy as np
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return dict(ok=False, why=f"got {got.dtype}{list(got.shape)}, onnxruntime gives {ref.dtype}{list(ref.shape)}")
    if not np.issubdtype(ref.dtype, np.floating):
        bad = got != ref
        n_bad = int(bad.sum())
        r = dict(ok=n_bad == 0, n_bad=n_bad, max_abs=float(np.abs(got.astype(np.float64) - ref).max(initial=0)),
                 worst=0.0 if n_bad == 0 else float("inf"))
    else:
        g, e = got.astype(np.float64), ref.astype(np.float64)
        nan_g, nan_e = np.isnan(g), np.isnan(e)
        diff = np.abs(g - e)
        diff[nan_g & nan_e] = 0
        diff[nan_g ^ nan_e] = np.inf
        inf_same = np.isinf(e) & (g == e)
        diff[inf_same] = 0
        tol = atol + rtol * np.where(np.isfinite(e), np.abs(e), 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(diff == 0, 0.0, diff / tol)  # diff > 0 with tol 0: inf
        bad = frac > 1
        n_bad = int(bad.sum())
        r = dict(ok=n_bad == 0, n_bad=n_bad, max_abs=float(diff.max(initial=0)), worst=float(frac.max(initial=0)))
    if n_bad:
        i = np.unravel_index(int(np.argmax(bad)), ref.shape)
        r["where"] = [int(k) for k in i]
        r["got_value"], r["expected_value"] = float(got[i]), float(ref[i])
        r["why"] = (f"{n_bad} of {ref.size} elements out of tolerance; first at {list(r['where'])}: "
                    f"got {r['got_value']:.9g}, onnxruntime {r['expected_value']:.9g}")
    return r


def memcpy_bandwidth():
    """Single-threaded copy bandwidth: numpy.copyto of a 256 MiB buffer into
    another (both touched first), median of MEMCPY_REPS; bytes moved = read
    + write = 2 x size."""
    import numpy as np
    src = np.ones(MEMCPY_BYTES // 4, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)
    np.copyto(dst, src)
    ts = []
    for _ in range(MEMCPY_REPS):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        ts.append(time.perf_counter() - t0)
    s = stats([t * 1e3 for t in ts])
    gbs = lambda ms: 2 * MEMCPY_BYTES / (ms * 1e-3) / 1e9  # noqa: E731
    return dict(buffer_bytes=MEMCPY_BYTES, reps=MEMCPY_REPS, median_ms=s["median"], gbps=gbs(s["median"]),
                gbps_min=gbs(s["max"]), gbps_max=gbs(s["min"]),
                method="numpy.copyto of a 256 MiB float32 buffer, 1 thread, bytes = 2 x size (read + write)")


# ------------------------------------------------------------ engines (in workers)

class KilnEngine:
    """A model on one kiln backend, through the ONNXIFI ABI (kiln_abi)."""

    def __init__(self, lib, backend_index, model_bytes, inputs, out_specs):
        import numpy as np
        self.backend = lib.init_backend(backend_index)
        self.model_bytes = model_bytes
        self.inputs = inputs
        self.outputs = {o["name"]: np.empty(o["shape"], o["dtype"]) for o in out_specs}
        self.graph = None

    def compile(self):
        t0 = time.perf_counter()
        self.graph = self.backend.init_graph(self.model_bytes)
        ms = (time.perf_counter() - t0) * 1e3
        self.graph.bind(self.inputs, self.outputs)
        return ms

    def run(self):
        self.graph.run()

    def drop(self):
        if self.graph:
            self.graph.release()
            self.graph = None

    def close(self):
        self.drop()
        self.backend.release()


class OrtEngine:
    """A model on onnxruntime's CPU provider: all graph optimizations,
    intra_op_num_threads = threads, sequential execution, no spin-waiting
    (idle pool threads must not steal cores from the next engine in an
    interleaved round), inputs and preallocated outputs bound with IOBinding."""

    def __init__(self, threads, model_bytes, inputs, out_specs):
        import numpy as np
        import onnxruntime as ort
        self.ort = ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        self.so = so
        self.model_bytes = model_bytes
        self.inputs = inputs
        self.outputs = {o["name"]: np.empty(o["shape"], o["dtype"]) for o in out_specs}
        self.sess = self.io = None

    def compile(self):
        t0 = time.perf_counter()
        self.sess = self.ort.InferenceSession(self.model_bytes, self.so, providers=["CPUExecutionProvider"])
        ms = (time.perf_counter() - t0) * 1e3
        io = self.sess.io_binding()
        for k, v in self.inputs.items():
            io.bind_cpu_input(k, v)
        for k, v in self.outputs.items():
            io.bind_output(k, "cpu", 0, v.dtype, list(v.shape), v.ctypes.data)
        self.io = io
        return ms

    def run(self):
        self.sess.run_with_iobinding(self.io)

    def drop(self):
        self.sess = self.io = None

    def close(self):
        self.drop()


def load_model(models_dir, name):
    import numpy as np
    with open(os.path.join(models_dir, "manifest.json")) as f:
        entry = json.load(f)["models"][name]
    with open(os.path.join(models_dir, entry["file"]), "rb") as f:
        model_bytes = f.read()
    with np.load(os.path.join(models_dir, entry["inputs_file"])) as z:
        inputs = {i["name"]: np.ascontiguousarray(z[i["name"]]) for i in entry["inputs"]}
    return entry, model_bytes, inputs


def make_engine(spec, plugin, entry, model_bytes, inputs, kiln_lib=None):
    """spec: "ort:THREADS" or "kiln:INDEX:NAME"."""
    kind, rest = spec.split(":", 1)
    if kind == "ort":
        return OrtEngine(int(rest), model_bytes, inputs, entry["outputs"])
    index, name = rest.split(":", 1)
    name = name.rsplit("@", 1)[0]  # "NAME@THREADS"
    names = [b.name for b in kiln_lib.backends()]
    if int(index) >= len(names) or names[int(index)] != name:
        raise RuntimeError(f"backend {index} is {names[int(index)] if int(index) < len(names) else 'missing'}, "
                           f"not {name}")
    return KilnEngine(kiln_lib, int(index), model_bytes, inputs, entry["outputs"])


def worker_discover(a):
    sys.path.insert(0, HERE)
    from kiln_abi import KilnLibrary
    lib = KilnLibrary(a.plugin)
    res = [dict(index=b.index, name=b.name, short=b.short, device=b.device, device_type=b.device_type)
           for b in lib.backends()]
    lib.close()
    return dict(ok=True, backends=res)


def worker_probe(a):
    """Fresh process: load, cold compile, one run (outputs saved), peak RSS,
    then release and compile again (warm)."""
    import numpy as np
    sys.path.insert(0, HERE)
    res = dict(ok=False, stage="load")
    try:
        entry, model_bytes, inputs = load_model(a.models_dir, a.model)
        lib = None
        if a.engine.startswith("kiln:"):
            from kiln_abi import KilnLibrary
            lib = KilnLibrary(a.plugin)
        eng = make_engine(a.engine, a.plugin, entry, model_bytes, inputs, lib)
        # Both engines have the same here: the interpreter, numpy, the model
        # bytes, its inputs and its output buffers (untouched yet).
        res["rss_base_kb"] = proc_status_kb("VmRSS")
        res["stage"] = "compile"
        res["compile_cold_ms"] = eng.compile()
        res["stage"] = "run"
        t0 = time.perf_counter()
        eng.run()
        res["first_run_ms"] = (time.perf_counter() - t0) * 1e3
        res["rss_peak_kb"] = proc_status_kb("VmHWM")
        import resource
        res["ru_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        np.savez(a.outputs, **eng.outputs)
        res["stage"] = "warm compile"
        eng.drop()
        res["compile_warm_ms"] = eng.compile()
        eng.close()
        res["ok"] = True
        del res["stage"]
    except Exception as e:  # reported as the row's failure
        res["error"] = str(e) if type(e).__name__ == "KilnError" else f"{type(e).__name__}: {e}"
    return res


def set_realtime():
    """Puts this thread, and so every thread it starts from now on (kiln's
    pool, onnxruntime's intra-op threads), in the real-time class SCHED_FIFO
    at priority 1: on a machine shared with other jobs the timed threads then
    get a core whenever they are runnable, as on an idle machine (the kernel
    still leaves other work 5 % of each second: sched_rt_runtime_us). Returns
    what was set, for the report."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "SCHED_FIFO 1"
    except (AttributeError, OSError) as e:
        log(f"bench: --realtime: cannot use SCHED_FIFO ({e}); timing at the normal priority")
        return f"normal (SCHED_FIFO refused: {e})"


def _busy(n):
    x = 0
    for i in range(n):
        x += i
    return x


def parallel_speed(k):
    """How many cores this process can really use at once: k forked
    processes each run the same pure-Python loop (~6 ms on one core) at
    once, against one alone (the best of 3 each); returns k x (one's time)
    / (k's time): about k when k cores are there, about 1 when the machine
    gives this guest one core's worth at the time (bench/README.md, "Two
    threads on a shared machine": a 2-thread timing then measures that).
    It forks: call it before the engines start their threads or after
    they are closed."""
    def run(m):
        t0 = time.perf_counter()
        pids = []
        for _ in range(m):
            pid = os.fork()
            if pid == 0:
                _busy(300000)
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        return time.perf_counter() - t0
    one = min(run(1) for _ in range(3))
    return k * one / min(run(k) for _ in range(3))


def worker_time(a):
    """All engines of one model in one process: a warm-up round, then rounds
    in which each engine runs once, the order rotating from round to round."""
    sched = set_realtime() if a.realtime else "normal"
    threads = int(os.environ.get("KILN_NUM_THREADS", "1"))
    speed = parallel_speed(threads) if threads > 1 else None
    sys.path.insert(0, HERE)
    entry, model_bytes, inputs = load_model(a.models_dir, a.model)
    specs = a.engines.split(",")
    lib = None
    if any(s.startswith("kiln:") for s in specs):
        from kiln_abi import KilnLibrary
        lib = KilnLibrary(a.plugin)
    engines = {}
    for s in specs:
        e = make_engine(s, a.plugin, entry, model_bytes, inputs, lib)
        e.compile()
        engines[s] = e
    warm = {}
    if a.warmup:
        for s, e in engines.items():
            t0 = time.perf_counter()
            e.run()
            warm[s] = (time.perf_counter() - t0) * 1e3
    if a.reps:
        reps = a.reps
    else:
        round_s = sum(warm.values()) / 1e3
        reps = int(max(MIN_REPS, min(MAX_REPS, a.budget / max(round_s, 1e-6))))
    times = {s: [] for s in specs}
    for r in range(reps):
        k = r % len(specs)
        for s in specs[k:] + specs[:k]:
            e = engines[s]
            t0 = time.perf_counter()
            e.run()
            times[s].append((time.perf_counter() - t0) * 1e3)
    # The outputs of the last timed run, checked again against onnxruntime's.
    recheck = {}
    for s in specs:
        if not s.startswith("kiln:"):
            continue
        ref = engines[a.ref[s]].outputs
        recheck[s] = {o: compare(engines[s].outputs[o], ref[o], entry["rtol"], entry["atol"]) for o in ref}
    for e in engines.values():
        e.close()
    return dict(ok=True, reps=reps, warmup_ms=warm, times_ms=times, recheck=recheck, sched=sched,
                parallel_speed=speed)


def worker_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--plugin")
    ap.add_argument("--models-dir")
    ap.add_argument("--model")
    ap.add_argument("--engine")
    ap.add_argument("--engines")
    ap.add_argument("--ref", default="{}")
    ap.add_argument("--outputs")
    ap.add_argument("--result", required=True)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S)
    ap.add_argument("--realtime", action="store_true")
    a = ap.parse_args(argv)
    a.ref = json.loads(a.ref)
    fn = {"_discover": worker_discover, "_probe": worker_probe, "_time": worker_time}[a.mode]
    res = fn(a)
    with open(a.result + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(a.result + ".tmp", a.result)


# ------------------------------------------------------------ orchestration

def run_worker(args, result, timeout=3600, threads=None, extra_env=None):
    """Runs `bench.py MODE ...` in a fresh interpreter (with
    KILN_NUM_THREADS=threads when given, and extra_env); returns its JSON or a
    failure dict (with the tail of its stderr)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if threads:
        env["KILN_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    if os.path.exists(result):
        os.unlink(result)
    cmd = [sys.executable, os.path.abspath(__file__)] + args + ["--result", result]
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, text=True,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return dict(ok=False, error=f"timed out after {timeout} s")
    tail = "\n".join(p.stderr.strip().splitlines()[-15:])
    if p.returncode != 0 or not os.path.exists(result):
        why = f"crashed with signal {-p.returncode}" if p.returncode < 0 else f"exited with status {p.returncode}"
        return dict(ok=False, error=f"worker {why}" + (f":\n{tail}" if tail else ""))
    with open(result) as f:
        res = json.load(f)
    if tail:
        res["stderr"] = tail
    return res


def ensure_models(models_dir, names):
    """Runs make_models.py for the models that are missing or were made by
    another version of it."""
    import hashlib
    with open(os.path.join(HERE, "make_models.py"), "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()[:16]
    man = {}
    try:
        with open(os.path.join(models_dir, "manifest.json")) as f:
            man = json.load(f)
    except (OSError, ValueError):
        pass
    stale = man.get("generator_hash") != h
    need = [n for n in names if stale or n not in man.get("models", {})
            or not os.path.exists(os.path.join(models_dir, man["models"][n]["file"]))
            or not os.path.exists(os.path.join(models_dir, man["models"][n]["inputs_file"]))]
    if need:
        log(f"bench: generating models: {', '.join(need)}")
        subprocess.run([sys.executable, os.path.join(HERE, "make_models.py"), "--out", models_dir,
                        "--models", ",".join(need)], check=True, stdout=sys.stderr)
    with open(os.path.join(models_dir, "manifest.json")) as f:
        return json.load(f)


def git_info():
    def git(*a):
        try:
            return subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True, text=True,
                                  timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    rev = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return rev + ("+dirty" if dirty and rev else "")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fmt_ms(x):
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 10000 else f"{x:.0f}"


def fmt_table(header, rows, right=None):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    right = right or set()
    def line(r):
        return "  ".join((str(c).rjust(w) if i in right else str(c).ljust(w)) for i, (c, w) in
                         enumerate(zip(r, widths))).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def render(results):
    """The text report: results table, then compile time and memory."""
    out = []
    mc = results["memcpy"]
    out.append(f"kiln benchmark  {results['meta']['date']}  {results['meta']['cpu']} ({results['meta']['cores']} cores)"
               f"  kiln {results['meta']['kiln_git'] or '?'}  onnxruntime {results['meta']['onnxruntime']}")
    out.append(f"memcpy bandwidth (1 thread, numpy copy of 256 MiB, median of {mc['reps']}): {mc['gbps']:.2f} GB/s "
               f"(range {mc['gbps_min']:.2f}..{mc['gbps_max']:.2f})")
    out.append(f"timing scheduled: {results['meta'].get('timing_sched', 'normal')}")
    ps = results["meta"].get("parallel_speed")
    if ps:
        out.append("cores usable at once before each N-thread timing (parallel_speed, N busy processes / 1; "
                   "about N unless the host is short of cores): "
                   + ", ".join(f"{k} {v:.2f}" for k, v in ps.items()))
    out.append("")
    rows = []
    fails = []
    for name, m in results["models"].items():
        for ek, e in m["engines"].items():
            t = e.get("timing")
            status = e["status"]
            ratio = e.get("ratio")
            gb = ""
            if t and m.get("ideal_bytes"):
                gbps = m["ideal_bytes"] / (t["median"] * 1e-3) / 1e9
                pct = 100 * gbps / mc["gbps"]
                gb = f"{gbps:.2f} ({pct:.{1 if pct < 10 else 0}f}%)"
            rows.append([name, e["label"], e["threads"], status, t["n"] if t else "-",
                         fmt_ms(t["median"]) if t else "-",
                         f"{fmt_ms(t['q1'])}..{fmt_ms(t['q3'])}" if t else "-",
                         f"{fmt_ms(t['min'])}..{fmt_ms(t['max'])}" if t else "-",
                         f"{ratio:.2f}" if ratio is not None else "-", gb or "-"])
            if status != "ok":
                fails.append(f"  {name} on {e['label']}: {e.get('error', status)}")
    out.append(fmt_table(["model", "backend", "thr", "status", "reps", "median ms", "IQR ms", "min..max ms",
                          "kiln/ort", "GB/s (% memcpy)"], rows, right={2, 4, 5, 6, 7, 8, 9}))
    out.append("kiln/ort: kiln's median / onnxruntime's median at the same thread count (lower is better). "
               "GB/s: bytes an ideal fused kernel moves / median time.")
    out.append("")
    rows = []
    for name, m in results["models"].items():
        for ek, e in m["engines"].items():
            p = e.get("probe") or {}
            mib = lambda kb: f"{kb / 1024:.0f}" if kb is not None else "-"  # noqa: E731
            base, peak = p.get("rss_base_kb"), p.get("rss_peak_kb")
            rows.append([name, e["label"], fmt_ms(p.get("compile_cold_ms")), fmt_ms(p.get("compile_warm_ms")),
                         fmt_ms(p.get("first_run_ms")), mib(base), mib(peak),
                         mib(peak - base) if base is not None and peak is not None else "-"])
    out.append("compile (onnxInitGraph / InferenceSession creation) and peak memory, each model and engine in a fresh process")
    out.append(fmt_table(["model", "backend", "compile cold ms", "warm ms", "first run ms", "RSS before MiB",
                          "peak RSS MiB", "peak - before MiB"], rows, right={2, 3, 4, 5, 6, 7}))
    if fails:
        out.append("")
        out.append("failures:")
        out += fails
    check = []
    for name, m in results["models"].items():
        for ek, e in m["engines"].items():
            for o, c in (e.get("check") or {}).items():
                if "max_abs" in c:
                    check.append(f"  {name} on {e['label']}, output {o}: max |kiln - ort| {c['max_abs']:.3g}, "
                                 f"{100 * c['worst']:.2g}% of tolerance (rtol {m['rtol']:g}, atol {m['atol']:g})"
                                 f"{'' if c['ok'] else ' FAILED'}")
    if check:
        out.append("")
        out.append("output check against onnxruntime (before timing):")
        out += check
    return "\n".join(out)


def chart(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    models = list(results["models"])
    backends = []
    for m in results["models"].values():
        for e in m["engines"].values():
            if e["kind"] == "kiln" and e["label"] not in backends:
                backends.append(e["label"])
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(models) + 2), 5.5))
    width = 0.8 / max(len(backends), 1)
    x = np.arange(len(models))
    top, bottom = 1.0, 1.0
    for bi, b in enumerate(backends):
        vals, lo, hi = [], [], []
        for m in models:
            ms = results["models"][m]["engines"]
            e = next((e for e in ms.values() if e["label"] == b), None)
            r = e.get("ratio") if e else None
            vals.append(r)
            # error bar: kiln's IQR over onnxruntime's median
            ref = next((o for o in ms.values() if o["kind"] == "ort" and e and o["threads"] == e["threads"]), None)
            if r and ref and "timing" in ref:
                lo.append(r - e["timing"]["q1"] / ref["timing"]["median"])
                hi.append(e["timing"]["q3"] / ref["timing"]["median"] - r)
            else:
                lo.append(0)
                hi.append(0)
        xs = x + (bi - (len(backends) - 1) / 2) * width
        h = [v if v else 0 for v in vals]
        ax.bar(xs, h, width, label=b, yerr=[lo, hi], capsize=3, error_kw=dict(elinewidth=1))
        for xi, v, up in zip(xs, vals, hi):
            if v:
                top, bottom = max(top, v + up), min(bottom, v)
                ax.annotate(f"{v:.3g}x", (xi, v + up), ha="center", va="bottom", fontsize=8,
                            xytext=(0, 2), textcoords="offset points")
            else:
                ax.annotate("FAILED", (xi, 1), ha="center", va="bottom", fontsize=8, color="red", rotation=90)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="onnxruntime (= 1)")
    ax.set_yscale("log")
    ax.set_ylim(bottom=bottom / 2, top=top * 3)
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=20, ha="right")
    ax.set_ylabel("kiln median time / onnxruntime median time (log; lower is better)")
    ax.set_title(f"kiln vs onnxruntime CPU (same thread count)  {results['meta']['date']}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(
        prog="bench/run",
        description="Benchmarks kiln's backends against onnxruntime (CPU) on the models of bench/make_models.py: "
                    "checks outputs, times interleaved rounds, measures compile time and peak RSS. "
                    "Writes results.json, results.txt and ratios.png into --out. bench/run also takes --no-build "
                    "(use the plugin already built).")
    ap.add_argument("--quick", action="store_true", help="smoke test: one timed run per model and engine, no warm-up")
    ap.add_argument("--models", help="comma list of models (default: all): " + ",".join(MODEL_ORDER))
    ap.add_argument("--reps", type=int, help="timed rounds per model (default: chosen per model from the warm-up "
                                             f"round to fill --budget, {MIN_REPS}..{MAX_REPS})")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help=f"seconds of timed rounds per model when --reps is not given (default {DEFAULT_BUDGET_S:g})")
    ap.add_argument("--backends", help="comma list of kiln backends to run (default: all the plugin offers; "
                                       "KILN_DEVICE chooses what it offers)")
    ap.add_argument("--threads", action="append", default=[], metavar="NAME=N[,M...]",
                    help="thread counts kiln backend NAME is timed at (KILN_NUM_THREADS), each against onnxruntime "
                         f"at the same count (defaults: {BACKEND_THREADS}, 0 = all cores; others: all cores)")
    ap.add_argument("--plugin", default=os.path.join(ROOT, "build", "release", "plugin", "libonnxifi-kiln.so"),
                    help="the plugin to load (default build/release/plugin/libonnxifi-kiln.so)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"), help="output folder (default build/bench)")
    ap.add_argument("--realtime", action="store_true",
                    help="time in the real-time class (SCHED_FIFO 1; needs root or CAP_SYS_NICE): on a machine "
                         "shared with other jobs, the timed threads get a core whenever runnable, as on an idle "
                         "machine; without it, ratios at 2+ threads mostly measure the other jobs (bench/README.md)")
    a = ap.parse_args(argv)

    import numpy as np
    import onnxruntime

    names = MODEL_ORDER if not a.models else [m.strip() for m in a.models.split(",") if m.strip()]
    for n in names:
        if n not in MODEL_ORDER:
            ap.error(f"unknown model '{n}' (known: {', '.join(MODEL_ORDER)})")
    if a.reps is not None and a.reps < 1:
        ap.error("--reps must be at least 1")
    threads = dict(BACKEND_THREADS)
    for t in a.threads:
        k, _, v = t.partition("=")
        vs = v.split(",")
        if not all(x.isdigit() and int(x) >= 1 for x in vs):
            ap.error(f"--threads {t}: expected NAME=N[,M...] with counts >= 1")
        threads[k] = [int(x) for x in vs]
    reps = 1 if a.quick else (a.reps or 0)
    models_dir = os.path.join(a.out, "models")
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(a.plugin):
        sys.exit(f"bench: the plugin {a.plugin} does not exist (build kiln first: ci/build)")
    t_start = time.time()

    manifest = ensure_models(models_dir, names)

    disc = run_worker(["_discover", "--plugin", a.plugin], os.path.join(work, "discover.json"), timeout=120)
    if not disc.get("ok"):
        sys.exit(f"bench: cannot list kiln's backends: {disc.get('error')}")
    backends = disc["backends"]
    if a.backends:
        want = [b.strip() for b in a.backends.split(",") if b.strip()]
        missing = [w for w in want if w not in [b["short"] for b in backends]]
        if missing:
            sys.exit(f"bench: backend(s) {', '.join(missing)} not offered by the plugin "
                     f"(it offers {', '.join(b['short'] for b in backends)}; see KILN_DEVICE)")
        backends = [b for b in backends if b["short"] in want]
    ncpu = os.cpu_count() or 1
    for b in backends:
        b["threads_list"] = sorted({t or ncpu for t in threads.get(b["short"], [ncpu])})
    log("bench: kiln backends: " + ", ".join(f"{b['name']} ({b['device']}, "
                                             f"{'/'.join(map(str, b['threads_list']))} threads)" for b in backends))

    mc = memcpy_bandwidth()
    log(f"bench: memcpy bandwidth {mc['gbps']:.2f} GB/s")

    results = dict(
        meta=dict(date=time.strftime("%Y-%m-%d %H:%M:%S"), cpu=cpu_model(), cores=ncpu, kernel=platform.release(),
                  python=platform.python_version(), numpy=np.__version__, onnxruntime=onnxruntime.__version__,
                  onnx=manifest.get("onnx_version"), kiln_git=git_info(), plugin=os.path.abspath(a.plugin),
                  kiln_device=os.environ.get("KILN_DEVICE", "auto"), quick=a.quick,
                  reps=a.reps or ("1 (quick)" if a.quick else f"auto ({a.budget:g} s per model, {MIN_REPS}..{MAX_REPS})"),
                  kernel_cache=("compile cold: a fresh process with an empty KILN_CACHE_DIR (the driver's own "
                                "caches, e.g. POCL_CACHE_DIR, as they are); warm: a second onnxInitGraph in "
                                "that process (programs kept for the process, the import record); "
                                "bench/cl_cache.py measures cold against warm with every cache controlled"),
                  timing_sched="SCHED_FIFO 1 (--realtime)" if a.realtime else "normal"),
        memcpy=mc, models={})

    for name in names:
        entry = manifest["models"][name]
        log(f"bench: {name}: {entry['description']}")
        common = ["--plugin", a.plugin, "--models-dir", models_dir, "--model", name]
        mres = dict(description=entry["description"], rtol=entry["rtol"], atol=entry["atol"],
                    ideal_bytes=entry.get("ideal_bytes"), flops=entry.get("flops"), nodes=entry["nodes"],
                    op_types=entry["op_types"], engines={})
        results["models"][name] = mres
        ort_threads = sorted({t for b in backends for t in b["threads_list"]}) or [1]
        engines = {}  # spec -> record
        for t in ort_threads:
            engines[f"ort:{t}"] = dict(kind="ort", label="onnxruntime" if len(ort_threads) == 1 else f"onnxruntime@{t}",
                                       threads=t)
        for b in backends:
            for t in b["threads_list"]:
                label = b["name"] if len(b["threads_list"]) == 1 else f"{b['name']}@{t}"
                engines[f"kiln:{b['index']}:{b['name']}@{t}"] = dict(kind="kiln", label=label, threads=t,
                                                                      ref=f"ort:{t}")
        # 1. probes: a fresh process per engine (compile, one run, outputs, RSS)
        for spec, e in engines.items():
            outf = os.path.join(work, f"{name}.{spec.replace(':', '_')}.npz")
            # kiln's disk cache starts empty for each probe, so "compile cold"
            # is kiln's cold compile whatever earlier runs stored
            kcache = os.path.join(work, f"kiln-cache.{name}.{spec.replace(':', '_').replace('@', '_')}")
            shutil.rmtree(kcache, ignore_errors=True)
            p = run_worker(["_probe", "--engine", spec, "--outputs", outf] + common,
                           os.path.join(work, f"probe.{name}.json"), threads=e["threads"],
                           extra_env={"KILN_CACHE_DIR": kcache} if e["kind"] == "kiln" else None)
            shutil.rmtree(kcache, ignore_errors=True)
            e["probe"] = {k: v for k, v in p.items() if k not in ("ok",)}
            e["outputs_file"] = outf
            if not p.get("ok"):
                e["status"] = "FAILED"
                e["error"] = f"{p.get('stage', 'probe')}: {p.get('error')}"
            else:
                e["status"] = "ok"
            log(f"bench:   {e['label']:<16} {e['status']:<6} compile {fmt_ms(p.get('compile_cold_ms'))} ms, "
                f"first run {fmt_ms(p.get('first_run_ms'))} ms, peak RSS "
                f"{(p.get('rss_peak_kb') or 0) / 1024:.0f} MiB" + ("" if p.get("ok") else f"\n    {e['error']}"))
        # 2. the check: each kiln backend's outputs against onnxruntime's
        for spec, e in engines.items():
            if e["kind"] != "kiln" or e["status"] != "ok":
                continue
            ref = engines[e["ref"]]
            if ref["status"] != "ok":
                e["status"], e["error"] = "FAILED", "onnxruntime failed on this model: nothing to check against"
                continue
            with np.load(e["outputs_file"]) as g, np.load(ref["outputs_file"]) as r:
                e["check"] = {o["name"]: compare(g[o["name"]], r[o["name"]], entry["rtol"], entry["atol"])
                              for o in entry["outputs"]}
            bad = [f"output {o}: {c['why']}" for o, c in e["check"].items() if not c["ok"]]
            if bad:
                e["status"] = "FAILED"
                e["error"] = (f"outputs differ from onnxruntime's (rtol {entry['rtol']:g}, atol {entry['atol']:g}): "
                              + "; ".join(bad))
                log(f"bench:   {e['label']}: {e['error']}")
        # 3. timing: the engines that passed, interleaved in one process
        #    one process per thread count (KILN_NUM_THREADS is read once per
        #    process): kiln at N threads interleaved with onnxruntime at N
        timed_all = [s for s, e in engines.items() if e["status"] == "ok"]
        for t in sorted({engines[s]["threads"] for s in timed_all}):
            timed = [s for s in timed_all if engines[s]["threads"] == t]
            refs = {s: engines[s]["ref"] for s in timed if engines[s]["kind"] == "kiln"}
            if not refs:
                continue
            tr = run_worker(["_time", "--engines", ",".join(timed), "--ref", json.dumps(refs),
                             "--reps", str(reps), "--warmup", "0" if a.quick else "1", "--budget", str(a.budget)]
                            + (["--realtime"] if a.realtime else []) + common,
                            os.path.join(work, f"time.{name}.{t}.json"), threads=t)
            if not tr.get("ok"):
                for s in timed:
                    engines[s]["status"], engines[s]["error"] = "FAILED", f"timing: {tr.get('error')}"
                log(f"bench:   timing failed: {tr.get('error')}")
            else:
                if a.realtime and tr.get("sched") != "SCHED_FIFO 1":
                    results["meta"]["timing_sched"] = tr.get("sched")
                if tr.get("parallel_speed"):
                    results["meta"].setdefault("parallel_speed", {})[f"{name}@{t}"] = tr["parallel_speed"]
                for s in timed:
                    e = engines[s]
                    e["timing"] = stats(tr["times_ms"][s])
                    e["timing"]["times_ms"] = tr["times_ms"][s]
                    e["timing"]["warmup_ms"] = tr["warmup_ms"].get(s)
                    if s in tr["recheck"]:
                        e["recheck"] = tr["recheck"][s]
                        bad = [f"output {o}: {c['why']}" for o, c in tr["recheck"][s].items() if not c["ok"]]
                        if bad:
                            e["status"] = "FAILED"
                            e["error"] = "outputs of the last timed run differ from onnxruntime's: " + "; ".join(bad)
                            del e["timing"]
        for s, e in engines.items():
            if e["kind"] == "kiln" and "timing" in e and "timing" in engines[e["ref"]]:
                e["ratio"] = e["timing"]["median"] / engines[e["ref"]]["timing"]["median"]
            elif e["kind"] == "ort" and "timing" in e:
                e["ratio"] = 1.0
            if "timing" in e:
                log(f"bench:   {e['label']:<16} median {fmt_ms(e['timing']['median'])} ms over {e['timing']['n']} "
                    f"rep(s)" + (f", {e['ratio']:.2f}x onnxruntime" if e["kind"] == "kiln" and "ratio" in e else ""))
        # kiln rows first, then onnxruntime
        order = [s for s in engines if engines[s]["kind"] == "kiln"] + [s for s in engines if engines[s]["kind"] == "ort"]
        for s in order:
            engines[s].pop("outputs_file", None)
            mres["engines"][s] = engines[s]

    results["meta"]["wall_s"] = round(time.time() - t_start, 1)
    text = render(results)
    print(text)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "results.txt"), "w") as f:
        f.write(text + "\n")
    try:
        chart(results, os.path.join(a.out, "ratios.png"))
    except Exception as ex:  # the numbers matter more than the picture
        log(f"bench: chart not drawn: {ex}")
    log(f"bench: wrote {os.path.join(a.out, 'results.json')}, results.txt and ratios.png "
        f"({results['meta']['wall_s']:.0f} s)")
    failed = [f"{n}/{e['label']}" for n, m in results["models"].items() for e in m["engines"].values()
              if e["status"] != "ok"]
    if failed:
        log(f"bench: FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        worker_main(sys.argv[1:])
    else:
        sys.exit(main(sys.argv[1:]))
