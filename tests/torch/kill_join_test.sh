#!/usr/bin/env bash
# A kill -9 during backward and a join leave every rank with bitwise identical parameters (issue 15).
# edl-run starts 2 workers (tests/torch/elastic_worker.cc); rank 1 stops inside backward at step 10
# with buckets in flight and is killed; the survivor recovers from the last commit, edl-run starts a
# replacement, which joins; at the end every worker that trained all steps wrote its parameters.
# Checks: the kill was sent, edl-run logged the failure, a recovery and a join, edl-run exited 0, at
# least 2 parameter files exist and they are byte-identical.
# With --device cuda (label gpu): the workers train on GPU 0 (edl-run --one-gpu-test: one NCCL_HOSTID
# per slot); without a usable GPU it skips (exit 77) with one line, or fails with EDL_REQUIRE_GPU=1.
# Usage: kill_join_test.sh EDL_RUN WORKER [--device cpu|cuda]
set -euo pipefail
. "$(dirname "$0")/gpu_probe.sh"
process_test_args "$@"
work=$(mktemp -d)
job=""
cleanup() { [ -n "$job" ] && kill "$job" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "kill_join_test FAILED: $*" >&2; echo "--- edl-run log ---" >&2; cat "$work/log" >&2 || true; exit 1; }

"$RUN" "${RUN_ARGS[@]}" --min-np 1 --max-np 3 -np 2 --reset-limit 3 "$WORKER" --dir "$work" --steps 150 \
  --pause-step 10 --device "$DEVICE" > "$work/log" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [ -s "$work/paused" ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
[ -s "$work/paused" ] || fail "rank 1 never stopped inside backward"
victim=$(cat "$work/paused")
kill -9 "$victim" || fail "kill -9 $victim failed"
echo "killed worker $victim inside backward"
set +e
wait "$job"
rc=$?
set -e
job=""
[ $rc -eq 0 ] || fail "edl-run exit code $rc"
after_kill=$(awk -v pid="$victim" 'index($0, "event=failed") && index($0, "pid=" pid " ") { seen = 1 } seen' "$work/log")
[ -n "$after_kill" ] || fail "edl-run logged no event=failed for the killed worker (pid $victim)"
echo "$after_kill" | grep -q "event=generation .*left=.*recover_ms=" || fail "no recovery after the kill"
echo "$after_kill" | grep -q "event=generation .*joined=" || fail "no join after the kill"
files=("$work"/params.*)
[ ${#files[@]} -ge 2 ] && [ -e "${files[0]}" ] || fail "fewer than 2 workers finished all steps (${#files[@]})"
for f in "${files[@]:1}"; do
  cmp -s "${files[0]}" "$f" || fail "parameters differ: ${files[0]} vs $f"
done
echo "kill_join_test passed: ${#files[@]} workers, bitwise identical parameters ($(stat -c %s "${files[0]}") bytes)"
