#!/usr/bin/env bash
# The reproducible mode end to end (issue 26): PROGRAM in the reproducible mode prints "CHECKSUM <hex>"
# of its final parameters and batch-norm statistics (edl-resnet20 --deterministic,
# edl-torch-reproducible). One worker without edl-run is the reference; the same job under edl-run
# with 2 and with 3 workers, and an elastic job of 2 workers in which one is killed with kill -9
# part-way and edl-run's replacement joins, must print the same checksum. Checks for the elastic run:
# the kill was sent, edl-run logged the failure, a recovery and a join, and exited 0.
# Usage: reproducible_test.sh EDL_RUN STEP_LOG_FLAG PROGRAM ARGS...
#   STEP_LOG_FLAG: PROGRAM's flag that makes rank 0 append a line per step to a file (when to kill);
#   PROGRAM must also take --step-delay-ms MS.
set -euo pipefail
RUN=$1
STEP_LOG=$2
TRAINER=$3
shift 3
ARGS=("$@")
work=$(mktemp -d)
job=""
cleanup() { [ -n "$job" ] && kill "$job" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() {
  echo "reproducible_test FAILED: $*" >&2
  for f in "$work"/*.log; do echo "--- $f (last lines) ---" >&2; tail -40 "$f" >&2; done
  exit 1
}
checksum() { grep -o 'CHECKSUM [0-9a-f]*' "$1" | tail -1 | cut -d' ' -f2; }

"$TRAINER" "${ARGS[@]}" > "$work/ref.log" 2>&1 || fail "the 1-worker run without edl-run failed"
ref=$(checksum "$work/ref.log")
[ -n "$ref" ] || fail "no CHECKSUM line in the 1-worker run"
echo "1 worker: CHECKSUM $ref"
for np in 2 3; do
  "$RUN" -np $np "$TRAINER" "${ARGS[@]}" > "$work/np$np.log" 2>&1 || fail "edl-run -np $np failed"
  got=$(checksum "$work/np$np.log")
  [ "$got" = "$ref" ] || fail "edl-run -np $np: CHECKSUM '$got', the 1-worker run $ref"
  echo "$np workers: CHECKSUM $got"
done

# Elastic: 2 workers; after 4 steps the worker of slot 1 is killed (kill -9), the survivor recovers
# from its last commit, edl-run starts a replacement and it joins. --step-delay-ms leaves it the time.
"$RUN" --min-np 1 --max-np 2 -np 2 --reset-limit 3 --pid-file "$work/pids" "$TRAINER" "${ARGS[@]}" \
  "$STEP_LOG" "$work/steps.jsonl" --step-delay-ms 150 > "$work/elastic.log" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [ -s "$work/steps.jsonl" ] && [ "$(wc -l < "$work/steps.jsonl")" -ge 4 ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
[ -s "$work/steps.jsonl" ] && [ "$(wc -l < "$work/steps.jsonl")" -ge 4 ] || fail "the elastic job never reached step 4"
victim=$(awk '$1 == 1 { print $2 }' "$work/pids")
[ -n "$victim" ] || fail "no worker of slot 1 in the pid file"
kill -9 "$victim" || fail "kill -9 $victim failed"
echo "killed worker $victim (slot 1) after $(wc -l < "$work/steps.jsonl") steps"
set +e
wait "$job"
rc=$?
set -e
job=""
[ $rc -eq 0 ] || fail "elastic edl-run exit code $rc"
after_kill=$(awk -v pid="$victim" 'index($0, "event=failed") && index($0, "pid=" pid " ") { seen = 1 } seen' "$work/elastic.log")
[ -n "$after_kill" ] || fail "edl-run logged no event=failed for the killed worker (pid $victim)"
echo "$after_kill" | grep -q "event=generation .*left=.*recover_ms=" || fail "no recovery after the kill"
echo "$after_kill" | grep -q "event=generation .*joined=" || fail "no join after the kill"
got=$(checksum "$work/elastic.log")
[ "$got" = "$ref" ] || fail "elastic run with a kill -9 and a join: CHECKSUM '$got', the 1-worker run $ref"
echo "elastic, kill -9 + join: CHECKSUM $got"
echo "reproducible_test passed: every run ended with CHECKSUM $ref"
