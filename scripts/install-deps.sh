#!/usr/bin/env bash
# Installs EDL's build and test dependencies from Debian's archive. Idempotent and quick when
# everything is already there (dpkg-query first; apt-get only for what is missing).
# Usage: scripts/install-deps.sh            (run as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache                # scripts/build.sh compiles through it when present (rebuilds, several worktrees)
  libgloo-dev libeigen3-dev libcxxopts-dev catch2 zlib1g-dev libhiredis-dev nlohmann-json3-dev
  libssl-dev            # libcrypto: SHA-256 / HMAC-SHA256 / RAND_bytes (src/common/crypto.cc)
  redis-server          # real external store for the Redis backend tests
  etcd-server etcd-client  # real 3-member etcd clusters for the etcd backend tests (etcdctl: member/health checks)
  libcpp-httplib-dev libssl-dev  # etcd backend: HTTP/JSON gateway client, base64 (libcrypto)
  dataset-fashion-mnist # /usr/share/datasets/fashion-mnist (main job, convergence bench)
  gnuplot-nox           # plots in docs/benchmarks.md
  iproute2              # network namespaces for emulated-link benches
  libopenmpi-dev openmpi-bin  # -DEDL_BENCH_WITH_MPI=ON: Open MPI baseline rows of allreduce_bench
  clang libclang-rt-14-dev  # -DEDL_BUILD_FUZZ=ON: libFuzzer + ASan/UBSan runtimes (docs/fuzzing.md)
  libtorch-dev          # edl::torch (src/torch, include/edl/torch.h, examples/torch)
  prometheus            # observability test: a real Prometheus server scrapes edl-run --metrics-port
  python3               # the structure and deps checks (scripts/check-structure.py, scripts/check-deps.py)
  git                   # scripts/run-benchmarks.sh: the commit each bench row was measured at
  slurmctld slurmd slurm-client munge  # tests/slurm: a real Slurm cluster on emulated nodes (testing/slurm_cluster.h)
  python3-kubernetes yamllint  # tests/kubernetes: offline checks of examples/kubernetes (scripts/check-k8s-manifests.py)
)
# Every external program that a test, bench, testing/ helper or script runs is listed with its package
# in testing/deps_programs.txt; scripts/check-deps.py (ctest label deps) fails when one of those
# packages is missing here.

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
