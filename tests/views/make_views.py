#!/usr/bin/env python3
"""Generate kiln's views suite: detection post-processing graphs that
exercise views (strided aliases) and in-place writes, in the ONNX node-test
layout.

Writes, next to this script, one directory per case:

    test_views_<case>/model.onnx
    test_views_<case>/test_data_set_0/input_K.pb    seeded random inputs
    test_views_<case>/test_data_set_0/output_K.pb   expected outputs (numpy)

Run the cases with tests/conformance (ROOT = this directory); README.md says
what each case checks.

The expected outputs come from plain numpy written below (explicit copies,
no aliasing, no ONNX runtime involved), computed in float64 and rounded to
float32. Each case is also computed a second time in float32, op by op in the
graph's order, and the generator asserts that the two agree to within a tenth
of the conformance tolerance (rtol 1e-4, atol 1e-5) and that every boolean
and integer output is identical: the data are chosen so that no output is
ill-conditioned, so any correct float32 implementation (another exp, FMA
contraction, another summation order) passes.

Everything is seeded and the models pin IR version 8, so the files are
byte-identical from run to run. Every model passes onnx.checker and strict
shape inference. Each case directory stays below 200 KB.

Requirements: Debian's python3-onnx (1.12) and python3-numpy:
    apt-get install python3-onnx python3-numpy && python3 tests/views/make_views.py
"""

import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
PRODUCER = "kiln tests/views/make_views.py"
HERE = os.path.dirname(os.path.abspath(__file__))
MAX_CASE_BYTES = 200 * 1024
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
# The conformance runner's tolerance; the float32 re-computation must stay
# within CONDITION_MARGIN of it.
RTOL, ATOL = 1e-4, 1e-5
CONDITION_MARGIN = 0.1

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL


# --------------------------------------------------------------------------
# graph building
# --------------------------------------------------------------------------

class Graph:
    """Collects nodes and initializers; names are deterministic."""

    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.outputs = []
        self.count = {}

    def _fresh(self, stem):
        k = self.count.get(stem, 0)
        self.count[stem] = k + 1
        return "%s_%d" % (stem, k)

    def input(self, name, elem, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name, elem, shape):
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def const(self, arr, stem="c"):
        name = self._fresh(stem)
        self.inits.append(numpy_helper.from_array(np.array(arr, order="C"),
                                                  name=name))
        return name

    def f(self, value):
        """A float32 scalar constant."""
        return self.const(np.array(value, dtype=np.float32), "f")

    def i64(self, values):
        return self.const(np.array(values, dtype=np.int64), "i")

    def op(self, op_type, inputs, out=None, n_out=1, **attrs):
        """Adds a node; returns its output name (or list of names)."""
        if out is None:
            outs = [self._fresh(op_type.lower()) for _ in range(n_out)]
        else:
            outs = out if isinstance(out, list) else [out]
        self.nodes.append(helper.make_node(op_type, inputs, outs,
                                           name=self._fresh("n_" + op_type),
                                           **attrs))
        return outs if (n_out > 1 or isinstance(out, list)) else outs[0]

    def slice(self, x, starts, ends, axes=None, steps=None, out=None):
        ins = [x, self.i64(starts), self.i64(ends)]
        if axes is not None or steps is not None:
            ins.append(self.i64(axes) if axes is not None else "")
        if steps is not None:
            ins.append(self.i64(steps))
        return self.op("Slice", ins, out=out)

    def unsqueeze(self, x, axes, out=None):
        return self.op("Unsqueeze", [x, self.i64(axes)], out=out)

    def reshape(self, x, shape, out=None):
        return self.op("Reshape", [x, self.i64(shape)], out=out)

    def gather(self, x, index, axis, out=None):
        """Gather with a constant scalar index (a view)."""
        return self.op("Gather", [x, self.i64(index)], out=out, axis=axis)


def finish_model(g, opset, metadata=None):
    graph = helper.make_graph(g.nodes, g.name, g.inputs, g.outputs,
                              initializer=g.inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name=PRODUCER,
        producer_version="1",
    )
    model.ir_version = IR_VERSION
    model.model_version = 1
    for k, v in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.checker.check_model(model)
    # Strict shape inference must agree with every declared shape.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(inferred)
    return model


# --------------------------------------------------------------------------
# writing and checking
# --------------------------------------------------------------------------

def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def check_conditioning(case, names, exact, f32):
    """exact: the float64 result (rounded at the end); f32: the op-by-op
    float32 result. Floats must agree within a fraction of the tolerance,
    everything else exactly."""
    for name, a, b in zip(names, exact, f32):
        assert a.shape == b.shape, (case, name, a.shape, b.shape)
        if a.dtype.kind == "f":
            a64 = a.astype(np.float64)
            err = np.abs(b.astype(np.float64) - a64) / (ATOL + RTOL * np.abs(a64))
            worst = float(err.max()) if err.size else 0.0
            assert worst < CONDITION_MARGIN, (
                "%s: output %s is ill-conditioned (float32 error %.3f of the tolerance)"
                % (case, name, worst))
        else:
            assert np.array_equal(a, b), (case, name, "differs in float32")


def write_case(case, model, in_names, inputs, out_names, outputs):
    d = os.path.join(HERE, case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    write_bytes(os.path.join(d, "model.onnx"), model.SerializeToString())
    ds = os.path.join(d, "test_data_set_0")
    graph_inputs = [v.name for v in model.graph.input]
    graph_outputs = [v.name for v in model.graph.output]
    assert graph_inputs == list(in_names), (case, graph_inputs, in_names)
    assert graph_outputs == list(out_names), (case, graph_outputs, out_names)
    for k, (n, x) in enumerate(zip(in_names, inputs)):
        write_bytes(os.path.join(ds, "input_%d.pb" % k),
                    numpy_helper.from_array(x, name=n).SerializeToString())
    for k, (n, y) in enumerate(zip(out_names, outputs)):
        write_bytes(os.path.join(ds, "output_%d.pb" % k),
                    numpy_helper.from_array(y, name=n).SerializeToString())
    total = 0
    for root, _, files in os.walk(d):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    assert total < MAX_CASE_BYTES, (case, total)
    return total


def run_case(case, model, in_names, inputs, out_names, ref):
    """ref(inputs, ft) computes the outputs in floating type ft."""
    exact = [np.asarray(y) for y in ref(inputs, np.float64)]
    f32 = [np.asarray(y) for y in ref(inputs, np.float32)]
    outs = []
    for y in exact:
        outs.append(y.astype(np.float32) if y.dtype.kind == "f" else y)
    check_conditioning(case, out_names, outs, f32)
    size = write_case(case, model, in_names, inputs, out_names, outs)
    print("%-32s %7d bytes, outputs %s" % (
        case, size, ", ".join(str(list(y.shape)) for y in outs)))
    return size, outs


def cast(inputs, ft):
    return [x.astype(ft) if x.dtype.kind == "f" else x for x in inputs]


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def random_boxes(rng, n, lo, hi, min_size, max_size):
    """[n, 4] boxes x1, y1, x2, y2 with corners in [lo, hi] (float32)."""
    x1 = rng.uniform(lo, hi - max_size, n)
    y1 = rng.uniform(lo, hi - max_size, n)
    w = rng.uniform(min_size, max_size, n)
    h = rng.uniform(min_size, max_size, n)
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)


# --------------------------------------------------------------------------
# 1. box decode from deltas with class-strided slices
# --------------------------------------------------------------------------

BBOX_CLIP = float(np.float32(np.log(1000.0 / 16)))
WEIGHTS = (10.0, 10.0, 5.0, 5.0)


def make_box_decode():
    case = "test_views_box_decode"
    rng = np.random.default_rng(20240701)
    n, c = 600, 5
    anchors = random_boxes(rng, n, 0.0, 800.0, 8.0, 160.0)
    deltas = (rng.standard_normal((n, 4 * c)) * 1.5).astype(np.float32)
    # Push some dw/dh past the clamp (dw / 5 > log(1000/16) ~ 4.14) so that
    # Min and Clip bite, on both sides of the limit.
    big = rng.choice(n * c, 60, replace=False)
    deltas.reshape(n, c, 4)[big // c, big % c, 2] = rng.uniform(21.0, 40.0, 60)
    big = rng.choice(n * c, 60, replace=False)
    deltas.reshape(n, c, 4)[big // c, big % c, 3] = rng.uniform(21.0, 40.0, 60)
    # An Exp of a clamped delta scales the width by up to ~62: keep those
    # boxes' deltas for the centre small so the corners stay away from
    # cancellation (pred_ctr -/+ half width near 0).
    inputs = [deltas, anchors]

    g = Graph("views_box_decode")
    g.input("deltas", F32, [n, 4 * c])
    g.input("anchors", F32, [n, 4])
    # class-strided slices: starts 0/1/2/3, step 4, several spellings of
    # the end (INT64_MAX, exact, -1, past the end)
    dx = g.slice("deltas", [0], [INT64_MAX], [1], [4])
    dy = g.slice("deltas", [1], [4 * c], [1], [4])
    dw = g.slice("deltas", [2], [-1], [-1], [4])
    dh = g.slice("deltas", [3], [1000], [1], [4])
    ax1 = g.slice("anchors", [0], [1], [1])
    ay1 = g.slice("anchors", [1], [2], [-1])
    ax2 = g.slice("anchors", [2], [3], [1])
    ay2 = g.slice("anchors", [3], [4], [1], [1])
    w = g.op("Sub", [ax2, ax1])
    h = g.op("Sub", [ay2, ay1])
    half = g.f(0.5)
    cx = g.op("Add", [ax1, g.op("Mul", [w, half])])
    cy = g.op("Add", [ay1, g.op("Mul", [h, half])])
    dx = g.op("Div", [dx, g.f(WEIGHTS[0])])
    dy = g.op("Div", [dy, g.f(WEIGHTS[1])])
    dw = g.op("Div", [dw, g.f(WEIGHTS[2])])
    dh = g.op("Div", [dh, g.f(WEIGHTS[3])])
    dw = g.op("Min", [dw, g.f(BBOX_CLIP)])
    dh = g.op("Clip", [dh, g.f(-BBOX_CLIP * 4), g.f(BBOX_CLIP)])
    pcx = g.op("Add", [g.op("Mul", [dx, w]), cx])
    pcy = g.op("Add", [g.op("Mul", [dy, h]), cy])
    pw = g.op("Mul", [g.op("Exp", [dw]), w])
    ph = g.op("Mul", [g.op("Exp", [dh]), h])
    hw = g.op("Mul", [pw, half])
    hh = g.op("Mul", [ph, half])
    x1 = g.op("Sub", [pcx, hw])
    y1 = g.op("Sub", [pcy, hh])
    x2 = g.op("Add", [pcx, hw])
    y2 = g.op("Add", [pcy, hh])
    parts = [g.unsqueeze(t, [2]) for t in (x1, y1, x2, y2)]
    g.op("Concat", parts, out="boxes", axis=2)
    g.reshape("boxes", [0, -1], out="boxes_flat")
    g.output("boxes", F32, [n, c, 4])
    g.output("boxes_flat", F32, [n, 4 * c])
    model = finish_model(g, 17)

    def ref(ins, ft):
        d, a = cast(ins, ft)
        dx, dy, dw, dh = (d[:, k::4].copy() for k in range(4))
        ax1, ay1, ax2, ay2 = (a[:, k:k + 1].copy() for k in range(4))
        w = ax2 - ax1
        h = ay2 - ay1
        cx = ax1 + w * ft(0.5)
        cy = ay1 + h * ft(0.5)
        dx = dx / ft(WEIGHTS[0])
        dy = dy / ft(WEIGHTS[1])
        dw = np.minimum(dw / ft(WEIGHTS[2]), ft(BBOX_CLIP))
        dh = np.clip(dh / ft(WEIGHTS[3]), ft(-BBOX_CLIP * 4), ft(BBOX_CLIP))
        pcx = dx * w + cx
        pcy = dy * h + cy
        pw = np.exp(dw) * w
        ph = np.exp(dh) * h
        hw, hh = pw * ft(0.5), ph * ft(0.5)
        boxes = np.stack([pcx - hw, pcy - hh, pcx + hw, pcy + hh], axis=2)
        return [boxes, boxes.reshape(n, 4 * c)]

    return run_case(case, model, ["deltas", "anchors"], inputs,
                    ["boxes", "boxes_flat"], ref)


# --------------------------------------------------------------------------
# 2. anchor grid generation with valid flags (feature map shape -> Range)
# --------------------------------------------------------------------------

def base_anchors_for(stride, sizes):
    c = (stride - 1) / 2.0
    return np.array([[c - w / 2, c - h / 2, c + w / 2, c + h / 2]
                     for w, h in sizes], dtype=np.float32)


def make_anchor_grid():
    case = "test_views_anchor_grid"
    rng = np.random.default_rng(20240702)
    fh, fw, stride = 20, 25, 8.0
    sizes = [(16, 16), (32, 32), (64, 64), (16, 32), (32, 16), (48, 24)]
    base = base_anchors_for(stride, sizes)
    a = base.shape[0]
    k = fh * fw * a
    # Anchor corners are 3.5 or 7.5 modulo 8; border and image size are
    # chosen so that some corners sit exactly on the limits (ties decide
    # >= against > and <= against <).
    border = 4.5
    feat = rng.standard_normal((1, 2, fh, fw)).astype(np.float32)
    im_info = np.array([151.0, 191.0], dtype=np.float32)  # image h, w
    inputs = [feat, base, np.array(stride, dtype=np.float32), im_info]

    g = Graph("views_anchor_grid")
    g.input("feat", F32, [1, 2, fh, fw])
    g.input("base_anchors", F32, [a, 4])
    g.input("stride", F32, [])
    g.input("im_info", F32, [2])
    shp = g.op("Shape", ["feat"])
    hh = g.gather(shp, 2, 0)
    ww = g.gather(shp, 3, 0)
    zero, one = g.const(np.array(0, np.int64)), g.const(np.array(1, np.int64))
    ry = g.op("Range", [zero, hh, one])
    rx = g.op("Range", [zero, ww, one])
    fy = g.op("Cast", [ry], to=F32)
    fx = g.op("Cast", [rx], to=F32)
    sy = g.op("Mul", [fy, "stride"])
    sx = g.op("Mul", [fx, "stride"])
    hw = g.op("Concat", [g.unsqueeze(hh, [0]), g.unsqueeze(ww, [0])], axis=0)
    gy = g.op("Expand", [g.unsqueeze(sy, [1]), hw])   # [H, W]
    gx = g.op("Expand", [g.unsqueeze(sx, [0]), hw])   # [H, W]
    ux = g.unsqueeze(g.reshape(gx, [-1]), [1])        # [HW, 1]
    uy = g.unsqueeze(g.reshape(gy, [-1]), [1])
    shifts = g.op("Concat", [ux, uy, ux, uy], axis=1)  # [HW, 4]
    allb = g.op("Add", [g.unsqueeze(shifts, [1]),
                        g.unsqueeze("base_anchors", [0])])  # [HW, A, 4]
    g.reshape(allb, [-1, 4], out="anchors")
    # inside the image (with an allowed border)
    x1 = g.gather("anchors", 0, 1)
    y1 = g.gather("anchors", 1, 1)
    x2 = g.gather("anchors", 2, 1)
    y2 = g.gather("anchors", 3, 1)
    imh = g.gather("im_info", 0, 0)
    imw = g.gather("im_info", 1, 0)
    nb = g.f(-border)
    v1 = g.op("GreaterOrEqual", [x1, nb])
    v2 = g.op("GreaterOrEqual", [y1, nb])
    v3 = g.op("LessOrEqual", [x2, g.op("Add", [imw, g.f(border)])])
    v4 = g.op("LessOrEqual", [y2, g.op("Add", [imh, g.f(border)])])
    inside = g.op("And", [g.op("And", [v1, v2]), g.op("And", [v3, v4])])
    # valid feature-map region: positions below ceil(image / stride)
    vh = g.op("Ceil", [g.op("Div", [imh, "stride"])])
    vw = g.op("Ceil", [g.op("Div", [imw, "stride"])])
    fy_ok = g.op("Less", [fy, vh])                     # [H]
    fx_ok = g.op("Less", [fx, vw])                     # [W]
    grid_ok = g.op("And", [g.unsqueeze(fy_ok, [1]), g.unsqueeze(fx_ok, [0])])
    pos_ok = g.unsqueeze(g.reshape(grid_ok, [-1]), [1])  # [HW, 1]
    pos_ok = g.reshape(g.op("Expand", [pos_ok, g.i64([fh * fw, a])]), [-1])
    g.op("And", [inside, pos_ok], out="valid")
    validf = g.op("Cast", ["valid"], to=F32)
    g.op("ReduceSum", [validf], out="num_valid", keepdims=0)
    g.op("Mul", ["anchors", g.unsqueeze(validf, [1])], out="valid_anchors")
    g.output("anchors", F32, [k, 4])
    g.output("valid", BOOL, [k])
    g.output("num_valid", F32, [])
    g.output("valid_anchors", F32, [k, 4])
    model = finish_model(g, 13)

    def ref(ins, ft):
        _, b, s, info = cast(ins, ft)
        sy = np.arange(fh).astype(ft) * s
        sx = np.arange(fw).astype(ft) * s
        gy, gx = np.meshgrid(sy, sx, indexing="ij")
        gx, gy = gx.reshape(-1), gy.reshape(-1)
        shifts = np.stack([gx, gy, gx, gy], axis=1)
        anchors = (shifts[:, None, :] + b[None, :, :]).reshape(-1, 4)
        imh, imw = info[0], info[1]
        inside = ((anchors[:, 0] >= -border) & (anchors[:, 1] >= -border)
                  & (anchors[:, 2] <= imw + ft(border))
                  & (anchors[:, 3] <= imh + ft(border)))
        fy_ok = np.arange(fh).astype(ft) < np.ceil(imh / s)
        fx_ok = np.arange(fw).astype(ft) < np.ceil(imw / s)
        pos_ok = np.repeat((fy_ok[:, None] & fx_ok[None, :]).reshape(-1), a)
        valid = inside & pos_ok
        vf = valid.astype(ft)
        return [anchors, valid, np.array(vf.sum(), dtype=ft),
                anchors * vf[:, None]]

    size, outs = run_case(case, model, ["feat", "base_anchors", "stride",
                                        "im_info"], inputs,
                          ["anchors", "valid", "num_valid", "valid_anchors"],
                          ref)
    nv = int(outs[1].sum())
    assert 0.2 * k < nv < 0.8 * k, nv  # the flags are not degenerate
    anc = outs[0]
    for col, lim in ((0, -border), (1, -border), (2, 191.0 + border),
                     (3, 151.0 + border)):
        assert (anc[:, col] == lim).any(), (col, lim)  # ties occur
    return size, outs


# --------------------------------------------------------------------------
# 2b. anchor grid over scalar H and W inputs (data-dependent shapes)
# --------------------------------------------------------------------------

def make_anchor_grid_dynamic():
    case = "test_views_anchor_grid_dynamic"
    fh, fw, stride = 12, 15, 16.0
    base = base_anchors_for(stride, [(32, 32), (64, 32), (32, 64)])
    a = base.shape[0]
    inputs = [np.array(fh, np.int64), np.array(fw, np.int64),
              np.array(stride, np.float32), base]

    g = Graph("views_anchor_grid_dynamic")
    g.input("H", I64, [])
    g.input("W", I64, [])
    g.input("stride", F32, [])
    g.input("base_anchors", F32, [a, 4])
    zero, one = g.const(np.array(0, np.int64)), g.const(np.array(1, np.int64))
    sy = g.op("Mul", [g.op("Cast", [g.op("Range", [zero, "H", one])], to=F32),
                      "stride"])
    sx = g.op("Mul", [g.op("Cast", [g.op("Range", [zero, "W", one])], to=F32),
                      "stride"])
    hw = g.op("Concat", [g.unsqueeze("H", [0]), g.unsqueeze("W", [0])], axis=0)
    gy = g.reshape(g.op("Expand", [g.unsqueeze(sy, [1]), hw]), [-1, 1])
    gx = g.reshape(g.op("Expand", [g.unsqueeze(sx, [0]), hw]), [-1, 1])
    shifts = g.op("Concat", [gx, gy, gx, gy], axis=1)
    allb = g.op("Add", [g.unsqueeze(shifts, [1]),
                        g.unsqueeze("base_anchors", [0])])
    g.reshape(allb, [-1, 4], out="anchors")
    # inside the image of size (H * stride, W * stride), no border
    limw = g.op("Mul", [g.op("Cast", ["W"], to=F32), "stride"])
    limh = g.op("Mul", [g.op("Cast", ["H"], to=F32), "stride"])
    x1y1 = g.slice("anchors", [0], [2], [1])
    ok_lo = g.op("GreaterOrEqual", [x1y1, g.f(0.0)])          # [K, 2]
    lim = g.op("Concat", [g.unsqueeze(limw, [0]), g.unsqueeze(limh, [0])],
               axis=0)
    x2y2 = g.slice("anchors", [2], [4], [1])
    ok_hi = g.op("LessOrEqual", [x2y2, lim])
    ok = g.op("And", [ok_lo, ok_hi])
    okx = g.gather(ok, 0, 1)
    oky = g.gather(ok, 1, 1)
    g.op("And", [okx, oky], out="valid")
    g.op("Cast", ["valid"], out="valid_i32", to=TensorProto.INT32)
    g.output("anchors", F32, ["K", 4])
    g.output("valid", BOOL, ["K"])
    g.output("valid_i32", TensorProto.INT32, ["K"])
    model = finish_model(g, 17)

    def ref(ins, ft):
        h, w, s, b = cast(ins, ft)
        sy = np.arange(int(h)).astype(ft) * s
        sx = np.arange(int(w)).astype(ft) * s
        gy, gx = np.meshgrid(sy, sx, indexing="ij")
        gx, gy = gx.reshape(-1), gy.reshape(-1)
        shifts = np.stack([gx, gy, gx, gy], axis=1)
        anchors = (shifts[:, None, :] + b[None, :, :]).reshape(-1, 4)
        limw, limh = ft(int(w)) * s, ft(int(h)) * s
        valid = ((anchors[:, 0] >= 0) & (anchors[:, 1] >= 0)
                 & (anchors[:, 2] <= limw) & (anchors[:, 3] <= limh))
        return [anchors, valid, valid.astype(np.int32)]

    size, outs = run_case(case, model, ["H", "W", "stride", "base_anchors"],
                          inputs, ["anchors", "valid", "valid_i32"], ref)
    k = fh * fw * a
    assert 0.2 * k < int(outs[1].sum()) < 0.9 * k
    return size, outs


# --------------------------------------------------------------------------
# 3. in-place clamping through ScatterND (and ScatterElements)
# --------------------------------------------------------------------------

def make_clamp_scatternd():
    case = "test_views_clamp_scatternd"
    rng = np.random.default_rng(20240703)
    n = 800
    im_w, im_h = 640.0, 480.0
    # On a 1/8 grid, so that scaling, clamping and the corner differences
    # are exact in float32 (an area of a box clamped to a sliver would
    # otherwise be pure rounding noise).
    boxes = np.round(random_boxes(rng, n, -80.0, 720.0, 4.0, 120.0) * 8) / 8
    inputs = [boxes]
    scale = 1.25
    rows = np.arange(n, dtype=np.int64)
    # all rows of columns 0 and 2: a strided box [N, 2] of the [N, 4] data
    idx_x = np.stack([np.stack([rows, np.full(n, c, np.int64)], axis=1)
                      for c in (0, 2)], axis=1)            # [N, 2, 2]
    idx_y = np.stack([np.stack([rows, np.full(n, c, np.int64)], axis=1)
                      for c in (1, 3)], axis=1)
    odd = np.arange(1, n, 2, dtype=np.int64)[:, None]       # rows 1::2
    col0 = np.zeros((n, 1), np.int64)                       # ScatterElements

    g = Graph("views_clamp_scatternd")
    g.input("boxes", F32, [n, 4])
    b0 = g.op("Mul", ["boxes", g.f(scale)])                # an arena value
    zero = g.f(0.0)
    xs = g.slice(b0, [0], [4], [1], [2])                    # x1, x2
    xc = g.op("Min", [g.op("Max", [xs, zero]), g.f(im_w)])
    b1 = g.op("ScatterND", [b0, g.const(idx_x, "idx_x"), xc])
    ys = g.slice(b1, [1], [INT64_MAX], [1], [2])            # y1, y2 of b1
    yc = g.op("Min", [g.op("Max", [ys, zero]), g.f(im_h)])
    b2 = g.op("ScatterND", [b1, g.const(idx_y, "idx_y"), yc])
    # every other row halved, written back in place
    half = g.op("Mul", [g.slice(b2, [1], [n], [0], [2]), g.f(0.5)])
    b3 = g.op("ScatterND", [b2, g.const(odd, "idx_odd"), half])
    # x1 raised to at least 1 through ScatterElements (column 0)
    x1 = g.op("Max", [g.slice(b3, [0], [1], [1]), g.f(1.0)])
    g.op("ScatterElements", [b3, g.const(col0, "idx_col0"), x1],
         out="clamped", axis=1)
    wd = g.op("Sub", [g.gather("clamped", 2, 1), g.gather("clamped", 0, 1)])
    ht = g.op("Sub", [g.gather("clamped", 3, 1), g.gather("clamped", 1, 1)])
    g.op("Mul", [wd, ht], out="area")
    g.op("Greater", ["area", g.f(100.0)], out="keep")
    g.output("clamped", F32, [n, 4])
    g.output("area", F32, [n])
    g.output("keep", BOOL, [n])
    model = finish_model(g, 16)

    def ref(ins, ft):
        (bx,) = cast(ins, ft)
        b = bx * ft(scale)
        b = b.copy()
        b[:, 0::2] = np.minimum(np.maximum(b[:, 0::2], ft(0)), ft(im_w))
        b[:, 1::2] = np.minimum(np.maximum(b[:, 1::2], ft(0)), ft(im_h))
        b[1::2, :] = b[1::2, :] * ft(0.5)
        b[:, 0] = np.maximum(b[:, 0], ft(1.0))
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        return [b, area, area > ft(100.0)]

    size, outs = run_case(case, model, ["boxes"], inputs,
                          ["clamped", "area", "keep"], ref)
    clamped = outs[0]
    assert (boxes * scale < 0).any() and (boxes[:, 2] * scale > im_w).any()
    assert 0.3 * n < int(outs[2].sum()) < 0.7 * n  # many boxes clamped away
    assert (clamped[:, 0] >= 1.0).all()
    return size, outs


# --------------------------------------------------------------------------
# 4. write-after-read hazard: a view read after an in-place write
# --------------------------------------------------------------------------

def make_war_hazard():
    case = "test_views_war_hazard"
    rng = np.random.default_rng(20240704)
    n = 500
    raw = random_boxes(rng, n, 0.0, 600.0, 20.0, 200.0)
    other = rng.standard_normal((n, 2)).astype(np.float32)
    offs = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    inputs = [raw, other]
    rows = np.arange(n, dtype=np.int64)
    idx_23 = np.stack([np.stack([rows, np.full(n, c, np.int64)], axis=1)
                       for c in (2, 3)], axis=1)            # [N, 2, 2]
    idx_3 = np.stack([rows, np.full(n, 3, np.int64)], axis=1)[:, None, :]

    g = Graph("views_war_hazard")
    g.input("raw", F32, [n, 4])
    g.input("other", F32, [n, 2])
    # boxes lives in the arena (an intermediate), so it is a candidate for
    # being overwritten in place.
    boxes = g.op("Add", ["raw", g.const(offs, "offs")], out="boxes")
    # Views of boxes taken first ...
    old23 = g.slice(boxes, [2], [4], [1])                   # [N, 2]
    old3 = g.gather(boxes, 3, 1)                            # [N]
    old_t = g.op("Transpose", [boxes], perm=[1, 0])          # [4, N]
    # ... then, from another branch, a ScatterND that overwrites exactly
    # the region those views read, placed before their readers in node
    # order.
    upd = g.op("Relu", ["other"])
    w = g.op("ScatterND", [boxes, g.const(idx_23, "idx_23"), upd], out="w")
    # write-after-write on w's column 3, again before w's own reader
    upd2 = g.op("Neg", [g.op("Abs", [g.gather("other", 0, 1)])])
    w2 = g.op("ScatterND", [w, g.const(idx_3, "idx_3"),
                            g.unsqueeze(upd2, [1])], out="w2")
    # an elementwise op over boxes, placed before the readers too: an
    # in-place candidate (output over input 0) that must be refused while
    # views of boxes are still to be read
    g.op("Mul", [g.op("Neg", [boxes]), g.f(0.5)], out="neg_half")
    # the readers of the old contents
    g.op("ReduceMax", [old23], out="old_max", axes=[0], keepdims=1)
    g.op("Mul", [old3, g.f(2.0)], out="old_col3_x2")
    g.op("ReduceSum", [old_t, g.i64([1])], out="old_colsum", keepdims=0)
    # a reader of w (not of w2) after the second write
    g.op("ReduceMin", [g.slice(w, [3], [4], [1])], out="mid_min", axes=[0],
         keepdims=0)
    g.op("Sub", [w2, g.const(offs, "offs2")], out="written")
    g.output("written", F32, [n, 4])
    g.output("old_max", F32, [1, 2])
    g.output("old_col3_x2", F32, [n])
    g.output("old_colsum", F32, [4])
    g.output("mid_min", F32, [1])
    g.output("neg_half", F32, [n, 4])
    model = finish_model(g, 17)

    def ref(ins, ft):
        r, o = cast(ins, ft)
        b = r + offs.astype(ft)
        w = b.copy()
        w[:, 2:4] = np.maximum(o, ft(0))
        w2 = w.copy()
        w2[:, 3] = -np.abs(o[:, 0])
        return [w2 - offs.astype(ft), b[:, 2:4].max(axis=0, keepdims=True),
                b[:, 3] * ft(2), b.sum(axis=0), w[:, 3:4].min(axis=0),
                -b * ft(0.5)]

    size, outs = run_case(case, model, ["raw", "other"], inputs,
                          ["written", "old_max", "old_col3_x2", "old_colsum",
                           "mid_min", "neg_half"], ref)
    # a naive in-place write would show: the old values differ everywhere
    assert (outs[1] > 100).all() and outs[4][0] == 0.0
    return size, outs


# --------------------------------------------------------------------------
# 5. concat of processed slices along different axes
# --------------------------------------------------------------------------

def make_concat_slices():
    case = "test_views_concat_slices"
    rng = np.random.default_rng(20240705)
    n = 240
    x = rng.uniform(-4.0, 4.0, (n, 12)).astype(np.float32)
    bias = np.array([0.5, -1.0, 1.5, 2.0], np.float32)
    inputs = [x]

    g = Graph("views_concat_slices")
    g.input("x", F32, [n, 12])
    # along axis 1: three column slices, each transformed differently
    a = g.op("Mul", [g.slice("x", [0], [4], [1]), g.f(2.0)])
    b = g.op("Add", [g.slice("x", [4], [8], [1]), g.f(1.0)])
    c = g.op("Neg", [g.slice("x", [8], [12], [1])])
    g.op("Concat", [c, a, b], out="cols", axis=1)
    # along axis 0: a transposed 2-D slice, a reshape of a non-contiguous
    # slice (not one strided map), a reshape of a row-strided slice
    t = g.op("Transpose", [g.slice("x", [0], [12], [0])], perm=[1, 0])
    r = g.reshape(g.slice("x", [12, 0], [36, 6], [0, 1]), [12, 12])
    e = g.op("Mul", [g.reshape(g.slice("x", [36, 6], [60, 12], [0, 1],
                                       [2, 1]), [6, 12]), g.f(3.0)])
    g.op("Concat", [t, r, e], out="rows", axis=0)
    # along axis 1 of a 3-D reshape: rotate the groups
    r3 = g.reshape("x", [n, 3, 4])
    p = g.op("Mul", [g.slice(r3, [0], [1], [1]), g.f(0.5)])
    q = g.op("Add", [g.slice(r3, [1], [3], [1]), g.const(bias, "bias")])
    g.op("Concat", [q, p], out="groups", axis=1)
    # along the last axis, of pure views (no op between slice and concat)
    g.op("Concat", [g.slice(r3, [2], [4], [2]), g.slice(r3, [0], [2], [-1])],
         out="halves", axis=-1)
    # one processed slice twice, along axis 0
    g.op("Concat", [a, a], out="twice", axis=0)
    g.output("cols", F32, [n, 12])
    g.output("rows", F32, [30, 12])
    g.output("groups", F32, [n, 3, 4])
    g.output("halves", F32, [n, 3, 4])
    g.output("twice", F32, [2 * n, 4])
    model = finish_model(g, 15)

    def ref(ins, ft):
        (xx,) = cast(ins, ft)
        a = xx[:, 0:4] * ft(2)
        b = xx[:, 4:8] + ft(1)
        c = -xx[:, 8:12]
        cols = np.concatenate([c, a, b], axis=1)
        t = xx[0:12, :].T
        r = xx[12:36, 0:6].reshape(12, 12)
        e = xx[36:60:2, 6:12].reshape(6, 12) * ft(3)
        rows = np.concatenate([t, r, e], axis=0)
        r3 = xx.reshape(n, 3, 4)
        groups = np.concatenate([r3[:, 1:3] + bias.astype(ft),
                                 r3[:, 0:1] * ft(0.5)], axis=1)
        halves = np.concatenate([r3[:, :, 2:4], r3[:, :, 0:2]], axis=2)
        return [cols, rows, groups, halves, np.concatenate([a, a], axis=0)]

    return run_case(case, model, ["x"], inputs,
                    ["cols", "rows", "groups", "halves", "twice"], ref)


# --------------------------------------------------------------------------
# 6. reshape of a transpose into MatMul, expand+reshape, negative-step
#    slices, Gather with a constant scalar index, unequal Split
# --------------------------------------------------------------------------

def make_misc_views():
    case = "test_views_misc"
    rng = np.random.default_rng(20240706)
    nb, n = 64, 300
    feats = rng.standard_normal((nb, 8, 6)).astype(np.float32)
    v = rng.standard_normal((1, 4)).astype(np.float32)
    y = rng.standard_normal((50, 8)).astype(np.float32)
    boxes = random_boxes(rng, n, 0.0, 500.0, 10.0, 100.0)
    props = rng.uniform(-2.0, 2.0, (n, 10)).astype(np.float32)
    w1 = (rng.standard_normal((8, 5)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((48, 3)) * 0.2).astype(np.float32)
    inputs = [feats, v, y, boxes, props]

    g = Graph("views_misc")
    g.input("feats", F32, [nb, 8, 6])
    g.input("v", F32, [1, 4])
    g.input("y", F32, [50, 8])
    g.input("boxes", F32, [n, 4])
    g.input("props", F32, [n, 10])
    t = g.op("Transpose", ["feats"], perm=[0, 2, 1])          # [64, 6, 8]
    # reshapes of the transpose that no single stride map expresses
    g.op("MatMul", [g.reshape(t, [nb * 6, 8]), g.const(w1, "w1")], out="mm")
    g.op("MatMul", [g.reshape(t, [nb, -1]), g.const(w2, "w2")], out="mm2")
    # expand (zero stride) then reshape across the broadcast dimension
    ev = g.op("Expand", [g.op("Add", ["v", g.f(1.0)]), g.i64([100, 4])])
    g.op("Add", [g.reshape(ev, [50, 8]), "y"], out="expand_reshape")
    # negative steps: every other box from the last, columns reversed;
    # and a strided reversed window
    rr = g.slice("boxes", [-1, 3], [INT64_MIN, -5], [0, 1], [-2, -1])
    g.op("Mul", [rr, g.f(2.0)], out="rev")
    rw = g.slice("boxes", [250, 1], [10, 3], [0, 1], [-3, 1])
    g.op("Sub", [rw, g.f(1.0)], out="rev_window")
    # Gather with a constant scalar index along each axis
    g.op("Sub", [g.gather("boxes", 2, 1), g.gather("boxes", 0, 1)],
         out="widths")
    g.op("Mul", [g.gather("boxes", -1, 0), g.f(3.0)], out="last_row")
    # unequal splits along both axes
    s0, s1, s2 = g.op("Split", ["props", g.i64([2, 3, 5])], n_out=3, axis=1)
    g.op("Concat", [g.op("Mul", [s2, g.f(2.0)]), s0], out="split_cat", axis=1)
    g.op("ReduceMax", [s1], out="split_max", axes=[1], keepdims=1)
    p0, p1 = g.op("Split", ["props", g.i64([100, 200])], n_out=2, axis=0)
    g.op("Sub", [g.slice(p1, [0], [100], [0]), p0], out="split_rows")
    g.output("mm", F32, [nb * 6, 5])
    g.output("mm2", F32, [nb, 3])
    g.output("expand_reshape", F32, [50, 8])
    g.output("rev", F32, [n // 2, 4])
    g.output("rev_window", F32, [80, 2])
    g.output("widths", F32, [n])
    g.output("last_row", F32, [4])
    g.output("split_cat", F32, [n, 7])
    g.output("split_max", F32, [n, 1])
    g.output("split_rows", F32, [100, 10])
    model = finish_model(g, 14)

    def ref(ins, ft):
        fe, vv, yy, bx, pr = cast(ins, ft)
        t = fe.transpose(0, 2, 1)
        mm = t.reshape(nb * 6, 8) @ w1.astype(ft)
        mm2 = t.reshape(nb, 48) @ w2.astype(ft)
        er = np.broadcast_to(vv + ft(1), (100, 4)).reshape(50, 8) + yy
        rev = bx[::-2, ::-1] * ft(2)
        rwin = bx[250:10:-3, 1:3] - ft(1)
        widths = bx[:, 2] - bx[:, 0]
        last = bx[-1] * ft(3)
        split_cat = np.concatenate([pr[:, 5:10] * ft(2), pr[:, 0:2]], axis=1)
        split_max = pr[:, 2:5].max(axis=1, keepdims=True)
        split_rows = pr[100:200] - pr[0:100]
        return [mm, mm2, er, rev, rwin, widths, last, split_cat, split_max,
                split_rows]

    return run_case(case, model, ["feats", "v", "y", "boxes", "props"],
                    inputs, ["mm", "mm2", "expand_reshape", "rev",
                             "rev_window", "widths", "last_row", "split_cat",
                             "split_max", "split_rows"], ref)


# --------------------------------------------------------------------------
# 7. symbolic batch: dim_param N bounded by metadata (kiln.bound.N)
# --------------------------------------------------------------------------

def make_symbolic_batch():
    case = "test_views_symbolic_batch"
    rng = np.random.default_rng(20240707)
    n = 300
    im_h, im_w = 480.0, 640.0
    boxes = random_boxes(rng, n, 0.0, 640.0, 16.0, 160.0)
    deltas = (rng.standard_normal((n, 4)) * 0.25).astype(np.float32)
    deltas[::7, 2:4] = rng.uniform(5.0, 8.0, (len(deltas[::7]), 2))  # clamped
    im_hw = np.array([im_h, im_w], np.float32)
    inputs = [boxes, deltas, im_hw]

    g = Graph("views_symbolic_batch")
    g.input("boxes", F32, ["N", 4])
    g.input("deltas", F32, ["N", 4])
    g.input("im_hw", F32, [2])
    x1 = g.slice("boxes", [0], [1], [1])
    y1 = g.slice("boxes", [1], [2], [1])
    w = g.op("Sub", [g.slice("boxes", [2], [3], [1]), x1])
    h = g.op("Sub", [g.slice("boxes", [3], [4], [1]), y1])
    half = g.f(0.5)
    cx = g.op("Add", [x1, g.op("Mul", [w, half])])
    cy = g.op("Add", [y1, g.op("Mul", [h, half])])
    wh = g.op("Concat", [w, h], axis=1)                         # [N, 2]
    cxy = g.op("Concat", [cx, cy], axis=1)
    dxy = g.slice("deltas", [0], [2], [1])
    dwh = g.op("Min", [g.slice("deltas", [2], [4], [1]), g.f(BBOX_CLIP)])
    pc = g.op("Add", [g.op("Mul", [dxy, wh]), cxy])
    hwh = g.op("Mul", [g.op("Mul", [g.op("Exp", [dwh]), wh]), half])
    dec = g.op("Concat", [g.op("Sub", [pc, hwh]), g.op("Add", [pc, hwh])],
               axis=1)                                          # [N, 4]
    lim = g.op("Gather", ["im_hw", g.i64([1, 0, 1, 0])], axis=0)  # w h w h
    g.op("Min", [g.op("Max", [dec, g.f(0.0)]), lim], out="decoded")
    # views of an output: reshape, transpose, reshape (not mergeable)
    rs = g.reshape("decoded", [-1, 2, 2])                        # [N, 2, 2]
    corners = g.reshape(g.op("Transpose", [rs], perm=[0, 2, 1]), [0, 4])
    g.op("Mul", [corners, g.const(np.array([[1, 1, 2, 2]], np.float32),
                                  "cscale")], out="corners")
    # reversed rows over a symbolic dimension, then areas
    rev = g.slice("decoded", [-1], [INT64_MIN], [0], [-1])
    rw = g.op("Sub", [g.gather(rev, 2, 1), g.gather(rev, 0, 1)])
    rh = g.op("Sub", [g.gather(rev, 3, 1), g.gather(rev, 1, 1)])
    g.op("Mul", [rw, rh], out="areas_rev")
    # a column reduction through a transpose
    g.op("ReduceMax", [g.op("Transpose", ["decoded"], perm=[1, 0])],
         out="colmax", axes=[1], keepdims=0)
    # expand to the runtime batch read from Shape
    shp = g.op("Shape", ["deltas"])
    ex = g.op("Expand", [g.unsqueeze(lim, [0]), shp])            # [N, 4]
    g.op("Sub", [ex, "decoded"], out="room")
    g.output("decoded", F32, ["N", 4])
    g.output("corners", F32, ["N", 4])
    g.output("areas_rev", F32, ["N"])
    g.output("colmax", F32, [4])
    g.output("room", F32, ["N", 4])
    model = finish_model(g, 17, metadata={"kiln.bound.N": "1024"})

    def ref(ins, ft):
        b, d, hw = cast(ins, ft)
        x1, y1 = b[:, 0:1], b[:, 1:2]
        w = b[:, 2:3] - x1
        h = b[:, 3:4] - y1
        cx = x1 + w * ft(0.5)
        cy = y1 + h * ft(0.5)
        wh = np.concatenate([w, h], axis=1)
        cxy = np.concatenate([cx, cy], axis=1)
        pc = d[:, 0:2] * wh + cxy
        hwh = np.exp(np.minimum(d[:, 2:4], ft(BBOX_CLIP))) * wh * ft(0.5)
        dec = np.concatenate([pc - hwh, pc + hwh], axis=1)
        lim = hw[[1, 0, 1, 0]]
        dec = np.minimum(np.maximum(dec, ft(0)), lim)
        corners = dec.reshape(-1, 2, 2).transpose(0, 2, 1).reshape(-1, 4)
        corners = corners * np.array([[1, 1, 2, 2]], ft)
        rev = dec[::-1]
        areas = (rev[:, 2] - rev[:, 0]) * (rev[:, 3] - rev[:, 1])
        return [dec, corners, areas, dec.max(axis=0), lim[None, :] - dec]

    size, outs = run_case(case, model, ["boxes", "deltas", "im_hw"], inputs,
                          ["decoded", "corners", "areas_rev", "colmax",
                           "room"], ref)
    dec = outs[0]
    assert (dec == 0).any() and (dec[:, 2] == im_w).any()  # clipping bites
    return size, outs


CASES = [
    make_box_decode,
    make_anchor_grid,
    make_anchor_grid_dynamic,
    make_clamp_scatternd,
    make_war_hazard,
    make_concat_slices,
    make_misc_views,
    make_symbolic_batch,
]


def main():
    for fn in CASES:
        fn()


if __name__ == "__main__":
    main()
