// A small deterministic 2-layer MLP (tanh hidden layer, mean squared error) for optimizer tests:
// four parameter tensors in forward order (w1, b1, w2, b2); backward reports them in reverse order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace edl::test {

struct Dataset {
  int dim = 0;
  std::vector<float> x;  // n x dim
  std::vector<float> y;  // n
  size_t size() const { return y.size(); }
};

// Deterministic regression data: y = sin(sum_j a_j x_j) + small structured noise.
inline Dataset make_dataset(int n, int dim) {
  Dataset d;
  d.dim = dim;
  uint64_t s = 12345;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xffffff) / static_cast<float>(0xffffff) * 2.0f - 1.0f;
  };
  for (int i = 0; i < n; ++i) {
    float acc = 0;
    for (int j = 0; j < dim; ++j) {
      float v = next();
      d.x.push_back(v);
      acc += v * (0.3f + 0.1f * j);
    }
    d.y.push_back(std::sin(acc) + 0.05f * next());
  }
  return d;
}

struct TinyMlp {
  int dim, hidden;
  std::vector<float> w1, b1, w2, b2;      // parameters
  std::vector<float> gw1, gb1, gw2, gb2;  // gradients (overwritten by backward)

  TinyMlp(int dim_, int hidden_) : dim(dim_), hidden(hidden_) {
    w1.resize(hidden * dim);
    b1.resize(hidden);
    w2.resize(hidden);
    b2.resize(1);
    for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.3f * std::sin(0.7f * i + 0.1f);
    for (size_t i = 0; i < b1.size(); ++i) b1[i] = 0.05f * std::cos(1.3f * i);
    for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.4f * std::cos(0.9f * i + 0.2f);
    b2[0] = 0.01f;
    gw1.assign(w1.size(), 0);
    gb1.assign(b1.size(), 0);
    gw2.assign(w2.size(), 0);
    gb2.assign(1, 0);
  }

  struct Ref {
    float* data;
    float* grad;
    size_t count;
  };
  std::vector<Ref> parameters() {
    return {{w1.data(), gw1.data(), w1.size()},
            {b1.data(), gb1.data(), b1.size()},
            {w2.data(), gw2.data(), w2.size()},
            {b2.data(), gb2.data(), 1}};
  }

  // Mean-squared-error gradient over samples [begin, begin + count); calls ready(i) per parameter
  // in reverse order (b2, w2, b1, w1) as soon as each is final.
  void backward(const Dataset& d, size_t begin, size_t count, const std::function<void(size_t)>& ready) {
    std::vector<double> gw1_(w1.size(), 0), gb1_(b1.size(), 0), gw2_(w2.size(), 0);
    double gb2_ = 0;
    std::vector<double> h(hidden), dh(hidden);
    for (size_t s = begin; s < begin + count; ++s) {
      const float* x = &d.x[s * dim];
      double out = b2[0];
      for (int k = 0; k < hidden; ++k) {
        double a = b1[k];
        for (int j = 0; j < dim; ++j) a += w1[k * dim + j] * x[j];
        h[k] = std::tanh(a);
        out += w2[k] * h[k];
      }
      double dout = 2.0 * (out - d.y[s]) / static_cast<double>(count);
      gb2_ += dout;
      for (int k = 0; k < hidden; ++k) {
        gw2_[k] += dout * h[k];
        dh[k] = dout * w2[k] * (1.0 - h[k] * h[k]);
      }
      for (int k = 0; k < hidden; ++k) {
        gb1_[k] += dh[k];
        for (int j = 0; j < dim; ++j) gw1_[k * dim + j] += dh[k] * x[j];
      }
    }
    gb2[0] = static_cast<float>(gb2_);
    if (ready) ready(3);
    for (int k = 0; k < hidden; ++k) gw2[k] = static_cast<float>(gw2_[k]);
    if (ready) ready(2);
    for (int k = 0; k < hidden; ++k) gb1[k] = static_cast<float>(gb1_[k]);
    if (ready) ready(1);
    for (size_t i = 0; i < w1.size(); ++i) gw1[i] = static_cast<float>(gw1_[i]);
    if (ready) ready(0);
  }
};

}  // namespace edl::test
