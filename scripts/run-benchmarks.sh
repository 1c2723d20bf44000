#!/usr/bin/env bash
# Runs every bench executable (build/bench/) and experiment reproduction (build/experiments/) that
# was built, each with --json into one results directory, then
# writes docs/benchmarks.md (tables, the seeds' numbers beside ours) and docs/img/*.png (gnuplot).
#
#   scripts/run-benchmarks.sh [--build DIR] [--out DIR] [--only a,b,...] [--quick] [--doc-only]
#
#   --build DIR   build tree with bench/ and experiments/ (default: build)
#   --out DIR     results: <bench>.jsonl, <bench>.log, status.tsv, series/, plots/ (default: DIR/bench-results)
#   --only LIST   run only these benches (the doc is still made from everything in --out)
#   --quick       shorter runs of the slow benches (scaling_bench, elastic_bench, convergence_exp,
#                 controlplane_bench)
#   --doc-only    do not run anything; regenerate the doc and the plots from --out
#
# Needs only bash, coreutils and what the project builds; gnuplot (Debian gnuplot-nox) for the PNGs.
# Benches that were not built are skipped with a note in the doc. Emulated links need root.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
ONLY=""
QUICK=0
DOC_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --doc-only) DOC_ONLY=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run-benchmarks.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || OUT="$BUILD/bench-results"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B="$BUILD/bench"
X="$BUILD/experiments"
STATUS="$OUT/status.tsv"
EDL_RUN=$(find "$BUILD" -name edl-run -type f -perm -u+x 2>/dev/null | head -n 1)

if [ ! -x "$X/benchmarks_doc" ]; then
  echo "run-benchmarks.sh: $X/benchmarks_doc is missing: build the project first (cmake --build $BUILD)" >&2
  exit 2
fi

selected() {
  [ -z "$ONLY" ] && return 0
  case ",$ONLY," in *",$1,"*) return 0 ;; esac
  return 1
}

set_status() {  # name status note command
  local tmp="$STATUS.tmp"
  touch "$STATUS"
  awk -F'\t' -v n="$1" '$1 != n' "$STATUS" > "$tmp"
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$tmp"
  mv "$tmp" "$STATUS"
}

# run_bench NAME TIMEOUT_S COMMAND... (the command gets --json OUT/NAME.jsonl appended)
run_bench() {
  local name="$1" limit="$2"
  shift 2
  selected "$name" || return 0
  if [ ! -x "$1" ]; then
    echo "== $name: skipped ($(basename "$1") not built)"
    set_status "$name" skipped "$(basename "$1") not built" ""
    return 0
  fi
  local json="$OUT/$name.jsonl" log="$OUT/$name.log"
  rm -f "$json"
  local shown="${*//$BUILD\//build/}"
  shown="${shown//$OUT\//out/} --json out/$name.jsonl"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
  echo "== $name: $shown"
  local t0=$SECONDS rc=0
  timeout --kill-after=20 "$limit" "$@" --json "$json" > "$log" 2>&1 || rc=$?
  cat "$log"
  if [ $rc -eq 0 ]; then
    set_status "$name" ran "$((SECONDS - t0)) s, load average $load at start" "$shown"
  elif [ $rc -eq 124 ]; then
    set_status "$name" failed "timed out after $limit s (rows written before that are kept)" "$shown"
  else
    set_status "$name" failed "exit status $rc, see $name.log" "$shown"
  fi
}

if [ $DOC_ONLY -eq 0 ]; then
  if [ $QUICK -eq 1 ]; then
    SCALING_ARGS=(--steps 8 --warmup 2 --repeats 2)
    ELASTIC_ARGS=(--kills 2 --stops 1 --joins 2 --reps 1)
    CONVERGENCE_ARGS=(--quick)
    CHAOS_ARGS=(--trials 20)
    MTBF_ARGS=(--mtbf-run-s 30 --pairs 1)
    CONTROLPLANE_ARGS=(--runs 1)
  else
    CONTROLPLANE_ARGS=()
    SCALING_ARGS=()
    ELASTIC_ARGS=()
    CONVERGENCE_ARGS=()
    CHAOS_ARGS=()
    MTBF_ARGS=()
  fi
  # The fault kinds the runtime handles today; add stuck,stopforever once the progress deadline and
  # edl-run's ending of evicted workers are in (chaos_bench's default is every kind).
  CHAOS_FAULTS="${CHAOS_FAULTS:-kill,kill2,stop,join,leave,flood,hostile}"
  run_bench allreduce_bench 1200 "$B/allreduce_bench" --local-ranks 2
  if [ -n "$EDL_RUN" ]; then
    run_bench fusion_bench 1200 "$EDL_RUN" -np 2 "$B/fusion_bench"
  else
    selected fusion_bench && set_status fusion_bench skipped "edl-run not built" ""
  fi
  run_bench model_bench 1200 "$B/model_bench"
  run_bench reader_bench 600 "$B/reader_bench"
  run_bench optimizer_bench 1200 "$B/optimizer_bench"
  run_bench elastic_bench 1800 "$B/elastic_bench" "${ELASTIC_ARGS[@]}"
  run_bench shard_audit 900 "$B/shard_audit"
  run_bench chaos_bench 1800 "$B/chaos_bench" --faults "$CHAOS_FAULTS" "${CHAOS_ARGS[@]}"
  run_bench chaos_mtbf 1800 "$B/chaos_bench" --mtbf-s 10 "${MTBF_ARGS[@]}"
  run_bench netns_check 300 "$B/netns_check"
  run_bench controlplane_bench 3600 "$B/controlplane_bench" --store redis,embedded,etcd "${CONTROLPLANE_ARGS[@]}"
  run_bench scaling_bench 3600 "$X/scaling_bench" "${SCALING_ARGS[@]}"
  run_bench convergence 3600 "$X/convergence_exp" "${CONVERGENCE_ARGS[@]}"
  # The simulator takes EDL's own scaling curve and recovery times when both benches produced rows.
  SIM_ARGS=(--series-dir "$OUT/series")
  if [ -s "$OUT/scaling_bench.jsonl" ] && [ -s "$OUT/elastic_bench.jsonl" ]; then
    SIM_ARGS+=(--scaling "$OUT/scaling_bench.jsonl" --elastic "$OUT/elastic_bench.jsonl")
  fi
  selected cluster_sim && rm -rf "$OUT/series"
  run_bench cluster_sim 300 "$X/cluster_sim" "${SIM_ARGS[@]}"
fi

# --- the document ------------------------------------------------------------------------------
HEADER="$OUT/header.md"
{
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')), "\
"$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); "\
"commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "The machine is shared and small: compare rows measured in the same run, not across runs."
} > "$HEADER"
rm -rf "$OUT/plots"
"$X/benchmarks_doc" --in "$OUT" --doc "$ROOT/docs/benchmarks.md" --img-dir "$ROOT/docs/img" \
  --plot-dir "$OUT/plots" --header "$HEADER" || exit 1
if command -v gnuplot > /dev/null; then
  for gp in "$OUT"/plots/*.gp; do
    [ -e "$gp" ] || continue
    gnuplot "$gp" || echo "run-benchmarks.sh: gnuplot failed on $gp" >&2
  done
  echo "plots: $ROOT/docs/img"
else
  echo "run-benchmarks.sh: gnuplot not installed (apt-get install gnuplot-nox): no PNGs" >&2
fi
