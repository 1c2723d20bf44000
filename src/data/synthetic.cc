// Synthetic dataset: deterministic from a seed, learnable (class prototypes + noise).
#include <string>
#include <vector>

#include "data/memory_dataset.h"
#include "data/random.h"
#include "edl/error.h"

namespace edl::data {

std::shared_ptr<Dataset> make_synthetic(const SyntheticOptions& o) {
  EDL_CHECK(o.records > 0, InvalidArgument, "make_synthetic: records must be > 0");
  EDL_CHECK(o.shape.channels > 0 && o.shape.height > 0 && o.shape.width > 0, InvalidArgument,
            "make_synthetic: shape must be positive, got " + std::to_string(o.shape.channels) + "x" +
                std::to_string(o.shape.height) + "x" + std::to_string(o.shape.width));
  EDL_CHECK(o.num_classes >= 2 && o.num_classes <= 1 << 20, InvalidArgument,
            "make_synthetic: num_classes must be >= 2, got " + std::to_string(o.num_classes));
  EDL_CHECK(o.noise >= 0.f && o.noise <= 1.f, InvalidArgument,
            "make_synthetic: noise must be in [0, 1], got " + std::to_string(o.noise));
  const size_t px = o.shape.pixels();
  EDL_CHECK(px <= (size_t(1) << 24) && o.records <= (size_t(1) << 34) / px, InvalidArgument,
            "make_synthetic: " + std::to_string(o.records) + " records of " + std::to_string(px) +
                " pixels exceed the 16 GiB an in-memory synthetic dataset may use");
  std::vector<uint8_t> prototypes(px * o.num_classes);
  detail::Rng proto_rng(detail::mix(o.seed, 0x70726f746full));
  for (auto& p : prototypes) p = static_cast<uint8_t>(proto_rng.below(256));
  std::vector<uint8_t> pixels(px * o.records);
  std::vector<int32_t> labels(o.records);
  for (size_t i = 0; i < o.records; ++i) {
    detail::Rng rng(detail::mix(o.seed, i));
    int32_t c = static_cast<int32_t>(rng.below(o.num_classes));
    labels[i] = c;
    const uint8_t* proto = prototypes.data() + px * c;
    uint8_t* dst = pixels.data() + px * i;
    for (size_t j = 0; j < px; ++j) {
      float v = (1.f - o.noise) * proto[j] + o.noise * static_cast<float>(rng.below(256));
      dst[j] = static_cast<uint8_t>(v + 0.5f > 255.f ? 255.f : v + 0.5f);
    }
  }
  return std::make_shared<detail::MemoryDataset>("synthetic", "synthetic(seed=" + std::to_string(o.seed) + ")", o.shape,
                                                 o.num_classes, std::move(pixels), std::move(labels));
}

}  // namespace edl::data
