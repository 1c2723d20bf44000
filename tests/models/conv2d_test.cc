#include "models/common/conv2d.h"

#include <random>

#include "edl/error.h"
#include "models/common/depthwise_conv2d.h"
#include "models/common/winograd.h"
#include "models/grad_check.h"

namespace edl::models {
namespace {

using test::check_gradient;
using test::dot;
using test::random_tensor;

// Direct reference convolution (NHWC, HWIO).
Tensor reference_conv(const Tensor& in, const float* w, int co, int k, int s, int p) {
  const Shape is = in.shape();
  int oh = (is.h + 2 * p - k) / s + 1, ow = (is.w + 2 * p - k) / s + 1;
  Tensor out({is.n, oh, ow, co});
  for (int n = 0; n < is.n; ++n)
    for (int y = 0; y < oh; ++y)
      for (int x = 0; x < ow; ++x)
        for (int o = 0; o < co; ++o) {
          double acc = 0;
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) {
              int iy = y * s - p + ky, ix = x * s - p + kx;
              if (iy < 0 || iy >= is.h || ix < 0 || ix >= is.w) continue;
              for (int c = 0; c < is.c; ++c)
                acc += in.image(n)[(iy * is.w + ix) * is.c + c] * w[((ky * k + kx) * is.c + c) * co + o];
            }
          out.image(n)[(y * ow + x) * co + o] = static_cast<float>(acc);
        }
  return out;
}

struct ConvCase {
  const char* name;
  Shape in;
  Conv2dOptions opt;
};

void check_conv(const ConvCase& cc, int threads) {
  std::mt19937 rng(7);
  Conv2d conv("c", cc.opt);
  test::fill_uniform(conv.weight().value.data(), conv.weight().count(), rng);
  Tensor x = random_tensor(cc.in, rng);
  Tensor ref = reference_conv(x, conv.weight().value.data(), cc.opt.out_channels, cc.opt.kernel, cc.opt.stride,
                              cc.opt.padding);
  const Tensor& y = conv.forward(x, threads);
  REQUIRE(y.shape() == ref.shape());
  for (size_t i = 0; i < y.size(); ++i) REQUIRE(y.data()[i] == Approx(ref.data()[i]).margin(1e-4));

  Tensor r = random_tensor(y.shape(), rng);
  Tensor dx;
  size_t reported = 0;
  conv.backward(r, &dx, threads, [&](size_t) { ++reported; });
  CHECK(reported == 1);
  auto loss = [&] { return dot(conv.forward(x, threads), r); };
  // The convolution is linear, so a large step is exact up to rounding.
  test::Tolerance tol{0.05, 2e-3, 1e-3};
  check_gradient((std::string(cc.name) + " weight").c_str(), conv.weight().value.data(), conv.weight().grad.data(),
                 conv.weight().count(), loss, tol);
  check_gradient((std::string(cc.name) + " input").c_str(), x.data(), dx.data(), x.size(), loss, tol);
}

TEST_CASE("Conv2d matches a direct convolution and finite differences", "[models][conv2d]") {
  const ConvCase cases[] = {
      {"3x3 s1 winograd", {2, 6, 6, 3}, {3, 5, 3, 1, 1, true}},
      {"3x3 s1 winograd odd", {2, 5, 7, 4}, {4, 3, 3, 1, 1, true}},
      {"3x3 s1 im2col", {2, 6, 6, 3}, {3, 5, 3, 1, 1, false}},
      {"3x3 s2 p1", {3, 7, 6, 4}, {4, 6, 3, 2, 1, true}},
      {"1x1 pointwise", {3, 4, 5, 6}, {6, 7, 1, 1, 0, true}},
      {"5x5 s1 p2", {1, 6, 6, 2}, {2, 3, 5, 1, 2, true}},
      {"1x1 s2 p0", {2, 5, 5, 3}, {3, 4, 1, 2, 0, true}},
  };
  for (int threads : {1, 2}) {
    for (const ConvCase& cc : cases) {
      DYNAMIC_SECTION(cc.name << " threads " << threads) { check_conv(cc, threads); }
    }
  }
}

TEST_CASE("Conv2d Winograd equals im2col on ResNet-sized shapes", "[models][conv2d][winograd]") {
  std::mt19937 rng(3);
  for (Shape s : {Shape{3, 32, 32, 16}, Shape{2, 8, 8, 64}, Shape{2, 7, 7, 32}}) {
    Conv2d wino("w", {s.c, s.c, 3, 1, 1, true});
    Conv2d plain("p", {s.c, s.c, 3, 1, 1, false});
    test::fill_uniform(wino.weight().value.data(), wino.weight().count(), rng, -0.2f, 0.2f);
    std::copy(wino.weight().value.data(), wino.weight().value.data() + wino.weight().count(),
              plain.weight().value.data());
    Tensor x = random_tensor(s, rng);
    const Tensor& a = wino.forward(x, 2);
    const Tensor& b = plain.forward(x, 1);
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a.data()[i] == Approx(b.data()[i]).margin(1e-4));
    Tensor r = random_tensor(a.shape(), rng), da, db;
    wino.backward(r, &da, 2, {});
    plain.backward(r, &db, 1, {});
    for (size_t i = 0; i < da.size(); ++i) REQUIRE(da.data()[i] == Approx(db.data()[i]).margin(1e-4));
    for (size_t i = 0; i < wino.weight().count(); ++i)
      REQUIRE(wino.weight().grad.data()[i] == Approx(plain.weight().grad.data()[i]).epsilon(1e-4).margin(1e-3));
  }
}

TEST_CASE("Conv2d rejects a wrong channel count", "[models][conv2d]") {
  Conv2d conv("c", {3, 4, 3, 1, 1});
  Tensor x({1, 4, 4, 2});
  CHECK_THROWS_AS(conv.forward(x, 1), InvalidArgument);
  CHECK_THROWS_AS(Conv2d("bad", {0, 4, 3, 1, 1}), InvalidArgument);
}

TEST_CASE("DepthwiseConv2d matches a dense reference and finite differences", "[models][depthwise]") {
  struct Case {
    int channels, kernel, stride;
  };
  // 21 channels = one 16-channel vector block + 5 remainder lanes; kernel 5 takes the generic path.
  for (Case cs : {Case{5, 3, 1}, Case{21, 3, 1}, Case{21, 3, 2}, Case{5, 5, 2}}) {
    for (int threads : {1, 2}) {
      DYNAMIC_SECTION("c " << cs.channels << " k " << cs.kernel << " s " << cs.stride << " threads " << threads) {
        std::mt19937 rng(11);
        const int c = cs.channels, k = cs.kernel;
        DepthwiseConv2d dw("dw", {c, k, cs.stride, k / 2});
        test::fill_uniform(dw.weight().value.data(), dw.weight().count(), rng);
        Tensor x = random_tensor({3, 7, 6, c}, rng);
        const Tensor& y = dw.forward(x, threads);
        // Against the dense reference with a diagonal weight.
        std::vector<float> dense(static_cast<size_t>(k) * k * c * c, 0.0f);
        for (int t = 0; t < k * k; ++t)
          for (int ch = 0; ch < c; ++ch) dense[(t * c + ch) * c + ch] = dw.weight().value.data()[t * c + ch];
        Tensor ref = reference_conv(x, dense.data(), c, k, cs.stride, k / 2);
        REQUIRE(y.shape() == ref.shape());
        for (size_t i = 0; i < y.size(); ++i) REQUIRE(y.data()[i] == Approx(ref.data()[i]).margin(1e-5));
        Tensor r = random_tensor(y.shape(), rng), dx;
        dw.backward(r, &dx, threads, {});
        auto loss = [&] { return dot(dw.forward(x, threads), r); };
        test::Tolerance tol{0.05, 2e-3, 1e-3};
        check_gradient("dw weight", dw.weight().value.data(), dw.weight().grad.data(), dw.weight().count(), loss, tol);
        check_gradient("dw input", x.data(), dx.data(), x.size(), loss, tol);
      }
    }
  }
}

}  // namespace
}  // namespace edl::models
