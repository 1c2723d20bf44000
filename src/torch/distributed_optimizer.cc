// edl::torch::DistributedOptimizer: autograd hooks -> EDL's reduce-only DistributedOptimizer (buckets,
// fused asynchronous allreduce) -> p.grad() -> the wrapped torch optimizer, plus the LR policy and the
// momentum compensation of torch's u-form SGD buffers. See include/edl/torch.h and docs/torch.md.
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include "edl/error.h"
#include "edl/torch.h"
#include "torch/device.h"

namespace edl::torch {

namespace {

std::string shape_name(const std::string& name, const ::torch::Tensor& t) {
  std::string out = name + "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? "," : "") + std::to_string(t.size(d));
  return out + "]";
}

// The key of `p` in Optimizer::state(): libtorch 1.x keys it by the TensorImpl address printed as
// a string, libtorch 2.x by the address itself.
template <typename Key>
Key state_key(const ::torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << static_cast<const void*>(p.unsafeGetTensorImpl());
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The momentum buffer torch's SGD keeps for `p` (undefined before its first step).
::torch::Tensor sgd_buffer(::torch::optim::Optimizer& opt, const ::torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(opt.state())>::key_type;
  auto it = opt.state().find(state_key<Key>(p));
  if (it == opt.state().end()) return {};
  auto* s = dynamic_cast<::torch::optim::SGDParamState*>(it->second.get());
  return s ? s->momentum_buffer() : ::torch::Tensor();
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_f64(std::string& out, double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

struct Reader {
  const std::string& s;
  size_t pos = 0;
  void need(size_t n) const {
    EDL_CHECK(n <= s.size() - pos, DataError,
              "edl::torch::DistributedOptimizer::load: snapshot truncated (" + std::to_string(s.size()) + " bytes)");
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
};

constexpr const char* kMagic = "edl-torch-opt-v1";

}  // namespace

struct DistributedOptimizer::Hook : ::torch::autograd::FunctionPostHook {
  Hook(DistributedOptimizer* owner, size_t index) : owner(owner), index(index) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    owner->on_gradient(index);
    return outputs;
  }
  DistributedOptimizer* owner;
  size_t index;
};

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                                           DistributedOptimizerOptions options)
    : optimizer_(&optimizer) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& item : module.named_parameters(true)) names[item.value().unsafeGetTensorImpl()] = item.key();
  std::vector<std::pair<std::string, ::torch::Tensor>> named;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      EDL_CHECK(it != names.end() || !p.requires_grad(), InvalidArgument,
                "edl::torch::DistributedOptimizer: the optimizer holds a parameter of shape " +
                    shape_name("", p) + " that is not a parameter of the module");
      if (it != names.end()) named.emplace_back(it->second, p);
    }
  }
  init(std::move(named), std::move(options));
  if (options_.deterministic) add_module_buffers(module);
}

// Reproducible mode: float buffers are averaged exactly by EDL's optimizer; integer buffers
// (num_batches_tracked) advance once per step.
void DistributedOptimizer::add_module_buffers(const ::torch::nn::Module& module) {
  for (const auto& item : module.named_buffers(true)) {
    ::torch::Tensor b = item.value();
    if (!b.defined() || b.numel() == 0) continue;
    EDL_CHECK(b.is_cpu() && b.is_contiguous(), InvalidArgument,
              "edl::torch::DistributedOptimizer: buffer '" + item.key() + "' is not a contiguous CPU tensor");
    if (b.scalar_type() == ::torch::kFloat32) {
      reducer_->add_buffer(item.key(), b.data_ptr<float>(), static_cast<size_t>(b.numel()));
    } else {
      int_buffers_.push_back(b);
    }
  }
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           std::vector<std::pair<std::string, ::torch::Tensor>> named_parameters,
                                           DistributedOptimizerOptions options)
    : optimizer_(&optimizer) {
  init(std::move(named_parameters), std::move(options));
}

void DistributedOptimizer::init(std::vector<std::pair<std::string, ::torch::Tensor>> named,
                                DistributedOptimizerOptions options) {
  options_ = std::move(options);
  EDL_CHECK(options_.accumulation_steps >= 1, InvalidArgument,
            "edl::torch::DistributedOptimizerOptions.accumulation_steps must be >= 1, got " +
                std::to_string(options_.accumulation_steps));
  const auto& groups = optimizer_->param_groups();
  EDL_CHECK(!groups.empty(), InvalidArgument, "edl::torch::DistributedOptimizer: the optimizer has no param group");
  const double lr0 = groups[0].options().get_lr();
  for (const auto& g : groups) group_lr_ratio_.push_back(lr0 > 0 ? g.options().get_lr() / lr0 : 1.0);

  edl::DistributedOptimizerOptions o;
  o.optimizer.kind = OptimizerKind::kNone;
  o.scaling = options_.scaling;
  if (!o.scaling.schedule && o.scaling.lr_scaling != optim::LrScaling::kCallback) o.scaling.base_lr = lr0;
  o.comm = options_.comm;
  o.local = options_.local;
  o.bucket_cap_bytes = options_.bucket_cap_bytes;
  o.fuse = options_.fuse;
  o.overlap = options_.overlap;
  o.fp16_compression = options_.fp16_compression && !options_.bf16_compression;
  o.accumulation_steps = 1;  // passes are summed by libtorch into p.grad(); we launch on the last one
  o.check_layout = true;
  o.deterministic = options_.deterministic;
  EDL_CHECK(!options_.deterministic || options_.accumulation_steps == 1, InvalidArgument,
            "edl::torch::DistributedOptimizerOptions: deterministic needs accumulation_steps = 1 (each micro-batch "
            "is its own pass)");
  reducer_ = std::make_unique<edl::DistributedOptimizer>(o);

  for (auto& [name, p] : named) {
    if (!p.requires_grad()) continue;
    if (params_.empty()) cuda_ = p.is_cuda();
    // The first parameter decides; params_ is still empty while it is checked.
    const bool first_device = params_.empty() || p.device() == params_.front().device();
    EDL_CHECK(p.scalar_type() == ::torch::kFloat32 && p.layout() == ::torch::kStrided &&
                  (cuda_ ? p.is_cuda() && first_device : p.is_cpu()) &&
                  (!cuda_ || p.is_contiguous()),
              InvalidArgument,
              "edl::torch::DistributedOptimizer: parameter '" + name + "' is not a dense float32 " +
                  (cuda_ ? "contiguous CUDA tensor on the device of the first parameter" : "CPU tensor") +
                  " (all parameters must be on the CPU, or all on one CUDA device)");
    EDL_CHECK(p.is_leaf() && p.numel() > 0, InvalidArgument,
              "edl::torch::DistributedOptimizer: parameter '" + name + "' is not a non-empty leaf tensor");
    if (!cuda_)
      reducer_->add_parameter(shape_name(name, p), p.data_ptr<float>(), nullptr, static_cast<size_t>(p.numel()));
    names_.push_back(name);
    params_.push_back(p);
  }
  EDL_CHECK(!params_.empty(), InvalidArgument, "edl::torch::DistributedOptimizer: no parameter requires a gradient");
  EDL_CHECK(!options_.deterministic || !cuda_, InvalidArgument,
            "edl::torch::DistributedOptimizerOptions: deterministic (the reproducible mode) needs CPU parameters; "
            "parameter '" + names_[0] + "' is a CUDA tensor");
  EDL_CHECK(!options_.bf16_compression || cuda_, InvalidArgument,
            "edl::torch::DistributedOptimizerOptions.bf16_compression needs CUDA parameters");
  if (cuda_) {
    EDL_CHECK(device::built(), InvalidArgument,
              "edl::torch::DistributedOptimizer: parameter '" + names_[0] +
                  "' is a CUDA tensor, but this edl::torch was built without CUDA support");
    EDL_CHECK(!options_.comm || options_.local, InvalidArgument,
              "edl::torch::DistributedOptimizer: CUDA parameters reduce over the global world (edl::init) "
              "or locally; an explicit Communicator is host-only");
    // The gradients travel over edl::cuda; the reducer keeps the step, the generation, the LR
    // policy and the sample count, with one host float (its own allreduce per step).
    reducer_->add_parameter("edl.torch.control", &control_param_, &control_grad_, 1);
    handles_.resize(params_.size());
  }
  passes_seen_.assign(params_.size(), 0);
  reported_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = ::torch::autograd::impl::grad_accumulator(params_[i]);
    EDL_CHECK(acc != nullptr, InvalidArgument,
              "edl::torch::DistributedOptimizer: no gradient accumulator for '" + names_[i] + "'");
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<Hook>(this, i)));
    accumulators_.push_back(std::move(acc));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  try {
    reducer_->discard_step();
  } catch (...) {  // a destructor never throws; the communicator's error was or will be seen elsewhere
  }
}

void DistributedOptimizer::on_gradient(size_t index) {
  if (hook_error_) return;
  try {
    if (++passes_seen_[index] < options_.accumulation_steps) return;  // libtorch sums the passes
    EDL_CHECK(!reported_[index], InvalidArgument,
              "edl::torch::DistributedOptimizer: parameter '" + names_[index] + "' got a gradient in more than " +
                  std::to_string(options_.accumulation_steps) +
                  " backward passes of one step (call step() after accumulation_steps passes)");
    if (step_size_ == 0) step_size_ = reducer_->begin_step();  // pins this step's communicator
    if (step_size_ == 1 && !options_.deterministic) {  // a world of one: step() uses p.grad() in place
      reported_[index] = true;
      return;
    }
    if (cuda_) {
      launch_device(index);
      return;
    }
    ::torch::NoGradGuard no_grad;
    const ::torch::Tensor& p = params_[index];
    ::torch::Tensor g = p.grad();
    float* slot = reducer_->grad_slot(index);
    auto dst = ::torch::from_blob(slot, {p.numel()}, ::torch::kFloat32);
    if (g.defined()) {
      dst.copy_(g.reshape({-1}));
    } else {
      dst.zero_();
    }
    reported_[index] = true;
    reducer_->grad_ready(index);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

// CUDA parameters: the gradient is reduced in place in p.grad() (made contiguous; zeros when
// undefined), on the current stream of its device (inside a hook: the stream autograd ran the
// accumulation on). Weighted steps send samples * mean and sum; step() divides by the total.
void DistributedOptimizer::launch_device(size_t index) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor& p = params_[index];
  if (!p.grad().defined()) {
    p.mutable_grad() = ::torch::zeros_like(p);
  } else if (!p.grad().is_contiguous()) {
    p.mutable_grad() = p.grad().contiguous();
  }
  ::torch::Tensor g = p.grad();
  if (weighted_) g.mul_(static_cast<double>(samples_));
  const auto compression = options_.bf16_compression   ? cuda::Compression::kBf16
                           : options_.fp16_compression ? cuda::Compression::kFp16
                                                       : cuda::Compression::kNone;
  reported_[index] = true;
  handles_[index] = device::allreduce(g, "edl.torch.grad." + shape_name(names_[index], p),
                                      weighted_ ? ReduceOp::kSum : ReduceOp::kAverage, compression);
}

void DistributedOptimizer::fill_missing() {
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (reported_[i]) continue;
    if (cuda_) {
      launch_device(i);
      continue;
    }
    auto dst = ::torch::from_blob(reducer_->grad_slot(i), {params_[i].numel()}, ::torch::kFloat32);
    const ::torch::Tensor& g = params_[i].grad();
    if (g.defined()) {
      dst.copy_(g.reshape({-1}));
    } else {
      dst.zero_();  // Horovod: a parameter without a gradient takes part with zeros
    }
  }
}

// p.grad() = the step's mean gradient: the reduced sum from EDL's slots (from_slots) or, in a world
// of one, this rank's own sum already in p.grad() (used in place); divided by the passes; zeros for a
// parameter without a gradient (Horovod's rule).
void DistributedOptimizer::write_back(bool from_slots) {
  ::torch::NoGradGuard no_grad;
  const double inv_passes = 1.0 / options_.accumulation_steps;
  // CUDA, weighted: the sum of samples_r * mean_r over the ranks, divided by the samples here.
  const uint64_t samples = reducer_->last_step_stats().samples;
  const double scale = cuda_ && from_slots && samples > 0 ? inv_passes / static_cast<double>(samples) : inv_passes;
  for (size_t i = 0; i < params_.size(); ++i) {
    ::torch::Tensor& p = params_[i];
    if (!p.grad().defined()) p.mutable_grad() = ::torch::zeros_like(p);
    if (from_slots && !cuda_)
      p.mutable_grad().copy_(::torch::from_blob(reducer_->grad_slot(i), p.sizes(), ::torch::kFloat32));
    if (scale != 1.0) p.mutable_grad().mul_(scale);
  }
}

// CUDA: the current stream waits for every gradient's reduction (on the device; the host blocks
// only until each was negotiated and queued). The handles (and the tensors they hold) go.
void DistributedOptimizer::wait_device() {
  std::vector<Handle> handles;
  handles.swap(handles_);
  handles_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (handles[i].valid()) device::wait(handles[i], params_[i]);
}

void DistributedOptimizer::apply_lrs(double lr) {
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size() && g < group_lr_ratio_.size(); ++g)
    groups[g].options().set_lr(lr * group_lr_ratio_[g]);
}

void DistributedOptimizer::reset_step() {
  std::fill(passes_seen_.begin(), passes_seen_.end(), 0);
  std::fill(reported_.begin(), reported_.end(), false);
  if (cuda_) handles_.assign(params_.size(), Handle());  // in-flight tensors stay held by EDL
  hook_error_ = nullptr;
  step_size_ = 0;
  weighted_ = false;
  micro_open_ = false;
  int_buffers_at_start_.clear();
}

void DistributedOptimizer::begin_micro_batch(uint64_t samples) {
  EDL_CHECK(options_.deterministic, InvalidArgument,
            "edl::torch::DistributedOptimizer::begin_micro_batch needs DistributedOptimizerOptions::deterministic");
  if (hook_error_) return;  // step() rethrows it
  ::torch::NoGradGuard no_grad;
  if (step_size_ == 0) {
    step_size_ = reducer_->begin_step();
    for (const auto& b : int_buffers_) int_buffers_at_start_.push_back(b.clone());
  }
  if (micro_open_) fill_missing();  // the previous micro-batch: parameters without a gradient count as zeros
  reducer_->begin_micro_batch(samples);
  for (auto& p : params_) p.mutable_grad() = ::torch::Tensor();  // this pass's gradient only
  std::fill(passes_seen_.begin(), passes_seen_.end(), 0);
  std::fill(reported_.begin(), reported_.end(), false);
  micro_open_ = true;
}

// Reproducible mode, after EDL's step: integer buffers one count past their value at the start
// (every rank alike, whichever micro-batches it ran).
void DistributedOptimizer::finish_exact_step(const std::vector<::torch::Tensor>& at_start) {
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < int_buffers_.size() && i < at_start.size(); ++i) int_buffers_[i].copy_(at_start[i] + 1);
}

void DistributedOptimizer::zero_grad() { optimizer_->zero_grad(); }

void DistributedOptimizer::set_step_samples(uint64_t samples) {
  reducer_->set_step_samples(samples);
  samples_ = samples;
  weighted_ = true;
}

void DistributedOptimizer::discard_step() {
  reducer_->discard_step();
  reset_step();
}

void DistributedOptimizer::step() {
  if (hook_error_) {
    std::exception_ptr e = hook_error_;
    discard_step();
    std::rethrow_exception(e);
  }
  const bool weighted = weighted_;  // reset by reset_step(), after the missing gradients went out
  bool in_place = false;
  try {
    if (step_size_ == 0) step_size_ = reducer_->begin_step();  // no hook ran (e.g. no backward)
    in_place = step_size_ == 1 && !options_.deterministic;
    if (options_.deterministic ? micro_open_ : !in_place) fill_missing();
  } catch (...) {
    discard_step();
    throw;
  }
  const double lr = reducer_->lr();  // this step's LR (its generation was applied by begin_step)
  const int64_t t = reducer_->step_count();
  std::vector<::torch::Tensor> int_start = std::move(int_buffers_at_start_);
  if (options_.deterministic && int_start.empty())  // no micro-batch here: nothing ran forward
    for (const auto& b : int_buffers_) int_start.push_back(b.clone());
  try {
    reducer_->step();
    if (cuda_ && !in_place) wait_device();
  } catch (...) {
    reset_step();
    throw;
  }
  reset_step();
  const int previous_size = last_size_;
  last_size_ = reducer_->rescaler().size();
  // A weighted step in which no rank had a record (an epoch's tail) changes nothing, as in EDL.
  if ((weighted || options_.deterministic) && reducer_->last_step_stats().samples == 0) return;
  if (options_.deterministic) finish_exact_step(int_start);
  write_back(!in_place);
  if (options_.rescale) {
    apply_lrs(lr);
    compensate_before(t, previous_size);
  }
  optimizer_->step();
  if (options_.rescale) compensate_after();
}

// Momentum compensation for torch's SGD (docs/torch.md). Its buffer is in the u-form
// (u = mu u + g; w -= lr u): the pre-resize momentum is applied at the NEW learning rate, which is
// full compensation (gamma = k) at once. EDL's v-form ramp (v accumulates lr * g; the pre-resize part
// is scaled from 1 to k over T steps, eq. 6) corresponds in the u-form to scaling the pre-resize part
// s = mu^(t - t0) u_t0 by gamma_t / k; without compensation that part stays at 1 / k. Both optimizers
// then take the same steps under a constant schedule (tests/torch: "momentum compensation").
void DistributedOptimizer::compensate_before(int64_t t, int previous_size) {
  auto* sgd = dynamic_cast<::torch::optim::SGD*>(optimizer_);
  if (sgd == nullptr) return;
  const optim::Rescaler& r = reducer_->rescaler();
  const optim::ScalingPolicy& policy = r.policy();
  ::torch::NoGradGuard no_grad;
  if (previous_size != 0 && r.size() != previous_size) {  // a resize takes effect at this step
    const double before = optim::target_lr(policy, r.epoch(), t, previous_size);
    const double after = optim::target_lr(policy, r.epoch(), t, r.size());
    comp_.assign(params_.size(), ::torch::Tensor());
    comp_t0_ = -1;
    comp_k_ = before > 0 ? after / before : 1.0;
    comp_scale_ = 1.0;
    if (comp_k_ != 1.0 && std::isfinite(comp_k_)) {
      comp_t0_ = t;
      for (size_t i = 0; i < params_.size(); ++i) {
        ::torch::Tensor buf = sgd_buffer(*optimizer_, params_[i]);
        if (buf.defined()) comp_[i] = buf.clone();
      }
    }
  }
  if (comp_t0_ < 0) return;
  const int T = policy.compensation_steps;
  double target = 1.0 / comp_k_;
  if (policy.momentum_compensation)
    target = (T > 0 && t - comp_t0_ < T) ? optim::compensation_gamma(t, comp_t0_, T, comp_k_) / comp_k_ : 1.0;
  if (target != comp_scale_) {
    for (size_t i = 0; i < params_.size(); ++i) {
      ::torch::Tensor buf = sgd_buffer(*optimizer_, params_[i]);
      if (buf.defined() && comp_[i].defined()) buf.add_(comp_[i], target - comp_scale_);
    }
  }
  comp_scale_ = target;
  if (!policy.momentum_compensation || target == 1.0) {  // nothing more to ramp: drop s
    comp_.clear();
    comp_t0_ = -1;
  }
}

// s decays like the buffer it was taken from: s *= mu (the momentum of the parameter's group).
void DistributedOptimizer::compensate_after() {
  if (comp_t0_ < 0) return;
  ::torch::NoGradGuard no_grad;
  std::unordered_map<const void*, double> momentum;
  for (const auto& g : optimizer_->param_groups()) {
    const auto* o = dynamic_cast<const ::torch::optim::SGDOptions*>(&g.options());
    for (const auto& p : g.params()) momentum[p.unsafeGetTensorImpl()] = o ? o->momentum() : 0.0;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (comp_[i].defined()) comp_[i].mul_(momentum[params_[i].unsafeGetTensorImpl()]);
}

double DistributedOptimizer::lr() {
  return options_.rescale ? reducer_->lr() : optimizer_->param_groups()[0].options().get_lr();
}

void DistributedOptimizer::set_communicator(std::shared_ptr<Communicator> comm) {
  reset_step();
  reducer_->set_communicator(std::move(comm));
}

void DistributedOptimizer::on_generation(const elastic::GenerationInfo& info) {
  reset_step();
  reducer_->on_generation(info);
}

std::string DistributedOptimizer::save() {
  std::string out(kMagic);
  std::string r = reducer_->save();
  put_u64(out, r.size());
  out += r;
  put_u64(out, static_cast<uint64_t>(static_cast<int64_t>(last_size_)));
  put_u64(out, static_cast<uint64_t>(comp_t0_));
  put_f64(out, comp_k_);
  put_f64(out, comp_scale_);
  put_u64(out, comp_.size());
  for (const auto& c : comp_) {
    const uint64_t n = c.defined() ? static_cast<uint64_t>(c.numel()) : 0;
    put_u64(out, n);
    if (n) {
      ::torch::Tensor cc = c.to(::torch::kCPU).contiguous();
      out.append(reinterpret_cast<const char*>(cc.data_ptr<float>()), n * sizeof(float));
    }
  }
  return out;
}

void DistributedOptimizer::load(const std::string& snapshot) {
  discard_step();
  const size_t m = std::strlen(kMagic);
  EDL_CHECK(snapshot.compare(0, m, kMagic) == 0, DataError,
            "edl::torch::DistributedOptimizer::load: not a snapshot of this optimizer (" +
                std::to_string(snapshot.size()) + " bytes)");
  Reader in{snapshot, m};
  const auto rn = in.get<uint64_t>();
  in.need(rn);
  std::string r = snapshot.substr(in.pos, rn);
  in.pos += rn;
  const int last_size = static_cast<int>(static_cast<int64_t>(in.get<uint64_t>()));
  const int64_t t0 = static_cast<int64_t>(in.get<uint64_t>());
  const double k = in.get<double>(), scale = in.get<double>();
  const auto n = in.get<uint64_t>();
  EDL_CHECK(n == 0 || n == params_.size(), DataError,
            "edl::torch::DistributedOptimizer::load: snapshot has " + std::to_string(n) +
                " compensation buffers, the optimizer has " + std::to_string(params_.size()) + " parameters");
  std::vector<::torch::Tensor> comp(n);
  for (size_t i = 0; i < n; ++i) {
    const auto count = in.get<uint64_t>();
    if (count == 0) continue;
    EDL_CHECK(count == static_cast<uint64_t>(params_[i].numel()), DataError,
              "edl::torch::DistributedOptimizer::load: compensation buffer of '" + names_[i] + "' has " +
                  std::to_string(count) + " elements, the parameter " + std::to_string(params_[i].numel()));
    in.need(count * sizeof(float));
    comp[i] = ::torch::empty(params_[i].sizes(), ::torch::kFloat32);
    std::memcpy(comp[i].data_ptr<float>(), snapshot.data() + in.pos, count * sizeof(float));
    comp[i] = comp[i].to(params_[i].device());
    in.pos += count * sizeof(float);
  }
  EDL_CHECK(in.pos == snapshot.size(), DataError, "edl::torch::DistributedOptimizer::load: trailing bytes");
  reducer_->load(r);  // validates before anything below is replaced
  last_size_ = last_size;
  comp_t0_ = t0;
  comp_k_ = k;
  comp_scale_ = scale;
  comp_ = std::move(comp);
}

}  // namespace edl::torch
