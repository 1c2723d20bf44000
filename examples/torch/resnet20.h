// ResNet20 in libtorch (He et al. 2016, the CIFAR variant with option-A shortcuts: subsample and
// zero-pad the channels), the same architecture as models/resnet20 and bench/model_bench's libtorch
// baseline; `channels` input planes (1 for Fashion-MNIST, 3 for CIFAR-10). Used by the edl::torch
// example (examples/torch/fashion_mnist.cc), torch_bench and model_bench's libtorch rows.
// Outside namespace edl on purpose: TORCH_MODULE names torch::nn unqualified, which edl::torch would
// shadow inside namespace edl.
#pragma once

#include <torch/torch.h>

namespace edl_examples {

namespace nn = torch::nn;
using torch::indexing::None;
using torch::indexing::Slice;

inline nn::Conv2dOptions conv(int in, int out, int k, int stride, int groups = 1) {
  return nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).groups(groups).bias(false);
}

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int in, int out, int stride)
      : conv1(register_module("conv1", nn::Conv2d(conv(in, out, 3, stride)))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", nn::Conv2d(conv(out, out, 3, 1)))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))),
        stride(stride),
        pad((out - in) / 2) {}
  torch::Tensor forward(torch::Tensor x) {
    auto out = bn2(conv2(torch::relu(bn1(conv1(x)))));
    if (stride != 1 || pad != 0) {  // option A: subsample and zero-pad the channels
      x = x.index({Slice(), Slice(), Slice(None, None, stride), Slice(None, None, stride)});
      x = torch::constant_pad_nd(x, {0, 0, 0, 0, pad, pad});
    }
    return torch::relu(out + x);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  int stride, pad;
};
TORCH_MODULE(BasicBlock);

struct ResNet20Impl : nn::Module {
  ResNet20Impl(int channels, int classes)
      : conv1(register_module("conv1", nn::Conv2d(conv(channels, 16, 3, 1)))),
        bn1(register_module("bn1", nn::BatchNorm2d(16))),
        blocks(register_module("layers", nn::Sequential())),
        linear(register_module("linear", nn::Linear(64, classes))) {
    int in = 16;
    for (int stage = 0; stage < 3; ++stage) {
      int out = 16 << stage;
      for (int i = 0; i < 3; ++i) {
        blocks->push_back(BasicBlock(in, out, stage > 0 && i == 0 ? 2 : 1));
        in = out;
      }
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = blocks->forward(torch::relu(bn1(conv1(x))));
    return linear(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Sequential blocks;
  nn::Linear linear;
};
TORCH_MODULE(ResNet20);

}  // namespace edl_examples
