#!/usr/bin/env bash
# The README's first command: installs dependencies, builds EDL and runs the main job under edl-run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD_DIR=${EDL_BUILD_DIR:-build}
exec scripts/main-job.sh "$BUILD_DIR"
