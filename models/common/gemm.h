// Row-major float32 GEMM on Eigen: C (m x n) = [C +] op(A) (m x k) * op(B) (k x n).
// Leading dimensions are row strides in elements. Runs on the calling thread only (the models
// parallelise over images, never inside a GEMM; edl_models builds with EIGEN_DONT_PARALLELIZE).
#pragma once

namespace edl::models {

enum class Trans { kNo, kYes };

void gemm(Trans ta, Trans tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float* c, int ldc, bool accumulate);

}  // namespace edl::models
