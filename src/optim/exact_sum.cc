// ExactSum (exact_sum.h): fixed-point accumulation of micro-batch gradients.
#include "optim/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace edl::optim::detail {
namespace {

// The grid of a tensor: a value x goes to llrint(x * 2^shift); shift = kExactBits - E, M < 2^E.
// 0 for a zero maximum (every contribution is 0), and a non-finite maximum has no grid.
int grid_shift(double max_abs) {
  if (max_abs == 0.0) return 0;
  int e = 0;
  std::frexp(max_abs, &e);
  return kExactBits - e;
}

}  // namespace

void ExactSum::set_layout(std::vector<std::pair<size_t, size_t>> tensors, size_t elements) {
  tensors_ = std::move(tensors);
  elements_ = elements;
  grads_.clear();
  counts_.clear();
  clear();
}

void ExactSum::clear() {
  count_ = 0;
  samples_ = 0;
}

float* ExactSum::add(uint64_t samples) {
  if (count_ == grads_.size()) {
    grads_.emplace_back(elements_, 0.0f);
    counts_.push_back(0);
  }
  counts_[count_] = samples;
  samples_ += samples;
  return grads_[count_++].data();
}

void ExactSum::local_max(double* out) const {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const auto [offset, n] = tensors_[t];
    double m = 0.0;
    for (size_t j = 0; j < count_ && std::isfinite(m); ++j) {
      float top = 0.0f;
      bool finite = true;
      const float* g = grads_[j].data() + offset;
      for (size_t i = 0; i < n; ++i) {
        const float a = std::fabs(g[i]);
        finite &= a <= std::numeric_limits<float>::max();  // false for NaN and infinity
        top = a > top ? a : top;
      }
      m = finite ? std::max(m, static_cast<double>(top) * static_cast<double>(counts_[j]))
                 : std::numeric_limits<double>::infinity();
    }
    out[t] = m;
  }
}

void ExactSum::quantize(const double* global_max, int64_t* acc) const {
  for (size_t i = 0; i < elements_; ++i) acc[i] = 0;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!std::isfinite(global_max[t]) || global_max[t] == 0.0) continue;  // NaN mean / all zero
    const auto [offset, n] = tensors_[t];
    const double scale = std::ldexp(1.0, grid_shift(global_max[t]));
    int64_t* a = acc + offset;
    for (size_t j = 0; j < count_; ++j) {
      const double w = static_cast<double>(counts_[j]) * scale;  // exact: an integer times a power of two
      const float* g = grads_[j].data() + offset;
      for (size_t i = 0; i < n; ++i) a[i] += std::llrint(static_cast<double>(g[i]) * w);
    }
  }
}

void ExactSum::mean(const int64_t* sum, const double* global_max, uint64_t total_samples, float* out) const {
  const double inv_n = 1.0 / static_cast<double>(total_samples);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const auto [offset, n] = tensors_[t];
    if (!std::isfinite(global_max[t])) {
      for (size_t i = 0; i < n; ++i) out[offset + i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const double unit = std::ldexp(1.0, -grid_shift(global_max[t]));
    for (size_t i = 0; i < n; ++i)
      out[offset + i] = static_cast<float>(static_cast<double>(sum[offset + i]) * unit * inv_n);
  }
}

}  // namespace edl::optim::detail
