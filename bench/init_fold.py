#!/usr/bin/env python3
"""bench/init_fold.py: graph init (onnxInitGraph) on kiln's cpu backend
against onnxruntime's session creation, for weights that a model transforms
before use and that both engines fold into constants at init:

    cast_fp16   a float16 2048 x 4096 weight, Cast to float32, then MatMul
    dequant_i8  an int8 2048 x 4096 weight, DequantizeLinear (per tensor)
    scale       a float32 2048 x 4096 weight times a scalar constant
    lora        a float32 2048 x 4096 weight plus the product of a 2048 x 16
                and a 16 x 4096 factor (a low-rank adapter merged at init)

plus the bench models named with --models (their init, from
build/bench/models: make_models.py). kiln folds through its reference
kernels (ir/rewrite_const.c), so this measures those kernels' dense paths,
BatchNormalization folding and the plan's preparation too.

    bench/init_fold.py [--plugin PATH] [--rounds N] [--models a,b,...]

Each engine inits each model --rounds times in one process, the engines
alternating round by round (one thread each: KILN_NUM_THREADS=1, onnxruntime
intra_op_num_threads=1); the minimum and the median are printed, in ms.
The first init of a process (page faults of fresh memory, library set-up)
is included in the median. Needs numpy, onnx and onnxruntime
(build/bench/venv has them).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def fold_models():
    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    K, N = 2048, 4096
    rng = np.random.default_rng(0)
    x = h.make_tensor_value_info("x", T.FLOAT, [8, K])
    y = h.make_tensor_value_info("y", T.FLOAT, [8, N])

    def model(name, nodes, inits):
        g = h.make_graph(nodes + [h.make_node("MatMul", ["x", "w"], ["y"])], name, [x], [y], inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString()

    w = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
    return {
        "cast_fp16": model("cast_fp16", [h.make_node("Cast", ["w16"], ["w"], to=T.FLOAT)],
                           [nh.from_array(w.astype(np.float16), "w16")]),
        "dequant_i8": model("dequant_i8", [h.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"])],
                            [nh.from_array(rng.integers(-127, 128, (K, N)).astype(np.int8), "wq"),
                             nh.from_array(np.array(0.01, np.float32), "s"), nh.from_array(np.array(3, np.int8), "z")]),
        "scale": model("scale", [h.make_node("Mul", ["wf", "sc"], ["w"])],
                       [nh.from_array(w, "wf"), nh.from_array(np.array(0.5, np.float32), "sc")]),
        "lora": model("lora", [h.make_node("MatMul", ["la", "lb"], ["ab"]), h.make_node("Add", ["wf", "ab"], ["w"])],
                      [nh.from_array(w, "wf"), nh.from_array((rng.standard_normal((K, 16)) * 0.05).astype(np.float32), "la"),
                       nh.from_array((rng.standard_normal((16, N)) * 0.05).astype(np.float32), "lb")]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", default=os.path.join(ROOT, "build", "plugin", "libonnxifi-kiln.so"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--models", default="", help="bench models too (from build/bench/models), comma-separated")
    a = ap.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", "1")
    os.environ.setdefault("KILN_DEVICE", "cpu")
    import onnxruntime as ort
    from kiln_abi import KilnLibrary
    models = fold_models()
    for m in filter(None, a.models.split(",")):
        with open(os.path.join(ROOT, "build", "bench", "models", m + ".onnx"), "rb") as f:
            models[m] = f.read()
    lib = KilnLibrary(a.plugin)
    backend = lib.init_backend(0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    print(f"{'model':<14} {'kiln min':>9} {'median':>8} {'ort min':>9} {'median':>8}  kiln/ort (medians)")
    for name, data in models.items():
        tk, to = [], []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            g = backend.init_graph(data)
            tk.append((time.perf_counter() - t0) * 1e3)
            g.release()
            t0 = time.perf_counter()
            s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            to.append((time.perf_counter() - t0) * 1e3)
            del s
        mk, mo = statistics.median(tk), statistics.median(to)
        print(f"{name:<14} {min(tk):9.1f} {mk:8.1f} {min(to):9.1f} {mo:8.1f}  {mk / mo:.2f}", flush=True)
    backend.release()
    lib.close()


if __name__ == "__main__":
    main()
