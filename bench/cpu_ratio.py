#!/usr/bin/env python3
"""bench/cpu_ratio.py PLUGIN MODEL [RUNS]: kiln's cpu backend (through the
ONNXIFI ABI) and onnxruntime, 1 thread each (KILN_NUM_THREADS, default 1
here), run alternately in one process on MODEL with its NAME.inputs.npz
(bench/make_models.py); prints one JSON line: the medians of wall time and
of process CPU time per run (time.process_time: every thread of this
process, so other processes' time slices do not count), kiln/onnxruntime of
each, and the largest difference of the outputs. On a shared machine
compare plugins by running this for each in ABBA order (GEMM_CONV.md,
"Profiling"). Needs build/bench/venv (bench/run makes it)."""
import json
import os
import sys
import time

os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from kiln_abi import KilnLibrary  # noqa: E402


def main():
    plugin, model = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    data = open(model, "rb").read()
    inputs = dict(np.load(model[:-len(".onnx")] + ".inputs.npz"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ["KILN_NUM_THREADS"])
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, inputs)
    lib = KilnLibrary(plugin)
    cpu = next(b for b in lib.backends() if "cpu" in b.name)
    backend = lib.init_backend(cpu.index)
    graph = backend.init_graph(data)
    outs = {o.name: np.empty_like(v) for o, v in zip(sess.get_outputs(), ref)}
    graph.bind(inputs, outs)
    wk, wo, ck, co = [], [], [], []
    for r in range(runs + 3):  # 3 warm-up rounds
        c0, t0 = time.process_time(), time.perf_counter()
        graph.run()
        c1, t1 = time.process_time(), time.perf_counter()
        sess.run(None, inputs)
        c2, t2 = time.process_time(), time.perf_counter()
        if r >= 3:
            wk.append(t1 - t0), wo.append(t2 - t1), ck.append(c1 - c0), co.append(c2 - c1)
    m = np.median
    print(json.dumps({"model": os.path.basename(model), "runs": runs,
                      "wall_kiln_ms": m(wk) * 1e3, "wall_ort_ms": m(wo) * 1e3, "wall_ratio": m(wk) / m(wo),
                      "cpu_kiln_ms": m(ck) * 1e3, "cpu_ort_ms": m(co) * 1e3, "cpu_ratio": m(ck) / m(co),
                      "max_abs_diff": max(float(np.abs(outs[o.name] - v).max())
                                          for o, v in zip(sess.get_outputs(), ref))}))
    graph.release()
    backend.release()
    lib.close()


if __name__ == "__main__":
    main()
