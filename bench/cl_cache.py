#!/usr/bin/env python3
"""bench/cl_cache.py: the OpenCL engine's compile cache and memory, measured
side by side in one run (not part of CI; run by hand, a few minutes):

  (a) graph init cold vs warm per bench model and driver: cold = empty kiln
      cache (KILN_CACHE_DIR) AND empty driver caches (POCL_CACHE_DIR, Mesa's
      shader cache via MESA_SHADER_CACHE_DIR / XDG_CACHE_HOME), a new process;
      warm = the same directories after the cold process (which ran the graph
      twice, so the kiln cache holds its device binary), a new process.
      Reported: onnxInitGraph (kiln-run's "compile") and init + first run
      (PoCL compiles work-group functions at the first launch).
  (b) the 16M-element elementwise chain (ew_chain): the fused kernel against
      a plain copy kernel of the same bytes (tests/opencl_codegen --chain-rows
      16384: both in one program, median of 5 launches) and the whole graph
      with KILN_FUSION=0 (KILN_PROFILE kernel times through kiln-run).
  (c) the arena peak against the liveness lower bound after fusion
      (kiln-run --stats) per model.

Usage: bench/cl_cache.py [--build DIR] [--models a,b] [--drivers pocl,rusticl]
                         [--out DIR] [--skip a,b,c (comma list)]
The models come from bench/make_models.py (bench/README.md); make them first:
  build/bench/venv/bin/python bench/make_models.py --out build/bench/models
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVERS = {
    "pocl": {"OCL_ICD_VENDORS": "/etc/OpenCL/vendors/pocl.icd"},
    "rusticl": {"OCL_ICD_VENDORS": "/etc/OpenCL/vendors/rusticl.icd", "RUSTICL_ENABLE": "llvmpipe"},
}
# detection_post is left out: kiln-run feeds random inputs, and its ScatterND
# indices must be in range (bench/bench.py runs it with its own inputs)
MODELS = ["ew_chain", "mlp", "small_cnn", "resnet18", "mobilenetv2", "transformer", "embedding_bag"]


def run(cmd, env, timeout=1800):
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def fresh_dirs(tmp, tag):
    d = os.path.join(tmp, tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env = {"KILN_CACHE_DIR": os.path.join(d, "kiln"), "POCL_CACHE_DIR": os.path.join(d, "pocl"),
           "MESA_SHADER_CACHE_DIR": os.path.join(d, "mesa"), "XDG_CACHE_HOME": os.path.join(d, "xdg")}
    for k in ("POCL_CACHE_DIR", "XDG_CACHE_HOME"):
        os.makedirs(env[k])
    return env


def kiln_run(a, drv, model, extra, runs=1):
    env = {"KILN_DEVICE": "opencl", "KILN_LOG": "info"}
    env.update(DRIVERS[drv])
    env.update(extra)
    rc, out = run([a.kiln_run, "--runs", str(runs), "--stats", os.path.join(a.models, model + ".onnx")], env)
    r = {"rc": rc, "out": out}
    m = re.search(r"compile ([0-9.]+) ms, run min ([0-9.]+) ms", out)
    if m:
        r["init"], r["run"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"first run ([0-9.]+) ms", out)
    r["first"] = float(m.group(1)) if m else None
    m = re.search(r"arena (\d+) bytes = ([0-9.]+)x the liveness lower bound \((\d+)\)", out)
    if m:
        r["arena"], r["lb"] = int(m.group(1)), int(m.group(3))
    r["cached"] = re.search(r"program [0-9.]+ ms \((?:\d+ programs?, )?kiln cache[;)]", out) is not None
    m = re.search(r"prepare: copy ([0-9.]+) ms, rewrite\+shapes ([0-9.]+) ms", out)
    r["rewrite"] = float(m.group(2)) if m else None
    m = re.search(r"kernels ([0-9.]+) ms, device ops bound ([0-9.]+) ms", out)
    r["kern"], r["bind"] = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    m = re.search(r"memory ([0-9.]+) ms, program ([0-9.]+) ms", out)
    r["mem"], r["prog"] = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    return r


def fmt(x, nd=0):
    return "-" if x is None else f"{x:.{nd}f}"


def bench_init(a, tmp, lines):
    lines.append("### (a) graph init, cold vs warm (new process each)\n")
    lines.append("init = onnxInitGraph (kiln-run's compile); +1st = init plus the first run's extra time over the "
                 "fastest run (the driver's lazy compiles: PoCL builds work-group functions at the first launch); "
                 "warm phases: rewrite (prepare: key + graph record, or the passes), kern (the programs' loads with "
                 "their kernel objects and the device ops' kernels), bind (CLBlast's warm-up start, waited for only "
                 "with KILN_CL_CLBLAST_WARM=bind), mem (weights upload, buffers)\n")
    lines.append("| driver | model | cold init ms | warm init ms | warm/cold | cold init+1st | warm init+1st | "
                 "warm/cold | warm: rewrite / kern / bind / mem ms |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for drv in a.drivers:
        for m in a.models_list:
            env = fresh_dirs(tmp, f"{drv}-{m}")
            cold = kiln_run(a, drv, m, env)
            warm = kiln_run(a, drv, m, env)
            with open(os.path.join(a.rawdir, f"init-{drv}-{m}.log"), "w") as f:
                f.write(cold["out"] + "\n==== warm ====\n" + warm["out"])
            if "init" not in cold or "init" not in warm:
                lines.append(f"| {drv} | {m} | FAILED (rc {cold['rc']}/{warm['rc']}) | | | | | | |")
                print(cold["out"][-2000:], warm["out"][-2000:], file=sys.stderr)
                continue
            c1 = cold["init"] + max(0.0, (cold["first"] or 0) - cold["run"])
            w1 = warm["init"] + max(0.0, (warm["first"] or 0) - warm["run"])
            lines.append(
                f"| {drv} | {m} | {fmt(cold['init'])} | {fmt(warm['init'])} | {warm['init'] / cold['init']:.1%} | "
                f"{fmt(c1)} | {fmt(w1)} | {w1 / c1:.1%} | {fmt(warm['rewrite'])} / {fmt(warm['kern'])} / "
                f"{fmt(warm['bind'])} / {fmt(warm['mem'])}{'' if warm['cached'] else ' (no kiln-cache hit)'} |")
            print(lines[-1], flush=True)
    lines.append("")


def bench_chain(a, tmp, lines):
    lines.append("### (b) ew_chain, 16M float32 elementwise (8 nodes)\n")
    lines.append("fused / copy / variants: tests/opencl_codegen (one program; fused and copy: medians of 9 "
                 "alternated pairs, the copy one float per work item; fused/float16 copy: against a copy of 16 floats "
                 "per work item, 9 more pairs; fused/float16 NT copy: against that copy with the non-temporal "
                 "stores the fused kernel takes where it takes them (opencl/ENGINE.md, 'Streamed stores'), 9 more "
                 "pairs; variants: median of 5 launches); "
                 "kiln-run: whole run min of 3 (64 MiB in, 64 MiB out through host memory) and the KILN_PROFILE "
                 "kernel time per run (rusticl's event times are 0: '-')\n")
    lines.append("| driver | fused kernel ms | copy kernel ms (same bytes) | fused/copy | fused/float16 copy | "
                 "fused/float16 NT copy | "
                 "no exp/tanh ms (/copy) | float4+native_exp ms (/copy) | run fused ms | run KILN_FUSION=0 ms | "
                 "unfused/fused (run) | kernels fused / unfused ms | unfused/fused (kernels) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for drv in a.drivers:
        env = dict(DRIVERS[drv])
        rc, out = run([a.codegen, "--chain-rows", "16384", "--chain-only"], env)
        m = re.search(r"fused ([0-9.]+) ms, copy of the same bytes ([0-9.]+) ms: ratio ([0-9.]+), CPU time ratio "
                      r"[0-9.]+ \([^)]*\); hand-written chain ([0-9.]+) ms", out)
        m16 = re.search(r"against a float16 copy: fused ([0-9.]+) ms, float16 copy ([0-9.]+) ms: ratio ([0-9.]+)", out)
        mnt = re.search(r"against a float16 copy with[^:]* non-temporal stores: fused ([0-9.]+) ms, that copy ([0-9.]+) "
                        r"ms: ratio ([0-9.]+)", out)
        if not m or not m16 or not mnt:
            print(out[-3000:], file=sys.stderr)
            lines.append(f"| {drv} | FAILED | | | | | | | | | | | |")
            continue
        tf, tc, th = float(m.group(1)), float(m.group(2)), float(m.group(4))
        r16, rnt = float(m16.group(3)), float(mnt.group(3))
        var = dict(re.findall(r"variant (\S+)\s+([0-9.]+) ms", out))
        ks, rr = {}, {}
        for fusion in ("1", "0"):
            d = fresh_dirs(tmp, f"chain-{drv}-{fusion}")
            d.update({"KILN_FUSION": fusion, "KILN_PROFILE": "1"})
            r = kiln_run(a, drv, "ew_chain", d, runs=3)
            tot = 0.0
            for line in r["out"].splitlines():
                mm = re.match(r"\s+gen .*?\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+\s*$", line)
                if mm:
                    tot += float(mm.group(3)) / 1000.0  # mean us per call -> ms per run
            ks[fusion] = tot
            rr[fusion] = r.get("run")
        nm, vn = float(var.get("kiln_nomath", 0)), float(var.get("kiln_vec4n", 0))
        kr = f"{ks['0'] / ks['1']:.1f}x" if ks["1"] > 0 and ks["0"] > 0 else "-"
        runr = f"{rr['0'] / rr['1']:.1f}x" if rr["1"] and rr["0"] else "-"
        kf = f"{ks['1']:.1f} / {ks['0']:.1f}" if ks["1"] > 0 else "-"
        lines.append(f"| {drv} | {tf:.1f} | {tc:.1f} | {tf / tc:.2f}x | {r16:.2f}x | {rnt:.2f}x | {nm:.1f} ({nm / tc:.2f}x) | {vn:.1f} "
                     f"({vn / tc:.2f}x) | {fmt(rr['1'])} | {fmt(rr['0'])} | {runr} | {kf} | {kr} |")
        print(lines[-1], flush=True)
    lines.append("")


def bench_arena(a, tmp, lines):
    lines.append("### (c) arena peak vs the liveness lower bound after fusion (kiln-run --stats)\n")
    lines.append("| model | arena bytes | lower bound | arena/bound |")
    lines.append("|---|---|---|---|")
    drv = a.drivers[0]
    for m in a.models_list:
        r = kiln_run(a, drv, m, fresh_dirs(tmp, f"arena-{m}"))
        if "arena" not in r:
            lines.append(f"| {m} | FAILED (rc {r['rc']}) | | |")
            continue
        lb = r["lb"]
        lines.append(f"| {m} | {r['arena']} | {lb} | {r['arena'] / lb if lb else 1:.3f} |")
        print(lines[-1], flush=True)
    lines.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--models-dir", default=None, help="default BUILD/bench/models")
    ap.add_argument("--drivers", default="pocl,rusticl")
    ap.add_argument("--out", default=None, help="results markdown (default BUILD/bench/cl_cache.md)")
    ap.add_argument("--skip", default="", help="comma list of a,b,c to skip")
    a = ap.parse_args()
    a.kiln_run = os.path.join(a.build, "tools", "kiln-run")
    a.codegen = os.path.join(a.build, "tests", "opencl_codegen")
    a.models_list = [m for m in a.models.split(",") if m]
    a.models = a.models_dir or os.path.join(a.build, "bench", "models")
    a.drivers = [d for d in a.drivers.split(",") if d]
    out = a.out or os.path.join(a.build, "bench", "cl_cache.md")
    a.rawdir = os.path.splitext(out)[0] + "-logs"
    os.makedirs(a.rawdir, exist_ok=True)
    for f in (a.kiln_run, a.codegen):
        if not os.path.exists(f):
            sys.exit(f"cl_cache: {f} is missing (build first: ci/build {a.build})")
    missing = [m for m in a.models_list if not os.path.exists(os.path.join(a.models, m + ".onnx"))]
    if missing:
        sys.exit(f"cl_cache: models missing in {a.models}: {missing} (run bench/make_models.py --out {a.models})")
    skip = set(a.skip.split(","))
    try:
        load = os.getloadavg()
    except OSError:
        load = (0, 0, 0)
    lines = [f"## OpenCL cache and memory bench ({datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC)\n",
             f"machine: {platform.node()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} at start; "
             f"drivers {', '.join(a.drivers)}\n"]
    with tempfile.TemporaryDirectory(prefix="kiln-clbench-") as tmp:
        if "a" not in skip:
            bench_init(a, tmp, lines)
        if "b" not in skip:
            bench_chain(a, tmp, lines)
        if "c" not in skip:
            bench_arena(a, tmp, lines)
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(text)
    print(f"cl_cache: written to {out}")


if __name__ == "__main__":
    main()
