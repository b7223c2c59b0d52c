#!/usr/bin/env bash
# tests/fuzz/run.sh FUZZER NAME SECONDS WORKDIR [libFuzzer args...]: runs one
# libFuzzer target for SECONDS on WORKDIR/corpus/NAME (seeded on first use
# by make_seeds.sh, kept between runs), with the committed seeds and
# regression inputs copied in. A crash leaves its input in WORKDIR/artifacts/NAME/;
# copy it to tests/fuzz/regress/NAME/ once fixed. Prints libFuzzer's last
# status line (execs, cov, ft).
set -euo pipefail
fuzzer=$1 name=$2 secs=$3 work=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
corpus=$work/corpus/$name
mkdir -p "$corpus" "$work/artifacts/$name"
[ -n "$(ls -A "$corpus" 2>/dev/null)" ] || "$here/make_seeds.sh" "$name" "$corpus"
# the committed seeds and regression inputs join the corpus by copy: libFuzzer
# may write into every directory it is given
cp -n "$here/seeds/$name"/* "$here/regress/$name"/* "$corpus"/ 2>/dev/null || true
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
log=$work/$name.log
set +e
"$fuzzer" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/$name/" "$@" "$corpus" >"$log" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -n 1 || true
grep -E '^stat::' "$log" || true
if [ $rc -ne 0 ]; then
  tail -n 60 "$log"
  echo "run.sh: $name failed (exit $rc); inputs in $work/artifacts/$name/"
fi
exit $rc
