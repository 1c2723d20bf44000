#!/usr/bin/env bash
# The README's test command: installs dependencies, builds everything and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD_DIR=${EDL_BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j"${EDL_TEST_JOBS:-2}" --timeout 600
