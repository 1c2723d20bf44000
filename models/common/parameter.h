// Trainable parameters and non-trainable buffers of the reference models, and the non-owning views
// (ParamRef, BufferRef) that models hand to the optimizer and the elastic state.
//
// A Parameter owns its value and its gradient. `index` is its position in the model's registration
// (forward) order; a layer's backward pass reports that index to the gradient-ready callback as soon
// as the gradient is final.
//
// Thread-safety: plain data; the model's forward/backward are the only writers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "models/common/tensor.h"

namespace edl::models {

struct Parameter {
  std::string name;
  FloatBuffer value;
  FloatBuffer grad;
  size_t index = 0;

  void allocate(size_t count) {
    value.resize(count);
    grad.resize(count);
    value.zero();
    grad.zero();
  }
  size_t count() const { return value.size(); }
};

// Non-trainable state that must travel with the model (batch-norm running mean / variance).
struct Buffer {
  std::string name;
  FloatBuffer value;
};

// Views valid for the lifetime of the model that returned them.
struct ParamRef {
  std::string name;
  float* data;
  float* grad;
  size_t count;
};

struct BufferRef {
  std::string name;
  float* data;
  size_t count;
};

// Called with a parameter index as soon as that parameter's gradient is final during backward.
// Invoked on the thread that called backward(), never from inside a parallel region.
using GradReadyFn = std::function<void(size_t param_index)>;

}  // namespace edl::models
