#!/usr/bin/env python3
"""bench/zero_copy_cl.py PLUGIN MODELS_DIR [MODEL,...] [ROUNDS]: the OpenCL
engine's zero-copy host IO (KILN_CL_ZERO_COPY, opencl/ENGINE.md "Host memory
used in place") in one process, through the ONNXIFI ABI on the first OpenCL
backend (pick the driver with OCL_ICD_VENDORS). Per model two graphs of the
same bytes, fused and KILN_FUSION=0 (read when a graph is compiled); each
round runs the four cases (fused / unfused x zero-copy on / off; kiln reads
KILN_CL_ZERO_COPY per run) in an order that alternates round by round, on
the same numpy buffers (NAME.inputs.npz). Prints per model and case the
medians of wall time and of process CPU time per run (time.process_time:
every thread of this process — the driver's too —, so other processes'
time slices do not count), off/on of each and unfused/fused with zero-copy
on and off; and whether zero-copy on and off gave the same output bytes.
Needs the bench venv (onnxruntime not used)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

from kiln_abi import KilnLibrary  # noqa: E402


def main():
    plugin, mdir = sys.argv[1], sys.argv[2]
    models = sys.argv[3].split(",") if len(sys.argv) > 3 else ["ew_chain"]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    man = json.load(open(os.path.join(mdir, "manifest.json")))["models"]
    lib = KilnLibrary(plugin)
    cl = next(b for b in lib.backends() if "opencl" in b.name)
    backend = lib.init_backend(cl.index)
    print(f"backend {cl.name}: {cl.device}")
    for m in models:
        e = man[m]
        npz = np.load(os.path.join(mdir, e["inputs_file"]))
        ins = {i["name"]: np.ascontiguousarray(npz[i["name"]]) for i in e["inputs"]}
        data = open(os.path.join(mdir, e["file"]), "rb").read()
        graphs, outs = {}, {}
        for fusion in ("1", "0"):
            os.environ["KILN_FUSION"] = fusion
            g = backend.init_graph(data)
            outs[fusion] = {o["name"]: np.empty(o["shape"], o["dtype"]) for o in e["outputs"]}
            g.bind(ins, outs[fusion])
            graphs[fusion] = g
        os.environ.pop("KILN_FUSION")
        cases = [(f, z) for f in ("1", "0") for z in ("1", "0")]
        wall = {c: [] for c in cases}
        cpu = {c: [] for c in cases}
        same = True
        for r in range(rounds + 1):  # round 0: warm-up
            for c in (cases if r % 2 else cases[::-1]):
                os.environ["KILN_CL_ZERO_COPY"] = c[1]
                w0, c0 = time.perf_counter(), time.process_time()
                graphs[c[0]].run()
                w1, c1 = time.perf_counter(), time.process_time()
                if r:
                    wall[c].append((w1 - w0) * 1e3)
                    cpu[c].append((c1 - c0) * 1e3)
                if r == 1:
                    outs.setdefault(c, {k: v.copy() for k, v in outs[c[0]].items()})
        for f in ("1", "0"):
            same = same and all(np.array_equal(outs[(f, "1")][k], outs[(f, "0")][k]) for k in outs[f])
        os.environ.pop("KILN_CL_ZERO_COPY")
        med = {c: (float(np.median(wall[c])), float(np.median(cpu[c]))) for c in cases}
        for c in cases:
            print(f"{m:15s} {'fused' if c[0] == '1' else 'unfused':8s} zero-copy {'on ' if c[1] == '1' else 'off'}: "
                  f"wall {med[c][0]:9.3f} ms  cpu {med[c][1]:9.3f} ms  (median of {rounds})")
        for k, what in ((0, "wall"), (1, "cpu")):
            print(f"{m:15s} {what}: off/on fused {med[('1', '0')][k] / med[('1', '1')][k]:.2f} "
                  f"unfused {med[('0', '0')][k] / med[('0', '1')][k]:.2f}; unfused/fused zero-copy on "
                  f"{med[('0', '1')][k] / med[('1', '1')][k]:.2f} off {med[('0', '0')][k] / med[('1', '0')][k]:.2f}")
        print(f"{m:15s} zero-copy on and off: {'the same output bytes' if same else 'OUTPUTS DIFFER'}", flush=True)
        for g in graphs.values():
            g.release()
    backend.release()
    lib.close()


if __name__ == "__main__":
    main()
