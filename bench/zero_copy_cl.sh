#!/bin/sh
# bench/zero_copy_cl.sh [RUNS] [ROUNDS] [MODEL.onnx]: the OpenCL engine's
# zero-copy host IO (KILN_CL_ZERO_COPY, opencl/ENGINE.md "Host memory used
# in place") on the bench elementwise chain, PoCL and rusticl: per round
# zero-copy on and off in ABBA order, each fused and with KILN_FUSION=0,
# kiln-run -n RUNS (default 10) after one warm-up, printing the run min
# (ms) and the unfused/fused ratio. Run from the repo root after a build.
runs=${1:-10}
rounds=${2:-4}
model=${3:-build/bench/models/ew_chain.onnx}
run=build/tools/kiln-run
one() { # env...
  env "$@" KILN_DEVICE=opencl $run -n "$runs" --warmup 1 "$model" 2>&1 |
    sed -n 's/.*run min \([0-9.]*\) ms.*/\1/p'
}
for drv in pocl rusticl; do
  if [ $drv = pocl ]; then d="OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd"
  else d="OCL_ICD_VENDORS=/etc/OpenCL/vendors/rusticl.icd RUSTICL_ENABLE=llvmpipe"; fi
  r=1
  while [ $r -le "$rounds" ]; do
    if [ $((r % 2)) = 1 ]; then order="1 0"; else order="0 1"; fi
    # ($d is several words)
    # shellcheck disable=SC2086
    for zc in $order; do
      f1=$(one $d KILN_CL_ZERO_COPY=$zc KILN_FUSION=1); f0=$(one $d KILN_CL_ZERO_COPY=$zc KILN_FUSION=0)
      echo "$drv round=$r zero_copy=$zc fused_min_ms=$f1 unfused_min_ms=$f0 unfused/fused=$(echo "$f0 $f1" | awk '{printf "%.2f", $1/$2}')"
    done
    r=$((r + 1))
  done
done
