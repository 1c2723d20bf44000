#include "models/common/sgd.h"

namespace edl::models {

SgdMomentum::SgdMomentum(std::vector<ParamRef> params, SgdOptions options)
    : params_(std::move(params)), opt_(options) {
  velocity_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    velocity_[i].resize(params_[i].count);
    velocity_[i].zero();
  }
}

void SgdMomentum::step() {
  const float lr = opt_.lr, mu = opt_.momentum, wd = opt_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    float* w = params_[i].data;
    const float* g = params_[i].grad;
    float* v = velocity_[i].data();
    const size_t n = params_[i].count;
#pragma omp simd
    for (size_t j = 0; j < n; ++j) {
      v[j] = mu * v[j] + g[j] + wd * w[j];
      w[j] -= lr * v[j];
    }
  }
}

}  // namespace edl::models
