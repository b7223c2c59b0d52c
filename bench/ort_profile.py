#!/usr/bin/env python3
"""bench/ort_profile.py MODEL [RUNS] [THREADS]: onnxruntime's per-node profile of
MODEL at THREADS intra-op threads (default 1; SessionOptions.enable_profiling): per node, the median
of its kernel time over RUNS runs (default 200) on random inputs and its
inputs' shapes (onnxruntime fuses and renames nodes into NCHWc ones: map
them to kiln's steps by the conv shapes), and the median run; to set beside
kiln's KILN_PROFILE=1 or =cpu (GEMM_CONV.md, "Profiling"). Needs build/bench/venv (bench/run makes it)."""
import collections
import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort


def main():
    model = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ort_profile_{os.getpid()}")
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    inputs = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
              for i in sess.get_inputs()}
    for _ in range(runs):
        sess.run(None, inputs)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node, total, shapes = collections.defaultdict(list), [], {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = (e["name"][:-len("_kernel_time")], e["args"].get("op_name"))
            per_node[key].append(e["dur"])
            shapes[key] = " ".join("x".join(str(d) for d in list(t.values())[0])
                                   for t in e["args"].get("input_type_shape", []))
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            total.append(e["dur"])
    med = {k: float(np.median(v)) for k, v in per_node.items()}
    s = sum(med.values())
    print(f"onnxruntime {os.path.basename(model)}: median run {np.median(total[len(total) // 10:]):.1f} us, "
          f"nodes {s:.1f} us (medians of {runs} runs, {threads} thread{'s' if threads > 1 else ''})")
    for (name, op), t in med.items():  # inputs' shapes: to map onnxruntime's fused NCHWc nodes to the model's
        print(f"  {t:9.1f} us {100 * t / s:5.1f}%  {name} [{op}] {shapes[(name, op)]}")


if __name__ == "__main__":
    main()
