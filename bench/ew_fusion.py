#!/usr/bin/env python3
"""bench/ew_fusion.py: the 16M elementwise chain (make_models.py ew_chain) on
kiln's cpu backend fused, with KILN_FUSION=0, against a memcpy of the same
bytes (one thread, and --threads threads when more than one) and
onnxruntime at --threads threads (kiln: KILN_NUM_THREADS, default 1) — all
in one process, timed in interleaved rounds (median). KILN_FUSION is read
when a graph is compiled, so the two kiln graphs live side by side.
cpu_fallback/TILE.md has results.
  build/bench/venv/bin/python bench/ew_fusion.py [--plugin SO] [--reps N] [--threads N]"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

import bench  # noqa: E402
import kiln_abi  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default=os.path.join(HERE, "..", "build", "release", "plugin", "libonnxifi-kiln.so"))
    ap.add_argument("--models", default=os.path.join(HERE, "..", "build", "bench", "models"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    os.environ["KILN_DEVICE"] = "cpu"
    os.environ["KILN_NUM_THREADS"] = str(a.threads)  # read once, when the first cpu plan is made
    ortname = f"onnxruntime {a.threads} thread{'s' if a.threads > 1 else ''}"
    model = open(os.path.join(a.models, "ew_chain.onnx"), "rb").read()
    inputs = dict(np.load(os.path.join(a.models, "ew_chain.inputs.npz")))
    x = inputs["x"]
    outs = [{"name": "y", "shape": list(x.shape), "dtype": np.float32}]
    lib = kiln_abi.KilnLibrary(a.plugin)
    engines = {}
    for name, fusion in (("kiln fused", "1"), ("kiln KILN_FUSION=0", "0")):
        os.environ["KILN_FUSION"] = fusion
        e = bench.KilnEngine(lib, 0, model, inputs, outs)
        e.compile()
        engines[name] = e
    os.environ.pop("KILN_FUSION", None)
    ort = bench.OrtEngine(a.threads, model, inputs, outs)
    ort.compile()
    engines[ortname] = ort
    src = x.copy()
    dst = np.empty_like(src)

    class Copy:
        def run(self):
            np.copyto(dst, src)

    engines["memcpy (same bytes)"] = Copy()
    if a.threads > 1:
        from concurrent.futures import ThreadPoolExecutor
        tp = ThreadPoolExecutor(a.threads)
        parts = np.array_split(np.arange(src.shape[0]), a.threads)

        class CopyN:  # numpy releases the GIL while copying
            def run(self):
                list(tp.map(lambda r: np.copyto(dst[r[0]:r[-1] + 1], src[r[0]:r[-1] + 1]), parts))

        engines[f"memcpy, {a.threads} threads"] = CopyN()
    ref = None
    for name, e in engines.items():  # warm-up, and the outputs agree
        e.run()
        if hasattr(e, "outputs"):
            y = e.outputs["y"]
            if ref is None:
                ref = y.copy()
            else:
                err = np.max(np.abs(y - ref) / (1e-5 + np.abs(ref)))
                print(f"# {name}: max relative difference to the first engine {err:.2e}")
    ts = {k: [] for k in engines}
    for _ in range(a.reps):
        for name, e in engines.items():
            t0 = time.perf_counter()
            e.run()
            ts[name].append(time.perf_counter() - t0)
    n = x.size
    moved = 4 * n + 4 * n  # read x once, write y once (the 16 KiB bias aside)
    med = {k: float(np.median(v)) for k, v in ts.items()}
    best = {k: float(np.min(v)) for k, v in ts.items()}
    print(f"16M elementwise chain ({x.shape[0]}x{x.shape[1]} float32), median of {a.reps} interleaved rounds")
    print(f"{'engine':24s} {'ms':>8s} {'GB/s':>7s} {'x memcpy bw':>12s} {'x ort':>7s}   "
          f"{'best ms':>8s} {'x memcpy':>9s} {'x ort':>7s}  (best: the least disturbed round)")
    for k, t in med.items():
        b = best[k]
        print(f"{k:24s} {t * 1e3:8.2f} {moved / t / 1e9:7.2f} {med['memcpy (same bytes)'] / t:12.3f} "
              f"{t / med[ortname]:7.3f}   {b * 1e3:8.2f} {best['memcpy (same bytes)'] / b:9.3f} {b / best[ortname]:7.3f}")
    print(f"fused vs KILN_FUSION=0: {med['kiln KILN_FUSION=0'] / med['kiln fused']:.2f}x faster")
    # the compute limit: the same chain on 64 x 4096 (1 MiB in, 1 MiB out: cache-resident)
    import onnx
    m = onnx.load_from_string(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in ("x", "y"):
            vi.type.tensor_type.shape.dim[0].dim_value = 64
    small = m.SerializeToString()
    xs = {"x": np.ascontiguousarray(x[:64])}
    so = [{"name": "y", "shape": [64, x.shape[1]], "dtype": np.float32}]
    os.environ["KILN_FUSION"] = "1"
    e = bench.KilnEngine(lib, 0, small, xs, so)
    e.compile()
    os.environ.pop("KILN_FUSION", None)
    o = bench.OrtEngine(a.threads, small, xs, so)
    o.compile()
    for eng in (e, o):
        eng.run()
    tk, to = [], []
    for _ in range(max(a.reps, 20)):
        for eng, t in ((e, tk), (o, to)):
            t0 = time.perf_counter()
            for _ in range(10):
                eng.run()
            t.append((time.perf_counter() - t0) / 10)
    ns = x.shape[1] * 64
    print(f"cache-resident 64x{x.shape[1]} (median / best): kiln fused {np.median(tk) / ns * 1e9:.2f} / "
          f"{np.min(tk) / ns * 1e9:.2f} ns/element, onnxruntime {np.median(to) / ns * 1e9:.2f} / "
          f"{np.min(to) / ns * 1e9:.2f} ns/element; at kiln's best rate the 16M chain needs "
          f"{np.min(tk) / ns * n * 1e3:.1f} ms of compute (memcpy of its bytes, best: "
          f"{best['memcpy (same bytes)'] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
