#!/usr/bin/env bash
# The edl::torch job (issue 15): the libtorch ResNet20 of examples/torch trained on Fashion-MNIST under
# edl-run --min-np 1 --max-np 3, twice with the same settings: once without failures, once with one
# worker killed (kill -9) part-way through the first epoch and a replacement joining. Prints both
# test accuracies and fails, naming the reason, unless the kill was sent, edl-run logged the failure,
# a recovery and a join, both runs exited 0 and the accuracies differ by at most
# EDL_TORCH_MAX_DIFF_PP percentage points (default 0.5) and every worker that finished a run printed
# the same parameters checksum (at least 2 of them: bitwise identical parameters).
# Usage: scripts/torch-job.sh [BUILD_DIR] [--device cpu|cuda] [--run EDL_RUN] [--train PROGRAM] [--data DIR]
#   (after scripts/build.sh; needs libtorch-dev). --device cuda: every worker on GPU 0 (edl-run
#   --one-gpu-test: one NCCL_HOSTID per slot); --run / --train: the programs when not in BUILD_DIR
#   (scripts/gpu-torch-check.sh passes the bundle's edl-run and the kit's example); --data: the
#   Fashion-MNIST files (default /usr/share/datasets/fashion-mnist).
set -euo pipefail
BUILD_DIR=${EDL_BUILD_DIR:-build}
DEVICE=cpu
RUN=""
TRAIN=""
DATA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --run) RUN=$2; shift 2 ;;
    --train) TRAIN=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "torch-job: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) BUILD_DIR=$1; shift ;;
  esac
done
[ "$DEVICE" = cpu ] || [ "$DEVICE" = cuda ] || { echo "torch-job: --device must be cpu or cuda, got '$DEVICE'" >&2; exit 2; }
RUN=${RUN:-$BUILD_DIR/src/launcher/edl-run}
TRAIN=${TRAIN:-$BUILD_DIR/examples/edl-torch-fashion-mnist}
EPOCHS=${EDL_TORCH_EPOCHS:-3}
RECORDS=${EDL_TORCH_TRAIN_RECORDS:-30000}
TEST_RECORDS=${EDL_TORCH_TEST_RECORDS:-10000}
MAX_DIFF=${EDL_TORCH_MAX_DIFF_PP:-0.5}
for f in "$RUN" "$TRAIN"; do [ -x "$f" ] || { echo "torch-job: $f is missing: build with libtorch-dev installed" >&2; exit 1; }; done
ARGS=(--epochs "$EPOCHS" --train-records "$RECORDS" --test-records "$TEST_RECORDS" --device "$DEVICE" ${DATA:+--data "$DATA"})
RUN_ARGS=(--min-np 1 --max-np 3 -np 2)
[ "$DEVICE" = cuda ] && RUN_ARGS+=(--one-gpu-test)

work=$(mktemp -d)
job=""
trap 'rm -rf "$work"; [ -n "$job" ] && kill "$job" 2>/dev/null || true' EXIT
fail() { echo "== torch job FAILED: $* ==" >&2; exit 1; }
accuracy() { sed -n 's/.*final test accuracy: \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }
# same_parameters LOG WHAT: at least 2 workers printed a checksum, all the same
same_parameters() {
  local sums
  sums=$(sed -n 's/.*parameters checksum \([0-9a-f]*\).*/\1/p' "$1")
  [ "$(echo "$sums" | grep -c .)" -ge 2 ] || fail "$2: fewer than 2 workers printed a parameters checksum"
  [ "$(echo "$sums" | sort -u | wc -l)" -eq 1 ] || fail "$2: the workers' parameters differ: $(echo $sums)"
  echo "   $2: $(echo "$sums" | grep -c .) workers, bitwise identical parameters (checksum $(echo "$sums" | head -1))"
}

echo "== torch job 1/2: libtorch ResNet20 on Fashion-MNIST ($RECORDS training / $TEST_RECORDS test images,"
echo "   $EPOCHS epochs, $DEVICE), 2 workers, no failure =="
"$RUN" "${RUN_ARGS[@]}" "$TRAIN" "${ARGS[@]}" > "$work/base.log" 2>&1 || {
  tail -n 20 "$work/base.log" >&2; fail "the run without failures exited non-zero"; }
base=$(accuracy "$work/base.log")
[ -n "$base" ] || fail "the run without failures printed no accuracy"
echo "   test accuracy without failures: $base%"
same_parameters "$work/base.log" "without failures"

echo "== torch job 2/2: the same with worker 1 killed (kill -9) part-way and a replacement joining =="
"$RUN" "${RUN_ARGS[@]}" --reset-limit 3 --pid-file "$work/pids" "$TRAIN" "${ARGS[@]}" \
  > "$work/log" 2>&1 &
job=$!
steps_per_epoch=$(( RECORDS / 64 ))
for _ in $(seq 1 2400); do  # a third of the first epoch
  s=$(sed -n 's/.*step \([0-9]*\) epoch .*/\1/p' "$work/log" 2>/dev/null | tail -n 1)
  [ -n "$s" ] && [ "$s" -ge $(( steps_per_epoch / 3 )) ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.25
done
victim=$(awk '$1 == 1 { print $2 }' "$work/pids" 2>/dev/null | tail -n 1)
[ -n "$victim" ] && kill -0 "$victim" 2>/dev/null || fail "no live worker in slot 1: the kill could not be sent"
echo "   kill -9 worker in slot 1 (pid $victim)"
kill -9 "$victim" || fail "kill -9 $victim failed"
set +e
wait "$job"
rc=$?
set -e
job=""
[ $rc -eq 0 ] || { tail -n 30 "$work/log" >&2; fail "edl-run exit code $rc"; }
after_kill=$(awk -v pid="$victim" 'index($0, "event=failed") && index($0, "pid=" pid " ") { seen = 1 } seen' "$work/log")
[ -n "$after_kill" ] || fail "edl-run logged no event=failed for the killed worker (pid $victim)"
echo "$after_kill" | grep -q "event=generation .*left=.*recover_ms=" || fail "no recovery after the kill"
echo "$after_kill" | grep -q "event=generation .*joined=" || fail "no join after the kill"
acc=$(accuracy "$work/log")
[ -n "$acc" ] || fail "the run with a failure printed no accuracy"
echo "   test accuracy with a kill -9 and a join: $acc%"
same_parameters "$work/log" "with a kill -9 and a join"
awk -v a="$acc" -v b="$base" -v m="$MAX_DIFF" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= m + 0) }' ||
  fail "accuracy $acc% differs from $base% (no failures) by more than $MAX_DIFF pp"
echo "== torch job done: kill sent, recovery and join logged, accuracy $acc% vs $base% without failures =="
