#!/bin/sh
# tests/opencl_run.sh CMD...: runs CMD when the ICD loader (as OCL_ICD_VENDORS
# and RUSTICL_ENABLE select it) offers an OpenCL device; otherwise prints
# why and exits 77 (ctest SKIP_RETURN_CODE) — the OpenCL engine's tests are
# skipped, never passed, on a machine without the driver.
if ! command -v clinfo >/dev/null 2>&1; then
  echo "skipped: clinfo is missing (run ci/deps)"; exit 77
fi
if ! clinfo -l 2>/dev/null | grep -q 'Device #'; then
  echo "skipped: no OpenCL device through OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-(unset)}"; exit 77
fi
exec "$@"
