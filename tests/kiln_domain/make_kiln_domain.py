#!/usr/bin/env python3
"""Generate the kiln-domain cases: models whose nodes are operators of kiln's
own ONNX domain "ai.kiln" (docs/KILN_DOMAIN.md), in the ONNX node-test
layout, for tests/conformance (the real ONNXIFI path: dlopen, onnxInitGraph,
onnxRunGraph):

    test_kiln_<case>/model.onnx
    test_kiln_<case>/test_data_set_0/input_K.pb    seeded inputs
    test_kiln_<case>/test_data_set_0/output_K.pb   expected outputs (numpy)

The expectations are plain numpy written below from the operators'
definitions (Caffe2's), independent of kiln. Seeded: byte-identical files
from run to run. Needs Debian's python3-onnx (1.12) and python3-numpy:
    /usr/bin/python3 tests/kiln_domain/make_kiln_domain.py
"""

import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
DOMAIN = "ai.kiln"


def model_of(name, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, producer_name="kiln tests/kiln_domain/make_kiln_domain.py",
                              producer_version="1",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)  # nodes of a custom domain are not schema-checked
    return model


def write_case(case, model, inputs, outputs):
    d = os.path.join(HERE, case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for k, (v, x) in enumerate(zip(model.graph.input, inputs)):
        with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(x, name=v.name).SerializeToString())
    for k, (v, y) in enumerate(zip(model.graph.output, outputs)):
        with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(y, name=v.name).SerializeToString())


def quantize_rows(x):
    """Caffe2's FloatToFused8BitRowwiseQuantized, in float32 as Caffe2 computes it."""
    x = x.astype(np.float32)
    lo = x.min(axis=-1, keepdims=True)
    hi = x.max(axis=-1, keepdims=True)
    rng = (hi - lo).astype(np.float32)
    scale = (rng / np.float32(255)).astype(np.float32)
    inv = (np.float32(255) / (rng + np.float32(1e-8))).astype(np.float32)
    q = np.clip(np.rint((x - lo) * inv), 0, 255).astype(np.uint8)
    tail = np.concatenate([scale, lo], axis=-1).astype(np.float32).view(np.uint8)
    return np.concatenate([q, tail], axis=-1)


def dequantize_rows(q):
    d = q.shape[-1] - 8
    sb = np.ascontiguousarray(q[..., d:]).view(np.float32)
    return (q[..., :d].astype(np.float32) * sb[..., :1]).astype(np.float32) + sb[..., 1:]


def segments(lengths):
    start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [(int(start[m]), int(start[m + 1])) for m in range(len(lengths))]


def sls(table_rows, idx, segs, w=None, positional=False, mean=False):
    """table_rows: float64 [R, D]; the segment reduction in float64."""
    out = np.zeros((len(segs), table_rows.shape[1]), np.float64)
    for m, (b, e) in enumerate(segs):
        for k in range(b, e):
            wk = 1.0 if w is None else float(w[k - b] if positional else w[k])
            out[m] += wk * table_rows[idx[k]]
        if mean and e > b:
            out[m] /= e - b
    return out.astype(np.float32)


def case_rowwise(rng):
    """A float table quantized in the graph, summed over 8-bit rows by
    lengths (int64 indices), weighted by int32 offsets, then a Relu of the
    default domain; the dequantized table as a second output."""
    R, D, M = 50, 21, 6
    table = (rng.standard_normal((R, D)) * 2).astype(np.float32)
    lengths = np.array([3, 0, 5, 1, 0, 4], np.int32)
    N = int(lengths.sum())
    idx = rng.integers(0, R, N).astype(np.int64)
    idx[0], idx[1] = 0, R - 1
    w = rng.standard_normal(N).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    q = quantize_rows(table)
    rows = dequantize_rows(q).astype(np.float64)
    segs = segments(lengths)
    y_sum = sls(rows, idx, segs)
    y_wsum = np.maximum(sls(rows, idx, segs, w), 0).astype(np.float32)
    nodes = [
        helper.make_node("FloatToFused8BitRowwiseQuantized", ["table"], ["q"], domain=DOMAIN),
        helper.make_node("SparseLengthsSum", ["q", "indices", "lengths"], ["y_sum"], domain=DOMAIN,
                         name="sls_rowwise"),
        helper.make_node("SparseLengthsWeightedSum", ["q", "weights", "indices", "offsets"], ["ws"],
                         domain=DOMAIN, offsets=1),
        helper.make_node("Relu", ["ws"], ["y_wsum"]),
        helper.make_node("Fused8BitRowwiseQuantizedToFloat", ["q"], ["y_deq"], domain=DOMAIN),
    ]
    inputs = [helper.make_tensor_value_info("indices", TensorProto.INT64, [N]),
              helper.make_tensor_value_info("lengths", TensorProto.INT32, [M]),
              helper.make_tensor_value_info("weights", TensorProto.FLOAT, [N]),
              helper.make_tensor_value_info("offsets", TensorProto.INT32, [M])]
    outputs = [helper.make_tensor_value_info("y_sum", TensorProto.FLOAT, [M, D]),
               helper.make_tensor_value_info("y_wsum", TensorProto.FLOAT, [M, D]),
               helper.make_tensor_value_info("y_deq", TensorProto.FLOAT, [R, D])]
    inits = [numpy_helper.from_array(table, "table")]
    model = model_of("kiln_sls_rowwise", nodes, inputs, outputs, inits)
    write_case("test_kiln_sls_rowwise", model, [idx, lengths, w, offsets],
               [y_sum, y_wsum, dequantize_rows(q)])


def case_fp16_mean(rng):
    """SparseLengthsMean over a float16 table with int32 indices and a
    symbolic number of bags."""
    R, D = 30, 13
    table = rng.standard_normal((R, D)).astype(np.float16)
    lengths = np.array([2, 0, 1, 4, 3], np.int64)
    N = int(lengths.sum())
    idx = rng.integers(0, R, N).astype(np.int32)
    y = sls(table.astype(np.float64), idx, segments(lengths), mean=True)
    nodes = [helper.make_node("SparseLengthsMean", ["table", "indices", "lengths"], ["y"], domain=DOMAIN)]
    inputs = [helper.make_tensor_value_info("table", TensorProto.FLOAT16, [R, D]),
              helper.make_tensor_value_info("indices", TensorProto.INT32, ["N"]),
              helper.make_tensor_value_info("lengths", TensorProto.INT64, ["M"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", D])]
    model = model_of("kiln_sls_fp16_mean", nodes, inputs, outputs)
    write_case("test_kiln_sls_fp16_mean", model, [table, idx, lengths], [y])


def case_lstm_unit(rng):
    """LSTMUnit with sequence lengths (rows past theirs keep their state) and
    a forget bias."""
    N, D, t, fb = 5, 7, 2, 1.0
    h = rng.standard_normal((1, N, D)).astype(np.float32)
    c = rng.standard_normal((1, N, D)).astype(np.float32)
    g = (rng.standard_normal((1, N, 4 * D)) * 2).astype(np.float32)
    seq = np.array([3, 2, 5, 0, 1], np.int32)
    ts = np.array([t], np.int32)
    sig = lambda x: 1 / (1 + np.exp(-x))
    x = g.astype(np.float64)
    i, f, o, gg = (x[..., k * D:(k + 1) * D] for k in range(4))
    c_new = sig(f + fb) * c + sig(i) * np.tanh(gg)
    h_new = sig(o) * np.tanh(c_new)
    valid = (t < seq)[None, :, None]
    h_out = np.where(valid, h_new, h).astype(np.float32)
    c_out = np.where(valid, c_new, c).astype(np.float32)
    nodes = [helper.make_node("LSTMUnit", ["h", "c", "g", "seq", "t"], ["h_t", "c_t"], domain=DOMAIN,
                              forget_bias=fb)]
    inputs = [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, N, D]),
              helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, N, D]),
              helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, N, 4 * D]),
              helper.make_tensor_value_info("seq", TensorProto.INT32, [N]),
              helper.make_tensor_value_info("t", TensorProto.INT32, [1])]
    outputs = [helper.make_tensor_value_info("h_t", TensorProto.FLOAT, [1, N, D]),
               helper.make_tensor_value_info("c_t", TensorProto.FLOAT, [1, N, D])]
    model = model_of("kiln_lstm_unit", nodes, inputs, outputs)
    write_case("test_kiln_lstm_unit", model, [h, c, g, seq, ts], [h_out, c_out])


def case_const_lengths(rng):
    """The form the OpenCL engine runs on the device (opencl/OPS.md): float32
    tables, constant lengths / offsets (initializers), negative_indices = 1
    (indices in [-R, R) count from the end): a weighted sum over uneven
    segments with an empty one, a positional one over equal segments, and a
    mean by offsets over a [R, 2, 3] table."""
    R, D = 30, 16
    t1 = rng.standard_normal((R, D)).astype(np.float32)
    t3 = rng.standard_normal((R, 2, 3)).astype(np.float32)
    lengths = np.array([3, 0, 7, 4], np.int64)
    even = np.array([4, 4, 4], np.int32)
    offsets = np.array([0, 5, 5, 11], np.int64)
    n1, n2, n3 = int(lengths.sum()), int(even.sum()), 14
    i1 = rng.integers(-R, R, n1).astype(np.int64)
    i2 = rng.integers(-R, R, n2).astype(np.int32)
    i3 = rng.integers(-R, R, n3).astype(np.int64)
    w1 = rng.standard_normal(n1).astype(np.float32)
    w2 = rng.standard_normal(4).astype(np.float32)
    wrap = lambda i: np.where(i < 0, i + R, i)
    segs3 = [(0, 5), (5, 5), (5, 11), (11, n3)]
    y1 = sls(t1.astype(np.float64), wrap(i1), segments(lengths), w1)
    y2 = sls(t1.astype(np.float64), wrap(i2), segments(even), w2, positional=True)
    y3 = sls(t3.reshape(R, 6).astype(np.float64), wrap(i3), segs3, mean=True).reshape(4, 2, 3)
    nodes = [
        helper.make_node("SparseLengthsWeightedSum", ["t1", "w1", "i1", "lengths"], ["y1"], domain=DOMAIN,
                         negative_indices=1),
        helper.make_node("SparseLengthsWeightedSum", ["t1", "w2", "i2", "even"], ["y2"], domain=DOMAIN,
                         negative_indices=1, positional=1),
        helper.make_node("SparseLengthsMean", ["t3", "i3", "offsets"], ["y3"], domain=DOMAIN,
                         negative_indices=1, offsets=1),
    ]
    inputs = [helper.make_tensor_value_info("i1", TensorProto.INT64, [n1]),
              helper.make_tensor_value_info("w1", TensorProto.FLOAT, [n1]),
              helper.make_tensor_value_info("i2", TensorProto.INT32, [n2]),
              helper.make_tensor_value_info("w2", TensorProto.FLOAT, [4]),
              helper.make_tensor_value_info("i3", TensorProto.INT64, [n3])]
    outputs = [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [4, D]),
               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3, D]),
               helper.make_tensor_value_info("y3", TensorProto.FLOAT, [4, 2, 3])]
    inits = [numpy_helper.from_array(t1, "t1"), numpy_helper.from_array(t3, "t3"),
             numpy_helper.from_array(lengths, "lengths"), numpy_helper.from_array(even, "even"),
             numpy_helper.from_array(offsets, "offsets")]
    model = model_of("kiln_sls_const_lengths", nodes, inputs, outputs, inits)
    write_case("test_kiln_sls_const_lengths", model, [i1, w1, i2, w2, i3], [y1, y2, y3])


def main():
    rng = np.random.default_rng(20261122)
    case_rowwise(rng)
    case_fp16_mean(rng)
    case_lstm_unit(rng)
    case_const_lengths(rng)


if __name__ == "__main__":
    main()
