// Fusion layout (src/cuda/fusion_layout.h): every element of every tensor travels exactly once,
// pieces are aligned and never overlap, passes fit the buffer, big tensors are split.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <random>

#include "cuda/fusion_layout.h"
#include "edl/error.h"
#include "testing/resnet50.h"

using namespace edl;
using edl::cuda::FusionPass;
using edl::cuda::plan_fusion;

namespace {

void check_plan(const std::vector<size_t>& counts, size_t wire, size_t capacity, size_t align) {
  const auto passes = plan_fusion(counts, wire, capacity, align);
  std::map<size_t, size_t> covered;  // tensor -> elements so far (pieces of a tensor come in order)
  for (const FusionPass& p : passes) {
    REQUIRE(!p.pieces.empty());
    REQUIRE(p.elements * wire <= capacity);
    size_t end = 0;
    for (const auto& piece : p.pieces) {
      REQUIRE(piece.count > 0);
      REQUIRE((piece.buffer_offset * wire) % align == 0);
      REQUIRE(piece.buffer_offset >= end);  // no overlap, in order
      end = piece.buffer_offset + piece.count;
      REQUIRE(piece.offset == covered[piece.tensor]);
      covered[piece.tensor] += piece.count;
    }
    REQUIRE(p.elements == end);
  }
  for (size_t t = 0; t < counts.size(); ++t) REQUIRE(covered[t] == counts[t]);
}

}  // namespace

TEST_CASE("fusion layout: the ResNet-50 gradient list (161 tensors, 25.6 M floats) in one 64 MiB buffer... and a 4 MiB one",
          "[cuda][fusion]") {
  const auto counts = edl::testing::resnet50_gradient_counts();
  REQUIRE(counts.size() == 161);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  CHECK(total == 25557032);
  auto big = plan_fusion(counts, 4, size_t{128} << 20);
  CHECK(big.size() == 1);  // 102 MB fit in 128 MiB: one pass, one reduction
  check_plan(counts, 4, size_t{128} << 20, 256);
  check_plan(counts, 4, size_t{4} << 20, 256);  // the fc weight (2 M floats, 8 MB) spans passes
  auto small = plan_fusion(counts, 4, size_t{4} << 20);
  CHECK(small.size() >= 25);
}

TEST_CASE("fusion layout: random odd sizes, zero counts, 2- and 8-byte wires, tiny buffers", "[cuda][fusion]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> n(0, 5000);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> counts(1 + trial % 37);
    for (auto& c : counts) c = trial % 5 == 0 ? 0 : n(rng);
    for (size_t wire : {size_t{2}, size_t{4}, size_t{8}})
      for (size_t cap : {size_t{256}, size_t{1000}, size_t{4096}, size_t{65536}}) check_plan(counts, wire, cap, 256);
  }
  CHECK(plan_fusion({0, 0, 0}, 4, 1024).empty());
}

TEST_CASE("fusion layout: a buffer that cannot hold an element is refused", "[cuda][fusion]") {
  CHECK_THROWS_AS(plan_fusion({10}, 8, 4), InvalidArgument);
  CHECK_THROWS_AS(plan_fusion({10}, 4, 1024, 6), InvalidArgument);  // alignment not a multiple of the element
}
