// Register-blocked GEMM for narrow right-hand sides: C[m, N] (+)= op(A)[m, k] * B[k, N] with B
// row-major and contiguous (ldb == N) and N in {16, 32, 48, 64} — the channel counts of ResNet20's
// convolutions and of the Winograd GEMMs. Each step broadcasts one element of A against N/16 vectors
// of B held in registers' reach, so nothing is packed (Eigen's packing dominated these shapes).
// Written with GCC/Clang vector extensions: AVX-512 with -march=native, narrower vectors elsewhere.
//
// Thread-safety: pure function on caller-owned memory.
#pragma once

namespace edl::models {

// Returns false (and does nothing) when n is not one of the supported widths.
bool gemm_small_n(bool trans_a, int m, int n, int k, const float* a, int lda, const float* b, float* c, int ldc,
                  bool accumulate);

}  // namespace edl::models
