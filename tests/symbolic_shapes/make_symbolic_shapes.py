#!/usr/bin/env python3
"""Generate kiln's symbolic-shape suite: models whose symbolic input dims
meet constants in ways only a run's concrete sizes settle — a dim_param
broadcast against a constant (it may be 1 or equal it), a Conv output
size (H+1)/2 added to a constant 4 (true for H = 7 and 8 only), a stepped
Slice of a symbolic dim fed to a MatMul with a constant inner dim, and
data-dependent dims (Compress, a Reshape shape fed at run time) meeting
constants. Symbolic
inference cannot prove these dims compatible for every size
(ir/symdim.h, KILN_E_SYMBOLIC_SHAPE); the backends must still run every
valid size. Each case has several data sets of different sizes, run by
tests/conformance one after the other on one onnxInitGraph:

    test_sym_<case>/model.onnx
    test_sym_<case>/test_data_set_K/input_J.pb, output_J.pb

The expected outputs come from onnxruntime (CPU provider, graph
optimisations off), an oracle independent of kiln; for BatchNormalization
in training mode, which onnxruntime's inference build does not run (its
shape inference wants all three outputs named; with two left empty it
crashed, onnxruntime 1.32), from the ONNX reference evaluator
(onnx.reference).

Requirements: onnx, onnxruntime, numpy (bench/requirements.txt; e.g.
build/bench/venv/bin/python tests/symbolic_shapes/make_symbolic_shapes.py).
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def write_case(name, model, runs, oracle="onnxruntime"):
    """runs: a list of input dicts, one data set each; oracle: onnxruntime
    or "onnx.reference"."""
    onnx.checker.check_model(model, full_check=False)
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    data = model.SerializeToString()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(data)
    if oracle == "onnx.reference":
        from onnx.reference import ReferenceEvaluator
        sess = ReferenceEvaluator(model)
    else:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    for k, feeds in enumerate(runs):
        ds = os.path.join(d, f"test_data_set_{k}")
        os.makedirs(ds)
        outs = sess.run(out_names, feeds)
        for j, n in enumerate(in_names):
            with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(feeds[n], n).SerializeToString())
        for j, (n, o) in enumerate(zip(out_names, outs)):
            with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(o, n).SerializeToString())
    print(f"{name}: {len(runs)} data sets")


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "sym", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def main():
    rng = np.random.default_rng(7)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)

    # x[2,K] + r[2,6]: K is 6 or 1 (broadcast); runs K = 6, 1, 6
    m = model([helper.make_node("Add", ["x", "r"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
              [helper.make_tensor_value_info("x", F, [2, "K"]), helper.make_tensor_value_info("r", F, [2, 6])],
              [helper.make_tensor_value_info("z", F, [2, 6])])
    write_case("test_sym_broadcast_one", m,
               [{"x": r(2, 6), "r": r(2, 6)}, {"x": r(2, 1), "r": r(2, 6)}, {"x": r(2, 6), "r": r(2, 6)}])

    # the same with the constant side an initializer, and a leading symbolic
    # batch N that a [1,6] constant broadcasts over (N stays free)
    m = model([helper.make_node("Mul", ["x", "c"], ["y"]), helper.make_node("Sigmoid", ["y"], ["z"])],
              [helper.make_tensor_value_info("x", F, ["N", "K"])],
              [helper.make_tensor_value_info("z", F, ["N", 6])],
              [numpy_helper.from_array(r(1, 6), "c")])
    write_case("test_sym_broadcast_one_const", m,
               [{"x": r(3, 6)}, {"x": r(3, 1)}, {"x": r(5, 1)}, {"x": r(1, 6)}])

    # Conv stride 2 pads 1 over a symbolic H x W, then + a [1,3,4,4] tensor:
    # (H+1)/2 = 4 for H = 7 and 8
    w = r(3, 2, 3, 3)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
               helper.make_node("Add", ["c", "res"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
              [helper.make_tensor_value_info("x", F, [1, 2, "H", "W"]),
               helper.make_tensor_value_info("res", F, [1, 3, 4, 4])],
              [helper.make_tensor_value_info("z", F, [1, 3, 4, 4])],
              [numpy_helper.from_array(w, "w")])
    write_case("test_sym_conv_residual", m,
               [{"x": r(1, 2, 8, 8), "res": r(1, 3, 4, 4)}, {"x": r(1, 2, 7, 8), "res": r(1, 3, 4, 4)},
                {"x": r(1, 2, 7, 7), "res": r(1, 3, 4, 4)}])

    # Slice(step 2) over a symbolic K, then MatMul with W[6,4]: K = 11 or 12
    m = model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
               helper.make_node("MatMul", ["s", "w"], ["y"])],
              [helper.make_tensor_value_info("x", F, [2, "K"])],
              [helper.make_tensor_value_info("y", F, [2, 4])],
              [numpy_helper.from_array(np.array([0], np.int64), "st"),
               numpy_helper.from_array(np.array([1000], np.int64), "en"),
               numpy_helper.from_array(np.array([1], np.int64), "ax"),
               numpy_helper.from_array(np.array([2], np.int64), "sp"),
               numpy_helper.from_array(r(6, 4), "w")])
    write_case("test_sym_matmul_slice", m, [{"x": r(2, 12)}, {"x": r(2, 11)}, {"x": r(2, 12)}])

    # data-dependent dims (kiln's "?value:dim" symbols) meeting constants:
    # Compress(X[2,3], C, axis 1) -> Reshape [-1] -> + W[4] (2 of 3 kept)
    m = model([helper.make_node("Compress", ["X", "C"], ["v"], axis=1),
               helper.make_node("Reshape", ["v", "s"], ["t"]), helper.make_node("Add", ["t", "W"], ["o"])],
              [helper.make_tensor_value_info("X", F, [2, 3]), helper.make_tensor_value_info("C", TensorProto.BOOL, [3]),
               helper.make_tensor_value_info("W", F, [4])],
              [helper.make_tensor_value_info("o", F, [4])],
              [numpy_helper.from_array(np.array([-1], np.int64), "s")])
    write_case("test_sym_compress_reshape_add", m,
               [{"X": r(2, 3), "C": np.array([True, False, True]), "W": r(4)},
                {"X": r(2, 3), "C": np.array([False, True, True]), "W": r(4)}])
    # Compress(x[4], m) + c[4]: one kept element broadcasts, four add
    m = model([helper.make_node("Compress", ["x", "m"], ["v"]), helper.make_node("Add", ["v", "c"], ["y"])],
              [helper.make_tensor_value_info("x", F, [4]), helper.make_tensor_value_info("m", TensorProto.BOOL, [4])],
              [helper.make_tensor_value_info("y", F, [4])],
              [numpy_helper.from_array(r(4), "c")])
    write_case("test_sym_compress_broadcast", m,
               [{"x": r(4), "m": np.array([False, True, False, False])}, {"x": r(4), "m": np.array([True] * 4)},
                {"x": r(4), "m": np.array([False, False, False, True])}])
    # Compress(X[3,4,1], C[1], axis 2) -> Flatten(axis 3) -> W[12,1] - it
    m = model([helper.make_node("Compress", ["X", "C"], ["v"], axis=2),
               helper.make_node("Flatten", ["v"], ["t"], axis=3), helper.make_node("Sub", ["W", "t"], ["o"])],
              [helper.make_tensor_value_info("X", F, [3, 4, 1]), helper.make_tensor_value_info("C", TensorProto.BOOL, [1]),
               helper.make_tensor_value_info("W", F, [12, 1])],
              [helper.make_tensor_value_info("o", F, [12, 1])])
    write_case("test_sym_compress_flatten_sub", m, [{"X": r(3, 4, 1), "C": np.array([True]), "W": r(12, 1)}])
    # Reshape(X[2,3], S fed at run time) -> Transpose -> Reshape [-1], declared [6]
    m = model([helper.make_node("Reshape", ["X", "S"], ["v"]), helper.make_node("Transpose", ["v"], ["t"], perm=[1, 0]),
               helper.make_node("Reshape", ["t", "c"], ["o"])],
              [helper.make_tensor_value_info("X", F, [2, 3]), helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
              [helper.make_tensor_value_info("o", F, [6])],
              [numpy_helper.from_array(np.array([-1], np.int64), "c")])
    write_case("test_sym_reshape_runtime_transpose", m,
               [{"X": r(2, 3), "S": np.array([3, 2], np.int64)}, {"X": r(2, 3), "S": np.array([1, 6], np.int64)}])
    # BatchNormalization in training mode over a symbolic batch N, then Relu:
    # the batch's own statistics (over N, H, W) normalise it, so a run at a
    # smaller N may not reuse a variant padded to a larger one, and the
    # node is not the inference affine map a fusion would make of it; the
    # running statistics are a second and third output
    bn = [numpy_helper.from_array(v, n) for v, n in ((np.array([1.0, 2.0, 0.5], np.float32), "s"),
                                                    (np.array([0.1, -0.2, 0.3], np.float32), "b"),
                                                    (r(3), "m"), (np.abs(r(3)) + 0.5, "v"))]
    for name, outs in (("test_sym_bn_training_relu", ["y", "", ""]), ("test_sym_bn_training_stats", ["y", "rm", "rv"])):
        nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, training_mode=1,
                                  momentum=0.8, epsilon=1e-3), helper.make_node("Relu", ["y"], ["z"])]
        gouts = [helper.make_tensor_value_info("z", F, ["N", 3, 4, 5])]
        if outs[1]:
            gouts += [helper.make_tensor_value_info("rm", F, [3]), helper.make_tensor_value_info("rv", F, [3])]
        m = model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 4, 5])], gouts, bn, opset=15)
        write_case(name, m, [{"x": r(4, 3, 4, 5)}, {"x": r(2, 3, 4, 5)}, {"x": r(5, 3, 4, 5)}, {"x": r(1, 3, 4, 5)}],
                   oracle="onnx.reference")


if __name__ == "__main__":
    main()
