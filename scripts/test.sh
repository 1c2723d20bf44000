#!/usr/bin/env bash
# The README's test command: installs dependencies, builds everything and runs every test.
# After install-deps.sh every test dependency (redis-server, etcd, network namespaces, the
# Fashion-MNIST package) is present, so EDL_REQUIRE_DEPS=1 makes a missing one a failure instead of
# a skip (testing/deps.h); only a developer's ad-hoc ctest run may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export EDL_REQUIRE_DEPS=1
scripts/build.sh
BUILD_DIR=${EDL_BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j"${EDL_TEST_JOBS:-2}" --timeout 600
