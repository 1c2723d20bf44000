#!/usr/bin/env bash
# Adds torch-kit/ to a GPU bundle (scripts/gpu-bundle.sh calls it): what tests/torch/gpu_kit needs
# to build edl::torch with CUDA on the GPU machine against its own libtorch, besides the bundle's
# libedl / libedl_cuda and this checkout's sources: config.h, the static test and bench support
# libraries (built here without torch), and the header-only libraries Catch2 v2, cxxopts and
# nlohmann/json (Debian's).
#
#   scripts/gpu-torch-kit.sh BUILD_DIR BUNDLE_DIR
set -euo pipefail
BUILD=${1:?usage: gpu-torch-kit.sh BUILD_DIR BUNDLE_DIR}
BUNDLE=${2:?usage: gpu-torch-kit.sh BUILD_DIR BUNDLE_DIR}
KIT="$BUNDLE/torch-kit"
ninja -C "$BUILD" -j"${EDL_JOBS:-2}" edl_testing edl_bench_common
rm -rf "$KIT"
mkdir -p "$KIT/include/edl" "$KIT/include/catch2" "$KIT/lib"
cp "$BUILD/include/edl/config.h" "$KIT/include/edl/"
cp /usr/include/catch2/catch.hpp "$KIT/include/catch2/"
cp /usr/include/cxxopts.hpp "$KIT/include/"
cp -r /usr/include/nlohmann "$KIT/include/"
cp "$BUILD/testing/libedl_testing.a" "$BUILD/bench/libedl_bench_common.a" "$KIT/lib/"
echo "gpu-torch-kit.sh: $KIT, $(du -sh "$KIT" | cut -f1)"
