#!/usr/bin/env python3
"""bench/make_models.py: writes the benchmark models, their inputs and a
manifest into a folder (default build/bench/models).

Every model is ONNX opset 17, IR version 8, with its weights as initializers,
built with onnx.helper from weights drawn from a numpy generator seeded by the
model's name, so the same script always writes the same bytes. Each model
gets:

  NAME.onnx         the model (checked with onnx.checker, full_check=True)
  NAME.inputs.npz   its inputs (seeded too)
  manifest.json     for every model: inputs and outputs (name, dtype, shape),
                    the tolerances its outputs are checked with, the ideal
                    byte count of a fused kernel (elementwise chain), FLOPs
                    where meaningful, and a description; plus a hash of this
                    script so that bench.py rebuilds the models when it changes.

Usage: make_models.py [--out DIR] [--models a,b]
"""
import argparse
import hashlib
import json
import math
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


class Builder:
    """A tiny graph builder: named initializers and nodes with unique names."""

    def __init__(self, name):
        self.name = name
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.count = {}
        self.flops = 0

    def uid(self, hint):
        n = self.count.get(hint, 0)
        self.count[hint] = n + 1
        return f"{hint}_{n}" if n else hint

    def const(self, hint, array):
        name = self.uid(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def i64(self, hint, values):
        return self.const(hint, np.asarray(values, dtype=np.int64))

    def f32(self, hint, values):
        return self.const(hint, np.asarray(values, dtype=np.float32))

    def op(self, op_type, inputs, n_out=1, hint=None, **attrs):
        base = self.uid(hint or op_type.lower())
        outs = [base] if n_out == 1 else [f"{base}:{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, **attrs))
        return outs[0] if n_out == 1 else outs

    def input(self, name, dtype, shape):
        self.count.setdefault(name, 1)  # reserve the name: no node output may take it
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def output(self, value, name, dtype, shape):
        """Makes node value `value` a graph output called `name` (renames it:
        no Identity node, which would cost a copy)."""
        if value != name:
            assert name not in self.count, name
            for n in self.nodes:
                for lst in (n.input, n.output):
                    for k, v in enumerate(lst):
                        if v == value:
                            lst[k] = name
        self.outputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kiln-bench", producer_version="1")
        m.ir_version = IR_VERSION
        return m

    # -- layers --
    def conv(self, x, cin, cout, k, stride=1, group=1, bias=True, hint="conv", hw=None):
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(2.0 / fan_in)).astype(np.float32)
        ins = [x, self.const(hint + "_w", w)]
        if bias:
            ins.append(self.const(hint + "_b", (self.rng.standard_normal(cout) * 0.05).astype(np.float32)))
        pad = k // 2
        if hw is not None:
            oh, ow = (hw[0] + 2 * pad - k) // stride + 1, (hw[1] + 2 * pad - k) // stride + 1
            self.flops += 2 * oh * ow * cout * fan_in
        return self.op("Conv", ins, hint=hint, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad], group=group)

    def bn(self, x, c, hint="bn"):
        r = self.rng
        scale = r.uniform(0.5, 1.0, c).astype(np.float32)
        bias = (r.standard_normal(c) * 0.1).astype(np.float32)
        mean = (r.standard_normal(c) * 0.1).astype(np.float32)
        var = r.uniform(0.5, 1.5, c).astype(np.float32)
        return self.op("BatchNormalization",
                       [x, self.const(hint + "_scale", scale), self.const(hint + "_bias", bias),
                        self.const(hint + "_mean", mean), self.const(hint + "_var", var)],
                       hint=hint, epsilon=1e-5)

    def gemm(self, x, k, n, m_rows, hint="fc"):
        w = (self.rng.standard_normal((n, k)) * math.sqrt(2.0 / k)).astype(np.float32)
        b = (self.rng.standard_normal(n) * 0.05).astype(np.float32)
        self.flops += 2 * m_rows * k * n
        return self.op("Gemm", [x, self.const(hint + "_w", w), self.const(hint + "_b", b)], hint=hint, transB=1)

    def matmul_bias(self, x, k, n, m_rows, hint="proj", std=None):
        w = (self.rng.standard_normal((k, n)) * (std or math.sqrt(1.0 / k))).astype(np.float32)
        b = (self.rng.standard_normal(n) * 0.02).astype(np.float32)
        self.flops += 2 * m_rows * k * n
        y = self.op("MatMul", [x, self.const(hint + "_w", w)], hint=hint)
        return self.op("Add", [y, self.const(hint + "_b", b)], hint=hint + "_add")


F32, I64 = TensorProto.FLOAT, TensorProto.INT64


# ---------------------------------------------------------------- models
# Each builder returns (model, inputs dict, info dict). info: rtol, atol,
# description, optional ideal_bytes and flops.

def ew_chain():
    rows, cols = 4096, 4096  # 16M float32 (64 MiB)
    b = Builder("ew_chain")
    x = b.input("x", F32, [rows, cols])
    bias = b.f32("bias", (b.rng.standard_normal(cols) * 0.5).astype(np.float32))
    y = b.op("Mul", [x, b.f32("scale", np.float32(1.5))])       # 1
    y = b.op("Add", [y, bias])                                  # 2 broadcast bias [cols]
    s = b.op("Sigmoid", [y])                                    # 3
    y = b.op("Mul", [y, s])                                     # 4 (SiLU)
    y = b.op("Tanh", [y])                                       # 5
    y = b.op("Clip", [y, b.f32("lo", np.float32(-0.5)), b.f32("hi", np.float32(0.75))])  # 6
    y = b.op("Add", [y, x])                                     # 7 residual
    y = b.op("Relu", [y])                                       # 8
    b.output(y, "y", F32, [rows, cols])
    n = rows * cols
    inputs = {"x": b.rng.uniform(-2, 2, (rows, cols)).astype(np.float32)}
    info = dict(rtol=1e-4, atol=1e-5, ops=8,
                description="8 elementwise ops (Mul, Add+bias[4096], Sigmoid, Mul, Tanh, Clip, Add, Relu) on 4096x4096 float32",
                # an ideal fused kernel reads x and the bias once and writes y once
                ideal_bytes=4 * n + 4 * cols + 4 * n)
    return b.model(), inputs, info


def mlp():
    batch, dims = 64, [1024, 2048, 2048, 256]
    b = Builder("mlp")
    y = b.input("x", F32, [batch, dims[0]])
    for i in range(3):
        y = b.gemm(y, dims[i], dims[i + 1], batch, hint=f"fc{i + 1}")
        if i < 2:
            y = b.op("Relu", [y])
    b.output(y, "y", F32, [batch, dims[-1]])
    inputs = {"x": b.rng.standard_normal((batch, dims[0])).astype(np.float32)}
    info = dict(rtol=1e-3, atol=1e-4, flops=b.flops,
                description="3 Gemm (1024-2048-2048-256) + Relu, batch 64")
    return b.model(), inputs, info


def small_cnn():
    b = Builder("small_cnn")
    y = b.input("x", F32, [1, 3, 64, 64])
    c, hw = 3, 64
    for i, co in enumerate([32, 64, 128]):
        y = b.conv(y, c, co, 3, bias=False, hint=f"conv{i + 1}", hw=(hw, hw))
        y = b.bn(y, co, hint=f"bn{i + 1}")
        y = b.op("Relu", [y])
        y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
        c, hw = co, hw // 2
    y = b.op("Flatten", [y], axis=1)
    y = b.gemm(y, c * hw * hw, 10, 1, hint="fc")
    b.output(y, "logits", F32, [1, 10])
    inputs = {"x": b.rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}
    info = dict(rtol=1e-3, atol=1e-4, flops=b.flops,
                description="3x (Conv3x3-BatchNorm-Relu-MaxPool2) 32/64/128 ch + Gemm, 1x3x64x64")
    return b.model(), inputs, info


def resnet18():
    b = Builder("resnet18")
    y = b.input("x", F32, [1, 3, 224, 224])
    y = b.conv(y, 3, 64, 7, stride=2, bias=False, hint="conv1", hw=(224, 224))
    y = b.op("Relu", [b.bn(y, 64, hint="bn1")])
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c, hw = 64, 56
    for stage, co in enumerate([64, 128, 256, 512]):
        for blk in range(2):
            stride = 2 if stage > 0 and blk == 0 else 1
            h = f"l{stage + 1}.{blk}"
            t = b.conv(y, c, co, 3, stride=stride, bias=False, hint=h + ".conv1", hw=(hw, hw))
            t = b.op("Relu", [b.bn(t, co, hint=h + ".bn1")])
            ohw = hw // stride
            t = b.conv(t, co, co, 3, bias=False, hint=h + ".conv2", hw=(ohw, ohw))
            t = b.bn(t, co, hint=h + ".bn2")
            sc = y
            if stride != 1 or c != co:
                sc = b.conv(y, c, co, 1, stride=stride, bias=False, hint=h + ".down", hw=(hw, hw))
                sc = b.bn(sc, co, hint=h + ".down_bn")
            y = b.op("Relu", [b.op("Add", [t, sc])])
            c, hw = co, ohw
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    y = b.gemm(y, 512, 1000, 1, hint="fc")
    b.output(y, "logits", F32, [1, 1000])
    inputs = {"x": b.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    info = dict(rtol=1e-3, atol=1e-3, flops=b.flops,
                description="ResNet-18 (BasicBlock x [2,2,2,2]), random weights, BatchNormalization unfolded, 1x3x224x224")
    return b.model(), inputs, info


def mobilenetv2():
    b = Builder("mobilenetv2")
    y = b.input("x", F32, [1, 3, 224, 224])
    zero, six = b.f32("zero", np.float32(0)), b.f32("six", np.float32(6))
    relu6 = lambda t: b.op("Clip", [t, zero, six])  # noqa: E731
    y = relu6(b.conv(y, 3, 32, 3, stride=2, hint="stem", hw=(224, 224)))
    c, hw = 32, 112
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for bi, (t, co, n, s) in enumerate(cfg):
        for i in range(n):
            stride = s if i == 0 else 1
            h = f"b{bi}.{i}"
            hidden = c * t
            z = y
            if t != 1:
                z = relu6(b.conv(z, c, hidden, 1, hint=h + ".expand", hw=(hw, hw)))
            z = relu6(b.conv(z, hidden, hidden, 3, stride=stride, group=hidden, hint=h + ".dw", hw=(hw, hw)))
            ohw = (hw - 1) // stride + 1
            z = b.conv(z, hidden, co, 1, hint=h + ".project", hw=(ohw, ohw))
            if stride == 1 and c == co:
                z = b.op("Add", [z, y])
            y, c, hw = z, co, ohw
    y = relu6(b.conv(y, c, 1280, 1, hint="head", hw=(hw, hw)))
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    y = b.gemm(y, 1280, 1000, 1, hint="fc")
    b.output(y, "logits", F32, [1, 1000])
    inputs = {"x": b.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    info = dict(rtol=1e-3, atol=1e-3, flops=b.flops,
                description="MobileNetV2 (17 inverted-residual blocks, depthwise 3x3, Clip(0,6), BN folded into conv bias), 1x3x224x224")
    return b.model(), inputs, info


def transformer():
    seq, hid, heads, ffn = 128, 256, 4, 1024
    dh = hid // heads
    b = Builder("transformer")
    x = b.input("x", F32, [1, seq, hid])

    def layernorm(t, hint):
        g = b.f32(hint + "_g", b.rng.uniform(0.8, 1.2, hid).astype(np.float32))
        be = b.f32(hint + "_b", (b.rng.standard_normal(hid) * 0.05).astype(np.float32))
        return b.op("LayerNormalization", [t, g, be], hint=hint, axis=-1, epsilon=1e-5)

    h = layernorm(x, "ln1")
    split = b.i64("heads_shape", [1, seq, heads, dh])
    q = b.op("Transpose", [b.op("Reshape", [b.matmul_bias(h, hid, hid, seq, "q"), split])], perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [b.matmul_bias(h, hid, hid, seq, "k"), split])], perm=[0, 2, 3, 1])
    v = b.op("Transpose", [b.op("Reshape", [b.matmul_bias(h, hid, hid, seq, "v"), split])], perm=[0, 2, 1, 3])
    s = b.op("MatMul", [q, k], hint="scores")                      # [1, heads, seq, seq]
    s = b.op("Mul", [s, b.f32("inv_sqrt_dh", np.float32(1 / math.sqrt(dh)))])
    p = b.op("Softmax", [s], axis=-1)
    a = b.op("MatMul", [p, v], hint="context")                     # [1, heads, seq, dh]
    b.flops += 2 * 2 * heads * seq * seq * dh
    a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), b.i64("merge_shape", [1, seq, hid])])
    x1 = b.op("Add", [b.matmul_bias(a, hid, hid, seq, "o"), x], hint="residual1")
    h = layernorm(x1, "ln2")
    f = b.matmul_bias(h, hid, ffn, seq, "ffn1")
    # Gelu via Erf: 0.5 * f * (1 + erf(f / sqrt 2))
    e = b.op("Erf", [b.op("Div", [f, b.f32("sqrt2", np.float32(math.sqrt(2)))])])
    g = b.op("Mul", [b.op("Mul", [f, b.op("Add", [e, b.f32("one", np.float32(1))])]), b.f32("half", np.float32(0.5))])
    y = b.op("Add", [b.matmul_bias(g, ffn, hid, seq, "ffn2"), x1], hint="residual2")
    b.output(y, "y", F32, [1, seq, hid])
    inputs = {"x": b.rng.standard_normal((1, seq, hid)).astype(np.float32)}
    info = dict(rtol=1e-3, atol=1e-4, flops=b.flops,
                description="pre-LN transformer encoder block: LayerNormalization, 4-head attention "
                            "(MatMul, Softmax), Gelu via Erf, FFN 1024; seq 128, hidden 256")
    return b.model(), inputs, info


def detection_post():
    H, W, A, stride = 200, 250, 4, 8.0
    N = H * W * A  # 200,000 boxes
    img_h, img_w = H * stride, W * stride
    b = Builder("detection_post")
    deltas = b.input("deltas", F32, [N, 4])
    drop_rows = b.input("drop_rows", I64, [2000, 1])
    fix_idx = b.input("fix_idx", I64, [1000, 2])
    fix_val = b.input("fix_val", F32, [1000])

    # anchor grid: centres from Range, sizes from a constant, broadcast with Expand
    def rng1d(limit, hint):
        r = b.op("Range", [b.f32(hint + "_start", np.float32(0)), b.f32(hint + "_limit", np.float32(limit)),
                           b.f32(hint + "_delta", np.float32(1))], hint=hint)
        return b.op("Mul", [b.op("Add", [r, b.f32("half", np.float32(0.5))]), b.f32("stride", np.float32(stride))])

    grid = b.i64("grid_shape", [H, W, A])
    cx = b.op("Expand", [b.op("Reshape", [rng1d(W, "range_x"), b.i64("shape_1w1", [1, W, 1])]), grid])
    cy = b.op("Expand", [b.op("Reshape", [rng1d(H, "range_y"), b.i64("shape_h11", [H, 1, 1])]), grid])
    sizes = np.array([[32, 32], [64, 64], [45, 90], [90, 45]], dtype=np.float32)
    aw = b.op("Expand", [b.f32("anchor_w", sizes[:, 0].reshape(1, 1, A)), grid])
    ah = b.op("Expand", [b.f32("anchor_h", sizes[:, 1].reshape(1, 1, A)), grid])
    last = b.i64("axis_last", [-1])
    cols = [b.op("Unsqueeze", [t, last]) for t in (cx, cy, aw, ah)]
    anchors = b.op("Reshape", [b.op("Concat", cols, axis=-1), b.i64("shape_n4", [N, 4])], hint="anchors_nx4")

    # strided Slices: column k of an [N,4] tensor is every 4th element of its flat view
    flat = b.i64("flat", [-1])

    def columns(t, hint):
        f = b.op("Reshape", [t, flat], hint=hint + "_flat")
        return [b.op("Slice", [f, b.i64("start%d" % k, [k]), b.i64("end", [4 * N]), b.i64("axis0", [0]),
                               b.i64("step4", [4])], hint=f"{hint}_col{k}") for k in range(4)]

    acx, acy, aww, ahh = columns(anchors, "anchor")
    dx, dy, dw, dh = columns(deltas, "delta")
    clip = b.f32("wh_clip", np.float32(math.log(1000.0 / 16)))
    pcx = b.op("Add", [b.op("Mul", [dx, aww]), acx])
    pcy = b.op("Add", [b.op("Mul", [dy, ahh]), acy])
    pw = b.op("Mul", [b.op("Exp", [b.op("Min", [dw, clip])]), aww])
    ph = b.op("Mul", [b.op("Exp", [b.op("Min", [dh, clip])]), ahh])
    half = b.f32("half_f", np.float32(0.5))
    hw_, hh_ = b.op("Mul", [pw, half]), b.op("Mul", [ph, half])
    zero = b.f32("zero", np.float32(0))
    imw, imh = b.f32("img_w", np.float32(img_w)), b.f32("img_h", np.float32(img_h))
    x1 = b.op("Clip", [b.op("Sub", [pcx, hw_]), zero, imw])
    y1 = b.op("Clip", [b.op("Sub", [pcy, hh_]), zero, imh])
    x2 = b.op("Min", [b.op("Max", [b.op("Add", [pcx, hw_]), zero]), imw])
    y2 = b.op("Min", [b.op("Max", [b.op("Add", [pcy, hh_]), zero]), imh])
    one = b.i64("axis_one", [1])
    boxes = b.op("Concat", [b.op("Unsqueeze", [t, one]) for t in (x1, y1, x2, y2)], axis=1)
    # ScatterND: zero whole rows (suppressed anchors), then overwrite single coordinates
    zeros = b.f32("zero_rows", np.zeros((2000, 4), np.float32))
    boxes = b.op("ScatterND", [boxes, drop_rows, zeros], hint="scatter_rows")
    boxes = b.op("ScatterND", [boxes, fix_idx, fix_val], hint="scatter_elems")
    b.output(boxes, "boxes", F32, [N, 4])
    b.output(anchors, "anchors", F32, [N, 4])
    r = b.rng
    d = (r.standard_normal((N, 4)) * 0.2).astype(np.float32)
    d[r.choice(N, 500, replace=False), 2:] = 8.0  # some large dw/dh: exercises the Min clamp
    pick = r.choice(N * 4, 1000, replace=False)  # unique (row, col) pairs
    inputs = {
        "deltas": d,
        "drop_rows": r.choice(N, 2000, replace=False).astype(np.int64).reshape(2000, 1),
        "fix_idx": np.stack([pick // 4, pick % 4], axis=1).astype(np.int64),
        "fix_val": r.uniform(0, 100, 1000).astype(np.float32),
    }
    info = dict(rtol=1e-5, atol=1e-3,
                description="box decode for 200k anchors: anchor grid (Range, Reshape, Expand, Unsqueeze, Concat), "
                            "strided Slices, Exp, Min/Max/Clip clamping, 2 ScatterND")
    return b.model(), inputs, info


def embedding_bag():
    tables, vocab, dim, batch, bag = 4, 50000, 64, 512, 40
    b = Builder("embedding_bag")
    axes = b.i64("bag_axis", [1])
    pooled = []
    inputs = {}
    for t in range(tables):
        idx = b.input(f"idx{t}", I64, [batch, bag])
        mask = b.input(f"mask{t}", F32, [batch, bag, 1])
        table = b.f32(f"table{t}", (b.rng.standard_normal((vocab, dim)) * 0.1).astype(np.float32))
        rows = b.op("Gather", [table, idx], axis=0, hint=f"gather{t}")          # [batch, bag, dim]
        rows = b.op("Mul", [rows, mask], hint=f"masked{t}")                      # padding slots weigh 0
        pooled.append(b.op("ReduceSum", [rows, axes], keepdims=0, hint=f"sum{t}"))  # [batch, dim]
        lengths = b.rng.integers(1, bag + 1, batch)
        inputs[f"idx{t}"] = b.rng.integers(0, vocab, (batch, bag)).astype(np.int64)
        inputs[f"mask{t}"] = (np.arange(bag)[None, :] < lengths[:, None]).astype(np.float32)[:, :, None]
    y = b.op("Concat", pooled, axis=1)
    b.output(y, "y", F32, [batch, tables * dim])
    info = dict(rtol=1e-4, atol=1e-5,
                description="4 embedding tables 50000x64: Gather of 512 bags x 40 ids, mask Mul, ReduceSum over each bag, Concat")
    return b.model(), inputs, info


def sls_rowwise():
    """kiln's own domain (docs/KILN_DOMAIN.md): the embedding bag of
    embedding_bag() as 4 SparseLengthsSum nodes over 8-bit rowwise tables.
    onnxruntime cannot run it: bench/sls_isa.py times it on kiln's cpu
    backend, AVX2 against the scalar twin (KILN_CPU_ISA=base)."""
    tables, vocab, dim, batch, bag = 4, 50000, 64, 512, 40
    b = Builder("sls_rowwise")
    inputs = {}
    outs = []
    for t in range(tables):
        x = (b.rng.standard_normal((vocab, dim)) * 0.1).astype(np.float32)
        lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
        rng = hi - lo
        q = np.clip(np.rint((x - lo) * (np.float32(255) / (rng + np.float32(1e-8)))), 0, 255).astype(np.uint8)
        tail = np.concatenate([rng / np.float32(255), lo], axis=1).astype(np.float32).view(np.uint8)
        table = b.const(f"table{t}", np.concatenate([q, tail], axis=1))      # [vocab, dim + 8] uint8
        lengths = b.rng.integers(1, bag + 1, batch).astype(np.int32)
        n = int(lengths.sum())
        idx = b.input(f"idx{t}", I64, [n])
        lens = b.input(f"lengths{t}", TensorProto.INT32, [batch])
        inputs[f"idx{t}"] = b.rng.integers(0, vocab, n).astype(np.int64)
        inputs[f"lengths{t}"] = lengths
        base = b.uid(f"sls{t}")
        b.nodes.append(helper.make_node("SparseLengthsSum", [table, idx, lens], [base], name=base, domain="ai.kiln"))
        outs.append(base)
    for t, o in enumerate(outs):
        b.output(o, f"y{t}", F32, [batch, dim])
    info = dict(rtol=1e-4, atol=1e-5, kiln_only=True, rows=int(sum(v.size for k, v in inputs.items() if k[:3] == "idx")),
                description="4 8-bit rowwise tables 50000x(64+8): SparseLengthsSum (domain ai.kiln) of 512 bags x 1..40 ids")
    m = b.model()
    m.opset_import.append(helper.make_opsetid("ai.kiln", 1))
    return m, inputs, info


MODELS = {
    "ew_chain": ew_chain,
    "mlp": mlp,
    "small_cnn": small_cnn,
    "resnet18": resnet18,
    "mobilenetv2": mobilenetv2,
    "transformer": transformer,
    "detection_post": detection_post,
    "embedding_bag": embedding_bag,
    "sls_rowwise": sls_rowwise,  # kiln only (bench/sls_isa.py), not in bench.py's MODEL_ORDER
}

NP_TO_NAME = {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64", np.dtype(np.int32): "int32",
              np.dtype(np.bool_): "bool", np.dtype(np.float64): "float64"}


def write(name, out_dir):
    model, inputs, info = MODELS[name]()
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString()
    path = os.path.join(out_dir, name + ".onnx")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    np.savez(os.path.join(out_dir, name + ".inputs.npz"), **inputs)
    g = model.graph
    init_names = {t.name for t in g.initializer}
    dt = lambda vi: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)  # noqa: E731
    shape = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    ins = [dict(name=vi.name, dtype=NP_TO_NAME[np.dtype(dt(vi))], shape=shape(vi))
           for vi in g.input if vi.name not in init_names]
    for d in ins:
        a = inputs[d["name"]]
        assert list(a.shape) == d["shape"] and NP_TO_NAME[a.dtype] == d["dtype"], (name, d, a.shape, a.dtype)
    outs = [dict(name=vi.name, dtype=NP_TO_NAME[np.dtype(dt(vi))], shape=shape(vi)) for vi in g.output]
    n_params = sum(int(np.prod(t.dims)) for t in g.initializer)
    entry = dict(file=name + ".onnx", inputs_file=name + ".inputs.npz", inputs=ins, outputs=outs,
                 nodes=len(g.node), op_types=sorted({n.op_type for n in g.node}), params=n_params,
                 bytes=len(data), opset=OPSET, ir_version=IR_VERSION, **info)
    print(f"make_models: {name}: {len(g.node)} nodes, {n_params / 1e6:.2f} M params, {len(data) / 2**20:.1f} MiB, "
          f"ops {','.join(entry['op_types'])}", flush=True)
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bench", "models"))
    ap.add_argument("--models", default=",".join(MODELS), help="comma list (default: all): " + ",".join(MODELS))
    a = ap.parse_args()
    names = [m for m in a.models.split(",") if m]
    for m in names:
        if m not in MODELS:
            sys.exit(f"make_models: unknown model '{m}' (known: {', '.join(MODELS)})")
    os.makedirs(a.out, exist_ok=True)
    man_path = os.path.join(a.out, "manifest.json")
    manifest = {}
    if os.path.exists(man_path):
        with open(man_path) as f:
            manifest = json.load(f)
    h = script_hash()
    if manifest.get("generator_hash") != h:
        manifest = {"models": {}}
    manifest["generator_hash"] = h
    manifest["onnx_version"] = onnx.__version__
    manifest["numpy_version"] = np.__version__
    for m in names:
        manifest["models"][m] = write(m, a.out)
        with open(man_path + ".tmp", "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(man_path + ".tmp", man_path)


if __name__ == "__main__":
    main()
