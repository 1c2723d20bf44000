// MobileNetV2 (Sandler et al. 2018), CIFAR variant, width 1.0: the torchvision layer structure with
// the first convolution and the 24-channel stage at stride 1 (32x32 inputs keep a 4x4 final map).
// Inverted residual blocks (t, c, n, s): (1,16,1,1) (6,24,2,1) (6,32,3,2) (6,64,4,2) (6,96,3,1)
// (6,160,3,2) (6,320,1,1); expansion 1x1 conv (absent when t == 1), depthwise 3x3, linear 1x1
// projection, each followed by batch norm (ReLU6 after the first two); identity residual when
// stride == 1 and in == out. Then 1x1 conv to 1280, global average pooling, linear.
// 2,236,682 parameters in 158 tensors for 10 classes; 87.96 M multiply-adds per 32x32 image.
// Parameter names follow torchvision (features.N..., classifier.1).
//
// Thread-safety: see Model.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "models/common/batch_norm.h"
#include "models/common/conv2d.h"
#include "models/common/depthwise_conv2d.h"
#include "models/common/linear.h"
#include "models/common/model.h"
#include "models/common/pooling.h"
#include "models/common/residual.h"

namespace edl::models {

class MobileNetV2 : public Model {
 public:
  explicit MobileNetV2(ModelConfig config = {});
  std::string name() const override { return "mobilenetv2"; }

 protected:
  const Tensor& run_forward(const Tensor& input, bool train) override;
  void run_backward(const Tensor& dlogits, const GradReadyFn& ready) override;

 private:
  struct InvertedResidual {
    InvertedResidual(const std::string& name, int in, int out, int stride, int expansion);
    std::optional<Conv2d> expand;
    std::optional<BatchNorm2d> expand_bn;
    DepthwiseConv2d dw;
    BatchNorm2d dw_bn;
    Conv2d project;
    BatchNorm2d project_bn;
    bool residual;
    ResidualAdd add;
  };

  Conv2d conv1_;
  BatchNorm2d bn1_;
  std::vector<std::unique_ptr<InvertedResidual>> blocks_;
  Conv2d conv2_;
  BatchNorm2d bn2_;
  GlobalAvgPool pool_;
  Linear classifier_;
};

}  // namespace edl::models
