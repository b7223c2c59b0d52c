#!/bin/sh
# tests/fusion_opencl_check.sh CONFORMANCE LIB ROOT: runs the fusion-pattern
# suite (ROOT = tests/fusion) on the OpenCL engine and asserts that each
# graph went through the fused paths: its plan (KILN_LOG=info line "opencl
# plan ...") has the expected generated kernels, fused groups, device ops and
# no host node — e.g. conv+bn+relu is ONE kernel (direct conv with its
# epilogue), MatMul+epilogue is the CLBlast op + ONE epilogue kernel,
# softmax+layernorm+epilogue ONE reduction kernel — and that every output
# still matches onnxruntime's. Then the same suite with KILN_FUSION=0 must
# pass too and launch more. Run through tests/opencl_run.sh (exit 77 without
# a device).
set -u
conf=$1 lib=$2 root=$3
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
KILN_LOG=info "$conf" --lib "$lib" "$root" >"$log" 2>&1
rc=$?
fail=0
if [ $rc -ne 0 ] || ! grep -q "conformance: [1-9][0-9]* passed, 0 failed, 0 skipped" "$log"; then
  echo "FAIL: the fusion suite did not pass (rc $rc):"; grep -E "FAIL|conformance:" "$log"; fail=1
fi
# graph: kernels fused_groups device_ops
while read -r name k f d; do
  line=$(grep "opencl plan '$name' on" "$log" | grep "kernels (" | head -1)
  want="$k kernels ($f fused groups), $d device ops, 0 copies, 0 on the host"
  case "$line" in
  *"$want"*) echo "ok   $name: $want" ;;
  *) echo "FAIL $name: want '$want', got '${line:-no plan line}'"; fail=1 ;;
  esac
done <<'TABLE'
anchor_outputs 2 2 1
chain_views_bcast 2 2 0
conv_bn_relu_pool 1 1 1
conv_gemm_epilogue 1 1 1
conv_residual_clip 2 2 0
gemm_bias_relu 1 1 1
intermediate_outputs 3 2 0
layernorm_stats 1 1 0
matmul_gelu 1 1 1
reduce_kinds 4 4 0
reduce_prologue 2 2 0
residual 2 2 0
softmax_layernorm 2 2 1
TABLE
# unfused: the same results, more launches
KILN_FUSION=0 KILN_LOG=info "$conf" --lib "$lib" "$root" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "conformance: [1-9][0-9]* passed, 0 failed, 0 skipped" "$log"; then
  echo "FAIL: the fusion suite with KILN_FUSION=0 did not pass (rc $rc)"; grep -E "FAIL|conformance:" "$log"; fail=1
fi
line=$(grep "opencl plan 'conv_bn_relu_pool' on" "$log" | head -1)
case "$line" in
*"(0 fused groups)"*) echo "ok   KILN_FUSION=0: conv_bn_relu_pool unfused" ;;
*) echo "FAIL KILN_FUSION=0: conv_bn_relu_pool: '$line'"; fail=1 ;;
esac
exit $fail
