// The element conversions of the host path and the device kernels (common/float16.h, one copy for
// both, used through src/cuda/convert.h), checked on the CPU against independent references: the
// compiler's _Float16 for float16, the nearer of the two neighbouring bfloat16 values (ties to even)
// for bfloat16; and the kernels' post-operations against the host path's arithmetic.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cuda/convert.h"
#include "edl/types.h"

using namespace edl;
namespace cv = edl::cuda::convert;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint16_t f16_bits(_Float16 h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

_Float16 f16_of(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return h;
}

// The bfloat16 nearest to f (ties to even), from the two candidates around it.
uint16_t bf16_reference(float f) {
  const uint32_t u = bits(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double dlo = std::fabs(static_cast<double>(f) - bfloat16_to_float(lo));
  const double dhi = std::fabs(static_cast<double>(f) - bfloat16_to_float(hi));
  if ((u & 0xffffu) == 0) return lo;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

}  // namespace

TEST_CASE("float16 -> float32: every one of the 65536 values as the compiler's _Float16", "[cuda][convert]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = static_cast<float>(f16_of(static_cast<uint16_t>(h)));
    const float got = cv::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    INFO("half bits " << h);
    REQUIRE(bits(got) == bits(want));
  }
}

TEST_CASE("float32 -> float16 / bfloat16: round to nearest even, on edge and random values", "[cuda][convert]") {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 65519.996f, 1e-8f, 5.96e-8f, 2.98e-8f,
                               6.1e-5f, 6.09e-5f, 1.0009765625f, 1.00048828125f, 3.4e38f, -3.4e38f,
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) values.push_back(f);
  }
  for (float f : values) {
    INFO("float bits " << bits(f));
    REQUIRE(cv::float_to_half(f) == f16_bits(static_cast<_Float16>(f)));
    if (std::fabs(f) < 3.38e38f) REQUIRE(cv::float_to_bfloat16(f) == bf16_reference(f));  // not the overflow edge
    REQUIRE(float_to_half(f) == cv::float_to_half(f));  // libedl's host path is the same code
    REQUIRE(float_to_bfloat16(f) == cv::float_to_bfloat16(f));  // and edl/types.h's inline copy agrees
  }
  // NaN stays NaN in both.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(half_to_float(cv::float_to_half(nan))));
  CHECK(std::isnan(bfloat16_to_float(cv::float_to_bfloat16(nan))));
}

TEST_CASE("bfloat16 -> float32 is the upper half of the float's bits", "[cuda][convert]") {
  for (uint32_t b = 0; b < 65536; b += 7) {
    const float got = cv::bfloat16_to_float(static_cast<uint16_t>(b));
    CHECK(bits(got) == (b << 16));
  }
}

TEST_CASE("unpack post-operation: the host path's average (integers truncate, 16-bit rounded once)",
          "[cuda][convert]") {
  // int32 / int64 / uint8: truncating division, as divide_inplace on the host.
  CHECK(cv::convert_one<int32_t, int32_t>(-7, 2, 1.0f) == -3);
  CHECK(cv::convert_one<int32_t, int32_t>(7, 3, 1.0f) == 2);
  CHECK(cv::convert_one<int64_t, int64_t>(-9000000000LL, 4, 1.0f) == -2250000000LL);
  CHECK(cv::convert_one<uint8_t, uint8_t>(255, 4, 1.0f) == 63);
  // float32 sum of float16 inputs, divided, rounded once to float16.
  const float sum = 1.0f + 2.0f + 4.0f;  // 7
  const uint16_t h = cv::convert_one<float, cv::F16>(sum, 3, 1.0f);
  CHECK(h == float_to_half(7.0f / 3.0f));
  CHECK(cv::convert_one<float, cv::BF16>(sum, 3, 1.0f) == float_to_bfloat16(7.0f / 3.0f));
  // Widening (pack) leaves values alone; compression prescales.
  CHECK(cv::convert_one<cv::F16, float>(float_to_half(2.5f), 1, 1.0f) == 2.5f);
  CHECK(cv::convert_one<float, cv::F16>(3.0f, 1, 0.25f) == float_to_half(0.75f));
  CHECK(cv::convert_one<double, double>(1.0, 4, 1.0f) == 0.25);
  // Identity for divisor 1 and scale 1.
  CHECK(cv::convert_one<float, float>(-1.5f, 1, 1.0f) == -1.5f);
}
