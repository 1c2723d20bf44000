// ResNet20 for CIFAR-10 / Fashion-MNIST (He et al. 2016, section 4.2): conv3x3-16, three stages of
// three BasicBlocks with 16 / 32 / 64 channels, global average pooling, linear. Stage transitions use
// the parameter-free "option A" shortcut (stride-2 subsampling + zero channels), which gives exactly
// 269,722 parameters in 59 tensors for 3x32x32 input and 10 classes. Parameter names follow the
// common PyTorch implementation: conv1, bn1, layer{1,2,3}.{0,1,2}.{conv1,bn1,conv2,bn2}, linear.
//
// Thread-safety: see Model.
#pragma once

#include <memory>
#include <vector>

#include "models/common/batch_norm.h"
#include "models/common/conv2d.h"
#include "models/common/linear.h"
#include "models/common/model.h"
#include "models/common/pooling.h"
#include "models/common/residual.h"

namespace edl::models {

class ResNet20 : public Model {
 public:
  explicit ResNet20(ModelConfig config = {});
  std::string name() const override { return "resnet20"; }

 protected:
  const Tensor& run_forward(const Tensor& input, bool train) override;
  void run_backward(const Tensor& dlogits, const GradReadyFn& ready) override;

 private:
  struct BasicBlock {
    BasicBlock(const std::string& name, int in, int out, int stride);
    Conv2d conv1;
    BatchNorm2d bn1;
    Conv2d conv2;
    BatchNorm2d bn2;
    ResidualAdd add;
  };

  Conv2d conv1_;
  BatchNorm2d bn1_;
  std::vector<std::unique_ptr<BasicBlock>> blocks_;
  GlobalAvgPool pool_;
  Linear linear_;
};

}  // namespace edl::models
