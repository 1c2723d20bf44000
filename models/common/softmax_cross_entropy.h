// SoftmaxCrossEntropy: mean cross-entropy of softmax(logits) against integer labels, plus the number
// of correct top-1 predictions. backward() gives d(mean loss)/d(logits) = (softmax - onehot) / N.
//
// Thread-safety: one forward/backward at a time per instance.
#pragma once

#include <cstdint>

#include "models/common/tensor.h"

namespace edl::models {

struct LossResult {
  float loss = 0.0f;  // mean over the batch
  int correct = 0;    // argmax(logits) == label
};

class SoftmaxCrossEntropy {
 public:
  // logits: [N, 1, 1, classes]; labels: N values in [0, classes).
  LossResult forward(const Tensor& logits, const int32_t* labels);
  void backward(Tensor* dlogits) const;

 private:
  Tensor prob_;
  const int32_t* labels_ = nullptr;
};

// Index of the largest of n values (the first on ties).
int argmax(const float* v, int n);

}  // namespace edl::models
