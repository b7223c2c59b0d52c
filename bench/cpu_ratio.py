#!/usr/bin/env python3
"""bench/cpu_ratio.py PLUGIN MODEL [RUNS] [--realtime] [--alone]: kiln's cpu backend
(through the ONNXIFI ABI) and onnxruntime at the same thread count
(KILN_NUM_THREADS, default 1 here), run in one process on MODEL with its
NAME.inputs.npz (bench/make_models.py), with bench.py's own engines (the
same onnxruntime session options and IOBinding, the same kiln calls) and its
order: after 3 warm-up rounds, RUNS rounds (default 50) in which each engine
runs once, the order rotating from round to round. Prints one JSON line: the
medians of wall time and of process CPU time per run (time.process_time:
every thread of this process, so other processes' time slices do not count),
kiln/onnxruntime of each, and the largest difference of the outputs.

Which ratio to read: at 1 thread the CPU-time ratio is the latency ratio
without the other jobs' time slices. At 2+ threads it is not: it is the
ratio of the CPU time both engines' threads spent (work plus spin-waiting),
not of the time a caller waits. For latency at 2+ threads on a shared
machine use the wall ratio with --realtime (SCHED_FIFO, bench/README.md
"Two threads on a shared machine"). On a shared machine compare plugins by
running this for each in ABBA order (GEMM_CONV.md, "Profiling"). Needs
build/bench/venv (bench/run makes it).

--alone: after the interleaved rounds, RUNS runs of each engine back to
back, twice in the order kiln ort ort kiln; adds the medians of those runs
(alone_*: the mean of each engine's two blocks) and, per engine, its
interleaved / alone time (inter_over_alone_*): whether running beside the
other engine (its caches, its threads' wake-ups) costs an engine time.
GEMM_CONV.md "small_cnn: where the gap is" has what it showed.

At 2+ threads it also prints parallel_speed, [before, after] the timing:
how many cores the process could use at once (bench.parallel_speed: N
busy processes against one; about N normally). Read a 2-thread ratio only
when it is near N (bench/README.md, "Two threads on a shared machine")."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plugin")
    ap.add_argument("model")
    ap.add_argument("runs", nargs="?", type=int, default=50)
    ap.add_argument("--realtime", action="store_true", help="time in SCHED_FIFO 1 (as bench.py --realtime)")
    ap.add_argument("--alone", action="store_true", help="also time each engine's runs back to back")
    a = ap.parse_args()
    import bench  # noqa: E402  (after the environment above)
    sched = bench.set_realtime() if a.realtime else "normal"
    import numpy as np
    import onnxruntime as ort
    from kiln_abi import KilnLibrary

    threads = int(os.environ["KILN_NUM_THREADS"])
    speed = [bench.parallel_speed(threads)] if threads > 1 else []
    data = open(a.model, "rb").read()
    with np.load(a.model[:-len(".onnx")] + ".inputs.npz") as z:
        inputs = {k: np.ascontiguousarray(z[k]) for k in z.files}
    # the outputs' shapes and types from one plain onnxruntime run
    probe = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    specs = [dict(name=o.name, shape=list(v.shape), dtype=str(v.dtype))
             for o, v in zip(probe.get_outputs(), probe.run(None, inputs))]
    del probe
    lib = KilnLibrary(a.plugin)
    cpu = next(b for b in lib.backends() if "cpu" in b.name)
    engines = {"kiln": bench.KilnEngine(lib, cpu.index, data, inputs, specs),
               "ort": bench.OrtEngine(threads, data, inputs, specs)}
    for e in engines.values():
        e.compile()
    wall = {n: [] for n in engines}
    cpu_t = {n: [] for n in engines}
    order = list(engines)
    for r in range(a.runs + 3):  # 3 warm-up rounds
        k = r % len(order)
        for n in order[k:] + order[:k]:
            c0, t0 = time.process_time(), time.perf_counter()
            engines[n].run()
            c1, t1 = time.process_time(), time.perf_counter()
            if r >= 3:
                wall[n].append(t1 - t0)
                cpu_t[n].append(c1 - c0)
    m = np.median
    extra = {}
    if a.alone:
        alone = {n: {"wall": [], "cpu": []} for n in engines}
        for n in ["kiln", "ort", "ort", "kiln"]:
            w, c = [], []
            for _ in range(a.runs):
                c0, t0 = time.process_time(), time.perf_counter()
                engines[n].run()
                c1, t1 = time.process_time(), time.perf_counter()
                w.append(t1 - t0)
                c.append(c1 - c0)
            alone[n]["wall"].append(m(w))
            alone[n]["cpu"].append(m(c))
        for n in engines:
            for k, inter in (("wall", wall[n]), ("cpu", cpu_t[n])):
                v = float(np.mean(alone[n][k]))
                extra[f"alone_{k}_{n}_ms"] = v * 1e3
                extra[f"inter_over_alone_{k}_{n}"] = m(inter) / v
        extra["alone_wall_ratio"] = extra["alone_wall_kiln_ms"] / extra["alone_wall_ort_ms"]
        extra["alone_cpu_ratio"] = extra["alone_cpu_kiln_ms"] / extra["alone_cpu_ort_ms"]
    ko, oo = engines["kiln"].outputs, engines["ort"].outputs
    diff = max(float(np.abs(ko[s["name"]].astype(np.float64) - oo[s["name"]]).max(initial=0)) for s in specs)
    for e in engines.values():
        e.close()
    lib.close()
    if speed:
        speed.append(bench.parallel_speed(threads))
        extra["parallel_speed"] = speed
    print(json.dumps({"model": os.path.basename(a.model), "runs": a.runs, "threads": threads, "sched": sched,
                      "wall_kiln_ms": m(wall["kiln"]) * 1e3, "wall_ort_ms": m(wall["ort"]) * 1e3,
                      "wall_ratio": m(wall["kiln"]) / m(wall["ort"]),
                      "cpu_kiln_ms": m(cpu_t["kiln"]) * 1e3, "cpu_ort_ms": m(cpu_t["ort"]) * 1e3,
                      "cpu_ratio": m(cpu_t["kiln"]) / m(cpu_t["ort"]),
                      "max_abs_diff": diff, **extra}))


if __name__ == "__main__":
    main()
