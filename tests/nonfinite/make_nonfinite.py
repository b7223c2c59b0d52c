#!/usr/bin/env python3
"""Generate kiln's NaN / ±inf suite (issue 8, "Numbers"): small graphs, one
op family per case, fed inputs that hold NaN, +inf and -inf at positions in
the 8-lane vector body and in the tail of rows (so AVX2 kernels and their
scalar tails both see them), in the ONNX node-test layout next to this script:

    test_nonfinite_<case>/model.onnx
    test_nonfinite_<case>/test_data_set_0/input_K.pb
    test_nonfinite_<case>/test_data_set_0/output_K.pb   onnxruntime's outputs

Rows of the special matrix (37 columns: 4 AVX2 vectors and a tail of 5):
  0: one NaN          1: one +inf        2: one -inf
  3: NaN, +inf, -inf  4: finite          5: two +inf
  6: all -inf         7: +inf and -inf (no NaN)
The expected outputs come from onnxruntime (CPU provider, graph optimisations
off), except where onnxruntime's own answer is not a rule (the script checks
that it agrees with kiln's rule on every element the rule does not decide):
  - ReduceMax/ReduceMin, MaxPool, GlobalMaxPool: onnxruntime returns NaN only
    when the NaN is the first element of the row or window (or where MLAS's
    lane order happens to keep it), and -FLT_MAX for an all-NaN window. kiln
    propagates NaN, as IEEE 754-2019 maximum/minimum, numpy (np.max) and
    kiln's own elementwise Max/Min (where onnxruntime also propagates) do;
    the expected outputs are numpy's.
  - Clip with no max input: onnxruntime clamps +inf to FLT_MAX (its default
    bound); kiln leaves values above an absent bound unchanged, as the ONNX
    reference evaluator (np.clip with None) does.
The comparison (tests/testutil.c) requires NaN where onnxruntime gives
NaN and the same infinity where it gives one. Run the cases with
tests/conformance (ROOT = this directory) on any backend.

Requirements: onnx, onnxruntime, numpy (bench/requirements.txt; e.g.
build/venv/bin/python tests/nonfinite/make_nonfinite.py).
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT
NAN, INF = np.float32(np.nan), np.float32(np.inf)


def special(rng, rows=8, cols=37, scale=2.0):
    a = rng.uniform(-scale, scale, (rows, cols)).astype(np.float32)
    a[0, 3] = NAN
    a[1, 9] = INF
    a[2, 35] = -INF
    a[3, 0], a[3, 17], a[3, 34] = NAN, INF, -INF
    a[5, 8], a[5, 33] = INF, INF
    a[6, :] = -INF
    a[7, 31], a[7, 36] = INF, -INF
    return a


def save(name, nodes, feeds, outputs, inits=(), out_types=None, oracle=None):
    out_types = out_types or {}
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(n, F, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, out_types.get(n, F), None) for n in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln make_nonfinite")
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = sess.run(outputs, feeds)
    if oracle:  # kiln's documented rule instead of onnxruntime's (see the module docstring)
        mine = oracle(feeds)
        for a, b in zip(outs, mine):
            # the same everywhere the rule does not decide: where the rule gives
            # NaN or ±inf, onnxruntime may differ; elsewhere it must agree exactly
            fin = np.isfinite(b)
            assert a.shape == b.shape and np.array_equal(a[fin], b[fin]), name
        print("%-28s expected outputs from kiln's rule: %d element(s) differ from onnxruntime" %
              (name, sum(int((~((a == b) | (np.isnan(a) & np.isnan(b))) ).sum()) for a, b in zip(outs, mine))))
        outs = mine
    for o, a in zip(m.graph.output, outs):
        del o.type.tensor_type.shape.dim[:]
        for d in np.asarray(a).shape:
            o.type.tensor_type.shape.dim.add().dim_value = d
    onnx.checker.check_model(m, full_check=True)
    d = os.path.join(HERE, "test_nonfinite_" + name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for k, (n, a) in enumerate(feeds.items()):
        with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for k, (n, a) in enumerate(zip(outputs, outs)):
        with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())


def maxpool_np(x, k, pads=(0, 0, 0, 0), strides=None):
    """MaxPool (NCHW) with NaN propagation: -inf padding, np.max per window."""
    strides = strides or k
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=-np.inf)
    oh = (xp.shape[2] - k[0]) // strides[0] + 1
    ow = (xp.shape[3] - k[1]) // strides[1] + 1
    y = np.empty(x.shape[:2] + (oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            w = xp[:, :, i * strides[0]:i * strides[0] + k[0], j * strides[1]:j * strides[1] + k[1]]
            y[:, :, i, j] = np.max(w, axis=(2, 3))
    return y


def const(name, a, dt=np.float32):
    return numpy_helper.from_array(np.asarray(a, dtype=dt), name)


def main():
    rng = np.random.default_rng(8)
    x = special(rng)
    pos = np.abs(special(rng)) + np.float32(0.5)  # log/sqrt of positive values, with the specials
    pos[4, 5] = 0.0  # log(0) = -inf, 1/0 = inf
    y = special(rng)[::-1].copy()  # specials on other rows than x
    y[4, 0:8] = 0.0  # 0 * inf, x / 0
    y[0, 3] = 0.0

    # ---- elementwise unary math and activations
    unary = ["Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Erf", "Abs", "Neg", "Reciprocal", "Softplus", "Softsign",
             "Floor", "Ceil", "Sin", "Cos", "Relu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Sign"]
    for op in unary:
        inp = pos if op in ("Log", "Sqrt", "Reciprocal") else x
        save(op.lower(), [helper.make_node(op, ["x"], ["y"])], {"x": inp}, ["y"])
    save("leakyrelu", [helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], {"x": x}, ["y"])
    save("thresholdedrelu", [helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=0.5)], {"x": x}, ["y"])
    save("isnan", [helper.make_node("IsNaN", ["x"], ["y"])], {"x": x}, ["y"], out_types={"y": TensorProto.BOOL})
    save("isinf", [helper.make_node("IsInf", ["x"], ["y"])], {"x": x}, ["y"], out_types={"y": TensorProto.BOOL})

    # ---- binary (same shape, and a row broadcast)
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"]:
        save(op.lower(), [helper.make_node(op, ["x", "y"], ["z"])], {"x": x, "y": y}, ["z"])
    row = np.array([[NAN, INF, -INF, 0.0, 1.0, -1.0, 2.0, 0.5] * 4 + [NAN, 3.0, INF, -2.0, 0.0]], np.float32)
    for op in ["Add", "Mul", "Max", "Min"]:
        save(op.lower() + "_bcast", [helper.make_node(op, ["x", "r"], ["z"])], {"x": x, "r": row}, ["z"])
    save("max3", [helper.make_node("Max", ["x", "y", "r"], ["z"])], {"x": x, "y": y, "r": row}, ["z"])
    save("min3", [helper.make_node("Min", ["x", "y", "r"], ["z"])], {"x": x, "y": y, "r": row}, ["z"])
    for op in ["Less", "Greater", "Equal"]:
        save(op.lower(), [helper.make_node(op, ["x", "y"], ["z"])], {"x": x, "y": y}, ["z"],
             out_types={"z": TensorProto.BOOL})

    # ---- Clip: both bounds, min only, and NaN bounds are not tested (undefined)
    save("clip", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": x}, ["y"],
         [const("lo", -1.0), const("hi", 1.0)])
    save("clip_min", [helper.make_node("Clip", ["x", "lo"], ["y"])], {"x": x}, ["y"], [const("lo", 0.25)],
         oracle=lambda fd: [np.clip(fd["x"], np.float32(0.25), None)])

    # ---- a fused elementwise chain (one tile group on cpu / one kernel on opencl)
    save("chain", [
        helper.make_node("Mul", ["x", "y"], ["m"]),
        helper.make_node("Add", ["m", "x"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Max", ["t", "x"], ["mx"]),
        helper.make_node("Relu", ["mx"], ["z"]),
    ], {"x": x, "y": y}, ["z"])

    # ---- reductions (over the rows' 37 columns, and over the 8 rows)
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
               "ReduceL2", "ReduceLogSumExp"]:
        if op == "ReduceSum":
            save("reducesum_1", [helper.make_node(op, ["x", "ax"], ["y"], keepdims=1)], {"x": x}, ["y"],
                 [const("ax", [1], np.int64)])
            save("reducesum_0", [helper.make_node(op, ["x", "ax"], ["y"], keepdims=0)], {"x": x}, ["y"],
                 [const("ax", [0], np.int64)])
        else:
            npf = {"ReduceMax": np.max, "ReduceMin": np.min}.get(op)
            o1 = (lambda f: lambda fd: [f(fd["x"], axis=1, keepdims=True)])(npf) if npf else None
            o0 = (lambda f: lambda fd: [f(fd["x"], axis=0)])(npf) if npf else None
            save(op.lower() + "_1", [helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1)], {"x": x}, ["y"],
                 oracle=o1)
            save(op.lower() + "_0", [helper.make_node(op, ["x"], ["y"], axes=[0], keepdims=0)], {"x": x}, ["y"],
                 oracle=o0)
    save("reducelogsum", [helper.make_node("ReduceLogSum", ["x"], ["y"], axes=[1], keepdims=1)], {"x": pos}, ["y"])

    # ---- Softmax family (rows hold the specials)
    for op in ["Softmax", "LogSoftmax"]:
        save(op.lower(), [helper.make_node(op, ["x"], ["y"], axis=-1)], {"x": x}, ["y"])
        save(op.lower() + "_axis0", [helper.make_node(op, ["x"], ["y"], axis=0)], {"x": x}, ["y"])

    # ---- MatMul / Gemm / Conv
    w = rng.uniform(-1, 1, (37, 5)).astype(np.float32)
    w[4, 2] = 0.0  # inf * 0 -> NaN in row 1? (row 1's inf is at column 9: only where w[9, :] is used)
    save("matmul", [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], [const("w", w)])
    wz = w.copy()
    wz[9, :] = 0.0  # row 1's +inf meets zeros: NaN in every output of row 1
    save("matmul_inf_times_zero", [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"],
         [const("w", wz)])
    save("gemm", [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5, beta=1.0)], {"x": x}, ["y"],
         [const("w", w.T.copy()), const("b", rng.uniform(-1, 1, (5,)))])
    img = rng.uniform(-1, 1, (1, 2, 9, 9)).astype(np.float32)
    img[0, 0, 1, 1], img[0, 0, 4, 6], img[0, 1, 7, 2], img[0, 1, 8, 8] = NAN, INF, -INF, INF
    img[0, 1, 0, 8] = -INF
    cw = rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32)
    save("conv", [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], {"x": img}, ["y"],
         [const("w", cw), const("b", [0.1, -0.2, 0.3])])
    save("conv_relu", [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["y"]),
    ], {"x": img}, ["y"], [const("w", cw)])

    # ---- pooling
    save("maxpool", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {"x": img},
         ["y"], oracle=lambda fd: [maxpool_np(fd["x"], (2, 2))])
    save("maxpool_pad", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
         {"x": img}, ["y"], oracle=lambda fd: [maxpool_np(fd["x"], (3, 3), (1, 1, 1, 1), (1, 1))])
    save("averagepool", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
         {"x": img}, ["y"])
    save("globalmaxpool", [helper.make_node("GlobalMaxPool", ["x"], ["y"])], {"x": img}, ["y"],
         oracle=lambda fd: [np.max(fd["x"], axis=(2, 3), keepdims=True)])
    save("globalaveragepool", [helper.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": img}, ["y"])

    # ---- normalisation
    save("layernorm", [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], {"x": x}, ["y"],
         [const("s", rng.uniform(0.5, 1.5, (37,))), const("b", rng.uniform(-1, 1, (37,)))])
    save("batchnorm", [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": img}, ["y"],
         [const("s", [1.0, 0.5]), const("b", [0.0, 0.1]), const("m", [0.1, -0.1]), const("v", [1.0, 2.0])])

    conv_weights_over_padding()


def conv_weights_over_padding():
    """Conv with an inf, -inf or NaN weight and a finite X: the spec's zero
    padding makes 0 * inf = NaN wherever that weight's tap lies over the
    padding, and x * inf = +-inf elsewhere. One case per kernel form of the
    OpenCL backend (opencl/ops_gemm.c): the vector and scalar row kernels,
    the one-output kernel (3-D), depthwise, a conv wide enough for the GEMM
    paths, a conv with its MaxPool fused into the direct kernel and two
    with a Relu fused into the direct kernel or kiln's SGEMM; W a
    constant and W a graph input (a weight the kernels cannot check at
    compile time). Its own RNG, so the cases above stay as they were."""
    rng = np.random.default_rng(27)

    def weights(shape):
        w = rng.uniform(-1, 1, shape).astype(np.float32)
        w[0, 0, (0,) * (len(shape) - 2)] = INF  # the first tap: over the top/left padding
        if shape[0] > 1:
            w[1, -1, (-1,) * (len(shape) - 2)] = -INF  # the last tap: over the bottom/right padding
        if shape[0] > 2:
            w[2, 0, (1,) * (len(shape) - 2)] = NAN  # the centre: NaN everywhere
        return w

    def conv(name, xshape, wshape, w_input=False, pool=None, relu=False, **attrs):
        x = (rng.uniform(0.25, 1, xshape) * np.where(rng.uniform(size=xshape) < 0.5, -1, 1)).astype(np.float32)
        w = weights(wshape)
        b = rng.uniform(-1, 1, (wshape[0],)).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if pool or relu else "y"], **attrs)]
        oracle = None
        if pool:
            nodes.append(helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=pool, strides=pool))
        if relu:  # the conv with its epilogue in one kernel (direct, or kiln's SGEMM on PoCL)
            nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        feeds = {"x": x}
        inits = [const("b", b)]
        if w_input:
            feeds["w"] = w
        else:
            inits.append(const("w", w))
        if pool:  # kiln's MaxPool rule (NaN propagates), over onnxruntime's conv
            def oracle(fd, w=w, b=b):
                m = onnx.helper.make_model(
                    helper.make_graph([nodes[0]], "c", [helper.make_tensor_value_info("x", F, x.shape)],
                                      [helper.make_tensor_value_info("c", F, None)], [const("w", w), const("b", b)]),
                    opset_imports=[helper.make_opsetid("", 17)])
                m.ir_version = 8
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                c = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
                    ["c"], {"x": fd["x"]})[0]
                return [maxpool_np(c, pool)]
        save(name, nodes, feeds, ["y"], inits, oracle=oracle)

    conv("conv_w_inf_pad", (1, 2, 9, 9), (4, 2, 3, 3), pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_input", (1, 2, 9, 9), (4, 2, 3, 3), w_input=True, pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_narrow", (2, 2, 6, 6), (4, 2, 3, 3), pads=[1, 0, 2, 1], strides=[1, 2])
    conv("conv_w_inf_pad_same", (1, 3, 7, 7), (3, 3, 2, 2), auto_pad="SAME_LOWER", strides=[2, 2])
    conv("conv_w_inf_pad_3d", (1, 2, 4, 5, 5), (3, 2, 3, 3, 3), pads=[1, 1, 1, 1, 1, 1])
    conv("conv_w_inf_pad_dw", (1, 4, 8, 8), (4, 1, 3, 3), group=4, pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_wide", (1, 4, 16, 16), (16, 4, 3, 3), pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_wide_input", (1, 4, 16, 16), (16, 4, 3, 3), w_input=True, pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_maxpool", (1, 2, 8, 8), (4, 2, 3, 3), pool=[2, 2], pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_relu", (1, 2, 9, 9), (4, 2, 3, 3), relu=True, pads=[1, 1, 1, 1])
    conv("conv_w_inf_pad_wide_relu", (1, 4, 16, 16), (16, 4, 3, 3), relu=True, pads=[1, 1, 1, 1])


if __name__ == "__main__":
    main()
