#!/usr/bin/env python3
"""Generate kiln's tile suite: small graphs whose transposed reads the
OpenCL engine tiles through local memory under KILN_CL_TILE=all (opencl/
codegen.c, tile_plan), in the ONNX node-test layout (model.onnx and
test_data_set_0/input_K.pb / output_K.pb), expected outputs from numpy.
Run through tests/tile_opencl_check.sh (ctest tile_suite_opencl_*).

    PYTHON tests/tile/make_tile.py   # any Python with onnx and numpy, e.g. build/bench/venv

Seeded and pinned to IR version 8: the files are the same bytes each run.
"""

import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261125)
T = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}


def data(shape, dt):
    if dt == np.float32:
        return rng.uniform(-4, 4, shape).astype(dt)
    return rng.integers(-1000, 1000, shape).astype(dt)


def case(name, nodes, inputs, outputs, meta=None, in_shapes=None):
    """inputs: [(name, array)], outputs: [(name, array)]; in_shapes overrides
    the declared input shapes (symbolic dims)."""
    d = os.path.join(HERE, "test_tile_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    vi = [helper.make_tensor_value_info(n, T[a.dtype.type], (in_shapes or {}).get(n, list(a.shape)))
          for n, a in inputs]
    vo = [helper.make_tensor_value_info(n, T[a.dtype.type], (in_shapes or {}).get(n, list(a.shape)))
          for n, a in outputs]
    g = helper.make_graph(nodes, name, vi, vo)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln tests/tile/make_tile.py")
    m.ir_version = 8
    for k, v in (meta or {}).items():
        helper.set_model_props(m, {k: v})
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(inputs):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(d, "test_data_set_0", "input_%d.pb" % i))
    for i, (n, a) in enumerate(outputs):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(d, "test_data_set_0", "output_%d.pb" % i))


def tr(x, perm, name="y", inp="x"):
    return helper.make_node("Transpose", [inp], [name], perm=perm)


# a batch dim outside a 2-D transpose, tiles not dividing
x = data((3, 33, 65), np.float32)
case("batch", [tr(x, [0, 2, 1])], [("x", x)], [("y", x.transpose(0, 2, 1).copy())])
# the attention K^T permutation [B,S,H,D] -> [B,H,D,S], and [B,S,H,D] -> [B,H,S,D] (not tiled: D contiguous)
x = data((2, 37, 4, 20), np.float32)
case("attention", [tr(x, [0, 2, 3, 1]), tr(x, [0, 2, 1, 3], "z")], [("x", x)],
     [("y", x.transpose(0, 2, 3, 1).copy()), ("z", x.transpose(0, 2, 1, 3).copy())])
# a rest dim between the plane's dims, int32 and int64
x = data((5, 33, 65), np.int32)
w = data((3, 40, 9), np.int64)
case("ints", [tr(x, [2, 1, 0]), tr(w, [0, 2, 1], "z", "w")], [("x", x), ("w", w)],
     [("y", x.transpose(2, 1, 0).copy()), ("z", w.transpose(0, 2, 1).copy())])
# fused: Relu(Transpose(x) + b), the transposed input tiled in the elementwise kernel
x = data((33, 100), np.float32)
b = data((100, 33), np.float32)
case("fused", [tr(x, [1, 0], "t"), helper.make_node("Add", ["t", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
     [("x", x), ("b", b)], [("y", np.maximum(x.T + b, 0).astype(np.float32))])
# symbolic batch: the variant at the bound 8 run with 3 rows (the tiled groups of the run's rows)
x = data((3, 40, 70), np.float32)
b = data((3, 70, 40), np.float32)
case("symbolic", [tr(x, [0, 2, 1], "t"), helper.make_node("Mul", ["t", "b"], ["y"])], [("x", x), ("b", b)],
     [("y", (x.transpose(0, 2, 1) * b).astype(np.float32))], meta={"kiln.bound.N": "8"},
     in_shapes={"x": ["N", 40, 70], "b": ["N", 70, 40], "y": ["N", 70, 40]})
