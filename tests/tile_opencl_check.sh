#!/bin/sh
# tests/tile_opencl_check.sh CONFORMANCE LIB ROOT: runs the tile suite
# (ROOT = tests/tile, made by tests/tile/make_tile.py) on the OpenCL engine
# with KILN_CL_TILE=all and asserts that every graph passed and that its
# program reads through a local-memory tile (KILN_DUMP: "kiln_tile" in each
# <graph>.opencl-0.cl); then with KILN_CL_TILE=0, which must pass with no
# tile. Run through tests/opencl_run.sh (exit 77 without a device).
set -u
conf=$1 lib=$2 root=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0
for mode in all 0; do
  mkdir -p "$dir/$mode"
  KILN_CL_TILE=$mode KILN_DUMP="$dir/$mode" KILN_CACHE_DIR=off "$conf" --lib "$lib" "$root" >"$dir/$mode.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "conformance: 5 passed, 0 failed, 0 skipped" "$dir/$mode.log"; then
    echo "FAIL KILN_CL_TILE=$mode: the tile suite did not pass (rc $rc):"; grep -E "FAIL|conformance:" "$dir/$mode.log"
    fail=1
  fi
  for g in attention batch fused ints symbolic; do
    f="$dir/$mode/$g.opencl-0.cl"
    n=$(grep -c "kiln_tile\[" "$f" 2>/dev/null || true)
    if [ "$mode" = all ] && [ "${n:-0}" -gt 0 ]; then echo "ok   $g: tiled"
    elif [ "$mode" = 0 ] && [ -f "$f" ] && [ "${n:-0}" -eq 0 ]; then echo "ok   $g: untiled under KILN_CL_TILE=0"
    else echo "FAIL $g (KILN_CL_TILE=$mode): ${n:-no} tile lines in ${f##*/}"; fail=1
    fi
  done
done
[ $fail -eq 0 ] && echo "tile_opencl_check: passed"
exit $fail
