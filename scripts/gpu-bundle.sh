#!/usr/bin/env bash
# Builds .gpu-bundle/: what scripts/gpu-check.sh runs on a GPU machine that lacks this project's
# build dependencies (the device machine of docs/gpu.md, "Running the GPU check"): the `gpu` test
# binary, gpu_allreduce_bench, edl-run, the GPU elastic worker, libedl, libedl_cuda and every shared
# library they need (per ldd) beyond the base system (glibc, libstdc++, libgcc_s) — except libnccl
# (the GPU machine's own is used) and the CUDA driver. Compiled for sm_90 machine code + compute_90
# PTX (CMAKE_CUDA_ARCHITECTURES=90) and without -march=native: the bundle runs on another CPU. Also
# torch-kit/ (scripts/gpu-torch-kit.sh): what builds edl::torch with CUDA there (docs/torch.md), and
# fashion-mnist/ (this machine's dataset-fashion-mnist files) for scripts/torch-job.sh there.
#
#   scripts/gpu-bundle.sh [--out DIR] [--build DIR] [--arch LIST]
#
# Defaults: --out .gpu-bundle (ignored by git; the device call carries it), --build build-gpu-bundle,
# --arch 90. Writes DIR/MANIFEST (commit, date, architectures, every file with its size and
# sha256) and prints the bundle's size. EDL_JOBS (default 2) compile jobs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/.gpu-bundle"
BUILD="$ROOT/build-gpu-bundle"
ARCH=90
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd "$ROOT/.." && pwd)}
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDL_NATIVE=OFF -DEDL_WITH_CUDA=ON \
  -DEDL_WITH_TORCH=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${LAUNCHER[@]}" >/dev/null
ninja -C "$BUILD" -j"${EDL_JOBS:-2}" test_gpu gpu_allreduce_bench edl-run gpu_elastic_worker

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
BINS=("$BUILD/tests/cuda/test_gpu" "$BUILD/bench/gpu_allreduce_bench" "$(find "$BUILD/src" -name edl-run -type f | head -1)"
      "$BUILD/tests/cuda/gpu_elastic_worker")
for b in "${BINS[@]}"; do
  [ -x "$b" ] || { echo "gpu-bundle.sh: $b was not built" >&2; exit 1; }
  cp "$b" "$OUT/bin/"
done
# Libraries: everything ldd resolves except the base system, NCCL and the driver.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libnccl\.so|libcuda\.so)'
skip_path='/(ld-linux[^/]*|libc\.so[^/]*|libm\.so[^/]*|libdl\.so[^/]*|libpthread\.so[^/]*|librt\.so[^/]*|libstdc\+\+\.so[^/]*|libgcc_s\.so[^/]*|libnccl\.so[^/]*|libcuda\.so[^/]*)$'
for f in "$OUT"/bin/* "$BUILD/libedl.so" "$BUILD/src/cuda/libedl_cuda.so"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$OUT/lib/$name"
done
cp "$ROOT/scripts/gpu-check.sh" "$OUT/gpu-check.sh"  # the bundle runs itself, whatever checkout travels with it
{
  echo "commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
  echo "cuda_architectures $ARCH"
  echo "nvcc $(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)"
  (cd "$OUT" && find bin lib gpu-check.sh -type f | sort | while read -r f; do echo "file $f $(stat -c %s "$f") $(sha256sum "$f" | cut -c1-16)"; done)
} > "$OUT/MANIFEST"
# Every binary must start with only the bundle's libraries (and a libnccl) on the path.
missing=$(for f in "$OUT"/bin/*; do LD_LIBRARY_PATH="$OUT/lib" ldd "$f" | grep "not found" | grep -v libnccl || true; done)
if [ -n "$missing" ]; then
  echo "gpu-bundle.sh: the bundle misses libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
# ... and the loader takes every library beyond the base system from the bundle (LD_DEBUG=libs).
NCCL_DIR=$(dirname "$(ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')" 2>/dev/null || true)
foreign=$(LD_LIBRARY_PATH="$OUT/lib${NCCL_DIR:+:$NCCL_DIR}" LD_DEBUG=libs "$OUT/bin/test_gpu" --list-test-names-only 2>&1 |
  awk '/calling init:/{print $NF}' | sort -u | grep -v "^$OUT/lib/" | grep -Ev "$skip_path" || true)
if [ -n "$foreign" ]; then
  echo "gpu-bundle.sh: test_gpu loads libraries from outside the bundle:" >&2
  echo "$foreign" >&2
  exit 1
fi
echo "gpu-bundle.sh: $OUT, $(du -sb "$OUT" | cut -f1) bytes ($(du -sh "$OUT" | cut -f1)); the checkout: $(cd "$ROOT" && git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) bytes"
# torch-kit/: what the GPU machine needs to build edl::torch with CUDA against its own libtorch; and
# fashion-mnist/: the dataset of the torch job (the GPU machine has none; 30 MB of the 64 MiB carried).
"$ROOT/scripts/gpu-torch-kit.sh" "$BUILD" "$OUT"
FMNIST=${EDL_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$OUT/fashion-mnist"
cp "$FMNIST"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$OUT/fashion-mnist/"
echo "gpu-bundle.sh: with torch-kit/ and fashion-mnist/: $(du -sb "$OUT" | cut -f1) bytes; the device call carries it and the checkout: keep both under 64 MiB (scripts/gpu-torch-check.sh --rehearse checks)"
