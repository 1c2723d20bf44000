// Model: the interface every reference model implements, used by the distributed optimizer and the
// elastic state.
//
//   parameters()  trainable tensors {name, data, grad, count} in registration (forward) order;
//   buffers()     non-trainable state that must be saved / broadcast (batch-norm running stats);
//   forward()     one batch; returns the mean loss and the number of correct top-1 predictions;
//   backward()    gradients of that loss; calls ready(i) as soon as parameter i's gradient is final
//                 (reverse registration order), so an optimizer can start its allreduce while the
//                 rest of backward runs. backward() overwrites gradients (no zeroing needed).
//   predict()     eval-mode forward that writes the predicted class of each image.
//
// Images are float32 [batch][channels][height][width] (NCHW, the layout of CIFAR / Fashion-MNIST
// files and PyTorch) unless ModelConfig::input_layout says NHWC; models run NHWC internally.
//
// Thread-safety: a model is used by one thread at a time; it runs up to threads() worker threads
// inside forward/backward. Views from parameters()/buffers() stay valid for the model's lifetime.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/common/batch_norm.h"
#include "models/common/conv2d.h"
#include "models/common/parameter.h"
#include "models/common/softmax_cross_entropy.h"
#include "models/common/tensor.h"

namespace edl::models {

enum class InputLayout { kNCHW, kNHWC };

struct ModelConfig {
  int channels = 3;   // 3 for CIFAR-10, 1 for Fashion-MNIST
  int height = 32;
  int width = 32;
  int classes = 10;
  int threads = 1;    // worker threads inside forward/backward; 1 = the calling thread only
  uint64_t seed = 1;  // parameter initialisation
  InputLayout input_layout = InputLayout::kNCHW;
};

class Model {
 public:
  explicit Model(ModelConfig config);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual std::string name() const = 0;
  const ModelConfig& config() const { return config_; }

  std::vector<ParamRef> parameters();
  std::vector<BufferRef> buffers();
  size_t parameter_count() const;  // total scalars

  void set_threads(int threads);
  int threads() const { return config_.threads; }

  // labels may be null (then loss and correct are 0); train selects batch statistics in batch norm.
  LossResult forward(const float* images, const int32_t* labels, int batch, bool train);
  // Requires a preceding forward() with labels.
  void backward(const GradReadyFn& ready = {});
  // Eval-mode forward; writes `batch` class indices.
  void predict(const float* images, int batch, int32_t* classes);
  // Logits [batch, 1, 1, classes] of the last forward().
  const Tensor& logits() const { return *logits_; }

 protected:
  // Network body on NHWC input; returns the logits tensor (owned by the model).
  virtual const Tensor& run_forward(const Tensor& input, bool train) = 0;
  // Backward from d(loss)/d(logits) down to the first layer's weights (no input gradient).
  virtual void run_backward(const Tensor& dlogits, const GradReadyFn& ready) = 0;

  void register_parameter(Parameter& p);
  void register_buffer(Buffer& b);
  // Kaiming-normal initialisation of a convolution's weight (fan-in = k*k*in), then registration.
  void register_conv(Conv2d& conv, std::mt19937_64& rng);
  // A batch norm's weight and bias (parameters) and running mean / variance (buffers).
  void register_batch_norm(BatchNorm2d& bn);
  // Gradient scratch shared by the layers: grad(i) for i in [0, 4).
  Tensor& grad(int i) { return grads_[i]; }

  ModelConfig config_;

 private:
  std::vector<Parameter*> params_;
  std::vector<Buffer*> buffers_;
  Tensor input_;
  const Tensor* logits_ = nullptr;
  SoftmaxCrossEntropy loss_;
  Tensor dlogits_;
  Tensor grads_[4];
  bool has_loss_ = false;
};

}  // namespace edl::models
