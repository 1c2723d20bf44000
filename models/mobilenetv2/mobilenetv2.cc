#include "models/mobilenetv2/mobilenetv2.h"

#include <random>

#include "models/common/init.h"

namespace edl::models {
namespace {

BatchNormOptions bn(int c, ActivationKind act) { return {c, 1e-5f, 0.1f, act}; }
Conv2dOptions pointwise(int in, int out) { return {in, out, 1, 1, 0}; }

struct StageConfig {
  int expansion, channels, blocks, stride;
};
constexpr StageConfig kStages[] = {{1, 16, 1, 1},  {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                   {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};

}  // namespace

MobileNetV2::InvertedResidual::InvertedResidual(const std::string& name, int in, int out, int stride,
                                                int expansion)
    : dw(name + (expansion == 1 ? ".conv.0.0" : ".conv.1.0"), {in * expansion, 3, stride, 1}),
      dw_bn(name + (expansion == 1 ? ".conv.0.1" : ".conv.1.1"), bn(in * expansion, ActivationKind::kReLU6)),
      project(name + (expansion == 1 ? ".conv.1" : ".conv.2"), pointwise(in * expansion, out)),
      project_bn(name + (expansion == 1 ? ".conv.2" : ".conv.3"), bn(out, ActivationKind::kNone)),
      residual(stride == 1 && in == out),
      add({ActivationKind::kNone, 1, 0}) {
  if (expansion != 1) {
    expand.emplace(name + ".conv.0.0", pointwise(in, in * expansion));
    expand_bn.emplace(name + ".conv.0.1", bn(in * expansion, ActivationKind::kReLU6));
  }
}

MobileNetV2::MobileNetV2(ModelConfig config)
    : Model(config),
      conv1_("features.0.0", {config.channels, 32, 3, 1, 1}),
      bn1_("features.0.1", bn(32, ActivationKind::kReLU6)),
      conv2_("features.18.0", pointwise(320, 1280)),
      bn2_("features.18.1", bn(1280, ActivationKind::kReLU6)),
      classifier_("classifier.1", 1280, config.classes) {
  std::mt19937_64 rng(config.seed);
  auto add_conv = [&](Conv2d& c) { register_conv(c, rng); };
  auto add_bn = [&](BatchNorm2d& b) { register_batch_norm(b); };
  add_conv(conv1_);
  add_bn(bn1_);
  int in = 32, index = 1;
  for (const StageConfig& s : kStages) {
    for (int i = 0; i < s.blocks; ++i, ++index) {
      blocks_.push_back(std::make_unique<InvertedResidual>("features." + std::to_string(index), in, s.channels,
                                                           i == 0 ? s.stride : 1, s.expansion));
      InvertedResidual& b = *blocks_.back();
      if (b.expand) {
        add_conv(*b.expand);
        add_bn(*b.expand_bn);
      }
      init_kaiming_normal(b.dw.weight(), 9, rng);
      register_parameter(b.dw.weight());
      add_bn(b.dw_bn);
      add_conv(b.project);
      add_bn(b.project_bn);
      in = s.channels;
    }
  }
  add_conv(conv2_);
  add_bn(bn2_);
  init_uniform_fan_in(classifier_.weight(), 1280, rng);
  init_uniform_fan_in(classifier_.bias(), 1280, rng);
  register_parameter(classifier_.weight());
  register_parameter(classifier_.bias());
}

const Tensor& MobileNetV2::run_forward(const Tensor& input, bool train) {
  const int t = threads();
  // In training, each convolution accumulates the next batch norm's statistics as it writes.
  auto conv_bn = [&](auto& conv, BatchNorm2d& bn, const Tensor& in) -> const Tensor& {
    BlockHook hook = train ? bn.input_stats_hook(conv.output(), t) : BlockHook{};
    return bn.forward(conv.forward(in, t, hook), train, t);
  };
  const Tensor* x = &conv_bn(conv1_, bn1_, input);
  for (auto& b : blocks_) {
    const Tensor* h = x;
    if (b->expand) h = &conv_bn(*b->expand, *b->expand_bn, *h);
    h = &conv_bn(b->dw, b->dw_bn, *h);
    h = &conv_bn(b->project, b->project_bn, *h);
    x = b->residual ? &b->add.forward(*h, *x, t) : h;
  }
  const Tensor& f = conv_bn(conv2_, bn2_, *x);
  return classifier_.forward(pool_.forward(f, t), t);
}

void MobileNetV2::run_backward(const Tensor& dlogits, const GradReadyFn& ready) {
  const int t = threads();
  classifier_.backward(dlogits, &grad(0), t, ready);
  pool_.backward(grad(0), &grad(1), t);
  bn2_.backward(grad(1), &grad(2), t, ready);
  conv2_.backward(grad(2), &grad(0), t, ready);
  int d = 0;  // gradient of the current block's output
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    InvertedResidual& b = **it;
    int p = (d + 1) % 3, q = (d + 2) % 3;
    // Without a nonlinearity after the join, both branches receive grad(d) unchanged.
    b.project_bn.backward(grad(d), &grad(p), t, ready);
    b.project.backward(grad(p), &grad(q), t, ready, b.dw_bn.grad_stats_hook(grad(q), t));
    b.dw_bn.backward(grad(q), &grad(p), t, ready);
    int out = q;
    if (b.expand) {
      b.dw.backward(grad(p), &grad(q), t, ready, b.expand_bn->grad_stats_hook(grad(q), t));
      b.expand_bn->backward(grad(q), &grad(p), t, ready);
      b.expand->backward(grad(p), &grad(q), t, ready);
    } else {
      b.dw.backward(grad(p), &grad(q), t, ready);
    }
    if (b.residual) b.add.add_shortcut_grad(grad(d), &grad(out), t);
    d = out;
  }
  bn1_.backward(grad(d), &grad((d + 1) % 3), t, ready);
  conv1_.backward(grad((d + 1) % 3), nullptr, t, ready);
}

}  // namespace edl::models
