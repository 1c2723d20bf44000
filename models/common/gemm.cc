#include "models/common/gemm.h"

#include <Eigen/Core>

#include "models/common/gemm_small.h"

namespace edl::models {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;
using ConstRowMap = Eigen::Map<const RowMat, Eigen::Unaligned, Stride>;
using ConstColMap = Eigen::Map<const ColMat, Eigen::Unaligned, Stride>;
using RowMap = Eigen::Map<RowMat, Eigen::Unaligned, Stride>;

template <typename A, typename B>
void product(const A& a, const B& b, float* c, int m, int n, int ldc, bool accumulate) {
  RowMap cm(c, m, n, Stride(ldc));
  if (accumulate) {
    cm.noalias() += a * b;
  } else {
    cm.noalias() = a * b;
  }
}

}  // namespace

void gemm(Trans ta, Trans tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float* c, int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) RowMap(c, m, n, Stride(ldc)).setZero();
    return;
  }
  if (tb == Trans::kNo && ldb == n && gemm_small_n(ta == Trans::kYes, m, n, k, a, lda, b, c, ldc, accumulate)) return;
  // A transposed row-major matrix is the same memory read as column-major.
  if (ta == Trans::kNo && tb == Trans::kNo) {
    product(ConstRowMap(a, m, k, Stride(lda)), ConstRowMap(b, k, n, Stride(ldb)), c, m, n, ldc, accumulate);
  } else if (ta == Trans::kYes && tb == Trans::kNo) {
    product(ConstColMap(a, m, k, Stride(lda)), ConstRowMap(b, k, n, Stride(ldb)), c, m, n, ldc, accumulate);
  } else if (ta == Trans::kNo && tb == Trans::kYes) {
    product(ConstRowMap(a, m, k, Stride(lda)), ConstColMap(b, k, n, Stride(ldb)), c, m, n, ldc, accumulate);
  } else {
    product(ConstColMap(a, m, k, Stride(lda)), ConstColMap(b, k, n, Stride(ldb)), c, m, n, ldc, accumulate);
  }
}

}  // namespace edl::models
