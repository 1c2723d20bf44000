// DistributedOptimizer's public methods over its Impl (distributed_optimizer_impl.h: bucket layout,
// the per-step protocol, momentum compensation); save / load in distributed_optimizer_snapshot.cc.
// See include/edl/optim/optimizer.h and docs/optim.md.
#include "optim/distributed_optimizer_impl.h"

namespace edl {

using optim::detail::Param;

double OptimizerStepStats::overlap_fraction() const {
  if (comm_s <= 0) return 0.0;
  return std::clamp(hidden_s / comm_s, 0.0, 1.0);
}

DistributedOptimizer::DistributedOptimizer(DistributedOptimizerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

DistributedOptimizer::~DistributedOptimizer() = default;

size_t DistributedOptimizer::add_parameter(const std::string& name, float* data, float* grad, size_t count) {
  EDL_CHECK(!impl_->finalized, InvalidArgument,
            "DistributedOptimizer::add_parameter('" + name + "') after the buckets were built (first step)");
  EDL_CHECK(data != nullptr, InvalidArgument, "DistributedOptimizer::add_parameter('" + name + "'): data is null");
  EDL_CHECK(count > 0, InvalidArgument, "DistributedOptimizer::add_parameter('" + name + "'): count is 0");
  Param p;
  p.name = name;
  p.data = data;
  p.user_grad = grad;
  p.count = count;
  impl_->params.push_back(std::move(p));
  return impl_->params.size() - 1;
}

void DistributedOptimizer::add_buffer(const std::string& name, float* data, size_t count) {
  EDL_CHECK(!impl_->finalized, InvalidArgument,
            "DistributedOptimizer::add_buffer('" + name + "') after the buckets were built (first step)");
  EDL_CHECK(data != nullptr && count > 0, InvalidArgument,
            "DistributedOptimizer::add_buffer('" + name + "'): null data or count 0");
  optim::detail::StateBuffer b;
  b.name = name;
  b.data = data;
  b.count = count;
  impl_->state_buffers.push_back(std::move(b));
}

size_t DistributedOptimizer::num_parameters() const { return impl_->params.size(); }

float* DistributedOptimizer::grad_slot(size_t index) {
  impl_->finalize();
  EDL_CHECK(index < impl_->params.size(), InvalidArgument,
            "DistributedOptimizer::grad_slot: index " + std::to_string(index) + " out of range");
  const Param& p = impl_->params[index];
  return impl_->buckets[p.bucket].buf.data() + p.offset;
}

size_t DistributedOptimizer::num_buckets() {
  impl_->finalize();
  return impl_->buckets.size();
}

size_t DistributedOptimizer::bucket_of(size_t index) {
  impl_->finalize();
  EDL_CHECK(index < impl_->params.size(), InvalidArgument,
            "DistributedOptimizer::bucket_of: index " + std::to_string(index) + " out of range");
  return impl_->params[index].bucket;
}

int DistributedOptimizer::begin_step() {
  impl_->begin_step();
  return impl_->world_size;
}

void DistributedOptimizer::grad_ready(size_t index) { impl_->grad_ready(index); }

void DistributedOptimizer::backward_done() {
  impl_->begin_step();
  EDL_CHECK(impl_->pass < impl_->passes, InvalidArgument,
            "DistributedOptimizer::backward_done: all " + std::to_string(impl_->passes) +
                " backward passes of this step are done; call step()");
  impl_->end_pass();
}

void DistributedOptimizer::step() { impl_->step(); }

void DistributedOptimizer::begin_micro_batch(uint64_t samples) { impl_->begin_micro_batch(samples); }

void DistributedOptimizer::set_step_samples(uint64_t samples) {
  auto& s = *impl_;
  if (s.opt.deterministic) return;  // the micro-batches carry their records
  if (!s.in_step) {
    s.next_samples = samples;
    return;
  }
  EDL_CHECK(s.next_launch == 0, InvalidArgument,
            "DistributedOptimizer::set_step_samples(" + std::to_string(samples) +
                ") after this step's first bucket was launched: call it before the step's backward pass");
  s.step_samples = samples;
  s.total_samples = static_cast<double>(samples);
  s.check_batch(samples);
}

void DistributedOptimizer::discard_step() { impl_->discard(); }

void DistributedOptimizer::set_communicator(std::shared_ptr<Communicator> comm) {
  EDL_CHECK(!impl_->opt.local, InvalidArgument, "DistributedOptimizer::set_communicator on a local optimizer");
  EDL_CHECK(comm != nullptr, InvalidArgument, "DistributedOptimizer::set_communicator: null communicator");
  impl_->discard();
  impl_->explicit_comm = std::move(comm);
  impl_->finalize();
  impl_->resolve();
}

void DistributedOptimizer::on_generation(const elastic::GenerationInfo& info) {
  impl_->discard();
  elastic::GenerationInfo seen = info;
  seen.size = impl_->policy_size(info.size);
  impl_->rescaler.apply_generation(seen);
}

void DistributedOptimizer::set_epoch(int64_t epoch) { impl_->rescaler.set_epoch(epoch); }

int64_t DistributedOptimizer::step_count() const { return impl_->rescaler.step(); }

double DistributedOptimizer::lr() {
  if (!impl_->in_step) {
    impl_->finalize();
    impl_->resolve();
  }
  return impl_->rescaler.step_params().lr;
}

int DistributedOptimizer::accumulation_steps() {
  if (impl_->in_step) return impl_->passes;
  const auto& plan = batch_plan();
  return impl_->opt.accumulation_steps > 0 ? impl_->opt.accumulation_steps : plan.accumulation_steps;
}

const optim::BatchPlan& DistributedOptimizer::batch_plan() {
  if (!impl_->in_step) {
    impl_->finalize();
    impl_->resolve();
  }
  return impl_->rescaler.batch_plan();
}

const optim::Rescaler& DistributedOptimizer::rescaler() const { return impl_->rescaler; }

const OptimizerStepStats& DistributedOptimizer::last_step_stats() const { return impl_->stats; }

}  // namespace edl
