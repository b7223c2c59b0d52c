#!/usr/bin/env python3
"""Generate kiln's fusion-pattern suite (issue 5, "Correctness"): graphs whose
nodes the fusion pass groups — long elementwise chains with broadcasts and
views, conv + batchnorm + relu + maxpool, a residual block, softmax and
layernorm, a fused group whose intermediate is also a graph output, Gemm +
bias + Relu, MatMul + a written-out Gelu, conv + residual + Clip, a conv on
the im2col + GEMM path with an epilogue, reductions with prologues, anchors
whose output is also a graph output, LayerNormalization's Mean/InvStdDev, every reduction kind,
MatMul / Gemm / pointwise Conv with the epilogue in kiln's SGEMM store, im2col
convs (3x3 + BN + Relu, residual, downsampling, grouped, strided / dilated /
padded, 1-D, batches) with it too, convs with their pooling in the same
kernel (MaxPool / AveragePool: padded, dilated, ceil_mode,
count_include_pad; under a symbolic batch), poolings that stay their
own op, and views that only MatMuls read (attention's transposed heads,
Slice / Transpose / Expand views of a computed matrix; one the GEMM cannot
read in place), convs on CLBlast with a bias and a batch, embedding bags
(Gather -> mask Mul -> ReduceSum, rewritten into SparseLengthsWeightedSum
by the cpu plan and the OpenCL engine), device ops of one shape whose text
the OpenCL engine prints once (two bags, two LayerNormalizations) — in the
ONNX node-test layout, next to this script:

    test_fusion_<case>/model.onnx
    test_fusion_<case>/test_data_set_0/input_K.pb    seeded random inputs
    test_fusion_<case>/test_data_set_0/output_K.pb   expected outputs

(cases under a symbolic batch go to ../fusion_symbolic, same layout).

The expected outputs come from onnxruntime (CPU provider, all graph
optimisations off), an oracle independent of kiln. Run the cases with
tests/conformance (ROOT = this directory) on any backend.

Requirements: onnx, onnxruntime, numpy (bench/requirements.txt; e.g.
build/bench/venv/bin/python tests/fusion/make_fusion.py).
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def elem(a):
    """The ONNX element type of numpy array a (float32 unless it is int)."""
    return {np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
            np.dtype(np.int16): TensorProto.INT16, np.dtype(np.int8): TensorProto.INT8}.get(a.dtype, F)


def const(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def i64(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.int64), name)


def save(name, nodes, inputs, outputs, inits, feeds, batch_bound=None, out_types=None, expected=None):
    """batch_bound: the inputs' and outputs' first dim is the symbol N, with
    metadata kiln.bound.N = batch_bound (kiln plans at the bound and runs
    the feeds' batch as a prefix); such a case goes to ../fusion_symbolic
    (tests/fault_cache.sh counts two cache entries per case of this suite).
    out_types: an output's element type by name (float32 otherwise);
    expected: the outputs computed here (numpy), where onnxruntime has no
    kernel for the node (Relu on int8 and int16)."""
    sym = (lambda s: ["N"] + list(s[1:])) if batch_bound else (lambda s: s)
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, elem(a), sym(a.shape)) for n, a in feeds.items()],
                          [helper.make_tensor_value_info(n, (out_types or {}).get(n, F), sym(s)) for n, s in outputs],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln make_fusion")
    m.ir_version = 8
    if batch_bound:
        helper.set_model_props(m, {"kiln.bound.N": str(batch_bound)})
    onnx.checker.check_model(m, full_check=True)
    if expected is None:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = sess.run([n for n, _ in outputs], feeds)
    else:
        outs = expected
    d = os.path.join(os.path.join(os.path.dirname(HERE), "fusion_symbolic") if batch_bound else HERE,
                     "test_fusion_" + name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for k, (n, a) in enumerate(feeds.items()):
        with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for k, ((n, _), a) in enumerate(zip(outputs, outs)):
        with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())


def main():
    rng = np.random.default_rng(5)
    r = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)

    # a long elementwise chain through views and broadcasts; the sigmoid's
    # result (inside the group) is also a graph output
    save("chain_views_bcast", [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]),
        helper.make_node("Mul", ["xt", "b"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["sr"]),
        helper.make_node("Slice", ["sr", "st", "en", "ax", "sp"], ["sl"]),
        helper.make_node("Tanh", ["sl"], ["t"]),
        helper.make_node("Mul", ["t", "t"], ["t2"]),
        helper.make_node("Sub", ["t2", "d"], ["u"]),
        helper.make_node("Relu", ["u"], ["y"]),
    ], None, [("y", [2, 4, 7]), ("s", [2, 4, 3, 5])],
        [const("b", r(1, 4, 1, 5)), const("c", r(5)), i64("shape", [2, 4, 15]), i64("st", [1]), i64("en", [15]),
         i64("ax", [2]), i64("sp", [2]), const("d", r(7) * 0.1)],
        {"x": r(2, 3, 4, 5)})

    # conv + batchnorm + relu + maxpool
    save("conv_bn_relu_pool", [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ], None, [("y", [1, 8, 4, 4])],
        [const("w", r(8, 3, 3, 3) * 0.5), const("cb", r(8)), const("g", 1 + 0.5 * r(8)), const("be", r(8)),
         const("mu", r(8) * 0.1), const("var", 1 + 0.5 * np.abs(r(8)))],
        {"x": r(1, 3, 8, 8)})

    # a residual block: conv relu conv + skip, relu
    save("residual", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ], None, [("y", [1, 4, 6, 6])],
        [const("w1", r(4, 4, 3, 3) * 0.4), const("b1", r(4)), const("w2", r(4, 4, 3, 3) * 0.4), const("b2", r(4))],
        {"x": r(1, 4, 6, 6)})

    # matmul, softmax, layernorm and an elementwise epilogue
    save("softmax_layernorm", [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Mul", ["m", "scale"], ["ms"]),
        helper.make_node("Softmax", ["ms"], ["p"], axis=-1),
        helper.make_node("LayerNormalization", ["p", "lg", "lb"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Mul", ["ln", "k"], ["lk"]),
        helper.make_node("Add", ["lk", "x2"], ["y"]),
    ], None, [("y", [2, 5, 16]), ("p", [2, 5, 16])],
        [const("w", r(8, 16)), const("scale", [0.5]), const("lg", 1 + 0.5 * r(16)), const("lb", r(16)),
         const("k", r(16))],
        {"x": r(2, 5, 8), "x2": r(2, 5, 16)})

    # a fused group whose intermediates are graph outputs, read again later
    save("intermediate_outputs", [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Add", ["e", "b"], ["a"]),
        helper.make_node("Mul", ["a", "a"], ["m"]),
        helper.make_node("Neg", ["m"], ["n"]),
        helper.make_node("Transpose", ["n"], ["nt"], perm=[1, 0]),
        helper.make_node("Add", ["nt", "e2"], ["y"]),
    ], None, [("y", [6, 4]), ("e", [4, 6]), ("a", [4, 6]), ("nt", [6, 4])],
        [const("b", r(6))],
        {"x": r(4, 6), "e2": r(6, 4)})

    # Gemm (bias C inside the anchor) + Relu
    save("gemm_bias_relu", [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["y"]),
    ], None, [("y", [4, 16])],
        [const("w", r(16, 24)), const("c", r(16))],
        {"x": r(4, 24)})

    # MatMul + bias + a Gelu written out (erf form)
    save("matmul_gelu", [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Mul", ["h", "rs2"], ["hs"]),
        helper.make_node("Erf", ["hs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["y"]),
    ], None, [("y", [2, 6, 32])],
        [const("w", r(16, 32)), const("b", r(32)), const("rs2", [0.70710678]), const("one", [1.0]),
         const("half", [0.5])],
        {"x": r(2, 6, 16)})

    # conv + residual add + Clip (ReLU6), and a LeakyRelu conv in front
    save("conv_residual_clip", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["l1"], alpha=0.1),
        helper.make_node("Conv", ["l1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Clip", ["s", "lo", "hi"], ["y"]),
    ], None, [("y", [1, 8, 6, 6])],
        [const("w1", r(8, 8, 3, 3) * 0.3), const("b1", r(8)), const("w2", r(8, 8, 3, 3) * 0.3), const("b2", r(8)),
         const("lo", 0.0), const("hi", 0.6)],
        {"x": r(1, 8, 6, 6)})

    # a conv long enough for im2col + GEMM (32 channels x 3x3 = 288 >= 256,
    # 16 outputs, 64 positions), then Sigmoid and a per-channel scale
    save("conv_gemm_epilogue", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["sg"]),
        helper.make_node("Mul", ["sg", "k"], ["y"]),
    ], None, [("y", [1, 16, 8, 8])],
        [const("w", r(16, 32, 3, 3) * 0.2), const("b", r(16)), const("k", r(16, 1, 1))],
        {"x": r(1, 32, 8, 8)})

    # reductions with a prologue and an epilogue: an L2 normalisation over
    # the last axis, and a mean over a middle axis
    save("reduce_prologue", [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "ax"], ["ss"], keepdims=1),
        helper.make_node("Sqrt", ["ss"], ["n"]),
        helper.make_node("Div", ["x", "n"], ["y"]),
        helper.make_node("Mul", ["z", "two"], ["z2"]),
        helper.make_node("ReduceMean", ["z2"], ["zm"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["z", "zm"], ["y2"]),
    ], None, [("y", [3, 4, 40]), ("y2", [2, 5, 3])],
        [i64("ax", [-1]), const("two", [2.0])],
        {"x": r(3, 4, 40), "z": r(2, 5, 3)})

    # anchors whose own output is also a graph output: a direct conv with a
    # SiLU epilogue, a MatMul (CLBlast) with Tanh
    save("anchor_outputs", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["s", "c"], ["y"]),
        helper.make_node("MatMul", ["x2", "w2"], ["m"]),
        helper.make_node("Tanh", ["m"], ["y2"]),
    ], None, [("y", [1, 6, 5, 5]), ("c", [1, 6, 5, 5]), ("m", [3, 12]), ("y2", [3, 12])],
        [const("w", r(6, 4, 3, 3) * 0.4), const("b", r(6)), const("w2", r(10, 12))],
        {"x": r(1, 4, 5, 5), "x2": r(3, 10)})

    # a residual add before LayerNormalization with its Mean and InvStdDev
    # outputs (stores over the reduced domain), then a scale
    save("layernorm_stats", [
        helper.make_node("Add", ["x", "res"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "lg", "lb"], ["ln", "mean", "istd"], axis=-1, epsilon=1e-5),
        helper.make_node("Mul", ["ln", "k"], ["y"]),
    ], None, [("y", [4, 48]), ("mean", [4, 1]), ("istd", [4, 1])],
        [const("lg", 1 + 0.5 * r(48)), const("lb", r(48)), const("k", r(48))],
        {"x": r(4, 48), "res": r(4, 48)})

    # every reduction kind with a prologue and an epilogue, over leading,
    # middle, trailing and non-adjacent axes, short and long rows
    save("reduce_kinds", [
        helper.make_node("Abs", ["x"], ["ax_"]),
        helper.make_node("Add", ["ax_", "half"], ["p"]),
        helper.make_node("ReduceProd", ["p"], ["pr"], axes=[1], keepdims=0),
        helper.make_node("Sqrt", ["pr"], ["y1"]),
        helper.make_node("Mul", ["x", "three"], ["x3"]),
        helper.make_node("ReduceMax", ["x3"], ["mx"], axes=[0, 2], keepdims=1),
        helper.make_node("Exp", ["mx"], ["y2"]),
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("ReduceMin", ["nx"], ["mn"], axes=[2], keepdims=1),
        helper.make_node("Add", ["mn", "half"], ["y3"]),
        helper.make_node("Mul", ["z", "z"], ["zz"]),
        helper.make_node("ReduceMean", ["zz"], ["zm"], axes=[0], keepdims=1),
        helper.make_node("Sqrt", ["zm"], ["y4"]),
    ], None, [("y1", [3, 5]), ("y2", [1, 6, 1]), ("y3", [3, 6, 1]), ("y4", [1, 3])],
        [const("half", [0.5]), const("three", [3.0])],
        {"x": r(3, 6, 5), "z": r(40, 3)})

    # kiln's SGEMM with the epilogue in its store: Gemm with transA, alpha,
    # beta and a row-broadcast C, a ragged column tile (37) and rows not a
    # multiple of the row tile (19); a second Gemm with transB (the dot
    # kernel) and a column-broadcast C
    save("gemm_store_alpha", [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], transA=1, alpha=0.5, beta=2.0),
        helper.make_node("Tanh", ["g"], ["t"]),
        helper.make_node("LeakyRelu", ["t"], ["y"], alpha=0.2),
        helper.make_node("Gemm", ["x2", "w2", "c2"], ["g2"], transB=1, alpha=1.5, beta=0.5),
        helper.make_node("Sigmoid", ["g2"], ["y2"]),
    ], None, [("y", [19, 37]), ("y2", [19, 21])],
        [const("w", r(40, 37)), const("c", r(1, 37)), const("w2", r(21, 30)), const("c2", r(19, 1))],
        {"x": r(40, 19), "x2": r(19, 30)})

    # a batched MatMul (B not shared: per-batch offsets) + a residual read at
    # the same index + Relu, the Add also a graph output
    save("matmul_batched_residual", [
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Add", ["m", "res"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
    ], None, [("y", [2, 3, 11, 37]), ("h", [2, 3, 11, 37])],
        [const("b", r(3, 24, 37))],
        {"a": r(2, 3, 11, 24), "res": r(2, 3, 11, 37)})

    # a pointwise (1x1) grouped Conv + bias + Clip: the GEMM over (image, group)
    # with the bias per output channel in the store
    save("conv_pointwise_clip", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=2),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
    ], None, [("y", [2, 32, 5, 5])],
        [const("w", r(32, 16, 1, 1)), const("b", r(32)), const("lo", 0.0), const("hi", 0.6)],
        {"x": r(2, 32, 5, 5)})

    # reductions printed a work item per row with w rows per item (floatW
    # lanes along the kept innermost axis): 4096 rows of 32 from a broadcast
    # of two small inputs (lanes: one broadcast load and one vload), a
    # softmax written out over a middle axis (today its reductions stay
    # device ops between elementwise kernels), a transposed view (lanes read
    # one by one) with ReduceMax and a bias over the reduced domain, and
    # Mean / Min / Prod / LogSumExp rows of 12 with an 8-long kept axis, each
    # after an elementwise op (a reduction alone is a device op, not a spec)
    save("reduce_rows_vec", [
        helper.make_node("Add", ["xa", "ya"], ["sa"]),
        helper.make_node("Tanh", ["sa"], ["ta"]),
        helper.make_node("ReduceSum", ["ta", "ax1"], ["ra"], keepdims=0),
        helper.make_node("Relu", ["ra"], ["y1"]),
        helper.make_node("Mul", ["u", "two"], ["u2"]),
        helper.make_node("ReduceMax", ["u2"], ["um"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["u2", "um"], ["ud"]),
        helper.make_node("Exp", ["ud"], ["ue"]),
        helper.make_node("ReduceSum", ["ue", "ax1"], ["uz"], keepdims=1),
        helper.make_node("Div", ["ue", "uz"], ["us"]),
        helper.make_node("Add", ["us", "half"], ["y2"]),
        helper.make_node("Transpose", ["z"], ["zt"], perm=[0, 2, 1]),
        helper.make_node("Mul", ["zt", "m"], ["zm"]),
        helper.make_node("ReduceMax", ["zm"], ["zx"], axes=[1], keepdims=1),
        helper.make_node("Add", ["zx", "bias"], ["y3"]),
        helper.make_node("Mul", ["v", "two"], ["v2"]),
        helper.make_node("ReduceMean", ["v2"], ["y4"], axes=[1], keepdims=0),
        helper.make_node("Neg", ["v"], ["vn"]),
        helper.make_node("ReduceMin", ["vn"], ["y5"], axes=[-2], keepdims=1),
        helper.make_node("Abs", ["v"], ["va"]),
        helper.make_node("Add", ["va", "half"], ["vp"]),
        helper.make_node("ReduceProd", ["vp"], ["y6"], axes=[1], keepdims=0),
        helper.make_node("Sub", ["v", "half"], ["vh"]),
        helper.make_node("ReduceLogSumExp", ["vh"], ["y7"], axes=[1], keepdims=0),
    ], None, [("y1", [1, 4096]), ("y2", [4, 24, 64]), ("y3", [8, 1, 16]), ("y4", [6, 8]), ("y5", [6, 1, 8]),
              ("y6", [6, 8]), ("y7", [6, 8])],
        [i64("ax1", [1]), const("m", r(1, 20, 1)), const("bias", r(1, 1, 16)), const("two", [2.0]),
         const("half", [0.5])],
        {"xa": r(1, 32, 1), "ya": r(1, 1, 4096), "u": r(4, 24, 64) * 3, "z": r(8, 16, 20), "v": r(6, 12, 8)})

    # im2col convs with the epilogue in kiln's SGEMM store (the columns in
    # the engine's scratch): 3x3 + bias + BatchNormalization + Relu over a
    # batch of 2, 20 output channels (a partial row tile) and 100 positions
    # (a ragged column tile)
    save("conv_im2col_bn_relu", [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["y"]),
    ], None, [("y", [2, 20, 10, 10])],
        [const("w", r(20, 8, 3, 3) * 0.3), const("cb", r(20)), const("g", 1 + 0.5 * r(20)), const("be", r(20)),
         const("mu", r(20) * 0.1), const("var", 1 + 0.5 * np.abs(r(20)))],
        {"x": r(2, 8, 10, 10)})

    # a ResNet block's shapes: 3x3 + residual add + Relu, and a downsampling
    # stage: 3x3 stride 2 whose epilogue adds a 1x1 stride-2 conv's output
    # (both im2col: a strided 1x1 is no pointwise GEMM)
    save("conv_im2col_residual", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "x"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd", "bd"], ["d"], strides=[2, 2]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Add", ["c2", "d"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["y"]),
    ], None, [("y", [2, 32, 4, 4]), ("r1", [2, 16, 8, 8])],
        [const("w1", r(16, 16, 3, 3) * 0.2), const("b1", r(16)), const("wd", r(32, 16, 1, 1) * 0.3),
         const("bd", r(32)), const("w2", r(32, 16, 3, 3) * 0.2), const("b2", r(32))],
        {"x": r(2, 16, 8, 8)})

    # a grouped 3x3 conv through im2col (2 groups of 16 channels), batch 2,
    # + bias + Clip
    save("conv_im2col_grouped", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
    ], None, [("y", [2, 32, 6, 6])],
        [const("w", r(32, 16, 3, 3) * 0.2), const("b", r(32)), const("lo", -0.3), const("hi", 0.6)],
        {"x": r(2, 32, 6, 6)})

    # strided (2, 1), dilated (2, 2), asymmetric pads, no bias, + Tanh, the
    # conv's own output a graph output too; and a 1-D conv (k 5, pad 2) +
    # bias + LeakyRelu over a batch of 3
    save("conv_im2col_strided", [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 1], dilations=[2, 2], pads=[2, 1, 1, 2]),
        helper.make_node("Tanh", ["c"], ["y"]),
        helper.make_node("Conv", ["x1", "w1", "b1"], ["c1"], pads=[2, 2]),
        helper.make_node("LeakyRelu", ["c1"], ["y1"], alpha=0.1),
    ], None, [("y", [1, 24, 6, 10]), ("c", [1, 24, 6, 10]), ("y1", [3, 16, 20])],
        [const("w", r(24, 8, 3, 3) * 0.3), const("w1", r(16, 8, 5) * 0.3), const("b1", r(16))],
        {"x": r(1, 8, 13, 11), "x1": r(3, 8, 20)})

    # the pooling inside the direct conv's kernel (windows that do not
    # overlap): MaxPool 2x2 stride 3 dilation 2 padded (1, 1, 0, 0) with
    # ceil_mode over a batch of 2 (6 channels: 2 per work-item; the last
    # window's second row and column past the conv's 10: skipped); AveragePool 2x2/2 with
    # ceil_mode over an odd size (the last window half outside: counts
    # what is inside) after BatchNormalization (5 channels: 1 per item);
    # AveragePool 2x2/2 padded 1 with count_include_pad; a 1-D conv +
    # Sigmoid + MaxPool 3/3 (8 channels: 4 per item)
    save("conv_pool_fused", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["y1"], kernel_shape=[2, 2], strides=[3, 3], dilations=[2, 2],
                         pads=[1, 1, 0, 0], ceil_mode=1),
        helper.make_node("Conv", ["x9", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c2", "g", "be", "mu", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("AveragePool", ["bn"], ["y2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("Conv", ["x6", "w3", "b3"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("AveragePool", ["r3"], ["y3"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Conv", ["x1", "w4", "b4"], ["c4"], pads=[1, 1]),
        helper.make_node("Sigmoid", ["c4"], ["s4"]),
        helper.make_node("MaxPool", ["s4"], ["y4"], kernel_shape=[3], strides=[3]),
    ], None, [("y1", [2, 6, 4, 4]), ("y2", [2, 5, 5, 5]), ("y3", [1, 4, 4, 4]), ("y4", [1, 8, 4])],
        [const("w1", r(6, 3, 3, 3) * 0.5), const("b1", r(6)), const("w2", r(5, 3, 3, 3) * 0.5),
         const("g", 1 + 0.5 * r(5)), const("be", r(5)), const("mu", r(5) * 0.1),
         const("var", 1 + 0.5 * np.abs(r(5))), const("w3", r(4, 2, 1, 1)), const("b3", r(4)),
         const("w4", r(8, 4, 3) * 0.5), const("b4", r(8))],
        {"x": r(2, 3, 10, 10), "x9": r(2, 3, 9, 9), "x6": r(1, 2, 6, 6), "x1": r(1, 4, 12)})

    # poolings that stay their own device op: the ResNet stem's MaxPool
    # 3x3/2 padded 1 (overlapping windows: fused, the shared conv outputs
    # would be computed twice), and a MaxPool 2x2/2 whose input (the
    # epilogue's result) is also a graph output
    save("conv_pool_declined", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["y2"], kernel_shape=[2, 2], strides=[2, 2]),
    ], None, [("y1", [1, 4, 4, 4]), ("y2", [1, 4, 4, 4]), ("r2", [1, 4, 8, 8])],
        [const("w1", r(4, 3, 3, 3) * 0.5), const("b1", r(4)), const("w2", r(4, 3, 3, 3) * 0.5), const("b2", r(4))],
        {"x": r(1, 3, 8, 8)})

    # the pooled conv kernels under a symbolic batch N (bound 8, run at 3:
    # the OpenCL plan is made at the bound, its kernels launched over the
    # run's images)
    save("conv_pool_symbolic", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["y1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("AveragePool", ["s2"], ["y2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    ], None, [("y1", [3, 8, 4, 4]), ("y2", [3, 6, 5, 5])],
        [const("w1", r(8, 3, 3, 3) * 0.5), const("b1", r(8)), const("w2", r(6, 3, 3, 3) * 0.5)],
        {"x": r(3, 3, 9, 9)}, batch_bound=8)
    # views only MatMuls read, read in place (opencl/ENGINE.md "Views read
    # in place by MatMul"): attention's heads — q's Transpose(0,2,1,3) as
    # the scores' A (rows 32 apart, heads 8 apart), k's Transpose(0,2,3,1)
    # as its B^T, v's as the context's B —, the context written in place
    # into its heads' Transpose + Reshape (rows 32 apart, heads 8 apart)
    # that the output projection reads, and the heads' A against one
    # shared B (batched, B's batch stride 0)
    def heads(x, perm):
        return [helper.make_node("Reshape", [x, "hs"], [x + "r"]),
                helper.make_node("Transpose", [x + "r"], [x + "t"], perm=perm)]
    save("matmul_views_attn", [
        helper.make_node("MatMul", ["x", "wq"], ["q0"]),
        helper.make_node("Add", ["q0", "bq"], ["q"]),
        *heads("q", [0, 2, 1, 3]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        *heads("k", [0, 2, 3, 1]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        *heads("v", [0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "os"], ["cr"]),
        helper.make_node("MatMul", ["cr", "wo"], ["y"]),
        helper.make_node("MatMul", ["qt", "wp"], ["y2"]),
    ], None, [("y", [1, 16, 32]), ("y2", [1, 4, 16, 5])],
        [const("wq", r(32, 32)), const("bq", r(32)), const("wk", r(32, 32)), const("wv", r(32, 32)),
         i64("hs", [1, 16, 4, 8]), const("scale", [0.35]), const("wp", r(8, 5)), i64("os", [1, 16, 32]),
         const("wo", r(32, 32))],
        {"x": r(1, 16, 32)})

    # Slice, Transpose and Expand views of a computed [12, 48] read in place:
    # A with rows 48 apart at offset 16, A from every other row (rows 96
    # apart, offset 48), B with rows 48 apart at offset 8, A transposed
    # (A^T, lda 48), A broadcast over 2 batches (batch stride 0)
    save("matmul_views_slice", [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Slice", ["hr", "s1", "e1", "a01"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["y1"]),
        helper.make_node("Slice", ["hr", "s2", "e2", "a01", "st2"], ["b"]),
        helper.make_node("MatMul", ["b", "w3"], ["y2"]),
        helper.make_node("Slice", ["hr", "s3", "e3", "a1"], ["c"]),
        helper.make_node("MatMul", ["w4", "c"], ["y3"]),
        helper.make_node("Transpose", ["hr"], ["t"], perm=[1, 0]),
        helper.make_node("MatMul", ["t", "w5"], ["y4"]),
        helper.make_node("Expand", ["hr", "es"], ["e"]),
        helper.make_node("MatMul", ["e", "w6"], ["y5"]),
    ], None, [("y1", [12, 7]), ("y2", [6, 5]), ("y3", [3, 5]), ("y4", [48, 6]), ("y5", [2, 12, 3])],
        [const("w1", r(20, 48)), i64("s1", [0, 16]), i64("e1", [12, 40]), i64("a01", [0, 1]), const("w2", r(24, 7)),
         i64("s2", [1, 0]), i64("e2", [12, 24]), i64("st2", [2, 1]), const("w3", r(24, 5)), i64("s3", [8]),
         i64("e3", [13]), i64("a1", [1]), const("w4", r(3, 12)), const("w5", r(12, 6)), i64("es", [2, 12, 48]),
         const("w6", r(2, 48, 3))],
        {"x": r(12, 20)})

    # views a MatMul cannot read or write in place, copied: Transpose(2,0,1)
    # of a computed [4, 8, 16] puts the unit stride into the batch dim (the
    # matrices' strides are 128 and 16); a MatMul's [4, 8, 6] output read
    # through Transpose(0,2,1) + Reshape would be a transposed C
    save("matmul_views_copy", [
        helper.make_node("Tanh", ["x"], ["z"]),
        helper.make_node("Transpose", ["z"], ["zt"], perm=[2, 0, 1]),
        helper.make_node("MatMul", ["zt", "w"], ["y"]),
        helper.make_node("MatMul", ["z", "w2"], ["mm"]),
        helper.make_node("Transpose", ["mm"], ["mt"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["mt", "rs"], ["mr"]),
        helper.make_node("MatMul", ["mr", "w3"], ["y2"]),
    ], None, [("y", [16, 4, 3]), ("y2", [4, 3])],
        [const("w", r(16, 8, 3)), const("w2", r(16, 6)), i64("rs", [4, 48]), const("w3", r(48, 3))],
        {"x": r(4, 8, 16)})
    # two convs long enough for im2col + GEMM on CLBlast (32 x 3x3 = 288),
    # bias and a batch of 2: one + Sigmoid (the op without its bias, the
    # epilogue kernel adding it per channel of each image), one + Relu with
    # its own output a graph output too (the op keeps its bias)
    save("conv_gemm_bias_batch", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y2"]),
    ], None, [("y", [2, 16, 8, 8]), ("y2", [2, 16, 8, 8]), ("c2", [2, 16, 8, 8])],
        [const("w", r(16, 32, 3, 3) * 0.2), const("b", r(16)), const("w2", r(16, 32, 3, 3) * 0.2),
         const("b2", r(16))],
        {"x": r(2, 32, 8, 8)})


    # an empty MatMul (K = 0: its op leaves the node to the host, which
    # writes dense values) whose output only a Transpose + Reshape view
    # reads, as attention's context: that view is copied, not written in
    # place by the MatMul (kiln_cl_mm_reads_view; the plan's check of view
    # accesses failed the compile before)
    save("matmul_views_empty", [
        helper.make_node("Slice", ["x", "z", "z", "a3"], ["e"]),
        helper.make_node("MatMul", ["e", "w0"], ["m"]),
        helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["t", "rs"], ["rt"]),
        helper.make_node("MatMul", ["rt", "w2"], ["y"]),
    ], None, [("y", [1, 3, 4])],
        [i64("z", [0]), i64("a3", [3]), const("w0", np.zeros((0, 5))), i64("rs", [1, 3, 10]), const("w2", r(10, 4))],
        {"x": r(1, 2, 3, 4)})

    # two embedding bags — Gather (int64 and int32 indices, negative ones
    # wrapped) -> Mul by a 0/1 mask [B, L, 1] -> ReduceSum over the bag —
    # joined by a Concat: the cpu plan and the OpenCL rewrite make each one
    # SparseLengthsWeightedSum (ir/bags.h); the reference runs them as given
    mask = lambda b, l: (np.arange(l)[None, :] < rng.integers(0, l + 1, b)[:, None]).astype(np.float32)[:, :, None]
    save("embedding_bag", [
        helper.make_node("Gather", ["t1", "i1"], ["g1"], axis=0),
        helper.make_node("Mul", ["g1", "m1"], ["p1"]),
        helper.make_node("ReduceSum", ["p1", "ax"], ["s1"], keepdims=0),
        helper.make_node("Gather", ["t2", "i2"], ["g2"], axis=0),
        helper.make_node("Mul", ["m2", "g2"], ["p2"]),
        helper.make_node("ReduceSum", ["p2", "ax"], ["s2"], keepdims=0),
        helper.make_node("Concat", ["s1", "s2"], ["y"], axis=1),
    ], [], [("y", [6, 19])],
        [const("t1", r(30, 16)), const("t2", r(11, 3)), i64("ax", [1])],
        {"i1": rng.integers(-30, 30, (6, 5)).astype(np.int64), "m1": mask(6, 5),
         "i2": rng.integers(-11, 11, (6, 7)).astype(np.int32), "m2": mask(6, 7)})

    # integer Relu chains: int8 (Mesa 22.3's llvmpipe crashed compiling
    # `x < 0 ? 0 : x` on char — a SIGSEGV in LLVM's instruction selection at
    # the first launch; opencl/codegen.c writes it `x > 0 ? x : 0`), int16
    # and int32, each with an Add of its input (one fused group each)
    ints = lambda dt, *sh: rng.integers(np.iinfo(dt).min // 2, np.iinfo(dt).max // 2, sh).astype(dt)
    feeds = {"a": ints(np.int8, 3, 37), "b": ints(np.int16, 3, 37), "c": np.array([-5], np.int32)}
    save("int_relu", [
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Add", ["ra", "a"], ["ya"]),
        helper.make_node("Relu", ["b"], ["rb"]),
        helper.make_node("Add", ["rb", "b"], ["yb"]),
        helper.make_node("Relu", ["c"], ["yc"]),
    ], [], [("ya", [3, 37]), ("yb", [3, 37]), ("yc", [1])], [], feeds,
        out_types={"ya": TensorProto.INT8, "yb": TensorProto.INT16, "yc": TensorProto.INT32},
        expected=[np.maximum(feeds["a"], 0) + feeds["a"], np.maximum(feeds["b"], 0) + feeds["b"],
                  np.maximum(feeds["c"], 0)])

    # a Reshape of a graph input that is also a graph output: on OpenCL a
    # buffer copy step (the host's input written straight into the output's
    # buffer), no view-copy kernel to build; the Relu beside it one kernel
    save("reshape_output", [
        helper.make_node("Reshape", ["x", "s"], ["y"]),
        helper.make_node("Relu", ["x"], ["z"]),
    ], None, [("y", [12, 5]), ("z", [3, 4, 5])], [i64("s", [12, 5])], {"x": r(3, 4, 5)})

    # four conv + bias + activation blocks of the same shapes (other
    # weights), the third with a LeakyRelu: on OpenCL the second and fourth
    # groups' kernels are the first's text, which the program holds once (each
    # step its own kernel object, its own arguments; opencl/ENGINE.md
    # "Repeated kernels printed once"); the third's text comes between them
    save("repeated_blocks", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c3"], ["r3"], alpha=0.1),
        helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c4"], ["y"]),
    ], None, [("y", [1, 8, 6, 6])],
        [const("w%d" % k, r(8, 8, 3, 3) * 0.3) for k in range(1, 5)] + [const("b%d" % k, r(8)) for k in range(1, 5)],
        {"x": r(1, 8, 6, 6)})

    # device ops printing the same text but for their names: two embedding
    # bags of one shape (two tables, both int64 indices; each one
    # SparseLengthsWeightedSum op on OpenCL) and two LayerNormalizations of
    # one shape (other scales and biases), each alone before a MatMul: on
    # OpenCL the second bag's and the second LayerNormalization's kernels
    # are the first's text, printed once (opencl/ENGINE.md "Repeated ops
    # printed once"; the MatMuls too where kiln's SGEMM runs them).
    # bad_second_bag/ holds the same inputs but for one index of the second
    # bag, out of range: a run must fail naming that bag, bag2
    # (tests/fusion_opencl_check.sh)
    feeds = {"i1": rng.integers(-13, 13, (6, 5)).astype(np.int64), "m1": mask(6, 5),
             "i2": rng.integers(-13, 13, (6, 5)).astype(np.int64), "m2": mask(6, 5), "x": r(4, 16)}
    save("repeated_ops", [
        helper.make_node("Gather", ["t1", "i1"], ["g1"], axis=0),
        helper.make_node("Mul", ["g1", "m1"], ["p1"]),
        helper.make_node("ReduceSum", ["p1", "ax"], ["s1"], keepdims=0, name="bag1"),
        helper.make_node("Gather", ["t2", "i2"], ["g2"], axis=0),
        helper.make_node("Mul", ["g2", "m2"], ["p2"]),
        helper.make_node("ReduceSum", ["p2", "ax"], ["s2"], keepdims=0, name="bag2"),
        helper.make_node("Concat", ["s1", "s2"], ["bags"], axis=1),
        helper.make_node("LayerNormalization", ["x", "lg1", "lb1"], ["n1"], axis=-1, epsilon=1e-5, name="ln1"),
        helper.make_node("MatMul", ["n1", "w1"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "lg2", "lb2"], ["n2"], axis=-1, epsilon=1e-5, name="ln2"),
        helper.make_node("MatMul", ["n2", "w2"], ["y"]),
    ], [], [("bags", [6, 16]), ("y", [4, 16])],
        [const("t1", r(13, 8)), const("t2", r(13, 8)), i64("ax", [1]), const("lg1", 1 + 0.5 * r(16)),
         const("lb1", r(16)), const("w1", r(16, 16)), const("lg2", 1 + 0.5 * r(16)), const("lb2", r(16)),
         const("w2", r(16, 16))], feeds)
    bad = os.path.join(HERE, "test_fusion_repeated_ops", "bad_second_bag")
    os.makedirs(bad, exist_ok=True)
    for k, (n, a) in enumerate(feeds.items()):
        if n == "i2":
            a = a.copy()
            a[3, 2] = 13  # rows -13 .. 12
        with open(os.path.join(bad, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())

if __name__ == "__main__":
    main()
