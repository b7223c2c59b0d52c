#!/usr/bin/env python3
"""Generate the bundled default models of kiln and their test data.

Writes, next to this script:

    cnn.onnx                          small CNN classifier, opset 13
    cnn/test_data_set_0/input_0.pb    seeded random input  "input" [1,3,32,32]
    cnn/test_data_set_0/output_0.pb   expected output      "probabilities" [1,10]
    mlp.onnx                          3-layer MLP, opset 13
    mlp/test_data_set_0/input_0.pb    seeded random input  "x" [4,64]
    mlp/test_data_set_0/output_0.pb   expected output      "logits" [4,10]

The expected outputs come from a plain numpy forward pass written below (no
ONNX runtime involved), computed in float64 and rounded to float32 at the end.
Everything is seeded, so the outputs are byte-identical from run to run.

Requirements: Debian's python3-onnx (1.12) and python3-numpy:
    apt-get install python3-onnx python3-numpy && python3 examples/make_models.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
# Lowest IR version that carries opset 13; pinned so the bytes do not depend
# on the installed onnx package's default.
IR_VERSION = 7
BN_EPS = 1e-5
PRODUCER = "kiln examples/make_models.py"

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------
# numpy reference implementations (NCHW, float64)
# --------------------------------------------------------------------------

def ref_conv2d(x, w, b, pad):
    """Conv, stride 1, dilation 1, group 1, symmetric zero padding (im2col)."""
    n, c, h, wd = x.shape
    m, c2, kh, kw = w.shape
    assert c == c2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = h + 2 * pad - kh + 1
    ow = wd + 2 * pad - kw + 1
    # cols[n, c, i, j, oh, ow] = xp[n, c, oy + i, ox + j]
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j, :, :] = xp[:, :, i:i + oh, j:j + ow]
    cols = cols.reshape(n, c * kh * kw, oh * ow)
    y = np.einsum("mk,nkp->nmp", w.reshape(m, c * kh * kw), cols)
    y = y.reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.reshape(1, m, 1, 1)
    return y


def ref_batchnorm(x, scale, bias, mean, var, eps=BN_EPS):
    sh = (1, -1, 1, 1)
    return (scale.reshape(sh) * (x - mean.reshape(sh))
            / np.sqrt(var.reshape(sh) + eps) + bias.reshape(sh))


def ref_relu(x):
    return np.maximum(x, 0.0)


def ref_maxpool2x2(x):
    n, c, h, w = x.shape
    assert h % 2 == 0 and w % 2 == 0
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def ref_global_avg_pool(x):
    return x.mean(axis=(2, 3), keepdims=True)


def ref_flatten(x):
    return x.reshape(x.shape[0], -1)


def ref_gemm(a, b, c, trans_b):
    """Gemm with alpha = beta = 1, transA = 0."""
    return a @ (b.T if trans_b else b) + c


def ref_softmax(x, axis=1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def f64(a):
    return np.asarray(a, dtype=np.float64)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def he_normal(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def small_uniform(rng, shape, lo, hi):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def init(name, arr):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name=name)


def finish_model(graph):
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        producer_version="1",
    )
    model.ir_version = IR_VERSION
    model.model_version = 1
    onnx.checker.check_model(model)
    # Shape inference must agree with the declared output shapes.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(inferred)
    return model


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def write_model_and_data(name, model, in_name, x, out_name, y):
    assert x.dtype == np.float32 and y.dtype == np.float32
    write_bytes(os.path.join(HERE, name + ".onnx"), model.SerializeToString())
    ds = os.path.join(HERE, name, "test_data_set_0")
    write_bytes(os.path.join(ds, "input_0.pb"),
                numpy_helper.from_array(x, name=in_name).SerializeToString())
    write_bytes(os.path.join(ds, "output_0.pb"),
                numpy_helper.from_array(y, name=out_name).SerializeToString())


# --------------------------------------------------------------------------
# Model 1: CNN classifier
# --------------------------------------------------------------------------

def make_cnn():
    rng = np.random.default_rng(20240601)

    c0, c1, c2, ncls = 3, 8, 16, 10
    w1 = he_normal(rng, (c1, c0, 3, 3), c0 * 9)
    b1 = small_uniform(rng, (c1,), -0.1, 0.1)
    bn1_scale = small_uniform(rng, (c1,), 0.5, 1.5)
    bn1_bias = small_uniform(rng, (c1,), -0.2, 0.2)
    bn1_mean = small_uniform(rng, (c1,), -0.3, 0.3)
    bn1_var = small_uniform(rng, (c1,), 0.5, 2.0)

    w2 = he_normal(rng, (c2, c1, 3, 3), c1 * 9)
    bn2_scale = small_uniform(rng, (c2,), 0.5, 1.5)
    bn2_bias = small_uniform(rng, (c2,), -0.2, 0.2)
    bn2_mean = small_uniform(rng, (c2,), -0.3, 0.3)
    bn2_var = small_uniform(rng, (c2,), 0.5, 2.0)

    # Gemm B is [N, K] with transB = 1.  The pooled features after BN+ReLU
    # are O(1) and all non-negative, so plain He init gives logits spread
    # over ~15 units and a near one-hot softmax; scale down so the logits
    # spread over a few units and the softmax stays informative.
    fc_w = (he_normal(rng, (ncls, c2), c2) * 0.3).astype(np.float32)
    fc_b = small_uniform(rng, (ncls,), -0.5, 0.5)

    x = rng.standard_normal((1, c0, 32, 32)).astype(np.float32)

    inits = [
        init("conv1.weight", w1), init("conv1.bias", b1),
        init("bn1.scale", bn1_scale), init("bn1.bias", bn1_bias),
        init("bn1.mean", bn1_mean), init("bn1.var", bn1_var),
        init("conv2.weight", w2),
        init("bn2.scale", bn2_scale), init("bn2.bias", bn2_bias),
        init("bn2.mean", bn2_mean), init("bn2.var", bn2_var),
        init("fc.weight", fc_w), init("fc.bias", fc_b),
    ]
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"],
                         ["conv1"], name="conv1", kernel_shape=[3, 3],
                         pads=pads, strides=[1, 1]),
        helper.make_node("BatchNormalization",
                         ["conv1", "bn1.scale", "bn1.bias", "bn1.mean",
                          "bn1.var"], ["bn1"], name="bn1", epsilon=BN_EPS),
        helper.make_node("Relu", ["bn1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight"], ["conv2"],
                         name="conv2", kernel_shape=[3, 3], pads=pads,
                         strides=[1, 1]),
        helper.make_node("BatchNormalization",
                         ["conv2", "bn2.scale", "bn2.bias", "bn2.mean",
                          "bn2.var"], ["bn2"], name="bn2", epsilon=BN_EPS),
        helper.make_node("Relu", ["bn2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], name="pool2",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["pool2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"],
                         name="fc", alpha=1.0, beta=1.0, transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"],
                         name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "kiln_cnn",
        inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                              [1, c0, 32, 32])],
        outputs=[helper.make_tensor_value_info("probabilities",
                                               TensorProto.FLOAT, [1, ncls])],
        initializer=inits,
    )
    model = finish_model(graph)

    # numpy reference forward pass
    h = ref_conv2d(f64(x), f64(w1), f64(b1), pad=1)
    h = ref_batchnorm(h, f64(bn1_scale), f64(bn1_bias), f64(bn1_mean),
                      f64(bn1_var))
    h = ref_maxpool2x2(ref_relu(h))
    h = ref_conv2d(h, f64(w2), None, pad=1)
    h = ref_batchnorm(h, f64(bn2_scale), f64(bn2_bias), f64(bn2_mean),
                      f64(bn2_var))
    h = ref_maxpool2x2(ref_relu(h))
    h = ref_flatten(ref_global_avg_pool(h))
    logits = ref_gemm(h, f64(fc_w), f64(fc_b), trans_b=True)
    y = ref_softmax(logits, axis=1).astype(np.float32)
    assert y.shape == (1, ncls)
    # Not degenerate: neither (near) uniform nor (near) one-hot.
    assert 0.15 < y.max() < 0.95, y
    assert abs(float(y.sum()) - 1.0) < 1e-5

    write_model_and_data("cnn", model, "input", x, "probabilities", y)
    return model, y


# --------------------------------------------------------------------------
# Model 2: MLP
# --------------------------------------------------------------------------

def make_mlp():
    rng = np.random.default_rng(20240602)

    batch, d_in, d_h, d_out = 4, 64, 128, 10
    # Gemm B is stored [K, N] (transB = 0) here, so between the two models
    # both layouts of Gemm's B operand are exercised.
    w1 = he_normal(rng, (d_in, d_h), d_in)
    b1 = small_uniform(rng, (d_h,), -0.1, 0.1)
    w2 = he_normal(rng, (d_h, d_h), d_h)
    b2 = small_uniform(rng, (d_h,), -0.1, 0.1)
    w3 = he_normal(rng, (d_h, d_out), d_h)
    b3 = small_uniform(rng, (d_out,), -0.1, 0.1)

    x = rng.standard_normal((batch, d_in)).astype(np.float32)

    inits = [
        init("fc1.weight", w1), init("fc1.bias", b1),
        init("fc2.weight", w2), init("fc2.bias", b2),
        init("fc3.weight", w3), init("fc3.bias", b3),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1"],
                         name="fc1", alpha=1.0, beta=1.0),
        helper.make_node("Relu", ["fc1"], ["relu1"], name="relu1"),
        helper.make_node("Gemm", ["relu1", "fc2.weight", "fc2.bias"], ["fc2"],
                         name="fc2", alpha=1.0, beta=1.0),
        helper.make_node("Relu", ["fc2"], ["relu2"], name="relu2"),
        helper.make_node("Gemm", ["relu2", "fc3.weight", "fc3.bias"],
                         ["logits"], name="fc3", alpha=1.0, beta=1.0),
    ]
    graph = helper.make_graph(
        nodes, "kiln_mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                              [batch, d_in])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                               [batch, d_out])],
        initializer=inits,
    )
    model = finish_model(graph)

    h = ref_relu(ref_gemm(f64(x), f64(w1), f64(b1), trans_b=False))
    h = ref_relu(ref_gemm(h, f64(w2), f64(b2), trans_b=False))
    y = ref_gemm(h, f64(w3), f64(b3), trans_b=False).astype(np.float32)
    assert y.shape == (batch, d_out)

    write_model_and_data("mlp", model, "x", x, "logits", y)
    return model, y


def main():
    for name, fn in (("cnn", make_cnn), ("mlp", make_mlp)):
        _, y = fn()
        size = os.path.getsize(os.path.join(HERE, name + ".onnx"))
        # cnn is ~8 KB.  mlp is ~103 KB: its 25,856 float32 weights
        # (64x128 + 128x128 + 128x10, plus biases) alone take 103 KB, so the
        # requested 100 KB cap cannot hold with hidden width 128.
        assert size < 128 * 1024, (name, size)
        print("%s.onnx: %d bytes, output %s" % (name, size, list(y.shape)))
        print(np.array2string(y, precision=4, suppress_small=True))


if __name__ == "__main__":
    main()
