#!/usr/bin/env bash
# The README's first command: installs dependencies, builds EDL and runs the main job under edl-run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD_DIR=${EDL_BUILD_DIR:-build}
NP=${EDL_MAIN_NP:-3}
echo "== main job: edl-run -np $NP edl-hello (collectives across $NP processes, verified) =="
exec "$BUILD_DIR/src/elastic/edl-run" -np "$NP" "$BUILD_DIR/examples/edl-hello"
