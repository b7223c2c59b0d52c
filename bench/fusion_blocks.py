#!/usr/bin/env python3
"""Conv + BatchNormalization + Relu blocks for the OpenCL fusion measurement
(opencl/ENGINE.md, "Fusion: measured"): one conv the OpenCL engine runs with
its direct kernel (16->16 3x3 at 56x56: Cg*k = 144), one it runs through
im2col + CLBlast (64->64 3x3 at 28x28: Cg*k = 576). Seeded, opset 17.

    build/bench/venv/bin/python bench/fusion_blocks.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def block(name, c, hw, out_dir):
    rng = np.random.default_rng(7)
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", f(c, c, 3, 3) * 0.2), ("b", f(c)), ("g", 1 + 0.3 * f(c)), ("be", f(c)), ("mu", 0.1 * f(c)),
        ("var", 1 + 0.5 * np.abs(f(c)))]]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["cv"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["cv", "g", "be", "mu", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(out_dir, name + ".onnx"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    block("cbr_direct", 16, 56, out)
    block("cbr_gemm", 64, 28, out)


if __name__ == "__main__":
    main()
