#!/bin/sh
# tests/fusion_opencl_check.sh CONFORMANCE LIB ROOT [GEMM [KILN_RUN]]: runs the fusion-pattern
# suite (ROOT = tests/fusion) on the OpenCL engine and asserts that each
# graph went through the fused paths: its plan (KILN_LOG=info line "opencl
# plan ...") has the expected generated kernels, fused groups, device ops and
# no host node — e.g. conv+bn+relu(+maxpool) is ONE kernel (direct conv with
# its epilogue and the pooling), MatMul+epilogue is the CLBlast op + ONE epilogue kernel,
# softmax+layernorm+epilogue ONE reduction kernel — and that every output
# still matches onnxruntime's. Then the same suite with KILN_FUSION=0 must
# pass too and launch more. GEMM (4th argument, default clblast): which
# SGEMM the run takes (KILN_CL_GEMM's choice on the driver). The cases under
# a symbolic batch (ROOT_symbolic) run once, their plan checked too. With kiln's,
# MatMul / Gemm / pointwise-Conv groups are ONE kernel with the epilogue in
# the SGEMM's store (no op, no g*_epi kernel in the KILN_DUMP plan), an
# im2col conv's group is TWO kernels (im2col into the scratch, then that
# SGEMM) instead of the op (im2col, bias, SGEMM) + an epilogue kernel, and
# KILN_CL_GEMM_EPILOGUE=0 brings back op + epilogue kernel. Those checks
# run with KILN_CL_CONV_IMPLICIT=0 (im2col + SGEMM, whatever the shape);
# then with kiln's GEMM the suite runs again with the implicit GEMM forced
# (=1): each such conv group is ONE kernel, the SGEMM reading X through the
# window, no im2col kernel and no scratch. (The default choice, per shape,
# is the plain fusion_suite_opencl_* run.) The matmul_views cases: the
# views their MatMuls read in place and the ones still copied, then the same
# cases with KILN_CL_MM_VIEWS=0 (every view copied). Where a Conv / Gemm
# group is the device op + an epilogue kernel (CLBlast; KILN_CL_GEMM_EPILOGUE=0), the op
# runs without its bias / C and the epilogue kernel adds it — no n*_bias /
# n*_gemm_c prefill kernel in the program — unless the op's own output is
# read elsewhere (a graph output): KILN_DUMP's plan and program say which.
# With kiln's GEMM the suite also runs with KILN_CL_GEMM=clblast, so that
# CLBlast's path is checked on both drivers. repeated_ops: device ops that
# print an earlier op's text print nothing (the plan says so), with a
# program per kernel too, and a bad index in the second of two bags that
# share a text is reported by that bag (KILN_RUN, 5th argument). Run through
# tests/opencl_run.sh (exit 77 without a device).
set -u
conf=$1 lib=$2 root=$3 gemm=${4:-clblast} krun=${5:-}
log=$(mktemp) || exit 1
dump=$(mktemp -d) || exit 1
trap 'rm -rf "$log" "$dump"' EXIT
export KILN_CL_CONV_IMPLICIT=0
fail=0
# run_suite WHAT [VAR=value...]: the fusion suite with those variables (and
# KILN_LOG=info) into $log; every case must pass
run_suite() {
  what=$1
  shift
  env "$@" KILN_LOG=info "$conf" --lib "$lib" "$root" >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "conformance: [1-9][0-9]* passed, 0 failed, 0 skipped" "$log"; then
    echo "FAIL: the fusion suite$what did not pass (rc $rc):"; grep -E "FAIL|conformance:" "$log"; fail=1
  fi
}
run_suite "" KILN_DUMP="$dump"
# graph: kernels fused_groups device_ops [buffer copies, default 0]; the lines marked "kiln" / "clblast" apply
# with that GEMM
check_table() {
  while read -r g name k f d cp; do
    [ "$g" = any ] || [ "$g" = "$gemm" ] || continue
    line=$(grep "opencl plan '$name' on" "$log" | grep "kernels (" | head -1)
    want="$k kernels ($f fused groups), $d device ops, ${cp:-0} copies, 0 on the host"
    case "$line" in
    *"$want"*) echo "ok   $name: $want" ;;
    *) echo "FAIL $name: want '$want', got '${line:-no plan line}'"; fail=1 ;;
    esac
  done
}
# check_split NAME SPLIT KEPT: NAME's KILN_DUMP plan has SPLIT groups whose
# anchor's op runs without its bias / C (the epilogue kernel adds it), and
# its program KEPT bias / C prefill kernels (n*_bias, n*_gemm_c) in all
check_split() {
  f=$(ls "$dump"/$1.opencl-*.txt 2>/dev/null | head -1)
  ns=$(cat "$dump"/$1.opencl-*.txt 2>/dev/null |
    grep -cE "device op without its (bias|C) \+ one epilogue kernel adding it")
  nk=$(cat "$dump"/$1.opencl-*.cl 2>/dev/null | grep -cE "__kernel void n[0-9]+_(bias|gemm_c)\(")
  if [ -n "$f" ] && [ "$ns" = "$2" ] && [ "$nk" = "$3" ]; then
    echo "ok   $1: $2 ops without their bias / C (added by the epilogue kernel), $3 prefill kernels"
  else
    echo "FAIL $1: want $2 ops without their bias / C and $3 prefill kernels, got $ns and $nk (${f:-no plan})"
    [ -n "$f" ] && cat "$f"
    fail=1
  fi
}
# the groups of the op + an epilogue kernel with CLBlast's GEMM
check_split_clblast() {
  check_split conv_gemm_epilogue 1 0
  check_split conv_gemm_bias_batch 1 1
  check_split gemm_bias_relu 1 0
  check_split gemm_store_alpha 2 0
}
check_table <<'TABLE'
clblast anchor_outputs 2 2 1
kiln anchor_outputs 2 2 0
any chain_views_bcast 2 2 0
any conv_bn_relu_pool 1 1 0
any embedding_bag 0 0 3 4
any repeated_blocks 4 4 0
any reshape_output 1 0 0 1
clblast conv_gemm_epilogue 1 1 0
kiln conv_gemm_epilogue 2 1 0
clblast conv_gemm_bias_batch 2 2 0
kiln conv_gemm_bias_batch 4 2 0
clblast conv_im2col_bn_relu 1 1 0
kiln conv_im2col_bn_relu 2 1 0
clblast conv_im2col_grouped 1 1 0
kiln conv_im2col_grouped 2 1 0
clblast conv_im2col_residual 2 2 1
kiln conv_im2col_residual 4 2 1
clblast conv_im2col_strided 2 2 0
kiln conv_im2col_strided 4 2 0
any conv_pointwise_clip 1 1 0
any conv_pool_declined 2 2 2
any conv_pool_fused 4 4 0
any conv_residual_clip 2 2 0
clblast gemm_store_alpha 2 2 2
kiln gemm_store_alpha 2 2 0
clblast gemm_bias_relu 1 1 1
kiln gemm_bias_relu 1 1 0
any intermediate_outputs 3 2 0
any layernorm_stats 1 1 0
clblast matmul_batched_residual 1 1 1
kiln matmul_batched_residual 1 1 0
clblast matmul_gelu 1 1 1
kiln matmul_gelu 1 1 0
any reduce_kinds 4 4 0
any reduce_prologue 2 2 0
any residual 2 2 0
clblast softmax_layernorm 2 2 1
kiln softmax_layernorm 2 2 0
clblast matmul_views_attn 4 4 8
kiln matmul_views_attn 5 4 4
any matmul_views_copy 3 0 3
clblast matmul_views_slice 1 1 6
kiln matmul_views_slice 1 1 5
TABLE
# views only MatMuls read (opencl/ENGINE.md "Views read in place by
# MatMul"): in the KILN_DUMP plan, N views read or written in place and C
# view-copy kernels (kiln's SGEMM copies attention's K^T, a transposed B)
check_views() {
  while read -r g name n c; do
    [ "$g" = any ] || [ "$g" = "$gemm" ] || continue
    f=$(ls "$dump"/$name.opencl-*.txt 2>/dev/null | head -1)
    got_n=$(grep -c "[a-z] in place by MatMul" "$f" 2>/dev/null)
    got_c=$(grep -c ", a view copy$" "$f" 2>/dev/null)
    if [ -n "$f" ] && [ "$got_n" = "$n" ] && [ "$got_c" = "$c" ]; then
      echo "ok   $name: $n views read or written in place by MatMul, $c view copies"
    else
      echo "FAIL $name: want $n views in place and $c view copies, got ${got_n:-?} and ${got_c:-?} (${f:-no plan})"
      [ -n "$f" ] && cat "$f"
      fail=1
    fi
  done
}
check_views <<'TABLE'
clblast matmul_views_attn 4 0
kiln matmul_views_attn 3 1
any matmul_views_slice 5 0
any matmul_views_copy 0 2
any matmul_views_empty 0 2
TABLE
# repeated_blocks' first, second and fourth conv groups print one text
# (opencl/ENGINE.md "Repeated kernels printed once"): the plan says the
# second and fourth are the first's text, its program defines two kernels
# (the third's LeakyRelu is another); and with a program per kernel
# (KILN_CL_PROGRAM_SPLIT=1) each step's kernel comes from the program holding
# its text — not the third's — and the outputs still match
f=$(ls "$dump"/repeated_blocks.opencl-*.txt 2>/dev/null | head -1)
got=$( [ -n "$f" ] && grep -c ", the text of an earlier kernel$" "$f")
defs=$(cat "$dump"/repeated_blocks.opencl-*.cl 2>/dev/null | grep -c "^__kernel ")
if [ "${got:-0}" = 2 ] && [ "$defs" = 2 ]; then
  echo "ok   repeated_blocks: 2 groups print the first's text, 2 kernels in the program"
else
  echo "FAIL repeated_blocks: want 2 groups reusing the first's text and 2 kernels, got ${got:-?} and $defs (${f:-no plan})"
  fail=1
fi
# repeated_ops (opencl/ENGINE.md "Repeated ops printed once"): the second
# bag's and the second LayerNormalization's ops print nothing, nor, with
# kiln's SGEMM, the second MatMul's; the program defines each text once
f=$(ls "$dump"/repeated_ops.opencl-*.txt 2>/dev/null | head -1)
got=$( [ -n "$f" ] && grep -c ", the text of the op of .* (not printed again)$" "$f")
want=2
[ "$gemm" = kiln ] && want=3
if [ "${got:-0}" = "$want" ]; then
  echo "ok   repeated_ops: $want ops print an earlier op's text"
else
  echo "FAIL repeated_ops: want $want ops reusing an earlier op's text, got ${got:-?} (${f:-no plan})"
  [ -n "$f" ] && cat "$f"
  fail=1
fi
# (the repeated kernels' objects cloned from the first's, and with
# KILN_CL_CLONE=0 created again by name; each op's from the program that
# holds its text)
for clone in 1 0; do
  env KILN_CL_PROGRAM_SPLIT=1 KILN_CL_CLONE=$clone KILN_CACHE_DIR=off "$conf" --lib "$lib" -f repeated_blocks \
    -f conv_residual_clip -f repeated_ops "$root" >"$log" 2>&1
  if grep -q "conformance: 3 passed, 0 failed, 0 skipped" "$log"; then
    echo "ok   repeated_blocks, conv_residual_clip, repeated_ops: a program per kernel, KILN_CL_CLONE=$clone"
  else
    echo "FAIL repeated_blocks, conv_residual_clip, repeated_ops with a program per kernel, KILN_CL_CLONE=$clone:"
    grep -E "FAIL|conformance:" "$log"; fail=1
  fi
done
# the second bag (bag2) meets an index out of range: its op, which shares
# the first bag's text, names itself
if [ -n "$krun" ]; then
  d=$root/test_fusion_repeated_ops
  "$krun" --lib "$lib" -n 1 -i "$d/bad_second_bag/input_0.pb" -i "$d/bad_second_bag/input_1.pb" \
    -i "$d/bad_second_bag/input_2.pb" -i "$d/bad_second_bag/input_3.pb" -i "$d/bad_second_bag/input_4.pb" \
    "$d/model.onnx" >"$log" 2>&1
  if grep -q "node bag2_bags (SparseLengthsWeightedSum): index 13 is out of range for a dimension of size 13" "$log"; then
    echo "ok   repeated_ops: the bad index of the second bag, named by its op"
  else
    echo "FAIL repeated_ops: the bad index of the second bag:"; grep -E "kiln-run|FAIL" "$log"; fail=1
  fi
fi
# a direct conv's group ending in a MaxPool / AveragePool whose windows do
# not overlap and whose input nothing else needs: ONE kernel, no pool op
for nw in conv_bn_relu_pool:1 conv_pool_fused:4; do
  name=${nw%:*} want=${nw#*:}
  f=$(ls "$dump"/$name.opencl-*.txt 2>/dev/null | head -1)
  got=$( [ -n "$f" ] && grep -cE "direct Conv with the epilogue and the (MaxPool|AveragePool) in one kernel" "$f")
  if [ "${got:-0}" = "$want" ] && ! grep -q "^op " "$f"; then
    echo "ok   $name: $want direct conv kernel(s) with the epilogue and the pooling inside, no pool op"
  else
    echo "FAIL $name: the KILN_DUMP plan ${f:-(none)} does not show the pooling inside the conv's kernel"
    [ -n "$f" ] && cat "$f"
    fail=1
  fi
done
# and the poolings it keeps as their own op, each with its reason (KILN_LOG=debug)
env KILN_LOG=debug "$conf" --lib "$lib" -f conv_pool_declined "$root" >"$log" 2>&1
for why in "the MaxPool's windows overlap (spatial dim 0: extent 3, stride 2)" \
  "'r2' is needed outside the group too (the group stores it)"; do
  if grep -F "its MaxPool stays its own device op: $why" "$log" >/dev/null &&
    grep -q "conformance: 1 passed, 0 failed" "$log"; then
    echo "ok   conv_pool_declined: the pool op kept: $why"
  else
    echo "FAIL conv_pool_declined: no debug line keeping the pool op for: $why"; grep -E "stays|conformance" "$log"; fail=1
  fi
done
# the suite's cases under a symbolic batch (ROOT_symbolic): conv_pool_symbolic's
# two pooled conv kernels planned once at the bound (8), launched over the
# run's 3 images, outputs right
symroot=${root%/}_symbolic
env KILN_LOG=info KILN_DUMP="$dump" "$conf" --lib "$lib" "$symroot" >"$log" 2>&1
f=$(ls "$dump"/conv_pool_symbolic.opencl-*.txt 2>/dev/null | head -1)
if grep -q "conformance: 1 passed, 0 failed, 0 skipped" "$log" &&
  grep -q "opencl plan 'conv_pool_symbolic' on .*, 2 kernels (2 fused groups), 0 device ops" "$log" &&
  grep -q "opencl plan 'conv_pool_symbolic': symbolic dim N: one variant at the bound 8 serves 1..8 (2 kernels launched over the run's rows" "$log" &&
  [ -n "$f" ] && [ "$(grep -cE "direct Conv with the epilogue and the (MaxPool|AveragePool) in one kernel" "$f")" = 2 ]; then
  echo "ok   conv_pool_symbolic: one variant at the bound 8, its 2 pooled conv kernels launched over the run's 3 images"
else
  echo "FAIL conv_pool_symbolic: not passed as one variant launching the 2 pooled conv kernels over the run's rows"
  grep -E "conv_pool_symbolic|conformance" "$log"; fail=1
fi
# CLBlast on a CPU device (rusticl): every conv is direct by default (the
# row above: conv_gemm_epilogue ONE kernel, no op; conv_use_gemm, OPS.md);
# KILN_CL_CONV=gemm brings back the CLBlast conv op + its epilogue kernel
# (and its bias to that kernel: check_split_clblast)
if [ "$gemm" = clblast ]; then
  rm -rf "$dump"/*
  run_suite " with KILN_CL_CONV=gemm" KILN_CL_CONV=gemm KILN_DUMP="$dump"
  check_table <<'TABLE'
clblast conv_gemm_epilogue 1 1 1
clblast conv_gemm_bias_batch 2 2 2
TABLE
  check_split_clblast
fi
# kiln's GEMM: these groups are one SGEMM kernel (g*_mm) each, no epilogue kernel
if [ "$gemm" = kiln ]; then
  check_split conv_gemm_bias_batch 0 0
  for name in matmul_gelu gemm_bias_relu matmul_batched_residual conv_pointwise_clip; do
    f=$(ls "$dump"/$name.opencl-*.txt 2>/dev/null | head -1)
    if [ -n "$f" ] && grep -q "^kernel g[0-9]*_mm:" "$f" && ! grep -q "^kernel g[0-9]*_epi" "$f" &&
      grep -q "in kiln's SGEMM with the epilogue in its store" "$f"; then
      echo "ok   $name: one SGEMM kernel with the epilogue in its store, no epilogue kernel"
    else
      echo "FAIL $name: the KILN_DUMP plan ${f:-(none)} does not show the epilogue in the SGEMM's store"
      [ -n "$f" ] && cat "$f"
      fail=1
    fi
  done
  # im2col convs: the im2col kernel (g*_col, writing the scratch) and the
  # SGEMM with the epilogue (g*_mm) per group, no epilogue kernel
  for name in conv_gemm_epilogue conv_gemm_bias_batch conv_im2col_bn_relu conv_im2col_grouped conv_im2col_residual \
    conv_im2col_strided; do
    f=$(ls "$dump"/$name.opencl-*.txt 2>/dev/null | head -1)
    if [ -n "$f" ] && grep -q "^kernel g[0-9]*_col:" "$f" && grep -q "^kernel g[0-9]*_mm:" "$f" &&
      ! grep -q "^kernel g[0-9]*_epi" "$f" && grep -q "^scratch: [1-9]" "$f" &&
      grep -q "im2col kernel + Conv in kiln's SGEMM with the epilogue in its store" "$f"; then
      echo "ok   $name: im2col kernel + SGEMM with the epilogue in its store, no epilogue kernel"
    else
      echo "FAIL $name: the KILN_DUMP plan ${f:-(none)} does not show the im2col conv's epilogue in the SGEMM's store"
      [ -n "$f" ] && cat "$f"
      fail=1
    fi
  done
  # the switch: op + separate epilogue kernel again, same results; the ops
  # (kiln's SGEMM) without their bias / C where nothing else reads their
  # output (conv_im2col_residual's 1x1 is an op alone: it keeps its bias)
  rm -rf "$dump"/*
  run_suite " with KILN_CL_GEMM_EPILOGUE=0" KILN_CL_GEMM_EPILOGUE=0 KILN_DUMP="$dump"
  gemm=clblast
  check_table <<'TABLE'
clblast gemm_bias_relu 1 1 1
clblast matmul_gelu 1 1 1
clblast matmul_batched_residual 1 1 1
clblast conv_gemm_epilogue 1 1 1
clblast conv_gemm_bias_batch 2 2 2
clblast conv_im2col_bn_relu 1 1 1
clblast conv_im2col_grouped 1 1 1
clblast conv_im2col_residual 2 2 3
clblast conv_im2col_strided 2 2 2
TABLE
  check_split_clblast
  check_split conv_im2col_bn_relu 1 0
  check_split conv_im2col_grouped 1 0
  check_split conv_im2col_residual 2 1
  check_split conv_im2col_strided 1 0
  # CLBlast's GEMM on this driver too: the groups of its op + an epilogue
  # kernel (convs forced to the GEMM: with CLBlast on a CPU device of narrow
  # vectors, rusticl, they would go direct)
  rm -rf "$dump"/*
  run_suite " with KILN_CL_GEMM=clblast" KILN_CL_GEMM=clblast KILN_CL_CONV=gemm KILN_DUMP="$dump"
  check_table <<'TABLE'
clblast conv_gemm_epilogue 1 1 1
clblast conv_gemm_bias_batch 2 2 2
clblast gemm_bias_relu 1 1 1
clblast gemm_store_alpha 2 2 2
TABLE
  check_split_clblast
  # the implicit GEMM forced: one kernel per conv group, no columns
  rm -rf "$dump"/*
  run_suite " with KILN_CL_CONV_IMPLICIT=1" KILN_CL_CONV_IMPLICIT=1 KILN_DUMP="$dump"
  gemm=kiln
  check_table <<'TABLE'
kiln conv_gemm_epilogue 1 1 0
kiln conv_gemm_bias_batch 2 2 0
kiln conv_im2col_bn_relu 1 1 0
kiln conv_im2col_grouped 1 1 0
kiln conv_im2col_residual 2 2 1
kiln conv_im2col_strided 2 2 0
TABLE
  for name in conv_gemm_epilogue conv_gemm_bias_batch conv_im2col_bn_relu conv_im2col_grouped conv_im2col_residual \
    conv_im2col_strided; do
    f=$(ls "$dump"/$name.opencl-*.txt 2>/dev/null | head -1)
    if [ -n "$f" ] && grep -q "^kernel g[0-9]*_mm:" "$f" && ! grep -q "^kernel g[0-9]*_col:" "$f" &&
      ! grep -q "^kernel g[0-9]*_epi" "$f" && ! grep -q "^scratch: [1-9]" "$f" &&
      grep -q "Conv in kiln's SGEMM with the epilogue in its store, one kernel" "$f"; then
      echo "ok   $name: implicit GEMM, one SGEMM kernel with the epilogue in its store, no columns"
    else
      echo "FAIL $name: the KILN_DUMP plan ${f:-(none)} does not show the implicit GEMM conv in one kernel"
      [ -n "$f" ] && cat "$f"
      fail=1
    fi
  done
fi
# KILN_CL_MM_VIEWS=0: every view copied again, the same results
rm -rf "$dump"/*
env KILN_CL_MM_VIEWS=0 KILN_DUMP="$dump" "$conf" --lib "$lib" -f matmul_views "$root" >"$log" 2>&1
if [ $? -ne 0 ] || ! grep -q "conformance: 4 passed, 0 failed, 0 skipped" "$log"; then
  echo "FAIL: the matmul_views cases with KILN_CL_MM_VIEWS=0 did not pass:"; grep -E "FAIL|conformance:" "$log"; fail=1
fi
check_views <<'TABLE'
any matmul_views_attn 0 4
any matmul_views_slice 0 5
any matmul_views_copy 0 2
any matmul_views_empty 0 2
TABLE
# unfused: the same results, more launches
run_suite " with KILN_FUSION=0" KILN_FUSION=0
line=$(grep "opencl plan 'conv_bn_relu_pool' on" "$log" | head -1)
case "$line" in
*"(0 fused groups)"*) echo "ok   KILN_FUSION=0: conv_bn_relu_pool unfused" ;;
*) echo "FAIL KILN_FUSION=0: conv_bn_relu_pool: '$line'"; fail=1 ;;
esac
exit $fail
