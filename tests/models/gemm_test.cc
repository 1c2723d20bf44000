#include "models/common/gemm.h"

#include <random>
#include <vector>

#include "models/common/gemm_small.h"
#include "models/grad_check.h"

namespace edl::models {
namespace {

// C = [C +] op(A) * op(B) in double, row-major.
std::vector<float> naive(bool ta, bool tb, int m, int n, int k, const std::vector<float>& a, int lda,
                         const std::vector<float>& b, int ldb, std::vector<float> c, int ldc, bool acc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = acc ? c[i * ldc + j] : 0.0;
      for (int p = 0; p < k; ++p) s += double(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = static_cast<float>(s);
    }
  return c;
}

TEST_CASE("gemm matches a naive product for every transpose and width", "[models][gemm]") {
  std::mt19937 rng(29);
  for (int n : {16, 32, 48, 64, 24, 7}) {
    for (int m : {1, 13, 40}) {
      for (int k : {1, 9, 300}) {
        for (int ta = 0; ta < 2; ++ta) {
          for (int tb = 0; tb < 2; ++tb) {
            for (bool acc : {false, true}) {
              const int lda = ta ? m + 3 : k + 2, ldb = tb ? k : n, ldc = n + (n % 16 == 0 ? 0 : 5);
              std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
              test::fill_uniform(a.data(), a.size(), rng);
              test::fill_uniform(b.data(), b.size(), rng);
              test::fill_uniform(c.data(), c.size(), rng);
              auto want = naive(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc);
              gemm(ta ? Trans::kYes : Trans::kNo, tb ? Trans::kYes : Trans::kNo, m, n, k, a.data(), lda, b.data(),
                   ldb, c.data(), ldc, acc);
              INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb << " acc " << acc);
              for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) REQUIRE(c[i * ldc + j] == Approx(want[i * ldc + j]).margin(1e-3));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gemm_small_n declines unsupported widths", "[models][gemm]") {
  std::vector<float> a(4), b(4), c(4);
  CHECK_FALSE(gemm_small_n(false, 2, 2, 2, a.data(), 2, b.data(), c.data(), 2, false));
  CHECK_FALSE(gemm_small_n(false, 2, 16, 0, a.data(), 2, b.data(), c.data(), 16, false));
}

}  // namespace
}  // namespace edl::models
