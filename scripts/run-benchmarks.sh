#!/usr/bin/env bash
# Runs every bench executable (build/bench/) and experiment reproduction (build/experiments/) that
# was built, each with --json into one results directory, then publishes the rows into docs/data/
# and regenerates docs/benchmarks.md, docs/experiments.md and the figures from them.
#
#   scripts/run-benchmarks.sh [--build DIR] [--out DIR] [--only a,b,...] [--quick] [--doc-only] [--no-publish]
#
#   --build DIR   build tree with bench/ and experiments/ (default: build)
#   --out DIR     results: <bench>.jsonl, <bench>.log, status.tsv, machine.txt, series/ (default: DIR/bench-results)
#   --only LIST   run only these benches (the others keep their rows and provenance in docs/data/);
#                 chaos_bench's MTBF runs are the entries chaos_mtbf (10 s) and chaos_mtbf30 (30 s)
#   --quick       shorter runs of the slow benches (scaling_bench, elastic_bench, convergence_exp,
#                 chaos_bench, controlplane_bench, slurm_bench, autoscale_bench, scale_bench, join_bench)
#   --doc-only    do not run anything; publish --out (docs/data itself: only regenerate the docs)
#   --no-publish  do not copy --out into docs/data/ nor write the docs (results stay in --out)
#
# A bench may also leave <bench>.csv next to its rows (metrics_timeline: edl-run's --metrics-file);
# it is published with them.
# Every bench's provenance goes to status.tsv, one line per bench (tab-separated):
#   name, ran|skipped|failed, note, command, commit (short hash, "-dirty" with uncommitted changes),
#   UTC start, wall seconds, 1-min load average at start, at end.
# Publishing copies the rows, status.tsv, machine.txt and series/ into docs/data/ (committed: the
# docs are generated from them, and scripts/check-docs.sh checks that they still are), then writes
# docs/benchmarks.md, docs/experiments.md (from docs/experiments.md.in) and docs/img/*.gp (+ .png).
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
PUBLISH=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --doc-only) DOC_ONLY=1; shift ;;
    --no-publish) PUBLISH=0; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
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

set_status() {  # name status note command [commit start_utc wall_s load_start load_end]
  local tmp="$STATUS.tmp"
  touch "$STATUS"
  awk -F'\t' -v n="$1" '$1 != n' "$STATUS" > "$tmp"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" "${6:-}" "${7:-}" "${8:-}" "${9:-}" >> "$tmp"
  mv "$tmp" "$STATUS"
}

commit_id() {
  local c
  c=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || c="$c-dirty"
  echo "$c"
}

load1() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }

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
  local shown="${*//$OUT\//out/}"
  shown="${shown//$BUILD\//build/}"
  shown="${shown//$ROOT\//} --json out/$name.jsonl"
  local load commit start
  load=$(load1)
  commit=$(commit_id)
  start=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
  echo "== $name: $shown"
  local t0=$SECONDS rc=0
  timeout --kill-after=20 "$limit" "$@" --json "$json" > "$log" 2>&1 || rc=$?
  cat "$log"
  local wall=$((SECONDS - t0)) load_end
  load_end=$(load1)
  local prov=("$shown" "$commit" "$start" "$wall" "$load" "$load_end")
  if [ $rc -eq 0 ]; then
    set_status "$name" ran "" "${prov[@]}"
  elif [ $rc -eq 124 ]; then
    set_status "$name" failed "timed out after $limit s (rows written before that are kept)" "${prov[@]}"
  else
    set_status "$name" failed "exit status $rc, see $name.log" "${prov[@]}"
  fi
}

if [ $DOC_ONLY -eq 0 ]; then
  if [ $QUICK -eq 1 ]; then
    SCALING_ARGS=(--steps 8 --warmup 2 --repeats 2)
    ELASTIC_ARGS=(--kills 2 --stops 1 --joins 2 --reps 1)
    CONVERGENCE_ARGS=(--quick)
    CHAOS_ARGS=(--trials 20)
    REPRO_ARGS=(--trials 3)
    MTBF_ARGS=(--mtbf-run-s 30 --pairs 1)
    CONTROLPLANE_ARGS=(--runs 1)
    SLURM_ARGS=(--runs 1)
    AUTOSCALE_ARGS=(--repeats 1)
    SCALE_ARGS=(--ranks 16,64 --store embedded --kills 2)
    STORE_ARGS=(--leases 256)
    JOIN_ARGS=(--sizes-mb 1,100)
  else
    JOIN_ARGS=()
    AUTOSCALE_ARGS=()
    CONTROLPLANE_ARGS=()
    SLURM_ARGS=()
    SCALING_ARGS=()
    ELASTIC_ARGS=()
    CONVERGENCE_ARGS=()
    CHAOS_ARGS=(--trials 100)
    REPRO_ARGS=(--trials 10)
    MTBF_ARGS=(--pairs 3)
    # Issue 25: 16 to 512 processes on the embedded store and etcd (memory: ~10 MiB RSS per worker,
    # most of it shared libraries; run it on a quiet machine).
    SCALE_ARGS=(--ranks 16,64,256,512 --store embedded,etcd --kills 3)
    # The steady load of 256 and 1,024 workers' leases on each backend (docs/store.md, "Capacity").
    STORE_ARGS=(--backends tcp,redis,memory,etcd --leases 256,1024)
  fi
  # Every fault kind (docs/chaos.md); CHAOS_FAULTS narrows it.
  CHAOS_FAULTS="${CHAOS_FAULTS:-kill,kill2,stop,stopforever,join,leave,stuck,flood,hostile}"
  # Every allreduce comparison in one run (bench/allreduce_launch.h): 2 and 4 local ranks, Open MPI's
  # shared-memory and TCP rows beside EDL's when the build has -DEDL_BENCH_WITH_MPI=ON (and mpirun),
  # 2 emulated hosts x 2 ranks on a 1 Gbit/s link (root).
  run_bench allreduce_bench 2400 "$B/allreduce_bench" --suite
  if [ -n "$EDL_RUN" ]; then
    run_bench fusion_bench 1200 "$EDL_RUN" -np 2 "$B/fusion_bench"
  else
    selected fusion_bench && set_status fusion_bench skipped "edl-run not built" ""
  fi
  run_bench model_bench 1200 "$B/model_bench"
  run_bench reader_bench 600 "$B/reader_bench"
  run_bench store_bench 1200 "$B/store_bench" "${STORE_ARGS[@]}"
  run_bench optimizer_bench 1200 "$B/optimizer_bench"
  run_bench timeline_bench 900 "$B/timeline_bench"
  run_bench torch_bench 1200 "$B/torch_bench"  # built only with libtorch (edl::torch): skipped otherwise
  run_bench elastic_bench 1800 "$B/elastic_bench" "${ELASTIC_ARGS[@]}"
  run_bench scale_bench 5400 "$B/scale_bench" "${SCALE_ARGS[@]}"
  run_bench join_bench 3600 "$B/join_bench" "${JOIN_ARGS[@]}"
  run_bench autoscale_bench 1800 "$B/autoscale_bench" "${AUTOSCALE_ARGS[@]}"
  # Job metrics around a kill and a join (edl-run --metrics-file; docs/observability.md, "Plots").
  if [ -n "$EDL_RUN" ] && [ -x "$BUILD/testing/elastic_worker" ]; then
    run_bench metrics_timeline 300 "$ROOT/scripts/metrics-timeline.sh" --edl-run "$EDL_RUN" \
      --worker "$BUILD/testing/elastic_worker"
  else
    selected metrics_timeline && set_status metrics_timeline skipped "edl-run or testing/elastic_worker not built" ""
  fi
  run_bench shard_audit 900 "$B/shard_audit"
  run_bench chaos_bench 3600 "$B/chaos_bench" --faults "$CHAOS_FAULTS" "${CHAOS_ARGS[@]}"
  # The reproducible mode under kills, joins and leaves: every trial must also match the final state
  # of the same job trained by one worker without faults (matches_reference; docs/optim.md).
  run_bench chaos_repro 1800 "$B/chaos_bench" --deterministic --faults kill,kill2,join,leave "${REPRO_ARGS[@]}"
  # Goodput under kill -9 at exponential intervals (MTBF 10 s and 30 s), paired with failure-free runs:
  # select them with --only chaos_mtbf,chaos_mtbf30.
  run_bench chaos_mtbf 1800 "$B/chaos_bench" --mtbf-s 10 "${MTBF_ARGS[@]}"
  run_bench chaos_mtbf30 1800 "$B/chaos_bench" --mtbf-s 30 "${MTBF_ARGS[@]}"
  # Straggler rebalancing vs waiting and eviction (3 workers under edl-run, one at half speed), and
  # the reproducible mode's cost next to the normal mode (docs/data.md, docs/optim.md).
  run_bench rebalance_bench 1800 "$B/rebalance_bench" --rounds 3
  run_bench reproducible_bench 1200 "$B/reproducible_bench"
  run_bench netns_check 300 "$B/netns_check"
  run_bench controlplane_bench 3600 "$B/controlplane_bench" --store redis,embedded,etcd "${CONTROLPLANE_ARGS[@]}"
  # A real Slurm cluster on emulated nodes (root; Slurm, munge, etcd): node loss and a second allocation.
  run_bench slurm_bench 1800 "$B/slurm_bench" "${SLURM_ARGS[@]}"
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

# --- provenance of the machine -----------------------------------------------------------------
if [ $DOC_ONLY -eq 0 ]; then
  echo "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')), "\
"$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)" > "$OUT/machine.txt"
fi

# --- publishing: docs/data/ and the generated docs ---------------------------------------------
[ $PUBLISH -eq 1 ] || { echo "results in $OUT (not published: --no-publish)"; exit 0; }
DATA="$ROOT/docs/data"
if [ "$OUT" != "$DATA" ]; then
  # A bench of this run replaces its rows and its status line; the others' stay as they were, with
  # their own provenance (each section of the docs names the run it comes from).
  # Only the benches selected in this invocation (--only) are published: $OUT may hold older
  # results of other benches from earlier runs, which must not replace the committed ones.
  mkdir -p "$DATA"
  touch "$DATA/status.tsv"
  MINE="$OUT/status.published.tsv"
  : > "$MINE"
  while IFS=$'\t' read -r name rest; do
    [ -n "$name" ] && selected "$name" && printf '%s\t%s\n' "$name" "$rest" >> "$MINE"
  done < "$STATUS"
  while IFS=$'\t' read -r name _; do
    [ -n "$name" ] || continue
    rm -f "$DATA/$name.jsonl" "$DATA/$name.csv"
    for f in "$OUT/$name.jsonl" "$OUT/$name.csv"; do
      [ -e "$f" ] && cp "$f" "$DATA/"
    done
  done < "$MINE"
  awk -F'\t' 'NR == FNR { mine[$1] = 1; next } !($1 in mine)' "$MINE" "$DATA/status.tsv" > "$DATA/status.tsv.new"
  cat "$MINE" >> "$DATA/status.tsv.new"
  mv "$DATA/status.tsv.new" "$DATA/status.tsv"
  [ -e "$OUT/machine.txt" ] && cp "$OUT/machine.txt" "$DATA/"
  if grep -q "^cluster_sim"$'\t' "$MINE" 2>/dev/null; then
    rm -rf "$DATA/series"
    [ -d "$OUT/series" ] && cp -r "$OUT/series" "$DATA/series"
  fi
fi
rm -f "$ROOT"/docs/img/*.gp  # figures the data set no longer gives disappear with their PNGs below
"$X/benchmarks_doc" --in "$DATA" --doc "$ROOT/docs/benchmarks.md" --img-dir "$ROOT/docs/img" \
  --experiments-in "$ROOT/docs/experiments.md.in" --experiments "$ROOT/docs/experiments.md" || exit 1
if command -v gnuplot > /dev/null; then
  for gp in "$ROOT"/docs/img/*.gp; do
    [ -e "$gp" ] || continue
    (cd "$ROOT/docs" && gnuplot "$gp") || echo "run-benchmarks.sh: gnuplot failed on $gp" >&2
  done
  echo "plots: $ROOT/docs/img"
  for png in "$ROOT"/docs/img/*.png; do
    [ -e "${png%.png}.gp" ] || rm -f "$png"
  done
else
  echo "run-benchmarks.sh: gnuplot not installed (apt-get install gnuplot-nox): no PNGs" >&2
fi
