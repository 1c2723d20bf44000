#!/usr/bin/env bash
# Configures and builds EDL (Release, Ninja) into ${EDL_BUILD_DIR:-build}. Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${EDL_BUILD_DIR:-build}
JOBS=${EDL_JOBS:-$(nproc)}
LAUNCHER=()
if command -v ccache >/dev/null 2>&1 && [ "${EDL_CCACHE:-1}" != 0 ]; then
  # base_dir: hits across checkouts (worktrees, clean clones) of the same sources.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
