// Finite-difference gradient checking for the model layers.
//
// A layer's scalar test loss is L = sum(r * out) for a fixed random r, so d(L)/d(out) = r is what
// backward() receives. check_gradient() perturbs sampled entries of a float tensor by +-eps, reruns
// the forward pass (in double accumulation) and compares the central difference to the analytic
// gradient with |num - ana| <= atol + rtol * max(|num|, |ana|). Whole-network checks may allow a few
// outliers (max_bad): a +-eps step that crosses a ReLU kink somewhere downstream is not a bug, while a
// wrong backward pass fails nearly every sample.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include <catch2/catch.hpp>

#include "models/common/tensor.h"

namespace edl::models::test {

inline void fill_uniform(float* p, size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (size_t i = 0; i < n; ++i) p[i] = d(rng);
}

inline Tensor random_tensor(Shape s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s);
  fill_uniform(t.data(), t.size(), rng, lo, hi);
  return t;
}

inline double dot(const Tensor& a, const Tensor& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a.data()[i]) * r.data()[i];
  return s;
}

struct Tolerance {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
};

// Checks up to `samples` entries of values[0, count) against analytic[0, count).
inline void check_gradient(const char* what, float* values, const float* analytic, size_t count,
                           const std::function<double()>& loss, Tolerance tol = {}, size_t samples = 48,
                           int max_bad = 0) {
  std::mt19937 rng(1234);
  std::vector<size_t> idx(count);
  for (size_t i = 0; i < count; ++i) idx[i] = i;
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(std::min(samples, count));
  std::vector<float> ana(analytic, analytic + count);  // copy: loss() may overwrite gradients
  int bad = 0;
  std::ostringstream report;
  for (size_t i : idx) {
    float saved = values[i];
    values[i] = static_cast<float>(saved + tol.eps);
    double up = loss();
    values[i] = static_cast<float>(saved - tol.eps);
    double down = loss();
    values[i] = saved;
    double num = (up - down) / (2 * tol.eps);
    double a = ana[i];
    if (std::abs(num - a) > tol.atol + tol.rtol * std::max(std::abs(num), std::abs(a))) {
      if (++bad <= 5) report << " [" << i << "] numeric " << num << " analytic " << a << ";";
    }
  }
  INFO(what << ":" << report.str());
  CHECK(bad <= max_bad);
}

}  // namespace edl::models::test
