#!/usr/bin/env python3
"""bench/gemm_conv_ort.py PLUGIN: single-operator models (MatMul 1024^3 and
a few Conv layers of make_models.py's ResNet-18 / MobileNetV2, with bias)
on kiln's cpu backend through the ONNXIFI ABI and on onnxruntime, both at
KILN_NUM_THREADS threads (default here 1), interleaved; prints the best and the median latency of each and
kiln/ort of the bests (the machine may be shared: the best run is the least
disturbed one). Needs build/bench/venv
(bench/run makes it)."""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
THREADS = int(os.environ.setdefault("KILN_NUM_THREADS", "1"))  # kiln's pool; onnxruntime gets the same
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln_abi import KilnLibrary  # noqa: E402


def matmul_model(n):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [w])
    return g, {"x": rng.standard_normal((n, n)).astype(np.float32)}, [n, n]


def conv_model(c, m, hw, k, s, group):
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    p = k // 2
    o = (hw + 2 * p - k) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s],
                              pads=[p, p, p, p], group=group)]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, o, o])], [w, b])
    return g, {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}, [1, m, o, o]


CASES = [("MatMul 1024^3", lambda: matmul_model(1024)),
         ("resnet18 conv1 7x7/2 3->64 @224", lambda: conv_model(3, 64, 224, 7, 2, 1)),
         ("resnet18 l1 3x3 64->64 @56", lambda: conv_model(64, 64, 56, 3, 1, 1)),
         ("resnet18 l3 3x3 256->256 @14", lambda: conv_model(256, 256, 14, 3, 1, 1)),
         ("mobilenetv2 b1 expand 1x1 16->96 @112", lambda: conv_model(16, 96, 112, 1, 1, 1)),
         ("mobilenetv2 b1 dw 3x3/2 96 @112", lambda: conv_model(96, 96, 112, 3, 2, 96)),
         ("mobilenetv2 b2 dw 3x3 144 @56", lambda: conv_model(144, 144, 56, 3, 1, 144)),
         ("mobilenetv2 head 1x1 320->1280 @7", lambda: conv_model(320, 1280, 7, 1, 1, 1))]


def main():
    lib = KilnLibrary(sys.argv[1])
    cpu = next(b for b in lib.backends() if b.name == "cpu" or "cpu" in b.name)
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    print(f"{THREADS} thread(s) each")
    print(f"{'model':42s} {'kiln best':>9s} {'ort best':>9s} {'kiln/ort':>9s} {'kiln med':>9s} {'ort med':>9s}"
          "  max|diff|")
    for name, make in CASES:
        g, inputs, oshape = make()
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        data = model.SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        backend = lib.init_backend(cpu.index)
        graph = backend.init_graph(data)
        y = np.empty(oshape, np.float32)
        graph.bind(inputs, {"y": y})
        tk, to = [], []
        for r in range(reps + 1):
            t = time.perf_counter()
            graph.run()
            t1 = time.perf_counter()
            ref = sess.run(None, inputs)[0]
            t2 = time.perf_counter()
            if r:
                tk.append(t1 - t)
                to.append(t2 - t1)
        bk, bo, mk, mo = min(tk) * 1e3, min(to) * 1e3, np.median(tk) * 1e3, np.median(to) * 1e3
        print(f"{name:42s} {bk:9.3f} {bo:9.3f} {bk / bo:9.2f} {mk:9.3f} {mo:9.3f}  {np.abs(y - ref).max():.2e}")
        graph.release()
        backend.release()
    lib.close()


if __name__ == "__main__":
    main()
