#!/usr/bin/env bash
# tools/opencl_kit.sh BUILD KIT: packs kiln's OpenCL ctest cases to run on
# another machine's OpenCL driver (a GPU's, say) with nothing built there.
# BUILD is a configured and built tree (ci/build BUILD); KIT a new folder
# that gets:
#   bin/    the plugin, the fault-injecting plugin, the test programs and
#           kiln-run (stripped), and clinfo;
#   lib/    the libraries they link that a stock Linux lacks: ocl-icd's
#           loader, CLBlast, protobuf-c, OpenBLAS (xz) and its Fortran
#           runtime;
#   src/    tests/ and examples/ (the suites, models and check scripts);
#   node.tar.xz  the ONNX node tests (libonnx-testdata);
#   tests.txt    every ctest case PoCL runs, plus rusticl's own ones, with its
#           environment and command, rewritten for the kit (name, env, command,
#           tab-separated); fusion_kernels twice, with KILN_CL_GEMM forced to
#           clblast and to kiln (the check's plan table depends on which);
#   run.sh  on the target: run.sh ICD_LIBRARY [JOBS [RESULTS]].
# Two cases check counts written for one CI driver, and may fail on
# another while every output matches:
#  - fusion_kernels_*_clblast: rusticl's choice of the direct conv kernel.
#    A GPU takes CLBlast's GEMM for two of its convs; so does PoCL when
#    CLBlast is forced.
#  - symbolic_batch_opencl_nofusion_kit: rusticl's one variant at the bound.
#    PoCL keeps one per batch there; tests/CMakeLists.txt says why.
# Made from a PoCL machine's build, the kit passes 39 of 41 on PoCL and 41
# of 41 on rusticl. opencl/ENGINE.md ("On an NVIDIA GPU") has what a run of
# the same cases, packed the same way, found on an H100.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: tools/opencl_kit.sh BUILD KIT" >&2; exit 2; }
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
kit=$2
[ -e "$kit" ] && { echo "tools/opencl_kit.sh: $kit exists" >&2; exit 2; }
plugin=$build/plugin/libonnxifi-kiln.so
[ -f "$plugin" ] || { echo "tools/opencl_kit.sh: no plugin in $build (build it first)" >&2; exit 1; }
command -v clinfo >/dev/null || { echo "tools/opencl_kit.sh: clinfo is missing (ci/deps)" >&2; exit 1; }
node=/usr/share/libonnx-testdata/data/node
[ -d "$node" ] || { echo "tools/opencl_kit.sh: $node is missing (ci/deps)" >&2; exit 1; }
mkdir -p "$kit/bin" "$kit/lib" "$kit/src"
kit=$(cd "$kit" && pwd)

for b in conformance abi abi_clmem opencl_codegen opencl_ops opencl_runtime opencl_transpose opencl_zerocopy \
  opencl_cache import_cache_abi symbolic_batch stress_threads lifetime_cycles fault_sweep observe_abi; do
  strip -o "$kit/bin/$b" "$build/tests/$b"
done
strip -o "$kit/bin/kiln-run" "$build/tools/kiln-run"
strip -o "$kit/bin/libonnxifi-kiln.so" "$(readlink -f "$plugin")"
strip -o "$kit/bin/libonnxifi-kiln-fault.so" "$build/plugin/libonnxifi-kiln-fault.so"
cp "$(command -v clinfo)" "$kit/bin/"
# the plugin's libraries but the C and C++ runtimes every Linux has
ldd "$plugin" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
  case $name in
  libc.so.* | libm.so.* | libstdc++.so.* | libgcc_s.so.* | libpthread.so.* | libdl.so.* | librt.so.*) ;;
  libopenblas*) xz -T0 -6 -c "$path" > "$kit/lib/$name.xz" ;;
  *) cp -L "$path" "$kit/lib/$name" ;;
  esac
done
cp -r "$src/tests" "$src/examples" "$kit/src/"
tar -C "$(dirname "$node")" -cJf "$kit/node.tar.xz" node

ctest --test-dir "$build" --show-only=json-v1 > "$kit/ctest.json"
python3 - "$kit" "$build" "$src" <<'EOF'
import json, shlex, sys
kit, build, src = sys.argv[1:4]
tests = json.load(open(f"{kit}/ctest.json"))["tests"]
names = {t["name"] for t in tests}
plugin = None
def rw(s):
    for a, b in ((f"{build}/plugin/libonnxifi-kiln-fault.so", "@K@/bin/libonnxifi-kiln-fault.so"),
                 (f"{build}/tests/kiln-cache-", "@T@/kc-"), (f"{build}/tests/", "@K@/bin/"),
                 (f"{build}/tools/", "@K@/bin/"), (f"{build}", "@K@/bin"), (f"{src}", "@K@/src"),
                 ("/etc/OpenCL/vendors/pocl.icd", "@ICD@"), ("/etc/OpenCL/vendors/rusticl.icd", "@ICD@")):
        s = s.replace(a, b)
    return s
out = []
for t in tests:
    n = t["name"]
    if not ("pocl" in n or ("rusticl" in n and n.replace("rusticl", "pocl") not in names)):
        continue
    if "two_drivers" in n:
        continue
    env = []
    for p in t.get("properties", []):
        if p["name"] == "ENVIRONMENT":
            env = [e for e in p["value"] if e != "RUSTICL_ENABLE=llvmpipe"]
    cmd = [rw(c) for c in t["command"]]
    cmd = ["@K@/bin/libonnxifi-kiln.so" if c.startswith("@K@/bin/plugin/libonnxifi-kiln.so") else c for c in cmd]
    name = n.replace("pocl", "kit").replace("rusticl", "kit")
    if n.startswith("fusion_kernels_opencl_"):
        if n != "fusion_kernels_opencl_pocl":
            continue
        for gemm in ("clblast", "kiln"):
            c2 = [gemm if c in ("kiln", "clblast") else c for c in cmd]
            e2 = [e for e in env if not e.startswith("KILN_CL_GEMM=")] + [f"KILN_CL_GEMM={gemm}"]
            out.append((f"{name}_{gemm}", e2, c2))
        continue
    out.append((name, env, cmd))
with open(f"{kit}/tests.txt", "w") as f:
    for name, env, cmd in out:
        f.write(name + "\t" + " ".join(shlex.quote(rw(e)) for e in env) + "\t" + " ".join(shlex.quote(c) for c in cmd) + "\n")
print(f"tools/opencl_kit.sh: {len(out)} test cases")
EOF
rm -f "$kit/ctest.json"

cat > "$kit/run.sh" <<'EOF'
#!/usr/bin/env bash
# run.sh ICD_LIBRARY [JOBS [RESULTS]]: runs the kit's OpenCL test cases on
# the driver whose ICD library is ICD_LIBRARY (a path or a name the dynamic
# loader finds, e.g. /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1), JOBS
# at a time (default 8), KIT_TIMEOUT seconds each (default 600). Writes
# RESULTS/summary.txt (a line per case: exit status, seconds, its last
# result line), RESULTS/fails.txt (the end of each failed case's log) and
# RESULTS/logs/. Exit status 0 when every case passed or skipped (77).
# The node tests are unpacked into /usr/share/libonnx-testdata/data when
# missing there (the test programs' default; needs write access).
set -u
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
K=$(cd "$(dirname "$0")" && pwd)
jobs=${2:-8}
res=$(mkdir -p "${3:-kit-results}" && cd "${3:-kit-results}" && pwd)
T=$(mktemp -d /tmp/kiln-kit-XXXXXX)
mkdir -p "$T/lib" "$res/logs"
cp "$K"/lib/*.so.* "$T/lib/"
for z in "$K"/lib/*.xz; do [ -e "$z" ] && xz -dc "$z" > "$T/lib/$(basename "$z" .xz)"; done
echo "$1" > "$T/driver.icd"
export LD_LIBRARY_PATH=$T/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OCL_ICD_VENDORS=$T/driver.icd PATH=$K/bin:$PATH
node=/usr/share/libonnx-testdata/data
if [ ! -d "$node/node" ]; then
  mkdir -p "$node" && tar -xJf "$K/node.tar.xz" -C "$node" ||
    echo "run.sh: cannot unpack the node tests into $node: the cases reading them fail"
fi
clinfo -l || { echo "run.sh: no OpenCL device through $1"; exit 1; }
one() {
  IFS=$'\t' read -r name envs cmd <<< "$1"
  for v in envs cmd; do
    x=${!v}; x=${x//@K@/$K}; x=${x//@T@/$T}; x=${x//@ICD@/$T/driver.icd}; printf -v "$v" '%s' "$x"
  done
  local t0=$SECONDS
  eval "timeout ${KIT_TIMEOUT:-600} env $envs $cmd" > "$res/logs/$name.log" 2>&1
  local rc=$?
  printf '%-44s rc=%-3s %5ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'conformance: |passed|failed|skipped|FAIL' "$res/logs/$name.log" | tail -n 1 | cut -c1-140)"
}
export -f one
export K T res
tr '\n' '\0' < "$K/tests.txt" | xargs -0 -P "$jobs" -I{} bash -c 'one "$1"' _ {} | sort > "$res/summary.txt"
: > "$res/fails.txt"
while read -r name rc _; do
  case $rc in rc=0 | rc=77) ;; *) { echo "######## $name ($rc)"; tail -n 60 "$res/logs/$name.log"; } >> "$res/fails.txt" ;; esac
done < "$res/summary.txt"
rm -rf "$T"
cat "$res/summary.txt"
n=$(grep -c . "$res/summary.txt"); bad=$(grep -vcE ' rc=(0|77) ' "$res/summary.txt")
echo "run.sh: $n cases, $((n - bad)) passed or skipped, $bad failed (logs in $res)"
[ "$bad" -eq 0 ]
EOF
chmod +x "$kit/run.sh"
echo "tools/opencl_kit.sh: $kit ($(du -sh "$kit" | cut -f1)); on the target: $kit/run.sh ICD_LIBRARY [JOBS [RESULTS]]"
