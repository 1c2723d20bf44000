#!/usr/bin/env bash
# Configures and builds EDL (Release, Ninja) into ${EDL_BUILD_DIR:-build}. Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${EDL_BUILD_DIR:-build}
JOBS=${EDL_JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
