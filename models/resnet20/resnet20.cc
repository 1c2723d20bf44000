#include "models/resnet20/resnet20.h"

#include <random>

#include "models/common/init.h"

namespace edl::models {
namespace {

Conv2dOptions conv3x3(int in, int out, int stride) { return {in, out, 3, stride, 1}; }
BatchNormOptions bn(int c, ActivationKind act) { return {c, 1e-5f, 0.1f, act}; }

}  // namespace

ResNet20::BasicBlock::BasicBlock(const std::string& name, int in, int out, int stride)
    : conv1(name + ".conv1", conv3x3(in, out, stride)),
      bn1(name + ".bn1", bn(out, ActivationKind::kReLU)),
      conv2(name + ".conv2", conv3x3(out, out, 1)),
      bn2(name + ".bn2", bn(out, ActivationKind::kNone)),
      add({ActivationKind::kReLU, stride, (out - in) / 2}) {}

ResNet20::ResNet20(ModelConfig config)
    : Model(config),
      conv1_("conv1", conv3x3(config.channels, 16, 1)),
      bn1_("bn1", bn(16, ActivationKind::kReLU)),
      linear_("linear", 64, config.classes) {
  std::mt19937_64 rng(config.seed);
  auto add_conv = [&](Conv2d& c) { register_conv(c, rng); };
  auto add_bn = [&](BatchNorm2d& b) { register_batch_norm(b); };
  add_conv(conv1_);
  add_bn(bn1_);
  const int widths[3] = {16, 32, 64};
  int in = 16;
  for (int stage = 0; stage < 3; ++stage) {
    for (int i = 0; i < 3; ++i) {
      int stride = (stage > 0 && i == 0) ? 2 : 1;
      auto name = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      blocks_.push_back(std::make_unique<BasicBlock>(name, in, widths[stage], stride));
      BasicBlock& b = *blocks_.back();
      add_conv(b.conv1);
      add_bn(b.bn1);
      add_conv(b.conv2);
      add_bn(b.bn2);
      in = widths[stage];
    }
  }
  init_uniform_fan_in(linear_.weight(), 64, rng);
  init_uniform_fan_in(linear_.bias(), 64, rng);
  register_parameter(linear_.weight());
  register_parameter(linear_.bias());
}

const Tensor& ResNet20::run_forward(const Tensor& input, bool train) {
  const int t = threads();
  // In training, each convolution accumulates the next batch norm's statistics as it writes.
  auto conv_bn = [&](Conv2d& conv, BatchNorm2d& bn, const Tensor& in) -> const Tensor& {
    BlockHook hook = train ? bn.input_stats_hook(conv.output(), t) : BlockHook{};
    return bn.forward(conv.forward(in, t, hook), train, t);
  };
  const Tensor* x = &conv_bn(conv1_, bn1_, input);
  for (auto& b : blocks_) {
    const Tensor& h = conv_bn(b->conv1, b->bn1, *x);
    const Tensor& m = conv_bn(b->conv2, b->bn2, h);
    x = &b->add.forward(m, *x, t);
  }
  return linear_.forward(pool_.forward(*x, t), t);
}

void ResNet20::run_backward(const Tensor& dlogits, const GradReadyFn& ready) {
  const int t = threads();
  // Four rotating gradient tensors: d is the gradient of the current block's output.
  int d = 0;
  linear_.backward(dlogits, &grad(1), t, ready);
  pool_.backward(grad(1), &grad(d), t);
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    BasicBlock& b = **it;
    int a = (d + 1) % 4, p = (d + 2) % 4, q = (d + 3) % 4;
    b.add.backward(grad(d), &grad(a), t, b.bn2.grad_stats_hook(grad(a), t));  // a: both branches' gradient
    b.bn2.backward(grad(a), &grad(p), t, ready);
    b.conv2.backward(grad(p), &grad(q), t, ready, b.bn1.grad_stats_hook(grad(q), t));
    b.bn1.backward(grad(q), &grad(p), t, ready);
    b.conv1.backward(grad(p), &grad(q), t, ready);  // q: gradient of the block input
    b.add.add_shortcut_grad(grad(a), &grad(q), t);
    d = q;
  }
  bn1_.backward(grad(d), &grad((d + 1) % 4), t, ready);
  conv1_.backward(grad((d + 1) % 4), nullptr, t, ready);
}

}  // namespace edl::models
