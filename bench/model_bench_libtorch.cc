#include "model_bench_libtorch.h"

#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "common/bench_util.h"
#include "resnet20.h"  // examples/torch: the libtorch ResNet20 the edl::torch example trains

namespace edl::bench {
namespace {

namespace nn = torch::nn;
using torch::indexing::None;
using torch::indexing::Slice;

nn::Conv2dOptions conv(int in, int out, int k, int stride, int groups = 1) {
  return nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).groups(groups).bias(false);
}

struct InvertedResidualImpl : nn::Module {
  InvertedResidualImpl(int in, int out, int stride, int t) : residual(stride == 1 && in == out) {
    int hid = in * t;
    body = register_module("conv", nn::Sequential());
    if (t != 1) {
      body->push_back(nn::Conv2d(conv(in, hid, 1, 1)));
      body->push_back(nn::BatchNorm2d(hid));
      body->push_back(nn::ReLU6());
    }
    body->push_back(nn::Conv2d(conv(hid, hid, 3, stride, hid)));
    body->push_back(nn::BatchNorm2d(hid));
    body->push_back(nn::ReLU6());
    body->push_back(nn::Conv2d(conv(hid, out, 1, 1)));
    body->push_back(nn::BatchNorm2d(out));
  }
  torch::Tensor forward(torch::Tensor x) { return residual ? x + body->forward(x) : body->forward(x); }
  nn::Sequential body{nullptr};
  bool residual;
};
TORCH_MODULE(InvertedResidual);

struct MobileNetV2Impl : nn::Module {
  MobileNetV2Impl(int channels, int classes) {
    features = register_module("features", nn::Sequential());
    features->push_back(nn::Conv2d(conv(channels, 32, 3, 1)));
    features->push_back(nn::BatchNorm2d(32));
    features->push_back(nn::ReLU6());
    const int cfg[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 1}, {6, 32, 3, 2}, {6, 64, 4, 2},
                           {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int in = 32;
    for (const auto& c : cfg) {
      for (int i = 0; i < c[2]; ++i) {
        features->push_back(InvertedResidual(in, c[1], i == 0 ? c[3] : 1, c[0]));
        in = c[1];
      }
    }
    features->push_back(nn::Conv2d(conv(320, 1280, 1, 1)));
    features->push_back(nn::BatchNorm2d(1280));
    features->push_back(nn::ReLU6());
    classifier = register_module("classifier", nn::Linear(1280, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    return classifier(torch::adaptive_avg_pool2d(features->forward(x), {1, 1}).flatten(1));
  }
  nn::Sequential features{nullptr};
  nn::Linear classifier{nullptr};
};
TORCH_MODULE(MobileNetV2);

template <typename Net>
TorchResult run(Net net, bool train, int batch, int warmup, int iters, const torch::Tensor& images,
                const torch::Tensor& labels) {
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4));
  TorchResult r;
  for (const auto& p : net->parameters()) r.parameters += static_cast<size_t>(p.numel());
  std::vector<double> times;
  if (train) {
    net->train();
  } else {
    net->eval();
  }
  for (int i = 0; i < warmup + iters; ++i) {
    double t0 = now_s();
    if (train) {
      sgd.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(images), labels);
      loss.backward();
      sgd.step();
      r.finite = r.finite && std::isfinite(loss.item<float>());
    } else {
      torch::NoGradGuard no_grad;
      torch::Tensor pred = net->forward(images).argmax(1);
      (void)pred;
    }
    double t1 = now_s();
    if (i >= warmup) times.push_back(t1 - t0);
  }
  r.images_per_s = batch / median(times);
  return r;
}

}  // namespace

TorchResult run_libtorch(const std::string& model, bool train, int threads, int batch, int warmup, int iters,
                         int channels, int height, int width, int classes) {
  torch::set_num_threads(threads);
  torch::manual_seed(42);
  auto images = torch::rand({batch, channels, height, width}) * 2 - 1;
  auto labels = torch::randint(0, classes, {batch}, torch::kLong);
  if (model == "mobilenetv2") return run(MobileNetV2(channels, classes), train, batch, warmup, iters, images, labels);
  return run(edl_examples::ResNet20(channels, classes), train, batch, warmup, iters, images, labels);
}

}  // namespace edl::bench
