# Sourced by the edl::torch process tests (kill_join_test.sh, doubled_batch_test.sh):
#   process_test_args "$@"    their arguments, EDL_RUN WORKER [--device cpu|cuda]: sets RUN, WORKER,
#                             DEVICE, then gpu_probe
#   gpu_probe WORKER DEVICE   sets RUN_ARGS (edl-run's arguments for DEVICE: --one-gpu-test on cuda,
#                             one NCCL_HOSTID per slot) or, without a usable GPU, skips with one line
#                             (exit 77) — or fails with EDL_REQUIRE_GPU=1.
gpu_probe() {
  RUN_ARGS=()
  [ "$2" = cuda ] || return 0
  local why probe
  set +e
  why=$("$1" --device cuda --probe 1 2>&1)
  probe=$?
  set -e
  if [ $probe -eq 3 ]; then
    if [ -n "${EDL_REQUIRE_GPU:-}" ] && [ "${EDL_REQUIRE_GPU}" != 0 ]; then
      echo "$(basename "$0") FAILED: EDL_REQUIRE_GPU=1 and $why" >&2
      exit 1
    fi
    echo "GPU test skipped: $why (EDL_REQUIRE_GPU=1 makes this a failure)"
    exit 77
  fi
  [ $probe -eq 0 ] || { echo "$(basename "$0") FAILED: the worker's CUDA probe exited $probe: $why" >&2; exit 1; }
  RUN_ARGS=(--one-gpu-test)
}

process_test_args() {
  RUN=$1
  WORKER=$2
  DEVICE=cpu
  [ "${3:-}" = --device ] && DEVICE=${4:?--device needs cpu or cuda}
  gpu_probe "$WORKER" "$DEVICE"
}
