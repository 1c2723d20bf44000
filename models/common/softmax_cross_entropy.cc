#include "models/common/softmax_cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "edl/error.h"

namespace edl::models {

int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

LossResult SoftmaxCrossEntropy::forward(const Tensor& logits, const int32_t* labels) {
  const Shape s = logits.shape();
  const int k = static_cast<int>(s.image_size());
  prob_.reshape(s);
  labels_ = labels;
  LossResult r;
  double total = 0.0;
  for (int n = 0; n < s.n; ++n) {
    const float* z = logits.image(n);
    float* p = prob_.image(n);
    int label = labels[n];
    if (label < 0 || label >= k) {
      throw InvalidArgument("SoftmaxCrossEntropy: label " + std::to_string(label) + " outside [0, " +
                            std::to_string(k) + ")");
    }
    float mx = *std::max_element(z, z + k);
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += std::exp(static_cast<double>(z[i] - mx));
    double log_sum = std::log(sum);
    for (int i = 0; i < k; ++i) p[i] = static_cast<float>(std::exp(z[i] - mx - log_sum));
    total += log_sum - (z[label] - mx);
    if (argmax(z, k) == label) ++r.correct;
  }
  r.loss = static_cast<float>(total / std::max(1, s.n));
  return r;
}

void SoftmaxCrossEntropy::backward(Tensor* dlogits) const {
  const Shape s = prob_.shape();
  const int k = static_cast<int>(s.image_size());
  dlogits->reshape(s);
  const float inv = 1.0f / static_cast<float>(std::max(1, s.n));
  for (int n = 0; n < s.n; ++n) {
    const float* p = prob_.image(n);
    float* d = dlogits->image(n);
    for (int i = 0; i < k; ++i) d[i] = p[i] * inv;
    d[labels_[n]] -= inv;
  }
}

}  // namespace edl::models
