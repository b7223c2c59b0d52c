#!/bin/sh
# tests/views_nocopy.sh KILN_RUN VIEWS_DIR: every case of the views suite
# passes on the cpu backend with nothing materialised — its views run as
# strided aliases or view stacks, never as copies (kilnGetGraphStatistics,
# printed by kiln-run --stats).
set -u
run=$1 dir=$2
pass=0 fail=0
for c in "$dir"/test_views_*; do
  out=$(KILN_DEVICE=cpu "$run" --stats -n 1 --warmup 0 "$c" 2>&1)
  name=$(basename "$c")
  if printf '%s\n' "$out" | grep -q '^result:  PASS' && printf '%s\n' "$out" | grep -q '; 0 views materialised'; then
    echo "ok   $name: $(printf '%s\n' "$out" | grep '^stats:' | sed 's/^stats: *//')"
    pass=$((pass + 1))
  else
    echo "FAIL $name"; printf '%s\n' "$out" | grep -E '^(stats|memory|result)|kiln-run:' | sed 's/^/     /'
    fail=$((fail + 1))
  fi
done
echo "views_nocopy: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
