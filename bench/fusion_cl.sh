#!/bin/sh
# bench/fusion_cl.sh [RUNS] [MODEL.onnx...]: the OpenCL engine fused vs
# unfused (KILN_FUSION=0), on PoCL and rusticl, side by side: per driver and
# model, 3 alternating rounds of kiln-run -n RUNS (default 20), printing
# each round's median and min run time (ms) and the plan's kernels / device
# ops (KILN_LOG=info). Models default to examples/cnn.onnx and the blocks of
# bench/fusion_blocks.py in build/fm (make them first). Run from the repo root
# after ci/build build.
runs=${1:-20}
[ $# -gt 0 ] && shift
models=${*:-examples/cnn.onnx build/fm/cbr_direct.onnx build/fm/cbr_gemm.onnx}
run=build/tools/kiln-run
for drv in pocl rusticl; do
  if [ $drv = pocl ]; then set -- OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd
  else set -- OCL_ICD_VENDORS=/etc/OpenCL/vendors/rusticl.icd RUSTICL_ENABLE=llvmpipe; fi
  for m in $models; do
    for round in 1 2 3; do
      for fu in 1 0; do
        out=$(env "$@" KILN_DEVICE=opencl KILN_FUSION=$fu KILN_LOG=info KILN_CACHE_DIR=build/fm/cache-$drv \
          $run -n "$runs" --warmup 3 "$m" 2>&1)
        med=$(echo "$out" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
        min=$(echo "$out" | sed -n 's/.*run min \([0-9.]*\) ms.*/\1/p')
        plan=$(echo "$out" | grep -o '[0-9]* kernels ([0-9]* fused groups), [0-9]* device ops' | head -1)
        echo "$drv $(basename "$m" .onnx) fusion=$fu round=$round median_ms=$med min_ms=$min | $plan"
      done
    done
  done
done
