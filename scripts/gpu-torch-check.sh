#!/usr/bin/env bash
# The edl::torch GPU check (docs/torch.md, "CUDA tensors"; docs/gpu.md, "The device-tool call"): one
# device call runs all of it within EDL_TORCH_CHECK_S seconds (default 480), each phase with its own
# time limit so that a hang costs that phase only:
#   build      tests/torch/gpu_kit against python3's torch (torch.utils.cmake_prefix_path, or
#              EDL_TORCH_PREFIX) and .gpu-bundle (lib/, torch-kit/), into ${EDL_TORCH_KIT_BUILD:-/tmp/edl-torch-kit}  (<= 220 s)
#   tests      test_torch_gpu with EDL_REQUIRE_GPU=1 (a world of one, the CUDA round trip through
#              commit / restore and a checkpoint file, mixed devices refused)                 (<= 60 s)
#   kill-join  tests/torch/kill_join_test.sh --device cuda (2 workers on GPU 0, kill -9 inside
#              backward, a join, bitwise identical parameters)                                 (<= 60 s)
#   doubled    tests/torch/doubled_batch_test.sh --device cuda (2 ranks == one process with the
#              doubled batch, SGD+momentum and Adam; different shapes: MismatchError)          (<= 90 s)
#   bench      torch_bench --device cuda --modes overhead,edl (plain vs edl at 1 worker, 2 workers
#              on one GPU for behaviour only): ResNet20 here (<= 60 s), ResNet-50 at 224x224 as
#              the last phase (<= 90 s, what is left)
#   job        scripts/torch-job.sh --device cuda: the example's ResNet20 on Fashion-MNIST (the
#              bundle's fashion-mnist/) under edl-run --min-np 1 --max-np 3 on GPU 0, without
#              failures and with a kill -9 and a join: accuracy within 0.5 pp, checksums equal (<= 200 s)
# A phase that would start with less than its minimum left is not run (said in the summary).
# Writes under $OUT/torch/ (default gpu-check-out/torch/) as the phases go, 7 files:
#   torch_env.txt          the machine, torch, CUDA, NCCL, ABI, the libraries loaded, one line per phase
#   torch_build.log        the kit's build
#   torch_tests.log        test_torch_gpu, kill_join_test.sh and doubled_batch_test.sh
#   torch_bench.log        torch_bench's table
#   torch_gpu_bench.jsonl  the bench rows with device, driver, torch, nccl, time added: commit them as
#                          docs/data/torch_gpu_bench.jsonl
#   torch_job.log          the job's output: commit it as docs/data/torch_gpu_job.log
#   torch_check.jsonl      one summary row per run (docs/data/torch_gpu_check.jsonl)
#
#   [OUT=DIR] scripts/gpu-torch-check.sh [--rehearse] [--only PHASES]
#     --rehearse    a machine without a GPU (this project's CI machines): checks the bundle (size with
#                   the checkout under the device tool's 64 MiB, the dataset, torch-kit/), builds the
#                   kit against the CPU libtorch CMake finds (device_none.cc: CUDA tensors refused)
#                   and runs every phase, which must then skip or refuse --device cuda; every time
#                   limit x6
#     --only LIST   comma-separated phases (build,tests,kill-join,doubled,bench,job; default all)
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
REHEARSE=0
ONLY=build,tests,kill-join,doubled,bench,job
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) REHEARSE=1; shift ;;
    --only) ONLY=${2:?--only needs a list}; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "gpu-torch-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for p in ${ONLY//,/ }; do
  case "$p" in build|tests|kill-join|doubled|bench|job) ;; *) echo "gpu-torch-check.sh: unknown phase '$p'" >&2; exit 2 ;; esac
done
BUNDLE="$ROOT/.gpu-bundle"
KB=${EDL_TORCH_KIT_BUILD:-/tmp/edl-torch-kit}
W="$OUT/torch"
mkdir -p "$W" "$KB"
T0=$(date +%s)
SCALE=1  # a rehearsal on a 2-core machine without a GPU: every limit x6 (the kit's build alone takes minutes)
[ $REHEARSE = 1 ] && SCALE=6
END=$(( T0 + ${EDL_TORCH_CHECK_S:-480} * SCALE ))
: > "$W/torch_env.txt"
rm -f "$W/torch_gpu_bench.jsonl" "$W/torch_check.jsonl"
say() { echo "gpu-torch-check: $*" | tee -a "$W/torch_env.txt"; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
# budget CAP MIN: the seconds the next phase gets (CAP, or what is left), or 0 when under MIN
budget() {
  local left=$(( END - $(date +%s) ))
  [ $left -ge "$2" ] || { echo 0; return; }
  [ $left -lt "$1" ] && echo $left || echo "$1"
}

# --- the environment: the bundle's libraries, the machine's NCCL (the pip package torch brought) ---
PY=python3  # the python whose torch the kit builds against: python3, else the device machine's venv
python3 -c 'import torch' 2>/dev/null || { [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3; }
NCCL_DIR=$("$PY" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for f in glob.glob(os.path.join(p, "**", "libnccl.so.2"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit' 2>/dev/null || true)
# torch's own CUDA runtime ahead of the bundle's libcudart.so.13 (built here with CUDA 13.0.88): the
# loader keeps one library per soname, and libtorch_cuda should run on the runtime it was built with
# (libedl_cuda needs only 13.0's; the process then holds one runtime).
CUDART_DIR=$("$PY" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for f in glob.glob(os.path.join(p, "**", "libcudart.so.13"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit' 2>/dev/null || true)
export LD_LIBRARY_PATH="${CUDART_DIR:+$CUDART_DIR:}$BUNDLE/lib${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -e "$d/libcuda.so.1" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
COMMIT=${COMMIT:-$(awk '/^commit /{print $2}' "$BUNDLE/MANIFEST" 2>/dev/null)}
COMMIT=${COMMIT:-unknown}
# nvidia-smi comes with the device machine's driver (no Debian package here: without it the rows say none)
SMI=${EDL_NVIDIA_SMI:-nvidia-smi}
GPU=$("$SMI" --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
DEVICE_NAME=${GPU%%,*}
DRIVER=$(echo "${GPU#*,}" | tr -d ' ')
[ -n "$GPU" ] || { DEVICE_NAME=none; DRIVER=none; }
TORCH_INFO=$("$PY" -c 'import torch; c = torch.cuda.is_available(); print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI, ".".join(map(str, torch.cuda.nccl.version())) if c else "-", c)' 2>/dev/null | tail -1)
read -r TORCH_VERSION TORCH_CUDA TORCH_ABI TORCH_NCCL TORCH_GPU <<<"${TORCH_INFO:-none none none none False}"
say "commit $COMMIT; gpu '${DEVICE_NAME}' driver $DRIVER; $PY: torch $TORCH_VERSION cuda $TORCH_CUDA cxx11_abi $TORCH_ABI nccl $TORCH_NCCL gpu $TORCH_GPU; libnccl from ${NCCL_DIR:-the loader path}; libcudart from ${CUDART_DIR:-the bundle}"
[ $REHEARSE = 1 ] || export EDL_REQUIRE_GPU=1

# --- the bundle (always checked; the rehearsal fails on what the device call would) -----------------
BUNDLE_RC=0
if [ ! -f "$BUNDLE/MANIFEST" ] || [ ! -d "$BUNDLE/torch-kit" ]; then
  say "no bundle with torch-kit/ at $BUNDLE: run scripts/gpu-bundle.sh first"; BUNDLE_RC=1
else
  fm=$(ls "$BUNDLE"/fashion-mnist/*-ubyte.gz 2>/dev/null | wc -l)
  [ "$fm" -eq 4 ] || { say "the bundle has $fm of the 4 Fashion-MNIST files (fashion-mnist/)"; BUNDLE_RC=1; }
  if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then  # where the checkout is a git tree (here, not there)
    tree=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    total=$(( tree + $(du -sb "$BUNDLE" | cut -f1) ))
    say "the device call carries $total bytes (checkout $tree + bundle $(du -sb "$BUNDLE" | cut -f1)); limit 67108864"
    [ "$total" -le 67108864 ] || { say "over the device tool's 64 MiB"; BUNDLE_RC=1; }
  fi
fi

# --- phases -----------------------------------------------------------------------------------------
B_RC=- T_RC=- K_RC=- D_RC=- BENCH_RC=- BENCH50_RC=- J_RC=- ROWS=0 ACC=- BASE_ACC=-
run_phase() {  # NAME CAP MIN LOG COMMAND...: appends to LOG, sets PHASE_RC
  local name=$1 cap=$(( $2 * SCALE )) min=$3 log=$4 t
  shift 4
  t=$(budget "$cap" "$min")
  if [ "$t" -eq 0 ]; then PHASE_RC=not-run; say "$name: not run (under $min s left)"; return; fi
  local t0
  t0=$(date +%s)
  echo "==== $name ($*; limit $t s)" >>"$log"
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
  PHASE_RC=$?
  say "$name: status $PHASE_RC in $(( $(date +%s) - t0 )) s$( { [ $PHASE_RC = 124 ] || [ $PHASE_RC = 137 ]; } && echo ' (its time limit?)')"
}

build_kit() {
  local prefix=${EDL_TORCH_PREFIX:-$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
  local extra=()
  [ $REHEARSE = 1 ] && extra=(-DEDL_KIT_REHEARSE=ON)
  # a build folder configured from another checkout (an earlier worktree): start it afresh
  if [ -f "$KB/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT/tests/torch/gpu_kit" "$KB/CMakeCache.txt"; then
    rm -rf "$KB"
  fi
  cmake -S "$ROOT/tests/torch/gpu_kit" -B "$KB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDL_BUNDLE_DIR="$BUNDLE" \
    ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} "${extra[@]}" &&
    ninja -C "$KB" -j"${EDL_JOBS:-$(nproc)}"
}

if want build; then
  : >"$W/torch_build.log"
  export ROOT KB BUNDLE REHEARSE PY
  run_phase build 220 30 "$W/torch_build.log" bash -c "$(declare -f build_kit); build_kit"
  B_RC=$PHASE_RC
  [ "$B_RC" = 0 ] || tail -30 "$W/torch_build.log"
fi
for f in "$KB/test_torch_gpu" "$KB/torch_bench"; do
  [ -x "$f" ] && say "$(basename "$f") loads: $(ldd "$f" | awk '/libnccl|libtorch_cuda|libedl|libc10_cuda|libcudart/{printf "%s ", $3}')"
done
EDL_RUN="$BUNDLE/bin/edl-run"
: >"$W/torch_tests.log"
if want tests; then
  run_phase tests 60 20 "$W/torch_tests.log" "$KB/test_torch_gpu" --durations yes
  T_RC=$PHASE_RC
fi
if want kill-join; then
  run_phase kill-join 60 30 "$W/torch_tests.log" "$ROOT/tests/torch/kill_join_test.sh" "$EDL_RUN" \
    "$KB/edl_torch_elastic_worker" --device cuda
  K_RC=$PHASE_RC
fi
if want doubled; then
  run_phase doubled 90 30 "$W/torch_tests.log" "$ROOT/tests/torch/doubled_batch_test.sh" "$EDL_RUN" \
    "$KB/edl_torch_elastic_worker" --device cuda
  D_RC=$PHASE_RC
fi
# bench_rows MODEL CAP MIN ARGS...: torch_bench --device cuda on MODEL; its rows get device, driver,
# torch, NCCL and time (the bench itself writes device and commit) and go to torch_gpu_bench.jsonl
bench_rows() {
  local model=$1 cap=$2 min=$3 stamp
  shift 3
  rm -f "$KB/rows.jsonl"
  run_phase "bench $model" "$cap" "$min" "$W/torch_bench.log" "$KB/torch_bench" --device cuda --model "$model" \
    --modes overhead,edl --commit "$COMMIT" --json "$KB/rows.jsonl" "$@"
  stamp=$(printf ', "gpu": "%s", "driver": "%s", "torch": "%s", "nccl": "%s", "time": "%s"}' "$DEVICE_NAME" "$DRIVER" \
    "$TORCH_VERSION" "$TORCH_NCCL" "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
  [ -f "$KB/rows.jsonl" ] && awk -v s="$stamp" '{ sub(/}$/, s); print }' "$KB/rows.jsonl" >>"$W/torch_gpu_bench.jsonl"
  ROWS=$(cat "$W/torch_gpu_bench.jsonl" 2>/dev/null | wc -l)
  say "bench $model: $ROWS rows in all"
}
if want bench; then
  : >"$W/torch_bench.log"
  bench_rows resnet20 60 20 --batch 64 --warmup 5 --iters 30 --pair-iters 60
  BENCH_RC=$PHASE_RC
fi
if want job; then
  : >"$W/torch_job.log"
  run_phase job 200 90 "$W/torch_job.log" "$ROOT/scripts/torch-job.sh" --device cuda --run "$EDL_RUN" \
    --train "$KB/edl-torch-fashion-mnist" --data "$BUNDLE/fashion-mnist"
  J_RC=$PHASE_RC
  BASE_ACC=$(sed -n 's/.*test accuracy without failures: \([0-9.]*\)%.*/\1/p' "$W/torch_job.log" | tail -1)
  ACC=$(sed -n 's/.*test accuracy with a kill -9 and a join: \([0-9.]*\)%.*/\1/p' "$W/torch_job.log" | tail -1)
fi

if want bench; then  # the larger model last: what is left of the time, at most 90 s
  bench_rows resnet50 90 40 --batch 32 --warmup 3 --iters 15 --pair-iters 20
  BENCH50_RC=$PHASE_RC
fi

# --- the summary --------------------------------------------------------------------------------------
ok_or() { [ "$1" = 0 ] || [ "$1" = - ]; }
STATUS=ok
if [ $REHEARSE = 1 ]; then
  # no GPU: the kit builds (device_none.cc), the tests skip (0), the scripts skip (77), the bench and
  # the job refuse --device cuda (non-zero)
  STATUS=rehearsal-failed
  [ $BUNDLE_RC = 0 ] && ok_or "$B_RC" && ok_or "$T_RC" && { [ "$K_RC" = 77 ] || [ "$K_RC" = - ]; } &&
    { [ "$D_RC" = 77 ] || [ "$D_RC" = - ]; } && [ "$BENCH_RC" != 0 ] && [ "$J_RC" != 0 ] && [ "$BENCH50_RC" != 0 ] &&
    STATUS=rehearsal-no-gpu
else
  for rc in "$B_RC" "$T_RC" "$K_RC" "$D_RC" "$BENCH_RC" "$J_RC"; do ok_or "$rc" || STATUS=failed; done
  ok_or "$BENCH50_RC" || [ "$BENCH50_RC" = not-run ] || STATUS=failed  # the last phase may find no time left
fi
printf '{"check": "gpu-torch-check", "status": "%s", "build": "%s", "tests": "%s", "kill_join": "%s", "doubled_batch": "%s", "bench": "%s", "bench_resnet50": "%s", "bench_rows": %s, "job": "%s", "accuracy": "%s", "accuracy_no_failure": "%s", "gpu": "%s", "driver": "%s", "torch": "%s", "nccl": "%s", "commit": "%s", "time": "%s", "seconds": %d}\n' \
  "$STATUS" "$B_RC" "$T_RC" "$K_RC" "$D_RC" "$BENCH_RC" "$BENCH50_RC" "$ROWS" "$J_RC" "${ACC:--}" "${BASE_ACC:--}" "$DEVICE_NAME" "$DRIVER" \
  "$TORCH_VERSION" "$TORCH_NCCL" "$COMMIT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(( $(date +%s) - T0 ))" >>"$W/torch_check.jsonl"
echo "---- torch bench"
cat "$W/torch_bench.log" 2>/dev/null
echo "---- torch job"
tail -12 "$W/torch_job.log" 2>/dev/null
echo "---- torch summary ($(( $(date +%s) - T0 )) s)"
cat "$W/torch_env.txt" "$W/torch_check.jsonl"
[ "$STATUS" = ok ] || [ "$STATUS" = rehearsal-no-gpu ]
