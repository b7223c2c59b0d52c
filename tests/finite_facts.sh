#!/bin/sh
# tests/finite_facts.sh CONFORMANCE PLUGIN NONFINITE_DIR KILN_RUN EXAMPLES_DIR:
# the rewritten-graph record keeps each padded Conv weight's finiteness (its facts,
# opencl/graph_cache.h), so that a warm init reads no weight for it. In a
# fresh cache directory, every graph record stored (KILN_CL_GRAPH_CACHE=1):
# - the padded convs with an inf or NaN weight (tests/nonfinite
#   conv_w_inf_pad*) pass cold and warm — a warm init that took a wrong
#   fact ("finite") would skip the padding's taps and lose their NaNs;
# - the bundled CNN (finite weights, padded 3x3 convs) matches its expected
#   outputs cold and warm, and its warm init says it took its weights'
#   finiteness from the record.
# Run through tests/opencl_run.sh (skips without an OpenCL device).
set -u
conf=$1 lib=$2 nonfinite=$3 run=$4 examples=$5
dir=$(mktemp -d /tmp/kiln-facts-XXXXXX) || exit 2
trap 'rm -rf "$dir"' EXIT
export KILN_CACHE_DIR="$dir/cache" KILN_CL_GRAPH_CACHE=1 KILN_DEVICE=opencl KILN_LOG=info
fail=0
for pass in cold warm; do
  "$conf" --lib "$lib" -f conv_w_inf_pad "$nonfinite" > "$dir/conf.$pass" 2>&1
  if ! grep -Eq "conformance: [1-9][0-9]* passed, 0 failed, 0 skipped" "$dir/conf.$pass"; then
    echo "FAIL: conv_w_inf_pad*, $pass:"; grep -E "FAIL|conformance:" "$dir/conf.$pass"; fail=1
  fi
  "$run" --lib "$lib" -n 1 --data "$examples/cnn" "$examples/cnn.onnx" > "$dir/cnn.$pass" 2>&1
  if ! grep -q "^result: *PASS" "$dir/cnn.$pass"; then
    echo "FAIL: examples/cnn, $pass:"; tail -5 "$dir/cnn.$pass"; fail=1
  fi
done
n=$(sed -n "s/.*; \([0-9]*\) weights' finiteness from the record.*/\1/p" "$dir/cnn.warm" | head -1)
if [ -z "$n" ] || [ "$n" -lt 1 ]; then
  echo "FAIL: the warm init of examples/cnn took no weight's finiteness from the record (${n:-no record read})"
  fail=1
fi
m=$(grep -c "weights' finiteness from the record" "$dir/conf.warm")
if [ "$m" -lt 1 ]; then
  echo "FAIL: no warm init of conv_w_inf_pad* read its record's facts"; fail=1
fi
[ $fail = 0 ] && echo "finite_facts: cold and warm pass; warm cnn: $n weights' finiteness from the record; $m conv_w_inf_pad graphs warm from their records"
exit $fail
