#!/usr/bin/env bash
# metrics-timeline.sh: a short elastic job with a kill -9 and a join, observed through edl-run's
# --metrics-file, for the "Job metrics" figure of docs/benchmarks.md (steps per second over time).
# scripts/run-benchmarks.sh runs it as the bench "metrics_timeline".
#
#   scripts/metrics-timeline.sh --edl-run PATH --worker PATH --json OUT.jsonl [--steps N] [--step-ms MS]
#                               [--kill-at S] [--join-at S]
#
# The job: testing/elastic_worker (--worker) under edl-run with a discovery script that reports
# 2 local slots; at --kill-at seconds (default 6) one worker gets SIGKILL (edl-run restarts it), at
# --join-at seconds (default 14) the script reports 3 slots (a third worker joins). Writes OUT.csv
# (the --metrics-file, a row every 0.25 s) next to OUT.jsonl, whose rows are the two events with
# edl-run's clock ({"event":"kill"|"join","t_s":...}) and the goodput report (--report) of the job.
set -euo pipefail

EDL_RUN=""
WORKER=""
JSON=""
STEPS=1000
STEP_MS=20
KILL_AT=6
JOIN_AT=14
while [ $# -gt 0 ]; do
  case "$1" in
    --edl-run) EDL_RUN="$2"; shift 2 ;;
    --worker) WORKER="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --step-ms) STEP_MS="$2"; shift 2 ;;
    --kill-at) KILL_AT="$2"; shift 2 ;;
    --join-at) JOIN_AT="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "metrics-timeline.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$EDL_RUN" ] || { echo "metrics-timeline.sh: --edl-run '$EDL_RUN' is not an executable" >&2; exit 2; }
[ -x "$WORKER" ] || { echo "metrics-timeline.sh: --worker '$WORKER' is not an executable" >&2; exit 2; }
[ -n "$JSON" ] || { echo "metrics-timeline.sh: --json PATH is required" >&2; exit 2; }
CSV="${JSON%.jsonl}.csv"

DIR=$(mktemp -d "${TMPDIR:-/tmp}/edl-metrics-timeline.XXXXXX")
LAUNCHER=""
cleanup() {
  [ -n "$LAUNCHER" ] && kill -9 "$LAUNCHER" 2> /dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
echo "localhost:2" > "$DIR/slots"
printf '#!/bin/sh\ncat "%s/slots"\n' "$DIR" > "$DIR/discover.sh"
chmod +x "$DIR/discover.sh"

# Workers report every 50 ms (EDL_METRICS_INTERVAL_MS): the job's step counter grows in bursts of one
# report, so a 1 s rate over the rows is off by at most ~5% instead of one 250 ms burst.
EDL_METRICS_INTERVAL_MS=50 "$EDL_RUN" --min-np 1 --max-np 3 --hostname localhost --host-discovery-script "$DIR/discover.sh" \
  --discovery-interval-ms 200 --pid-file "$DIR/pids" --grace-period 5 \
  --metrics-file "$CSV" --metrics-interval 0.25 --report "$DIR/report.json" \
  "$WORKER" --steps "$STEPS" --step-ms "$STEP_MS" --params 4096 --log "$DIR/worker.log" \
  > "$DIR/out" 2> "$DIR/err" &
LAUNCHER=$!

sleep "$KILL_AT"
victim=$(awk 'NR == 2 { print $2 }' "$DIR/pids")
[ -n "$victim" ] && kill -9 "$victim"
sleep "$(awk -v a="$KILL_AT" -v b="$JOIN_AT" 'BEGIN { print (b > a ? b - a : 0) }')"
echo "localhost:3" > "$DIR/slots"
rc=0
wait "$LAUNCHER" || rc=$?
LAUNCHER=""
cat "$DIR/err" >&2
[ $rc -eq 0 ] || { echo "metrics-timeline.sh: edl-run exited $rc" >&2; exit 1; }

# Event times on edl-run's clock (its log's t=), the same clock as the CSV's time_s.
t_of() { grep -m1 "$1" "$DIR/err" | sed -n 's/^edl-run: [0-9TZ:.-]* t=\([0-9.]*\) .*/\1/p'; }
kill_t=$(t_of "event=failed slot=1")
join_t=$(t_of "event=scale-up")
{
  echo "{\"bench\":\"metrics_timeline\",\"event\":\"kill\",\"t_s\":${kill_t:-null},\"steps\":$STEPS,\"step_ms\":$STEP_MS}"
  echo "{\"bench\":\"metrics_timeline\",\"event\":\"join\",\"t_s\":${join_t:-null},\"steps\":$STEPS,\"step_ms\":$STEP_MS}"
  printf '{"bench":"metrics_timeline","event":"report",%s\n' "$(tr -d '\n' < "$DIR/report.json" | sed 's/^{//')"
} > "$JSON"
