#!/bin/sh
# bench/ew_chain_cl.sh [RUNS] [MODEL.onnx]: the bench elementwise chain
# (make_models.py ew_chain) on the OpenCL engine, PoCL and rusticl side by
# side: fused vs KILN_FUSION=0, with kiln's math and vector width (now) and
# as before them (KILN_CL_MATH=builtin KILN_CL_VEC=4); 3 rounds in ABBA
# order per driver, kiln-run -n RUNS (default 5) each, printing the run min
# (ms) and, from a KILN_PROFILE=1 run, the kernels' total per run (PoCL;
# rusticl's event times are not meaningful). Run from the repo root after a
# build; opencl/ENGINE.md has the results.
runs=${1:-5}
model=${2:-build/bench/models/ew_chain.onnx}
run=build/tools/kiln-run
for f in "$model" "$run"; do
  [ -e "$f" ] || { echo "bench/ew_chain_cl.sh: $f not found (bench/run makes the models; pass MODEL.onnx)" >&2; exit 1; }
done
one() { # driver-env... -- fusion math vec
  out=$(env "$@" KILN_DEVICE=opencl KILN_CACHE_DIR=off $run -n "$runs" --warmup 1 "$model" 2>&1)
  echo "$out" | sed -n 's/.*run min \([0-9.]*\) ms.*/\1/p'
}
prof() {
  out=$(env "$@" KILN_DEVICE=opencl KILN_CACHE_DIR=off KILN_PROFILE=1 $run -n "$runs" --warmup 1 "$model" 2>&1)
  tot=$(echo "$out" | sed -n 's/^  total *\([0-9.]*\).*/\1/p' | head -1)
  echo "$tot $runs" | awk '{ if ($1 != "") printf "%.1f", $1 / ($2 + 1) }'
}
for drv in pocl rusticl; do
  if [ $drv = pocl ]; then d="OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd"
  else d="OCL_ICD_VENDORS=/etc/OpenCL/vendors/rusticl.icd RUSTICL_ENABLE=llvmpipe"; fi
  for round in 1 2 3; do
    if [ $((round % 2)) = 1 ]; then order="now before"; else order="before now"; fi
    for v in $order; do
      if [ $v = now ]; then m="KILN_CL_MATH= KILN_CL_VEC="; else m="KILN_CL_MATH=builtin KILN_CL_VEC=4"; fi
      # shellcheck disable=SC2086
      f1=$(one $d $m KILN_FUSION=1); f0=$(one $d $m KILN_FUSION=0)
      echo "$drv round=$round $v fused_min_ms=$f1 unfused_min_ms=$f0 unfused/fused=$(echo "$f0 $f1" | awk '{printf "%.2f", $1/$2}')"
    done
  done
  for v in now before; do
    if [ $v = now ]; then m="KILN_CL_MATH= KILN_CL_VEC="; else m="KILN_CL_MATH=builtin KILN_CL_VEC=4"; fi
    # shellcheck disable=SC2086
    echo "$drv profile $v kernels_ms_per_run fused=$(prof $d $m KILN_FUSION=1) unfused=$(prof $d $m KILN_FUSION=0)"
  done
done
