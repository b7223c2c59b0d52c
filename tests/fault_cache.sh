#!/bin/sh
# tests/fault_cache.sh CONFORMANCE LIB CASES [FAULT_LIB]: faults of the OpenCL engine's
# on-disk cache of device binaries (opencl/cache.c, docs/RELIABILITY.md).
# Each scenario runs the cases of CASES (the fusion suite: five graphs, each
# run once, KILN_CL_BINARY_CACHE=1 so that every graph stores its binary)
# through the ONNXIFI path on KILN_DEVICE=opencl and checks that kiln always
# runs (every output right), warns once per unusable directory, and never
# serves a damaged entry (it is rebuilt from source, then stored again):
#   missing directory (created), a directory that cannot be created
#   (/proc), a path that is a file, a full disk (FAULT_LIB, the fault build,
#   with KILN_FAULT_DISK_FULL=1: every write fails with ENOSPC),
#   the directory deleted while graphs run, truncated entries, a flipped
#   payload byte (every bit of it), an entry with a valid checksum but a garbage binary (the
#   driver rejects it), and four processes filling one directory at once.
# The cache directory variable is CACHE_VAR below (one place to retarget).
# No records of graphs as imported (KILN_CL_IMPORT_CACHE=0: stored when a
# parse takes 2 ms, which the load decides; tests/import_cache_abi has them).
# Exit 77 (skipped, reason printed) without an OpenCL device.
set -u
conf=$1 lib=$2 cases=$3 fault_lib=${4:-}
CACHE_VAR=KILN_CACHE_DIR
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ncases=$(ls -d "$cases"/test_* | wc -l)
runlib=$lib extra=

bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
ok() { echo "ok    $*"; }

# run NAME DIR [LOG]: the cases with the cache in DIR; output in $tmp/NAME.log
run() {
  env $extra "$CACHE_VAR=$2" KILN_DEVICE=opencl KILN_CL_BINARY_CACHE=1 KILN_CL_GRAPH_CACHE=1 KILN_CL_IMPORT_CACHE=0 \
    KILN_LOG=${3:-info} \
    "$conf" --lib "$runlib" "$cases" >"$tmp/$1.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "conformance: $ncases passed, 0 failed" "$tmp/$1.log"; then
    bad "$1: the cases did not all pass (exit $rc):"; tail -n 5 "$tmp/$1.log"; return 1
  fi
  return 0
}
count() { grep -c "$1" "$tmp/$2.log"; }
# programs and rewritten graphs served from the kiln cache (two entries per case)
SERVED='program of .*: from the kiln cache'
GRAPHS='rewritten graph from the kiln cache'
entries() { ls "$1"/*.kc 2>/dev/null | wc -l; }

probe=$(env KILN_DEVICE=opencl "$conf" --lib "$lib" -f none_such "$cases" 2>&1)
case "$probe" in *"skipped: no usable OpenCL device"*) echo "$probe"; exit 77 ;; esac

# 1. a missing directory is created; every graph built from source and stored
d=$tmp/cache/a/b
if run missing "$d"; then
  [ "$(count 'built from source' missing)" -eq "$ncases" ] && [ "$(entries "$d")" -eq $((3 * ncases)) ] &&
    ok "missing directory: created, $((3 * ncases)) entries stored (a program, a rewritten graph and a program list per case)" ||
    bad "missing directory: $(count 'built from source' missing) builds, $(entries "$d") entries"
fi
# 2. warm: every program from the cache
if run warm "$d"; then
  [ "$(count "$SERVED" warm)" -eq "$ncases" ] && [ "$(count "$GRAPHS" warm)" -eq "$ncases" ] &&
    [ "$(count 'built from source' warm)" -eq 0 ] &&
    ok "warm cache: $ncases programs and rewritten graphs from the cache" ||
    bad "warm cache: $(count "$SERVED" warm) programs and $(count "$GRAPHS" warm) graphs from the cache, $(count 'built from source' warm) built"
fi
# 2b. warm, the programs loaded ahead from each case's list (opencl/preload.h; =sync: before the lowering asks)
extra=KILN_CL_PRELOAD=sync
if run warm_ahead "$d"; then
  [ "$(count '1 program loaded ahead, 1 used' warm_ahead)" -eq "$ncases" ] &&
    ok "warm cache: every case's program loaded ahead from its list and taken" ||
    bad "warm cache: $(count '1 program loaded ahead, 1 used' warm_ahead) of $ncases programs loaded ahead and taken"
fi
extra=

# 3-5. unusable directories: kiln runs, one warning per directory
unusable() { # NAME DIR
  if run "$1" "$2" warn; then
    n=$(count 'is not usable' "$1")
    [ "$n" -eq 1 ] && ok "$1: runs, warned once" || bad "$1: $n warnings (expected 1)"
  fi
}
unusable not_creatable /proc/kiln-cache-test
: >"$tmp/a-file"
unusable not_a_directory "$tmp/a-file"
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$tmp/ro" && chmod 0500 "$tmp/ro"
  unusable read_only "$tmp/ro"
  chmod 0700 "$tmp/ro"
else
  echo "note  read-only directory: running as root (permissions do not apply); /proc and a file stand for it"
fi
# a full disk: the fault build's write() fails with ENOSPC (FAULT_LIB)
if [ -n "$fault_lib" ]; then
  mkdir -p "$tmp/full"
  runlib=$fault_lib extra=KILN_FAULT_DISK_FULL=1
  run full "$tmp/full" warn
  full_ok=$?
  runlib=$lib extra=
  if [ $full_ok -eq 0 ]; then
    n=$(count 'is not usable' full)
    left=$(ls -A "$tmp/full" | wc -l)
    [ "$n" -eq 1 ] && [ "$left" -eq 0 ] && ok "full disk: runs, warned once, no partial file left" ||
      bad "full disk: $n warnings, $left files left in the directory"
  fi
else
  echo "note  full disk: no fault-injection build given, not tested"
fi

# 6. damaged entries are never served: each is detected, deleted, rebuilt
damage() { # NAME HOW
  rm -rf "$tmp/dmg"; mkdir -p "$tmp/dmg"
  run "$1-fill" "$tmp/dmg" || return
  for f in "$tmp"/dmg/*.kc; do
    case $2 in
    truncate) head -c $(($(wc -c <"$f") / 2)) "$f" >"$f.x" && mv "$f.x" "$f" ;;
    header) head -c 20 "$f" >"$f.x" && mv "$f.x" "$f" ;;
    flip) # every bit of byte 4000, or of the middle of a shorter entry's payload (past its
      # 48-byte header: a seek past the end would append, not flip; writing 0xff
      # changes nothing where the byte is 0xff already)
      at=4000 sz=$(wc -c <"$f")
      [ "$sz" -gt 4001 ] || at=$((48 + (sz - 48) / 2))
      b=$(od -An -tu1 -j "$at" -N1 "$f" | tr -d ' ')
      printf "\\$(printf %o $((255 - b)))" | dd of="$f" bs=1 seek=$at conv=notrunc 2>/dev/null ;;
    garbage) # a valid header and checksum over a payload no driver accepts
      python3 - "$f" <<'EOF'
import struct, sys
M = (1 << 64) - 1
def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M
def hash64(s):  # opencl/cache.c kiln_cl_hash64 (16 lanes; the scalar twin, kiln_cl_hash64_base)
    K0, K1, K2 = 0x9e3779b185ebca87, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9
    n = len(s)
    acc = [((j + 1) * K1) & M for j in range(16)]
    for w in range(n // 8):
        j, b = w % 16, w // 16
        x = struct.unpack_from('<Q', s, 8 * w)[0]
        y = x ^ ((K0 + j * K1 + b * K2) & M)
        acc[j] = (acc[j] + (y & 0xffffffff) * (y >> 32) + rotl(y, 32)) & M
    r = K2 ^ n
    for j in range(16):
        r = (rotl(((r ^ acc[j]) * K0) & M, 29) * K1) & M
    for c in s[(n // 8) * 8:]:
        r = ((r ^ c) * 0x100000001b3) & M
    r ^= n
    r ^= r >> 33
    r = (r * K1) & M
    r ^= r >> 29
    r = (r * K0) & M
    r ^= r >> 32
    return r
def digest64(s):  # opencl/cache.c kiln_cl_digest64, the entry format's payload checksum (version 4)
    C = 4 << 20
    if len(s) <= C:
        return hash64(s)
    r = 0x27d4eb2f165667c5 ^ len(s)
    for at in range(0, len(s), C):
        r = (rotl(((r ^ hash64(s[at:at + C])) * 0x9e3779b185ebca87) & M, 29) * 0xc2b2ae3d27d4eb4f) & M
    return hash64(struct.pack('<Q', r))
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
payload = bytes((i * 7 + 3) & 0xff for i in range(len(b) - 48))
b[40:48] = struct.pack('<Q', digest64(payload))
open(p, 'wb').write(bytes(b[:48]) + payload)
EOF
      ;;
    esac
  done
  run "$1" "$tmp/dmg" || return
  if [ "$2" = garbage ]; then # the checksums are valid: the driver or the unpacker must reject them
    n=$(count 'checksum differs' "$1")
    [ "$n" -eq 0 ] && ok "$1: no entry caught by its checksum (the payloads themselves rejected)" ||
      bad "$1: $n entries caught by the checksum: the script's hash is not the cache's (opencl/cache.c kiln_cl_digest64)"
  fi
  built=$(count 'built from source' "$1")
  served=$(count "$SERVED" "$1")
  graphs=$(count "$GRAPHS" "$1")
  [ "$built" -eq "$ncases" ] && [ "$served" -eq 0 ] && [ "$graphs" -eq 0 ] &&
    [ "$(entries "$tmp/dmg")" -eq $((3 * ncases)) ] &&
    ok "$1: every damaged entry rebuilt from source and stored again" ||
    bad "$1: $built built from source, $served programs and $graphs graphs served from the cache, $(entries "$tmp/dmg") entries"
  extra=KILN_CL_PRELOAD=sync # the rewritten program lists too: each case's program loaded ahead and taken
  run "$1-after" "$tmp/dmg" || { extra=; return; }
  extra=
  [ "$(count "$SERVED" "$1-after")" -eq "$ncases" ] && [ "$(count "$GRAPHS" "$1-after")" -eq "$ncases" ] &&
    [ "$(count '1 program loaded ahead, 1 used' "$1-after")" -eq "$ncases" ] &&
    ok "$1: the rewritten entries are served (the program lists too)" ||
    bad "$1: the rewritten entries are not served ($(count '1 program loaded ahead, 1 used' "$1-after") of $ncases programs loaded ahead)"
}
damage truncated truncate
damage short_header header
damage flipped_byte flip
if command -v python3 >/dev/null 2>&1; then
  damage garbage_binary garbage
else
  echo "note  garbage binary: python3 missing, not tested"
fi

# 7. the directory deleted again and again while graphs run
mkdir -p "$tmp/del"
(while [ ! -f "$tmp/del.stop" ]; do rm -rf "$tmp/del" 2>/dev/null; done) &
deleter=$!
run deleted "$tmp/del" warn && ok "directory deleted while running: every case passed"
: >"$tmp/del.stop"
wait "$deleter"

# 8. four processes fill one empty directory at once
rm -rf "$tmp/par"
for k in 1 2 3 4; do run "par$k" "$tmp/par" & done
wait
for k in 1 2 3 4; do grep -q "conformance: $ncases passed, 0 failed" "$tmp/par$k.log" || bad "parallel fill: process $k"; done
tmps=$(ls -A "$tmp/par" | grep -c '\.tmp$')
if run par-after "$tmp/par"; then
  served=$(count "$SERVED" par-after)
  [ "$(count "$GRAPHS" par-after)" -eq "$ncases" ] || served=-1
  corrupt=$(count 'deleted, it will be rebuilt' par-after)
  [ "$served" -eq "$ncases" ] && [ "$corrupt" -eq 0 ] && [ "$tmps" -eq 0 ] &&
    ok "parallel fill: 4 processes, then every entry served, none damaged, no temporary file left" ||
    bad "parallel fill: $served served, $corrupt damaged, $tmps temporary files left"
fi

echo "fault_cache: $fails failure(s)"
[ "$fails" -eq 0 ]
