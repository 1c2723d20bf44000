#include "models/common/model.h"

#include <algorithm>

#include "edl/error.h"
#include "models/common/init.h"
#include "models/common/parallel.h"

namespace edl::models {

Model::Model(ModelConfig config) : config_(config) {
  if (config_.channels <= 0 || config_.height <= 0 || config_.width <= 0 || config_.classes <= 1) {
    throw InvalidArgument("ModelConfig: channels, height, width must be positive and classes >= 2");
  }
  set_threads(config_.threads);
}

void Model::set_threads(int threads) {
  if (threads < 1) throw InvalidArgument("Model: threads must be >= 1, got " + std::to_string(threads));
  config_.threads = threads;
}

void Model::register_parameter(Parameter& p) {
  p.index = params_.size();
  params_.push_back(&p);
}

void Model::register_buffer(Buffer& b) { buffers_.push_back(&b); }

std::vector<ParamRef> Model::parameters() {
  std::vector<ParamRef> out;
  out.reserve(params_.size());
  for (Parameter* p : params_) out.push_back({p->name, p->value.data(), p->grad.data(), p->count()});
  return out;
}

std::vector<BufferRef> Model::buffers() {
  std::vector<BufferRef> out;
  out.reserve(buffers_.size());
  for (Buffer* b : buffers_) out.push_back({b->name, b->value.data(), b->value.size()});
  return out;
}

size_t Model::parameter_count() const {
  size_t n = 0;
  for (const Parameter* p : params_) n += p->count();
  return n;
}

LossResult Model::forward(const float* images, const int32_t* labels, int batch, bool train) {
  if (batch <= 0) throw InvalidArgument("Model::forward: batch must be positive, got " + std::to_string(batch));
  const int c = config_.channels, h = config_.height, w = config_.width;
  input_.reshape({batch, h, w, c});
  const size_t image = static_cast<size_t>(c) * h * w;
  if (config_.input_layout == InputLayout::kNHWC || c == 1) {
    std::copy(images, images + image * batch, input_.data());
  } else {
    run_chunks(config_.threads, batch, [&](int, int b, int e) {
      for (int n = b; n < e; ++n) {
        const float* src = images + n * image;
        float* dst = input_.image(n);
        for (int ch = 0; ch < c; ++ch)
          for (size_t p = 0; p < static_cast<size_t>(h) * w; ++p) dst[p * c + ch] = src[ch * h * w + p];
      }
    });
  }
  logits_ = &run_forward(input_, train);
  has_loss_ = labels != nullptr;
  if (!has_loss_) return {};
  return loss_.forward(*logits_, labels);
}

void Model::backward(const GradReadyFn& ready) {
  if (!has_loss_) throw InvalidArgument("Model::backward: needs a preceding forward() with labels");
  loss_.backward(&dlogits_);
  run_backward(dlogits_, ready);
}

void Model::predict(const float* images, int batch, int32_t* classes) {
  forward(images, nullptr, batch, false);
  const int k = config_.classes;
  for (int n = 0; n < batch; ++n) classes[n] = argmax(logits_->image(n), k);
}

void Model::register_conv(Conv2d& conv, std::mt19937_64& rng) {
  const auto& o = conv.options();
  init_kaiming_normal(conv.weight(), o.kernel * o.kernel * o.in_channels, rng);
  register_parameter(conv.weight());
}

void Model::register_batch_norm(BatchNorm2d& bn) {
  register_parameter(bn.weight());
  register_parameter(bn.bias());
  register_buffer(bn.running_mean());
  register_buffer(bn.running_var());
}

}  // namespace edl::models
