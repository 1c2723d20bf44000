// ResNet-50 in libtorch (He et al. 2016, ImageNet variant; the stride on the 3x3 convolution of a
// bottleneck, as torchvision's "v1.5"): 224x224 RGB inputs, 25,557,032 parameters at 1000 classes.
// The larger model of torch_bench (--model resnet50). Outside namespace edl (see resnet20.h).
#pragma once

#include <torch/torch.h>

#include "resnet20.h"  // conv()

namespace edl_examples {

struct BottleneckImpl : nn::Module {
  BottleneckImpl(int in, int width, int stride)
      : conv1(register_module("conv1", nn::Conv2d(conv(in, width, 1, 1)))),
        bn1(register_module("bn1", nn::BatchNorm2d(width))),
        conv2(register_module("conv2", nn::Conv2d(conv(width, width, 3, stride)))),
        bn2(register_module("bn2", nn::BatchNorm2d(width))),
        conv3(register_module("conv3", nn::Conv2d(conv(width, width * 4, 1, 1)))),
        bn3(register_module("bn3", nn::BatchNorm2d(width * 4))) {
    if (stride != 1 || in != width * 4) {
      down = register_module("downsample", nn::Sequential(nn::Conv2d(conv(in, width * 4, 1, stride)),
                                                          nn::BatchNorm2d(width * 4)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + (down.is_empty() ? x : down->forward(x)));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  nn::Sequential down{nullptr};
};
TORCH_MODULE(Bottleneck);

struct ResNet50Impl : nn::Module {
  explicit ResNet50Impl(int classes = 1000)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)))),
        bn1(register_module("bn1", nn::BatchNorm2d(64))),
        blocks(register_module("layers", nn::Sequential())),
        fc(register_module("fc", nn::Linear(2048, classes))) {
    const int depth[4] = {3, 4, 6, 3};
    int in = 64;
    for (int stage = 0; stage < 4; ++stage) {
      const int width = 64 << stage;
      for (int i = 0; i < depth[stage]; ++i) {
        blocks->push_back(Bottleneck(in, width, stage > 0 && i == 0 ? 2 : 1));
        in = width * 4;
      }
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 3, 2, 1);
    x = blocks->forward(x);
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Sequential blocks;
  nn::Linear fc;
};
TORCH_MODULE(ResNet50);

}  // namespace edl_examples
