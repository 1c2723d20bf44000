#!/usr/bin/env bash
# The main job: elastic ResNet20 training on Fashion-MNIST under edl-run with the embedded store.
# Part-way through the first epoch one worker is killed (kill -9): the survivor recovers in place
# from the last commit, edl-run starts a replacement, and the newcomer is admitted at the next batch
# boundary, synced from the survivor, and trains on. The run ends with the test accuracy.
#
# It fails, naming the reason, unless: the kill was sent; edl-run's event log shows the failure of
# the killed worker, a recovery (a generation with left=... recover_ms=...) and a join (a generation
# with joined=... after the kill); edl-run exits 0; and the final test accuracy is at least
# EDL_MAIN_MIN_ACCURACY percent (default 60; chance is 10%).
# Usage: scripts/main-job.sh [BUILD_DIR]     (after scripts/build.sh)
set -euo pipefail
BUILD_DIR=${1:-${EDL_BUILD_DIR:-build}}
RUN="$BUILD_DIR/src/launcher/edl-run"
TRAIN="$BUILD_DIR/models/resnet20/edl-resnet20"
EPOCHS=${EDL_MAIN_EPOCHS:-2}
RECORDS=${EDL_MAIN_TRAIN_RECORDS:-20000}
TEST_RECORDS=${EDL_MAIN_TEST_RECORDS:-5000}
MIN_ACCURACY=${EDL_MAIN_MIN_ACCURACY:-60}
for f in "$RUN" "$TRAIN"; do [ -x "$f" ] || { echo "main-job: $f is missing: build first (scripts/build.sh)" >&2; exit 1; }; done

work=$(mktemp -d)
trap 'rm -rf "$work"; [ -n "${job:-}" ] && kill "$job" 2>/dev/null || true' EXIT
echo "== main job: elastic ResNet20 on Fashion-MNIST (a subset: $RECORDS training / $TEST_RECORDS test images,"
echo "   $EPOCHS epochs), 2 workers with 1 thread each, embedded store; one worker is killed part-way and a"
echo "   replacement joins =="
"$RUN" --min-np 1 --max-np 3 -np 2 --reset-limit 3 --pid-file "$work/pids" \
  "$TRAIN" --dataset fashion-mnist --epochs "$EPOCHS" --train-records "$RECORDS" --test-records "$TEST_RECORDS" \
  > "$work/log" 2>&1 &
job=$!
tail -n +1 -f --pid="$job" "$work/log" &  # shows the run; ends after edl-run, with the last lines
shown=$!

# Wait until the first epoch is about a third done, then kill the worker in slot 1.
for _ in $(seq 1 1200); do
  grep -qE "epoch 1/$EPOCHS \[######" "$work/log" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.25
done
fail() { echo "== main job FAILED: $* ==" >&2; exit 1; }

victim=$(awk '$1 == 1 { print $2 }' "$work/pids" 2>/dev/null | tail -n 1)
[ -n "$victim" ] || fail "no worker in slot 1 in edl-run's pid file: the kill could not be sent"
kill -0 "$victim" 2>/dev/null || fail "the worker in slot 1 (pid $victim) was already gone: the kill could not be sent"
echo "== main job: kill -9 worker in slot 1 (pid $victim) =="
kill -9 "$victim" || fail "kill -9 $victim failed"
set +e
wait "$job"
rc=$?
wait "$shown"
set -e
job=""
[ $rc -eq 0 ] || fail "edl-run exit code $rc"

# edl-run's event log (docs/launcher.md): the lines after the killed worker's failure.
after_kill=$(awk -v pid="$victim" 'index($0, "event=failed") && index($0, "pid=" pid " ") { seen = 1 } seen' "$work/log")
[ -n "$after_kill" ] || fail "edl-run logged no event=failed for the killed worker (pid $victim)"
echo "$after_kill" | grep -q "event=generation .*left=.*recover_ms=" ||
  fail "no recovery in edl-run's event log (a generation with left=... recover_ms=... after the kill)"
echo "$after_kill" | grep -q "event=generation .*joined=" ||
  fail "no join in edl-run's event log (a generation with joined=... after the kill)"

acc=$(sed -n 's/.*final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/log" | tail -n 1)
[ -n "$acc" ] || fail "no final test accuracy printed"
awk -v a="$acc" -v m="$MIN_ACCURACY" 'BEGIN { exit !(a + 0 >= m + 0) }' ||
  fail "final test accuracy $acc% is below the floor of $MIN_ACCURACY%"
echo "== main job done: the kill was sent, the survivor recovered, a replacement joined, and the final"
echo "   test accuracy is $acc% (floor $MIN_ACCURACY%) =="
