// Batch assembly (normalisation, augmentation) and the prefetch thread.
#include <catch2/catch.hpp>

#include <cmath>

#include "edl/data.h"
#include "edl/error.h"

using namespace edl::data;

namespace {

std::shared_ptr<Dataset> small_rgb(size_t records = 20) {
  SyntheticOptions o;
  o.records = records;
  o.shape = {3, 6, 5};
  o.seed = 7;
  return make_synthetic(o);
}

}  // namespace

TEST_CASE("assemble_batch normalises per channel into NCHW float", "[data][batch]") {
  auto ds = small_rgb();
  BatchOptions o;
  o.mean = {0.5f, 0.25f, 0.f};
  o.std = {0.5f, 2.f, 1.f};
  std::vector<uint64_t> idx = {3, 0, 17};
  Batch b;
  assemble_batch(*ds, idx.data(), idx.size(), o, 0, &b);
  REQUIRE(b.size == 3);
  REQUIRE(b.images.size() == 3 * 90);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(b.labels[i] == ds->label(idx[i]));
    CHECK(b.indices[i] == idx[i]);
    for (int c = 0; c < 3; ++c)
      for (int j = 0; j < 30; ++j) {
        float px = ds->pixels(idx[i])[c * 30 + j] / 255.f;
        CHECK(b.images[i * 90 + c * 30 + j] == Approx((px - o.mean[c]) / o.std[c]));
      }
  }
  BatchOptions bad;
  bad.mean = {0.f, 0.f};
  CHECK_THROWS_AS(assemble_batch(*ds, idx.data(), 1, bad, 0, &b), edl::InvalidArgument);
  bad = BatchOptions{};
  bad.std = {0.f};
  CHECK_THROWS_AS(assemble_batch(*ds, idx.data(), 1, bad, 0, &b), edl::InvalidArgument);
  std::vector<uint64_t> out_of_range = {20};
  CHECK_THROWS_AS(assemble_batch(*ds, out_of_range.data(), 1, BatchOptions{}, 0, &b), edl::InvalidArgument);
}

TEST_CASE("augmentation is a padded crop + flip, deterministic from seed and salt", "[data][batch]") {
  auto ds = small_rgb(50);
  BatchOptions o;
  o.augment = true;
  o.crop_padding = 2;
  o.seed = 99;
  std::vector<uint64_t> idx(50);
  for (size_t i = 0; i < 50; ++i) idx[i] = i;
  Batch a, b, c;
  assemble_batch(*ds, idx.data(), idx.size(), o, /*salt=*/1, &a);
  assemble_batch(*ds, idx.data(), idx.size(), o, /*salt=*/1, &b);
  assemble_batch(*ds, idx.data(), idx.size(), o, /*salt=*/2, &c);
  CHECK(a.images == b.images);
  CHECK(a.images != c.images);
  // Each augmented record equals exactly one (dy, dx, flip) transform of its source.
  const int H = 6, W = 5, P = 2;
  int flips = 0, shifted = 0;
  for (size_t r = 0; r < 50; ++r) {
    const uint8_t* src = ds->pixels(r);
    const float* got = a.images.data() + r * 90;
    int matches = 0;
    for (int dy = -P; dy <= P; ++dy)
      for (int dx = -P; dx <= P; ++dx)
        for (int flip = 0; flip < 2; ++flip) {
          bool ok = true;
          for (int ch = 0; ch < 3 && ok; ++ch)
            for (int y = 0; y < H && ok; ++y)
              for (int x = 0; x < W && ok; ++x) {
                int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
                float want = (sy < 0 || sy >= H || sx < 0 || sx >= W) ? 0.f : src[ch * 30 + sy * W + sx] / 255.f;
                ok = std::fabs(got[ch * 30 + y * W + x] - want) < 1e-6f;
              }
          if (ok) {
            ++matches;
            flips += flip;
            shifted += (dy != 0 || dx != 0);
          }
        }
    CHECK(matches >= 1);
  }
  CHECK(flips > 5);     // both choices occur
  CHECK(flips < 45);
  CHECK(shifted > 25);
}

TEST_CASE("prefetcher returns batches in submission order with the assembled contents", "[data][prefetch]") {
  auto ds = small_rgb(100);
  BatchOptions o = cifar10_normalization(true);
  Prefetcher p(ds, o, /*depth=*/2);
  Batch none;
  CHECK_FALSE(p.next(&none));
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < 100; ++i) order.push_back((i * 37) % 100);
  p.submit_all(order, 16, /*salt=*/5);
  CHECK(p.pending() == 7);
  Batch got, want;
  size_t seen = 0;
  while (p.next(&got)) {
    assemble_batch(*ds, order.data() + seen, got.size, o, 5, &want);
    CHECK(got.indices == want.indices);
    CHECK(got.images == want.images);
    CHECK(got.labels == want.labels);
    seen += got.size;
  }
  CHECK(seen == 100);
  CHECK(p.pending() == 0);
  CHECK_THROWS_AS(p.submit({100}), edl::InvalidArgument);
  p.submit_all(order, 10);
  p.clear();
  CHECK(p.pending() == 0);
  CHECK_FALSE(p.next(&got));
  p.submit({1, 2});
  REQUIRE(p.next(&got));
  CHECK(got.size == 2);
}
