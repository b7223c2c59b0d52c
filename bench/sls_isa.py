#!/usr/bin/env python3
"""bench/sls_isa.py: SparseLengthsSum over 8-bit rowwise tables (kiln's own
domain, docs/KILN_DOMAIN.md; model sls_rowwise of make_models.py) on kiln's
cpu backend, the AVX2/FMA kernel against its scalar twin (KILN_CPU_ISA=base),
in rows gathered per second, by wall time and by the process's CPU time (on
a shared machine a longer run is preempted more often: the CPU time is the
steadier number). onnxruntime cannot run the model, so the check is against
numpy (the dequantized rows summed in float64).

    bench/sls_isa.py [--plugin PATH] [--models-dir DIR] [--reps N] [--threads N]

Each ISA runs in its own process (kiln picks the ISA once per process), at
KILN_NUM_THREADS=N (default 1: the kernels against each other on one core;
the bags are split over the cpu pool the same way for both).
Needs numpy and onnx (build/bench/venv has them).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAME = "sls_rowwise"


def load(models_dir):
    with open(os.path.join(models_dir, "manifest.json")) as f:
        entry = json.load(f)["models"][NAME]
    with open(os.path.join(models_dir, entry["file"]), "rb") as f:
        model_bytes = f.read()
    with np.load(os.path.join(models_dir, entry["inputs_file"])) as z:
        inputs = {i["name"]: np.ascontiguousarray(z[i["name"]]) for i in entry["inputs"]}
    return entry, model_bytes, inputs


def expected(model_bytes, inputs):
    import onnx
    from onnx import numpy_helper
    m = onnx.load_from_string(model_bytes)
    tables = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    outs = []
    for node in m.graph.node:
        q = tables[node.input[0]]
        d = q.shape[1] - 8
        sb = np.ascontiguousarray(q[:, d:]).view(np.float32)
        rows = q[:, :d].astype(np.float64) * sb[:, :1] + sb[:, 1:]
        idx, lens = inputs[node.input[1]], inputs[node.input[2]]
        start = np.concatenate([[0], np.cumsum(lens)])
        outs.append(np.stack([rows[idx[start[k]:start[k + 1]]].sum(axis=0) for k in range(len(lens))]))
    return outs


def worker(a):
    sys.path.insert(0, HERE)
    from kiln_abi import KilnLibrary
    entry, model_bytes, inputs = load(a.models_dir)
    lib = KilnLibrary(a.plugin)
    names = [b.name for b in lib.backends()]
    be = lib.init_backend(names.index(next(n for n in names if n.endswith("cpu"))))
    g = be.init_graph(model_bytes)
    outs = {o["name"]: np.zeros(o["shape"], np.float32) for o in entry["outputs"]}
    g.bind(inputs, outs)
    g.run()
    times, cpu = [], []
    for _ in range(a.reps):
        c0, t0 = time.process_time(), time.perf_counter()
        g.run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    np.savez(a.save, **outs)
    g.release()
    be.release()
    lib.close()
    print(json.dumps(dict(times=times, cpu=cpu, rows=entry["rows"])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", default=os.path.join(ROOT, "build", "release", "plugin", "libonnxifi-kiln.so"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench", "models"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="KILN_NUM_THREADS of both runs (default 1)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if not os.path.exists(os.path.join(a.models_dir, NAME + ".onnx")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_models.py"), "--out", a.models_dir, "--models", NAME],
                       check=True, stdout=sys.stderr)
    entry, model_bytes, inputs = load(a.models_dir)
    want = expected(model_bytes, inputs)
    res = {}
    for isa in ("avx2", "base"):
        save = os.path.join(a.models_dir, f"{NAME}.{isa}.out.npz")
        # numpy's OpenBLAS threads spin after a call: keep them from taking a core
        env = dict(os.environ, KILN_DEVICE="cpu", KILN_CPU_ISA=isa, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   KILN_NUM_THREADS=str(a.threads))
        p = subprocess.run([sys.executable, __file__, "--worker", "--plugin", a.plugin, "--models-dir", a.models_dir,
                            "--reps", str(a.reps), "--save", save], env=env, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"sls_isa: the {isa} run failed:\n{p.stderr}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        with np.load(save) as z:
            got = [z[o["name"]] for o in entry["outputs"]]
        err = max(float(np.max(np.abs(g - w) / (1e-5 + 1e-4 * np.abs(w)))) for g, w in zip(got, want))
        med, cmed = float(np.median(r["times"])), float(np.median(r["cpu"]))
        res[isa] = dict(median_ms=med * 1e3, min_ms=min(r["times"]) * 1e3, cpu_median_ms=cmed * 1e3,
                        rows_per_s=r["rows"] / med, rows_per_cpu_s=r["rows"] / cmed, check=err <= 1)
        print(f"{isa:5s}: wall median {med * 1e3:7.3f} ms (min {min(r['times']) * 1e3:7.3f})  "
              f"{r['rows'] / med / 1e6:7.1f} M rows/s;  CPU time median {cmed * 1e3:7.3f} ms  "
              f"{r['rows'] / cmed / 1e6:7.1f} M rows/CPU-s;  check {'ok' if err <= 1 else 'FAILED'} "
              f"(worst error {err:.3f} of the tolerance)")
    ratio = res["avx2"]["rows_per_s"] / res["base"]["rows_per_s"]
    cratio = res["avx2"]["rows_per_cpu_s"] / res["base"]["rows_per_cpu_s"]
    print(f"sls_rowwise: {entry['rows']} rows of 64 per run, {a.threads} thread{'s' if a.threads > 1 else ''}; AVX2 / base = {ratio:.2f}x wall, {cratio:.2f}x CPU time "
          f"(target >= 4x)")
    return 0 if all(v["check"] for v in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
