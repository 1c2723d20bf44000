// SgdMomentum: single-process SGD with momentum and weight decay over a model's parameters
// (PyTorch semantics: v = momentum * v + (g + wd * w); w -= lr * v). The distributed optimizer in
// src/optim replaces it in the training binaries; benches and convergence tests use this one.
//
// Thread-safety: one step() at a time; the model must not run concurrently.
#pragma once

#include <vector>

#include "models/common/parameter.h"
#include "models/common/tensor.h"

namespace edl::models {

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
};

class SgdMomentum {
 public:
  SgdMomentum(std::vector<ParamRef> params, SgdOptions options);
  void step();
  void set_lr(float lr) { opt_.lr = lr; }

 private:
  std::vector<ParamRef> params_;
  SgdOptions opt_;
  std::vector<FloatBuffer> velocity_;
};

}  // namespace edl::models
