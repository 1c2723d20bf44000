#!/usr/bin/env bash
# The edl::torch part of the GPU check (docs/torch.md, "CUDA tensors"). scripts/gpu-check.sh starts
# its build phase in the background at the start and its run phase at the end; it also runs alone.
#   build  tests/torch/gpu_kit against python3's torch (torch.utils.cmake_prefix_path; or
#          EDL_TORCH_PREFIX) and .gpu-bundle (lib/ and torch-kit/), into ${EDL_TORCH_KIT_BUILD:-/tmp/edl-torch-kit}
#   run    test_torch_gpu (EDL_REQUIRE_GPU=1), tests/torch/kill_join_test.sh --device cuda (edl-run
#          --one-gpu-test, 2 workers, kill -9 inside backward, a join, bitwise identical parameters)
#          and torch_bench --device cuda (overhead and edl rows)
#   all    both (the default)
# Writes under $OUT (default gpu-check-out/) ONE file, torch.tar.gz (the device call brings back at
# most 8 files): torch_env.txt (torch, CUDA, NCCL, ABI, which libnccl the programs load),
# torch_build.log, torch_gpu_tests.log, torch_kill_join.log, torch_bench.log, torch_gpu_bench.jsonl
# (commit it as docs/data/torch_gpu_bench.jsonl) and torch_check.jsonl (one summary row); prints
# the summary and the bench table.
#
#   [OUT=DIR] scripts/gpu-torch-check.sh [build|run|all] [--rehearse]
#     --rehearse  a machine without a GPU or a CUDA libtorch (this project's CI machines): builds the
#                 kit against the CPU libtorch found by CMake (device_none.cc: CUDA tensors refused),
#                 runs the rest (the tests skip, the bench fails on --device cuda): checks the flow
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
PHASE=all
REHEARSE=0
for a in "$@"; do
  case "$a" in
    build|run|all) PHASE=$a ;;
    --rehearse) REHEARSE=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-torch-check.sh: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done
BUNDLE="$ROOT/.gpu-bundle"
KB=${EDL_TORCH_KIT_BUILD:-/tmp/edl-torch-kit}
W="$KB/out"  # the logs, packed into $OUT/torch.tar.gz
mkdir -p "$OUT" "$W"
say() { echo "gpu-torch-check: $*" | tee -a "$W/torch_env.txt"; }
if [ -z "${LD_LIBRARY_PATH:-}" ] || [[ "$LD_LIBRARY_PATH" != *"$BUNDLE/lib"* ]]; then
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

build() {
  : > "$W/torch_env.txt"
  local prefix=${EDL_TORCH_PREFIX:-}
  if [ -z "$prefix" ]; then
    prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
    local info='import torch; c = torch.cuda.is_available(); print(torch.__version__, "cuda", torch.version.cuda, "cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI, "nccl", torch.cuda.nccl.version() if c else "-", "gpu", c)'
    say "python3 torch: $(python3 -c "$info" 2>&1 | tail -1)"
  fi
  local extra=()
  [ $REHEARSE = 1 ] && extra=(-DEDL_KIT_REHEARSE=ON)
  say "building the kit against ${prefix:-the libtorch CMake finds} into $KB"
  cmake -S "$ROOT/tests/torch/gpu_kit" -B "$KB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDL_BUNDLE_DIR="$BUNDLE" \
    ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} "${extra[@]}" >"$W/torch_build.log" 2>&1 &&
    ninja -C "$KB" -j"${EDL_JOBS:-$(nproc)}" >>"$W/torch_build.log" 2>&1
  local rc=$?
  say "build: status $rc ($(grep -c "error:" "$W/torch_build.log") compiler errors)"
  [ $rc -eq 0 ] || tail -30 "$W/torch_build.log"
  echo $rc > "$KB/build.status"
  return $rc
}

row() {  # STATUS: the summary row
  printf '{"check": "gpu-torch-check", "status": "%s", "tests": %s, "kill_join": %s, "bench": %s, "bench_rows": %s, "commit": "%s", "time": "%s"}\n' \
    "$1" "${T_RC:-null}" "${K_RC:-null}" "${B_RC:-null}" "${ROWS:-0}" "$COMMIT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    >>"$W/torch_check.jsonl"
}

run() {
  COMMIT=${COMMIT:-$(awk '/^commit /{print $2}' "$BUNDLE/MANIFEST" 2>/dev/null)}
  COMMIT=${COMMIT:-unknown}
  if [ "$(cat "$KB/build.status" 2>/dev/null)" != 0 ]; then
    say "the kit was not built (see torch_build.log): nothing to run"
    row build-failed
    return 1
  fi
  for f in "$KB/test_torch_gpu" "$KB/torch_bench"; do
    say "$(basename "$f") loads: $(ldd "$f" | awk '/libnccl|libtorch_cuda|libedl|libc10_cuda/{printf "%s ", $3}')"
  done
  [ $REHEARSE = 1 ] || export EDL_REQUIRE_GPU=1
  timeout -k 5 60 "$KB/test_torch_gpu" --durations yes >"$W/torch_gpu_tests.log" 2>&1
  T_RC=$?
  say "torch gpu tests: status $T_RC: $(grep -E "^test cases:|^All tests passed" "$W/torch_gpu_tests.log" | tail -1)"
  timeout -k 5 90 "$ROOT/tests/torch/kill_join_test.sh" "$BUNDLE/bin/edl-run" "$KB/edl_torch_elastic_worker" --device cuda \
    >"$W/torch_kill_join.log" 2>&1
  K_RC=$?
  say "kill -9 + join on CUDA: status $K_RC: $(tail -1 "$W/torch_kill_join.log")"
  rm -f "$W/torch_gpu_bench.jsonl"
  timeout -k 5 80 "$KB/torch_bench" --device cuda --modes overhead,edl --batch 64 --warmup 5 --iters 30 --pair-iters 60 \
    --commit "$COMMIT" --json "$W/torch_gpu_bench.jsonl" >"$W/torch_bench.log" 2>&1
  B_RC=$?
  ROWS=$(cat "$W/torch_gpu_bench.jsonl" 2>/dev/null | wc -l)
  say "torch_bench --device cuda: status $B_RC, $ROWS rows"
  local status=ok
  if [ $REHEARSE = 1 ]; then
    status=rehearsal-failed
    [ $T_RC -eq 0 ] && [ $K_RC -eq 77 ] && [ $B_RC -ne 0 ] && status=rehearsal-no-gpu
  elif [ $T_RC -ne 0 ] || [ $K_RC -ne 0 ] || [ $B_RC -ne 0 ]; then
    status=failed
  fi
  row $status
  cat "$W/torch_bench.log"
  cat "$W/torch_gpu_bench.jsonl" 2>/dev/null
  [ $status = ok ] || [ $status = rehearsal-no-gpu ]
}

RC=0
case $PHASE in
  build) build; RC=$? ;;
  run) run; RC=$? ;;
  all) build && run; RC=$? ;;
esac
if [ $PHASE != build ]; then
  tar czf "$OUT/torch.tar.gz" -C "$W" . 2>/dev/null
  echo "---- torch summary"
  cat "$W/torch_env.txt"
  cat "$W/torch_check.jsonl" 2>/dev/null
fi
exit $RC
