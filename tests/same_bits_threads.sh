#!/bin/sh
# tests/same_bits_threads.sh PROGRAM PATTERN [N]: PROGRAM's output lines
# that contain PATTERN (hashes of result bits) are the same at
# KILN_NUM_THREADS=1 and N (default 2), and there is at least one. The cpu
# backend's results are bit-identical for any thread count (pool.h); a
# thread count is read once per process, so the two runs are two processes.
set -u
prog=$1 pat=$2 n=${3:-2}
a=$(KILN_NUM_THREADS=1 "$prog" | grep -F "$pat") || { echo "no '$pat' line at 1 thread"; exit 1; }
b=$(KILN_NUM_THREADS=$n "$prog" | grep -F "$pat") || { echo "no '$pat' line at $n threads"; exit 1; }
printf '1 thread:   %s\n%s threads: %s\n' "$a" "$n" "$b"
[ "$a" = "$b" ] && echo "same_bits_threads: 1 passed, 0 failed" && exit 0
echo "same_bits_threads: 0 passed, 1 failed"
exit 1
