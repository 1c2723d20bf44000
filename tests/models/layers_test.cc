#include <cmath>
#include <random>

#include "edl/error.h"
#include "models/common/activation.h"
#include "models/common/batch_norm.h"
#include "models/common/linear.h"
#include "models/common/pooling.h"
#include "models/common/residual.h"
#include "models/common/softmax_cross_entropy.h"
#include "models/grad_check.h"

namespace edl::models {
namespace {

using test::check_gradient;
using test::dot;
using test::random_tensor;

TEST_CASE("BatchNorm2d train mode: statistics, running stats and finite differences", "[models][batchnorm]") {
  for (ActivationKind act : {ActivationKind::kNone, ActivationKind::kReLU, ActivationKind::kReLU6}) {
    for (int threads : {1, 2}) {
      DYNAMIC_SECTION("activation " << static_cast<int>(act) << " threads " << threads) {
        std::mt19937 rng(5);
        const int c = 4;
        BatchNorm2d bn("bn", {c, 1e-5f, 0.1f, act});
        test::fill_uniform(bn.weight().value.data(), c, rng, 0.5f, 4.0f);
        test::fill_uniform(bn.bias().value.data(), c, rng, -1.0f, 3.0f);
        Tensor x = random_tensor({3, 3, 4, c}, rng, -2.0f, 3.0f);
        const Tensor& y = bn.forward(x, true, threads);
        // Per-channel batch statistics and the running-stat update.
        const size_t m = 3 * 3 * 4;
        for (int ch = 0; ch < c; ++ch) {
          double s = 0, s2 = 0;
          for (size_t p = 0; p < m; ++p) s += x.data()[p * c + ch];
          double mean = s / m;
          for (size_t p = 0; p < m; ++p) s2 += (x.data()[p * c + ch] - mean) * (x.data()[p * c + ch] - mean);
          double var = s2 / m;
          CHECK(bn.running_mean().value.data()[ch] == Approx(0.1 * mean).margin(1e-5));
          CHECK(bn.running_var().value.data()[ch] == Approx(0.9 + 0.1 * s2 / (m - 1)).margin(1e-5));
          for (size_t p = 0; p < m; ++p) {
            double v = bn.weight().value.data()[ch] * (x.data()[p * c + ch] - mean) / std::sqrt(var + 1e-5) +
                       bn.bias().value.data()[ch];
            if (act == ActivationKind::kReLU) v = std::max(v, 0.0);
            if (act == ActivationKind::kReLU6) v = std::min(std::max(v, 0.0), 6.0);
            REQUIRE(y.data()[p * c + ch] == Approx(v).margin(1e-4));
          }
        }
        Tensor r = random_tensor(y.shape(), rng), dx;
        std::vector<size_t> order;
        bn.backward(r, &dx, threads, [&](size_t i) { order.push_back(i); });
        CHECK(order.size() == 2);
        auto loss = [&] { return dot(bn.forward(x, true, threads), r); };
        test::Tolerance tol{2e-3, 3e-3, 3e-2};
        check_gradient("bn gamma", bn.weight().value.data(), bn.weight().grad.data(), c, loss, tol);
        check_gradient("bn beta", bn.bias().value.data(), bn.bias().grad.data(), c, loss, tol);
        check_gradient("bn input", x.data(), dx.data(), x.size(), loss, tol);
      }
    }
  }
}

TEST_CASE("BatchNorm2d eval mode uses the running statistics", "[models][batchnorm]") {
  std::mt19937 rng(6);
  BatchNorm2d bn("bn", {3, 1e-5f, 0.1f, ActivationKind::kNone});
  float* rm = bn.running_mean().value.data();
  float* rv = bn.running_var().value.data();
  rm[0] = 0.5f, rm[1] = -1.0f, rm[2] = 2.0f;
  rv[0] = 4.0f, rv[1] = 0.25f, rv[2] = 1.0f;
  Tensor x = random_tensor({2, 2, 2, 3}, rng);
  const Tensor& y = bn.forward(x, false, 1);
  for (size_t p = 0; p < 8; ++p)
    for (int ch = 0; ch < 3; ++ch)
      CHECK(y.data()[p * 3 + ch] == Approx((x.data()[p * 3 + ch] - rm[ch]) / std::sqrt(rv[ch] + 1e-5)).margin(1e-5));
  CHECK(rm[0] == 0.5f);  // eval does not touch the running statistics
  Tensor r = random_tensor(y.shape(), rng), dx;
  bn.backward(r, &dx, 1, {});
  auto loss = [&] { return dot(bn.forward(x, false, 1), r); };
  check_gradient("bn eval input", x.data(), dx.data(), x.size(), loss);
  check_gradient("bn eval gamma", bn.weight().value.data(), bn.weight().grad.data(), 3, loss);
}

TEST_CASE("ReLU and ReLU6 layers", "[models][activation]") {
  for (ActivationKind act : {ActivationKind::kReLU, ActivationKind::kReLU6}) {
    std::mt19937 rng(9);
    Activation layer(act);
    Tensor x = random_tensor({2, 3, 3, 5}, rng, -3.0f, 9.0f);
    // Keep inputs away from the kinks so +-eps does not cross them.
    for (size_t i = 0; i < x.size(); ++i) {
      float& v = x.data()[i];
      if (std::abs(v) < 0.1f) v += 0.3f;
      if (std::abs(v - 6.0f) < 0.1f) v += 0.3f;
    }
    const Tensor& y = layer.forward(x, 2);
    for (size_t i = 0; i < x.size(); ++i) {
      float v = std::max(x.data()[i], 0.0f);
      if (act == ActivationKind::kReLU6) v = std::min(v, 6.0f);
      REQUIRE(y.data()[i] == v);
    }
    Tensor r = random_tensor(y.shape(), rng), dx;
    layer.backward(r, &dx, 2);
    auto loss = [&] { return dot(layer.forward(x, 1), r); };
    check_gradient(act == ActivationKind::kReLU ? "relu" : "relu6", x.data(), dx.data(), x.size(), loss);
  }
}

TEST_CASE("ResidualAdd identity and option-A shortcut", "[models][residual]") {
  struct Case {
    Shape main, shortcut;
    ResidualOptions opt;
  };
  const Case cases[] = {
      {{2, 4, 4, 3}, {2, 4, 4, 3}, {ActivationKind::kNone, 1, 0}},
      {{2, 4, 4, 3}, {2, 4, 4, 3}, {ActivationKind::kReLU, 1, 0}},
      {{2, 3, 4, 8}, {2, 5, 7, 4}, {ActivationKind::kReLU, 2, 2}},
  };
  for (const Case& cs : cases) {
    std::mt19937 rng(13);
    ResidualAdd add(cs.opt);
    Tensor a = random_tensor(cs.main, rng), x = random_tensor(cs.shortcut, rng);
    const Tensor& y = add.forward(a, x, 2);
    // Forward against the definition.
    const int pad = cs.opt.pad_channels, s = cs.opt.stride;
    for (int n = 0; n < cs.main.n; ++n)
      for (int h = 0; h < cs.main.h; ++h)
        for (int w = 0; w < cs.main.w; ++w)
          for (int c = 0; c < cs.main.c; ++c) {
            size_t o = ((static_cast<size_t>(n) * cs.main.h + h) * cs.main.w + w) * cs.main.c + c;
            float sc = 0.0f;
            int src = c - pad;
            if (src >= 0 && src < cs.shortcut.c)
              sc = x.image(n)[((h * s) * cs.shortcut.w + w * s) * cs.shortcut.c + src];
            float v = a.data()[o] + sc;
            if (cs.opt.activation == ActivationKind::kReLU) v = std::max(v, 0.0f);
            REQUIRE(y.data()[o] == Approx(v));
          }
    Tensor r = random_tensor(y.shape(), rng), dmain, dx(cs.shortcut);
    add.backward(r, &dmain, 2);
    dx.zero();
    add.add_shortcut_grad(dmain, &dx, 2);
    auto loss = [&] { return dot(add.forward(a, x, 1), r); };
    test::Tolerance tol{1e-3, 2e-3, 1e-2};
    check_gradient("residual main", a.data(), dmain.data(), a.size(), loss, tol);
    check_gradient("residual shortcut", x.data(), dx.data(), x.size(), loss, tol);
  }
}

TEST_CASE("GlobalAvgPool finite differences", "[models][pooling]") {
  std::mt19937 rng(17);
  GlobalAvgPool pool;
  Tensor x = random_tensor({3, 3, 5, 4}, rng);
  const Tensor& y = pool.forward(x, 2);
  REQUIRE(y.shape() == Shape{3, 1, 1, 4});
  double s = 0;
  for (int p = 0; p < 15; ++p) s += x.image(1)[p * 4 + 2];
  CHECK(y.image(1)[2] == Approx(s / 15));
  Tensor r = random_tensor(y.shape(), rng), dx;
  pool.backward(r, &dx, 2);
  auto loss = [&] { return dot(pool.forward(x, 1), r); };
  check_gradient("gap input", x.data(), dx.data(), x.size(), loss);
}

TEST_CASE("Linear finite differences", "[models][linear]") {
  std::mt19937 rng(19);
  Linear fc("fc", 12, 5);
  test::fill_uniform(fc.weight().value.data(), fc.weight().count(), rng);
  test::fill_uniform(fc.bias().value.data(), fc.bias().count(), rng);
  Tensor x = random_tensor({4, 1, 2, 6}, rng);
  const Tensor& y = fc.forward(x, 1);
  double v = fc.bias().value.data()[3];
  for (int i = 0; i < 12; ++i) v += x.image(2)[i] * fc.weight().value.data()[i * 5 + 3];
  CHECK(y.image(2)[3] == Approx(v).margin(1e-5));
  Tensor r = random_tensor(y.shape(), rng), dx;
  std::vector<size_t> order;
  fc.backward(r, &dx, 1, [&](size_t i) { order.push_back(i); });
  CHECK(order.size() == 2);
  auto loss = [&] { return dot(fc.forward(x, 1), r); };
  test::Tolerance tol{0.05, 2e-3, 1e-3};
  check_gradient("linear weight", fc.weight().value.data(), fc.weight().grad.data(), fc.weight().count(), loss, tol);
  check_gradient("linear bias", fc.bias().value.data(), fc.bias().grad.data(), fc.bias().count(), loss, tol);
  check_gradient("linear input", x.data(), dx.data(), x.size(), loss, tol);
}

TEST_CASE("SoftmaxCrossEntropy loss, accuracy and finite differences", "[models][loss]") {
  std::mt19937 rng(23);
  SoftmaxCrossEntropy ce;
  Tensor z = random_tensor({4, 1, 1, 5}, rng, -3.0f, 3.0f);
  std::vector<int32_t> labels = {0, 4, 2, 2};
  LossResult res = ce.forward(z, labels.data());
  double total = 0;
  int correct = 0;
  for (int n = 0; n < 4; ++n) {
    const float* v = z.image(n);
    double mx = *std::max_element(v, v + 5), s = 0;
    for (int i = 0; i < 5; ++i) s += std::exp(v[i] - mx);
    total += std::log(s) + mx - v[labels[n]];
    if (argmax(v, 5) == labels[n]) ++correct;
  }
  CHECK(res.loss == Approx(total / 4).epsilon(1e-5));
  CHECK(res.correct == correct);
  Tensor dz;
  ce.backward(&dz);
  auto loss = [&] { return static_cast<double>(ce.forward(z, labels.data()).loss); };
  check_gradient("softmax ce logits", z.data(), dz.data(), z.size(), loss, {1e-2, 1e-3, 2e-2});
  labels[1] = 5;
  CHECK_THROWS_AS(ce.forward(z, labels.data()), InvalidArgument);
}

}  // namespace
}  // namespace edl::models
