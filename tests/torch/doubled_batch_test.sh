#!/usr/bin/env bash
# Two ranks with batch b == one process with batch 2b, in real processes under edl-run (issue 24;
# the in-process CPU version is torch_test.cc's): for SGD with momentum and for Adam, the worker of
# kill_join_test.sh (tests/torch/elastic_worker.cc --fixed 1: step s trains records [24 s, 24 s + 24)
# split over the ranks) runs 40 steps with -np 1 and with -np 2 from the same initial parameters.
# Checks: both ranks of the 2-rank run end with byte-identical parameters, which match the one
# process's within relative 1e-4 / absolute 1e-5 and moved from the initial ones (not vacuous).
# Then rank 1 builds another hidden width: the job fails naming MismatchError within 120 s (no hang).
# With --device cuda (label gpu): on GPU 0, edl-run --one-gpu-test; skips without a usable GPU
# (exit 77, one line), fails then with EDL_REQUIRE_GPU=1.
# Usage: doubled_batch_test.sh EDL_RUN WORKER [--device cpu|cuda]
set -euo pipefail
. "$(dirname "$0")/gpu_probe.sh"
process_test_args "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "doubled_batch_test FAILED: $*" >&2; for l in "$work"/*.log; do echo "--- $l" >&2; tail -n 20 "$l" >&2; done; exit 1; }

# train NAME NP OPTIMIZER STEPS [ARGS...]: the parameter files land in $work/NAME/
train() {
  local name=$1 np=$2 opt=$3 steps=$4
  shift 4
  mkdir -p "$work/$name"
  timeout -k 5 120 "$RUN" "${RUN_ARGS[@]}" -np "$np" "$WORKER" --dir "$work/$name" --steps "$steps" --fixed 1 \
    --pause-step -1 --sleep-ms 0 --optimizer "$opt" --min-world "$np" --device "$DEVICE" "$@" >"$work/$name.log" 2>&1
}
# close A B: every float of A within 1e-5 + 1e-4 |b| of B's (same count)
close() {
  paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") | awk '
    NF != 2 { bad = -1; exit } { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > 1e-5 + 1e-4 * m) bad++; n++ }
    END { if (bad != 0 || n == 0) { printf "%s of %d values differ beyond the tolerance\n", bad, n; exit 1 } }'
}

train init 1 sgd 0 || fail "the run of 0 steps failed"
init=("$work"/init/params.*)
for opt in sgd adam; do
  train "$opt-1" 1 "$opt" 40 || fail "$opt: the one-process run failed"
  train "$opt-2" 2 "$opt" 40 || fail "$opt: the 2-rank run failed"
  one=("$work/$opt-1"/params.*)
  two=("$work/$opt-2"/params.*)
  [ ${#two[@]} -eq 2 ] && [ -e "${one[0]}" ] || fail "$opt: missing parameter files (${#one[@]} + ${#two[@]})"
  cmp -s "${two[0]}" "${two[1]}" || fail "$opt: the 2 ranks' parameters differ"
  why=$(close "${two[0]}" "${one[0]}") || fail "$opt: 2 ranks vs one process with the doubled batch: $why"
  ! cmp -s "${one[0]}" "${init[0]}" || fail "$opt: training did not move the parameters"
  echo "$opt: 2 ranks ($DEVICE) == one process with the doubled batch (rel 1e-4, abs 1e-5), ranks bitwise equal"
done

set +e
train mismatch 2 sgd 5 --hidden-rank1 65
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "different shapes across ranks: exit $rc (want a failure, not a hang)"
grep -q "MismatchError\|different parameters\|different names or shapes" "$work/mismatch.log" ||
  fail "different shapes across ranks: no MismatchError in the log"
echo "different parameter shapes across ranks ($DEVICE): $(grep -m1 -o "different [a-z ]*" "$work/mismatch.log")"
echo "doubled_batch_test passed ($DEVICE)"
