#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh TARGET OUTDIR: writes the seed corpus of a fuzz
# target into OUTDIR (a build directory; nothing here is committed):
#   fuzz_model, fuzz_run: every model.onnx of Debian's libonnx-testdata (node,
#                simple, pytorch-*), examples/*.onnx and the model.onnx of
#                tests/{views,fusion,kiln_domain}; bench models too when
#                build/bench/models exists (bench/make_models.py; those under
#                256 KiB, the fuzzers' -max_len)
#   fuzz_tensor  the input/output .pb files of those tests (under 64 KiB)
#   fuzz_setio   nothing: its committed seeds (tests/fuzz/seeds) suffice
# Files are named by their path ('/' -> '_'), so reruns do not duplicate them.
set -euo pipefail
target=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
data=${KILN_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
mkdir -p "$out"
list=$(mktemp)
trap 'rm -f "$list"' EXIT
case $target in
fuzz_model | fuzz_run)
  { find "$data" -name model.onnx -size -256k 2>/dev/null
    find "$root/examples" -maxdepth 1 -name '*.onnx'
    find "$root/tests/views" "$root/tests/fusion" "$root/tests/kiln_domain" -name model.onnx 2>/dev/null
    if [ -d "$root/build/bench/models" ]; then find "$root/build/bench/models" -name '*.onnx' -size -256k; fi
  } | sort >"$list"
  ;;
fuzz_tensor)
  { find "$data" -name '*.pb' -size -64k 2>/dev/null
    find "$root/examples" "$root/tests/views" "$root/tests/kiln_domain" -name '*.pb' -size -64k 2>/dev/null
  } | sort >"$list"
  ;;
fuzz_setio) : >"$list" ;;
*) echo "make_seeds.sh: unknown target $target" >&2; exit 2 ;;
esac
# one copy pass (a process per file is slow on a loaded machine): each file
# lands in OUTDIR under its path with '/' turned into '_'
if [ -s "$list" ]; then
  sed 's|^/||' "$list" | tar -C / -cf - -T - | tar -C "$out" -xf - --transform='s|/|_|g'
fi
echo "make_seeds.sh: $(wc -l <"$list") seed files for $target in $out"
