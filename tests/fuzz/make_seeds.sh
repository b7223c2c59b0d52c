#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh TARGET OUTDIR: writes the seed corpus of a fuzz
# target into OUTDIR (a build directory; nothing here is committed):
#   fuzz_model, fuzz_run: every model.onnx of Debian's libonnx-testdata (node,
#                simple, pytorch-*), examples/*.onnx and the model.onnx of
#                tests/{views,fusion,kiln_domain}; bench models too when
#                bench/models exists (bench/make_models.py)
#   fuzz_tensor  the input/output .pb files of those tests (under 64 KiB)
#   fuzz_setio   nothing: its committed seeds (tests/fuzz/seeds) suffice
# Files are named by content hash, so reruns do not duplicate them.
set -euo pipefail
target=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
data=${KILN_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
mkdir -p "$out"
put() { local h; h=$(sha1sum "$1" | cut -c1-16); cp "$1" "$out/$h"; }
n=0
case $target in
fuzz_model | fuzz_run)
  while IFS= read -r f; do put "$f"; n=$((n + 1)); done < <(
    { find "$data" -name model.onnx -size -256k 2>/dev/null
      find "$root/examples" -maxdepth 1 -name '*.onnx'
      find "$root/tests/views" "$root/tests/fusion" "$root/tests/kiln_domain" -name model.onnx 2>/dev/null
      [ -d "$root/bench/models" ] && find "$root/bench/models" -name '*.onnx' -size -256k
    } | sort)
  ;;
fuzz_tensor)
  while IFS= read -r f; do put "$f"; n=$((n + 1)); done < <(
    { find "$data" -name '*.pb' -size -64k 2>/dev/null
      find "$root/examples" "$root/tests/views" "$root/tests/kiln_domain" -name '*.pb' -size -64k 2>/dev/null
    } | sort)
  ;;
fuzz_setio) ;;
*) echo "make_seeds.sh: unknown target $target" >&2; exit 2 ;;
esac
echo "make_seeds.sh: $n seed files for $target in $out"
