#include "edl/data/batch.h"

#include <cstring>
#include <string>

#include "data/random.h"
#include "edl/error.h"

namespace edl::data {
namespace {

// lut[c * 256 + v] = (v / 255 - mean[c]) / std[c]
std::vector<float> make_lut(const BatchOptions& o, int channels) {
  auto per_channel = [&](const std::vector<float>& v, const char* what) {
    EDL_CHECK(v.empty() || v.size() == 1 || v.size() == static_cast<size_t>(channels), InvalidArgument,
              std::string("BatchOptions.") + what + " has " + std::to_string(v.size()) + " values for " +
                  std::to_string(channels) + " channels");
  };
  per_channel(o.mean, "mean");
  per_channel(o.std, "std");
  EDL_CHECK(o.crop_padding >= 0, InvalidArgument,
            "BatchOptions.crop_padding must be >= 0, got " + std::to_string(o.crop_padding));
  std::vector<float> lut(static_cast<size_t>(channels) * 256);
  for (int c = 0; c < channels; ++c) {
    float mean = o.mean.empty() ? 0.f : o.mean[o.mean.size() == 1 ? 0 : c];
    float sd = o.std.empty() ? 1.f : o.std[o.std.size() == 1 ? 0 : c];
    EDL_CHECK(sd > 0.f, InvalidArgument, "BatchOptions.std must be > 0, got " + std::to_string(sd));
    for (int v = 0; v < 256; ++v) lut[c * 256 + v] = (static_cast<float>(v) / 255.f - mean) / sd;
  }
  return lut;
}

void convert_plain(const uint8_t* src, size_t plane, int channels, const float* lut, float* dst) {
  for (int c = 0; c < channels; ++c) {
    const float* l = lut + c * 256;
    for (size_t j = 0; j < plane; ++j) dst[j] = l[src[j]];
    src += plane;
    dst += plane;
  }
}

// Zero-padded random crop + optional horizontal flip, decided by (seed, salt, record).
void convert_augmented(const uint8_t* src, const Shape& s, int pad, uint64_t key, const float* lut, float* dst) {
  detail::Rng rng(key);
  const int dy = static_cast<int>(rng.below(2 * pad + 1)) - pad;
  const int dx = static_cast<int>(rng.below(2 * pad + 1)) - pad;
  const bool flip = rng.below(2) == 1;
  const int H = s.height, W = s.width;
  for (int c = 0; c < s.channels; ++c) {
    const float* l = lut + c * 256;
    const float zero = l[0];
    const uint8_t* plane = src + static_cast<size_t>(c) * H * W;
    float* out = dst + static_cast<size_t>(c) * H * W;
    for (int y = 0; y < H; ++y) {
      const int sy = y + dy;
      float* row = out + static_cast<size_t>(y) * W;
      if (sy < 0 || sy >= H) {
        for (int x = 0; x < W; ++x) row[x] = zero;
        continue;
      }
      const uint8_t* srow = plane + static_cast<size_t>(sy) * W;
      for (int x = 0; x < W; ++x) {
        const int ox = flip ? W - 1 - x : x;  // the crop window is flipped as a whole
        const int sx = ox + dx;
        row[x] = (sx < 0 || sx >= W) ? zero : l[srow[sx]];
      }
    }
  }
}

}  // namespace

BatchOptions fashion_mnist_normalization() {
  BatchOptions o;
  o.mean = {0.2860f};
  o.std = {0.3530f};
  return o;
}

BatchOptions cifar10_normalization(bool augment) {
  BatchOptions o;
  o.mean = {0.4914f, 0.4822f, 0.4465f};
  o.std = {0.2470f, 0.2435f, 0.2616f};
  o.augment = augment;
  return o;
}

void assemble_batch(const Dataset& ds, const uint64_t* indices, size_t n, const BatchOptions& options, uint64_t salt,
                    Batch* out) {
  EDL_CHECK(out != nullptr, InvalidArgument, "assemble_batch: out is null");
  const Shape s = ds.shape();
  const size_t px = s.pixels();
  std::vector<float> lut = make_lut(options, s.channels);
  for (size_t i = 0; i < n; ++i)
    EDL_CHECK(indices[i] < ds.size(), InvalidArgument,
              ds.name() + ": record index " + std::to_string(indices[i]) + " out of range (dataset has " +
                  std::to_string(ds.size()) + " records)");
  out->size = n;
  out->shape = s;
  out->images.resize(n * px);
  out->labels.resize(n);
  out->indices.assign(indices, indices + n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* src = ds.pixels(indices[i]);
    float* dst = out->images.data() + i * px;
    if (options.augment)
      convert_augmented(src, s, options.crop_padding, detail::mix(options.seed, salt, indices[i]), lut.data(), dst);
    else
      convert_plain(src, static_cast<size_t>(s.height) * s.width, s.channels, lut.data(), dst);
    out->labels[i] = ds.label(indices[i]);
  }
}

}  // namespace edl::data
