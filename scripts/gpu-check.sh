#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "Running the GPU check"): on a machine with one NVIDIA GPU, prints the
# GPU, driver, CUDA and NCCL versions first, runs the tests labelled `gpu` with EDL_REQUIRE_GPU=1
# (each test case on its own, with its own time limit) and gpu_allreduce_bench, and writes under
# $OUT (default: gpu-check-out/), at most 7 files:
#   env.txt                    the machine: GPU, driver, CUDA, NCCL (loaded), the mode, each step
#   gpu_tests.log              the test runs (Catch2; a failing test prints its ranks' logs)
#   gpu_allreduce_bench.jsonl  the bench rows: commit them as docs/data/gpu_allreduce_bench.jsonl
#   gpu_bench.log              the bench's table and errors
#   gpu_check.jsonl            one summary row: status, tests, bench, device, versions, commit, time
#   scratch.tar.gz             what the tests and the bench left in /tmp (rank logs), for post-mortems
#   build.log                  source mode only
# The programs come from one of two places, chosen automatically:
#   bundle  the script runs from a bundle (.gpu-bundle/gpu-check.sh, a copy scripts/gpu-bundle.sh
#           puts there) or .gpu-bundle/ exists beside scripts/: its binaries, LD_LIBRARY_PATH = its
#           lib/ + the machine's own libnccl.so.2 (the pip package nvidia-nccl-cu13 / -cu12 of
#           python3, else the system's or the CUDA toolkit's)
#   source  otherwise: a CMake build with -DEDL_WITH_CUDA=ON into ${EDL_BUILD_DIR:-build} (needs the
#           packages of scripts/install-deps.sh and the CUDA toolkit with NCCL)
# Time: the tests get EDL_CHECK_TESTS_S seconds in all (default 240; one test case at most 120),
# the bench EDL_CHECK_BENCH_S (default 150), so the whole check ends within ~410 s: the device
# call's timeout_s 450 leaves time to rerun within 15 minutes of device time.
# Without a usable GPU it says why, writes env.txt and gpu_check.jsonl, and exits 0 — or 1 with
# EDL_REQUIRE_GPU=1 (the device call sets it).
#
#   [OUT=DIR] [EDL_REQUIRE_GPU=1] scripts/gpu-check.sh [--quick] [--source] [--rehearse]
#     --quick     fewer bench rows (sizes 4K,1M; 2 kills per path): a rehearsal, not rows to commit
#     --source    build from source even when a bundle exists
#     --rehearse  without a GPU, run the rest anyway (the tests skip, the bench exits 3): checks the
#                 script and the programs on a machine without one
#   EDL_CHECK_TORCH=1 adds edl::torch on CUDA at the end (scripts/gpu-torch-check.sh, up to 480 s more;
#                     needs python3's torch; docs/gpu.md runs it as a device call of its own)
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -f "$HERE/MANIFEST" ] && [ -d "$HERE/bin" ]; then BUNDLE=$HERE; ROOT=$(dirname "$HERE")  # a bundle's copy
else ROOT=$(dirname "$HERE"); BUNDLE=$ROOT/.gpu-bundle; fi
OUT=${OUT:-$ROOT/gpu-check-out}
TESTS_S=${EDL_CHECK_TESTS_S:-240}
BENCH_S=${EDL_CHECK_BENCH_S:-150}
QUICK=0
REHEARSE=0
MODE=bundle
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --source) MODE=source; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -d "$BUNDLE/bin" ] || MODE=source
mkdir -p "$OUT"
T0=$(date +%s)
START_MARK=$(mktemp /tmp/gpu-check-start.XXXXXX)  # what the tests and the bench leave in /tmp is newer
trap 'rm -f "$START_MARK"' EXIT
log() { echo "gpu-check: $*" | tee -a "$OUT/env.txt"; }
: > "$OUT/env.txt"
rm -f "$OUT/gpu_check.jsonl" "$OUT/gpu_allreduce_bench.jsonl" "$OUT/scratch.tar.gz"

# --- the programs ------------------------------------------------------------------------------
find_nccl_dir() {
  local d
  for py in python3 /opt/torch/.venv/bin/python3; do
    d=$("$py" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for f in glob.glob(os.path.join(p, "**", "libnccl.so.2"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit' 2>/dev/null) && [ -n "$d" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -e "$d/libnccl.so.2" ] && { echo "$d"; return; }; done
}
if [ "$MODE" = bundle ]; then
  BIN="$BUNDLE/bin"
  NCCL_DIR=$(find_nccl_dir || true)
  export LD_LIBRARY_PATH="$BUNDLE/lib${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  COMMIT=$(awk '/^commit /{print $2}' "$BUNDLE/MANIFEST" 2>/dev/null)
  export EDL_TEST_EDL_RUN="$BIN/edl-run" EDL_TEST_GPU_WORKER="$BIN/gpu_elastic_worker"
  TESTS="$BIN/test_gpu"
  BENCH="$BIN/gpu_allreduce_bench"
  log "mode bundle ($(sed -n 2p "$BUNDLE/MANIFEST" 2>/dev/null)); libnccl from ${NCCL_DIR:-nowhere}"
else
  BUILD=${EDL_BUILD_DIR:-$ROOT/build}
  log "mode source: building into $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDL_WITH_CUDA=ON >"$OUT/build.log" 2>&1 &&
    ninja -C "$BUILD" -j"${EDL_JOBS:-$(nproc)}" test_gpu gpu_allreduce_bench edl-run gpu_elastic_worker >>"$OUT/build.log" 2>&1 ||
    { log "the build failed (see build.log)"; tail -20 "$OUT/build.log"; exit 1; }
  COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)
  TESTS="$BUILD/tests/cuda/test_gpu"
  BENCH="$BUILD/bench/gpu_allreduce_bench"
fi
COMMIT=${COMMIT:-unknown}
# The driver's libcuda.so.1 where containers mount it, in case the loader's path lacks it.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -e "$d/libcuda.so.1" ] && case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d" ;; esac
done
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1} NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# --- first thing: the machine and the loaded NCCL ------------------------------------------------
log "commit $COMMIT"
PROBE=$(timeout -k 5 60 "$BENCH" --probe 2>&1)
PROBE_RC=$?
log "probe: $PROBE"
probe_field() {  # KEY: its value in the probe line (KEY=value or KEY="a value")
  local v
  v=$(printf '%s\n' "$PROBE" | grep -o "$1=\"[^\"]*\"\|$1=[^ \"]*" | head -1)
  v=${v#*=}
  v=${v#\"}
  printf '%s' "${v%\"}"
}
json() {  # a JSON string of $1
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "${s//$'\n'/ }"
}
summary() {  # STATUS TESTS BENCH: appends the gpu_check.jsonl row
  {
    printf '{"check": "gpu-check", "status": %s, "tests": %s, "bench": %s, "mode": %s' "$(json "$1")" "$(json "$2")" \
      "$(json "$3")" "$(json "$MODE")"
    printf ', "device": %s, "driver_version": %s, "cuda_version": %s, "nccl_version": %s, "revoke_shrink": %s' \
      "$(json "$(probe_field gpu)")" "$(json "$(probe_field driver)")" "$(json "$(probe_field cuda)")" \
      "$(json "$(probe_field nccl)")" "$(json "$(probe_field revoke_shrink)")"
    printf ', "why": %s, "commit": %s, "time": %s, "seconds": %d}\n' "$(json "$(probe_field why)")" "$(json "$COMMIT")" \
      "$(json "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$(( $(date +%s) - T0 ))"
  } >>"$OUT/gpu_check.jsonl"
}
if [ $PROBE_RC -eq 3 ] && [ $REHEARSE = 1 ]; then
  log "no usable GPU: rehearsing the rest (the tests skip, the bench exits 3)"
elif [ $PROBE_RC -eq 3 ]; then
  log "no usable GPU: nothing to check here"
  summary no-gpu skipped skipped
  if [ "${EDL_REQUIRE_GPU:-0}" != 0 ]; then log "EDL_REQUIRE_GPU=1: failing"; exit 1; fi
  exit 0
elif [ $PROBE_RC -ne 0 ]; then
  log "the probe failed (status $PROBE_RC): the binaries do not start here?"
  summary probe-failed skipped skipped
  exit 1
fi

# --- edl::torch on CUDA (EDL_CHECK_TORCH=1; docs/torch.md, "CUDA tensors") ------------------------
# scripts/gpu-torch-check.sh runs at the end, all its phases within EDL_TORCH_CHECK_S seconds
# (default 480): too long beside this check in one device call; docs/gpu.md gives it a call of its own.
TORCH_ARGS=()
[ $PROBE_RC -eq 3 ] && TORCH_ARGS=(--rehearse)

# --- the gpu tests -----------------------------------------------------------------------------
[ $REHEARSE = 1 ] && [ $PROBE_RC -eq 3 ] && unset EDL_REQUIRE_GPU || export EDL_REQUIRE_GPU=1
log "gpu tests ..."
# One Catch2 run per test case, each with its own limit (a hang costs one case, not the rest), all
# within TESTS_S; a case that would start with under 20 s left is counted as not run.
mapfile -t NAMES < <("$TESTS" --list-test-names-only 2>/dev/null | grep -v '^$')
: >"$OUT/gpu_tests.log"
TESTS_RC=0 PASSED=0 FAILED=0 NOT_RUN=0
TESTS_END=$(( $(date +%s) + TESTS_S ))
TEST_ARGS=(--durations yes)  # Catch2: the case's time in the log
[ ${#NAMES[@]} -gt 0 ] || { log "test_gpu lists no test case"; TESTS_RC=1; }
for name in "${NAMES[@]}"; do
  left=$(( TESTS_END - $(date +%s) ))
  if [ $left -lt 20 ]; then NOT_RUN=$((NOT_RUN + 1)); log "  not run (no time left): $name"; continue; fi
  spec=$(printf '%s' "$name" | sed 's/[][\\,"*~]/\\&/g')  # Catch2 test spec: escape its special characters
  echo "==== $name" >>"$OUT/gpu_tests.log"
  t0=$(date +%s)
  timeout -k 5 $(( left < 120 ? left : 120 )) "$TESTS" "${TEST_ARGS[@]}" "$spec" >>"$OUT/gpu_tests.log" 2>&1
  rc=$?
  # exactly this one case ran, and passed (a skip without a GPU passes)
  if [ $rc -eq 0 ] && tail -3 "$OUT/gpu_tests.log" |
      grep -Eq "^All tests passed \([0-9]+ assertions? in 1 test case\)|^test cases: 1 \| 1 passed$"; then
    PASSED=$((PASSED + 1)); log "  ok ($(( $(date +%s) - t0 )) s): $name"
  else
    FAILED=$((FAILED + 1)); TESTS_RC=1
    log "  FAILED (status $rc$([ $rc -ge 124 ] && echo ', its time limit'), $(( $(date +%s) - t0 )) s): $name"
  fi
done
[ $NOT_RUN -gt 0 ] && TESTS_RC=1
TESTS_LINE="${#NAMES[@]} test cases: $PASSED passed, $FAILED failed, $NOT_RUN not run"
log "gpu tests: $TESTS_LINE"

# --- the bench ---------------------------------------------------------------------------------
BENCH_ARGS=(--commit "$COMMIT" --json "$OUT/gpu_allreduce_bench.jsonl")
# 3 recovery trials in each of its 3 cases (~4 s each on an H200) keep the bench inside its 150 s
[ $QUICK = 1 ] && BENCH_ARGS+=(--sizes 4K,1M --kills 2 --iters 5) || BENCH_ARGS+=(--kills 3)
log "bench ..."
timeout -k 5 "$BENCH_S" "$BENCH" "${BENCH_ARGS[@]}" >"$OUT/gpu_bench.log" 2>&1
BENCH_RC=$?
ROWS=0
[ -f "$OUT/gpu_allreduce_bench.jsonl" ] && ROWS=$(wc -l <"$OUT/gpu_allreduce_bench.jsonl")
log "bench: status $BENCH_RC, $ROWS rows"

if [ "${EDL_CHECK_TORCH:-0}" != 0 ]; then
  OUT="$OUT" "$ROOT/scripts/gpu-torch-check.sh" "${TORCH_ARGS[@]}"
  log "edl::torch on CUDA: status $? (torch/)"
fi

# --- what the ranks left behind, and the summary -----------------------------------------------
SCRATCH=$(cd /tmp && find . -maxdepth 1 -newer "$START_MARK" \( -name 'edl_coll_*' -o -name 'edl_gpu_bench_*' \) | head -400)
[ -n "$SCRATCH" ] && tar czf "$OUT/scratch.tar.gz" -C /tmp $SCRATCH 2>/dev/null
if [ -f "$OUT/scratch.tar.gz" ] && [ "$(stat -c %s "$OUT/scratch.tar.gz")" -gt 15000000 ]; then
  log "scratch.tar.gz is over 15 MB (the device tool brings back 16 MiB a file): only its *.log files kept"
  (cd /tmp && find $SCRATCH -name '*.log' -size -2M | head -400) | tar czf "$OUT/scratch.tar.gz" -C /tmp -T - 2>/dev/null
fi
# The device tool brings back files of at most 16 MiB: a longer log keeps its first 4 and last 10 MB.
for f in "$OUT/gpu_tests.log" "$OUT/gpu_bench.log"; do
  if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ]; then
    { head -c 4000000 "$f"; printf '\n[... gpu-check: cut to 14 MB ...]\n'; tail -c 10000000 "$f"; } >"$f.cut" && mv "$f.cut" "$f"
    log "$(basename "$f") was over 15 MB: cut to its first 4 and last 10 MB"
  fi
done
STATUS=ok
if [ $PROBE_RC -eq 3 ]; then
  STATUS=rehearsal-failed
  [ $TESTS_RC -eq 0 ] && [ $BENCH_RC -eq 3 ] && STATUS=rehearsal-no-gpu
elif [ $TESTS_RC -ne 0 ] && [ $BENCH_RC -ne 0 ]; then STATUS=tests-and-bench-failed
elif [ $TESTS_RC -ne 0 ]; then STATUS=tests-failed
elif [ $BENCH_RC -ne 0 ]; then STATUS=bench-failed
fi
summary "$STATUS" "status $TESTS_RC: ${TESTS_LINE:-none}" "status $BENCH_RC"
echo "---- bench table"
cat "$OUT/gpu_bench.log"
echo "---- summary ($(( $(date +%s) - T0 )) s)"
cat "$OUT/env.txt"
[ "$STATUS" = ok ] || [ "$STATUS" = rehearsal-no-gpu ]
