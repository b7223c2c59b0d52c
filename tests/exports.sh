#!/bin/sh
# tests/exports.sh LIB: the plugin must export exactly the ONNXIFI functions.
set -eu
lib=$1
expected="onnxGetBackendCompatibility onnxGetBackendIDs onnxGetBackendInfo onnxGetEventState
onnxGetExtensionFunctionAddress onnxInitBackend onnxInitEvent onnxInitGraph onnxReleaseBackend
onnxReleaseBackendID onnxReleaseEvent onnxReleaseGraph onnxRunGraph onnxSetGraphIO onnxSignalEvent
onnxWaitEvent"
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbVvRr]$/ {print $3}' | sed 's/@.*//' | sort -u)
want=$(printf '%s\n' $expected | sort -u)
if [ "$got" = "$want" ]; then
  echo "exports: the 16 ONNXIFI functions and nothing else"
  echo "exports: 1 passed, 0 failed"
  exit 0
fi
echo "exports: unexpected symbol set"
echo "--- extra:"; printf '%s\n' "$got" | grep -vxF "$want" || true
echo "--- missing:"; printf '%s\n' "$want" | grep -vxF "$got" || true
echo "exports: 0 passed, 1 failed"
exit 1
