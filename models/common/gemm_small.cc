#include "models/common/gemm_small.h"

#include <algorithm>

#include "models/common/simd.h"

namespace edl::models {
namespace {

using simd::load;
using simd::store;
using simd::v16;

// K is processed in blocks so the B panel (kKBlock x N floats) stays in L1.
constexpr int kKBlock = 128;

// Rows [0, R) of C for one K block. A(r, kk) is a[r * lda + kk], or a[kk * lda + r] when kTrans.
template <int N, int R, bool kTrans>
inline void kernel(const float* a, int lda, const float* b, float* c, int ldc, int k, bool load_c) {
  constexpr int V = N / 16;
  v16 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < V; ++q) acc[r][q] = load_c ? load(c + r * ldc + 16 * q) : v16{};
  for (int kk = 0; kk < k; ++kk) {
    v16 bv[V];
    for (int q = 0; q < V; ++q) bv[q] = load(b + kk * N + 16 * q);
    for (int r = 0; r < R; ++r) {
      float av = kTrans ? a[static_cast<long>(kk) * lda + r] : a[static_cast<long>(r) * lda + kk];
      for (int q = 0; q < V; ++q) acc[r][q] += av * bv[q];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < V; ++q) store(c + r * ldc + 16 * q, acc[r][q]);
}

template <int N, int R, bool kTrans>
void run(int m, int k, const float* a, int lda, const float* b, float* c, int ldc, bool accumulate) {
  for (int k0 = 0; k0 < k; k0 += kKBlock) {
    const int kb = std::min(kKBlock, k - k0);
    const bool load_c = accumulate || k0 > 0;
    const float* bk = b + static_cast<long>(k0) * N;
    auto a_at = [&](int row) {
      return kTrans ? a + static_cast<long>(k0) * lda + row : a + static_cast<long>(row) * lda + k0;
    };
    int r = 0;
    for (; r + R <= m; r += R) kernel<N, R, kTrans>(a_at(r), lda, bk, c + static_cast<long>(r) * ldc, ldc, kb, load_c);
    for (; r < m; ++r) kernel<N, 1, kTrans>(a_at(r), lda, bk, c + static_cast<long>(r) * ldc, ldc, kb, load_c);
  }
}

template <bool kTrans>
bool dispatch(int m, int n, int k, const float* a, int lda, const float* b, float* c, int ldc, bool accumulate) {
  switch (n) {
    case 16:
      run<16, 14, kTrans>(m, k, a, lda, b, c, ldc, accumulate);
      return true;
    case 32:
      run<32, 12, kTrans>(m, k, a, lda, b, c, ldc, accumulate);
      return true;
    case 48:
      run<48, 8, kTrans>(m, k, a, lda, b, c, ldc, accumulate);
      return true;
    case 64:
      run<64, 6, kTrans>(m, k, a, lda, b, c, ldc, accumulate);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool gemm_small_n(bool trans_a, int m, int n, int k, const float* a, int lda, const float* b, float* c, int ldc,
                  bool accumulate) {
  if (k <= 0) return false;
  return trans_a ? dispatch<true>(m, n, k, a, lda, b, c, ldc, accumulate)
                 : dispatch<false>(m, n, k, a, lda, b, c, ldc, accumulate);
}

}  // namespace edl::models
