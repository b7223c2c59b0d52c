#!/usr/bin/env python3
"""Generate kiln's float64-intermediate suite: float32 graphs that cast to
double, compute there and cast back — the model asks for double's range
(1e30 squared is finite in double) — in fused elementwise chains and fused
reductions. The backends that keep their own float64 intermediates in
float32 (the cpu tiles, OpenCL when no buffer is float64) must not do so
with the model's doubles (fuse/spec.h, kiln_fuse_spec_f64_values). Layout:

    test_double_<case>/model.onnx
    test_double_<case>/test_data_set_0/input_J.pb, output_J.pb

The expected outputs come from onnxruntime (CPU provider, graph
optimisations off). Requirements: onnx, onnxruntime, numpy
(build/bench/venv/bin/python tests/double/make_double.py).
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F, D = TensorProto.FLOAT, TensorProto.DOUBLE


def write_case(name, nodes, x, out_shape, opset=13, inits=()):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, list(x.shape))],
                          [helper.make_tensor_value_info("y", F, out_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    data = m.SerializeToString()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(data)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    y = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    assert np.all(np.isfinite(y)), name
    with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "y").SerializeToString())
    print(name, y.ravel()[:4])


def main():
    big = np.array([[1e30, 2e30, -3e30, 1.0], [3e38, 3e38, -3e38, -3e38], [1e8, 1.0, -1e8, 1.0]], np.float32)
    cast = lambda a, b, to: helper.make_node("Cast", [a], [b], to=to)
    # elementwise: (x*x)/x in double is x; in float32 it overflows
    write_case("test_double_chain", [cast("x", "d", D), helper.make_node("Mul", ["d", "d"], ["m"]),
                                     helper.make_node("Div", ["m", "d"], ["q"]), cast("q", "y", F)], big, [3, 4])
    # reductions: sums past FLT_MAX and 1e8 + 1 - 1e8 + 1
    write_case("test_double_reducesum", [cast("x", "d", D),
                                         helper.make_node("ReduceSum", ["d", "ax"], ["s"], keepdims=0),
                                         cast("s", "y", F)], big, [3], opset=13,
               inits=[numpy_helper.from_array(np.array([1], np.int64), "ax")])  # ReduceSum-13: axes an input
    write_case("test_double_reducel2", [cast("x", "d", D), helper.make_node("ReduceL2", ["d"], ["s"], axes=[1],
                                                                             keepdims=0), cast("s", "y", F)],
               big[:1], [1], opset=11)


if __name__ == "__main__":
    main()
