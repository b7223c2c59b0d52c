#!/bin/sh
# tests/opencl_env.sh: the CI machine has the two OpenCL implementations the
# opencl backend is tested on — PoCL, and Mesa's rusticl on llvmpipe — each
# selected alone through the ICD loader's OCL_ICD_VENDORS (the opencl engine's
# tests, conformance_opencl_* and the rest, run on each; this checks that
# ci/deps set the stage).
set -u
pass=0; fail=0
check() { # name icd extra-env
  out=$(env $3 OCL_ICD_VENDORS="/etc/OpenCL/vendors/$2" clinfo -l 2>&1)
  if printf '%s\n' "$out" | grep -q 'Device #'; then
    echo "ok   $1: $(printf '%s\n' "$out" | grep 'Device #' | head -n1 | sed 's/.*Device #[0-9]*: //')"
    pass=$((pass + 1))
  else
    echo "FAIL $1: no OpenCL device through $2"; printf '%s\n' "$out" | sed 's/^/     /'
    fail=$((fail + 1))
  fi
}
command -v clinfo >/dev/null || { echo "opencl_env: clinfo is missing (run ci/deps)"; exit 1; }
check PoCL pocl.icd ""
check rusticl rusticl.icd RUSTICL_ENABLE=llvmpipe
echo "opencl_env: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
