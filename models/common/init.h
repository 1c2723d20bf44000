// Parameter initialisation for the reference models (PyTorch conventions).
//
// Thread-safety: pure functions; the generator is the caller's.
#pragma once

#include <cmath>
#include <random>

#include "models/common/parameter.h"

namespace edl::models {

// He (Kaiming) normal, fan-in mode, gain sqrt(2): std = sqrt(2 / fan_in). For convolutions
// fan_in = kernel * kernel * in_channels / groups.
inline void init_kaiming_normal(Parameter& p, int fan_in, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
  float* v = p.value.data();
  for (size_t i = 0; i < p.count(); ++i) v[i] = dist(rng);
}

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default for Linear weight and bias.
inline void init_uniform_fan_in(Parameter& p, int fan_in, std::mt19937_64& rng) {
  float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> dist(-bound, bound);
  float* v = p.value.data();
  for (size_t i = 0; i < p.count(); ++i) v[i] = dist(rng);
}

}  // namespace edl::models
