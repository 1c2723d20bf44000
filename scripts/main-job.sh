#!/usr/bin/env bash
# The main job: elastic ResNet20 training on Fashion-MNIST under edl-run with the embedded store.
# Part-way through the first epoch one worker is killed (kill -9): the survivor recovers in place
# from the last commit, edl-run starts a replacement, and the newcomer is admitted at the next batch
# boundary, synced from the survivor, and trains on. The run ends with the test accuracy.
# Usage: scripts/main-job.sh [BUILD_DIR]     (after scripts/build.sh)
set -euo pipefail
BUILD_DIR=${1:-${EDL_BUILD_DIR:-build}}
RUN="$BUILD_DIR/src/elastic/edl-run"
TRAIN="$BUILD_DIR/models/resnet20/edl-resnet20"
EPOCHS=${EDL_MAIN_EPOCHS:-2}
RECORDS=${EDL_MAIN_TRAIN_RECORDS:-20000}
TEST_RECORDS=${EDL_MAIN_TEST_RECORDS:-5000}
for f in "$RUN" "$TRAIN"; do [ -x "$f" ] || { echo "main-job: $f is missing: build first (scripts/build.sh)" >&2; exit 1; }; done

work=$(mktemp -d)
trap 'rm -rf "$work"; [ -n "${job:-}" ] && kill "$job" 2>/dev/null || true' EXIT
echo "== main job: elastic ResNet20 on Fashion-MNIST (a subset: $RECORDS training / $TEST_RECORDS test images,"
echo "   $EPOCHS epochs), 2 workers with 1 thread each, embedded store; one worker is killed part-way and a"
echo "   replacement joins =="
"$RUN" --min-np 1 --max-np 3 -np 2 --reset-limit 3 --pid-file "$work/pids" \
  "$TRAIN" --dataset fashion-mnist --epochs "$EPOCHS" --train-records "$RECORDS" --test-records "$TEST_RECORDS" \
  > >(tee "$work/log") 2>&1 &
job=$!

# Wait until the first epoch is about a third done, then kill the worker in slot 1.
for _ in $(seq 1 1200); do
  grep -qE "epoch 1/$EPOCHS \[######" "$work/log" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.25
done
victim=$(awk '$1 == 1 { print $2 }' "$work/pids" 2>/dev/null | tail -n 1)
if [ -n "$victim" ] && kill -0 "$victim" 2>/dev/null; then
  echo "== main job: kill -9 worker in slot 1 (pid $victim) =="
  kill -9 "$victim"
fi
set +e
wait "$job"
rc=$?
set -e
job=""
if [ $rc -ne 0 ]; then echo "== main job FAILED (edl-run exit code $rc) =="; exit $rc; fi
grep -q "final test accuracy" "$work/log" || { echo "== main job: no final test accuracy printed =="; exit 1; }
echo "== main job done: training survived the failure and the join =="
