#!/bin/sh
# tests/exports.sh LIB: the plugin must export exactly the ONNXIFI functions,
# and need nothing of the OpenCL ICD loader past OpenCL 1.2's symbol
# versions (a 2.x entry point, clCloneKernel, is looked up at run time:
# opencl/clone.c; a link-time reference made an older loader refuse the
# plugin).
set -eu
lib=$1
expected="onnxGetBackendCompatibility onnxGetBackendIDs onnxGetBackendInfo onnxGetEventState
onnxGetExtensionFunctionAddress onnxInitBackend onnxInitEvent onnxInitGraph onnxReleaseBackend
onnxReleaseBackendID onnxReleaseEvent onnxReleaseGraph onnxRunGraph onnxSetGraphIO onnxSignalEvent
onnxWaitEvent"
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbVvRr]$/ {print $3}' | sed 's/@.*//' | sort -u)
want=$(printf '%s\n' $expected | sort -u)
fail=0
if [ "$got" = "$want" ]; then
  echo "exports: the 16 ONNXIFI functions and nothing else"
else
  echo "exports: unexpected symbol set"
  echo "--- extra:"; printf '%s\n' "$got" | grep -vxF "$want" || true
  echo "--- missing:"; printf '%s\n' "$want" | grep -vxF "$got" || true
  fail=1
fi
ocl=$(nm -D --undefined-only "$lib" | grep -o '@OPENCL_[0-9.]*' | sort -u | tr '\n' ' ')
case "$ocl" in
*OPENCL_2* | *OPENCL_3*)
  echo "exports: needs the ICD loader's $ocl(an OpenCL 2.x/3.x symbol version)"
  fail=1 ;;
*) echo "exports: OpenCL symbol versions needed: ${ocl:-none}" ;;
esac
if [ "$fail" -eq 0 ]; then
  echo "exports: 2 passed, 0 failed"
  exit 0
fi
echo "exports: $((2 - fail)) passed, 1 failed"
exit 1
