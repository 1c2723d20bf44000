// edl::torch — elastic data-parallel training of libtorch programs (docs/torch.md).
//
// A separate library (target edl::torch, `find_package(edl COMPONENTS torch)`), built when libtorch
// is found; libedl itself never depends on torch. The Horovod-PyTorch equivalents:
//   DistributedOptimizer       wraps any torch::optim::Optimizer. Its gradients are averaged over the
//                              ranks by EDL's bucketed, fused asynchronous allreduce (an
//                              edl::DistributedOptimizer of kind kNone underneath): autograd hooks on
//                              every parameter's gradient accumulator hand each gradient over as soon
//                              as backward has accumulated it, so the reduction overlaps the rest of
//                              backward; step() waits, writes the mean into p.grad() and calls the
//                              wrapped optimizer's step(). In a world of one (decided per step)
//                              nothing is copied: step() uses p.grad() in place.
//   broadcast_parameters       every rank takes root's parameters and buffers (BN statistics).
//   broadcast_optimizer_state  every rank takes root's optimizer state (momenta, Adam moments and
//                              step counts, param-group options such as the learning rate).
//   register_state             one call registers a module's parameters and buffers, the wrapped
//                              optimizer's state and the DistributedOptimizer's rescaling
//                              bookkeeping with an edl::elastic::State: commit / restore / sync and
//                              checkpoints then cover the libtorch job.
//
//   auto net = ResNet20();  torch::optim::SGD sgd(net->parameters(), SGDOptions(0.1).momentum(0.9));
//   edl::torch::DistributedOptimizer opt(sgd, *net);
//   edl::elastic::State state;  edl::torch::register_state(state, *net, opt);
//   edl::elastic::run(state, [&] { while (...) { opt.zero_grad(); opt.set_step_samples(n);
//                                                if (n > 0) loss(net, batch).backward();
//                                                opt.step(); edl::notify_batch_end(); } });
//
// The learning rate is rescaled by default: the LR the torch optimizer was built with is taken as
// the LR of ONE worker, and every step trains with it x the world size (ScalingPolicy defaults:
// linear scaling, base_size 1; docs/torch.md section 4). Set scaling.lr_scaling = kNone to keep it,
// or rescale = false to manage the LRs yourself. The policy's local batch (scaling.batch.local_batch,
// default 32, or global_batch / size) must be the batch each rank trains: give the shard generator
// the same number (ShardOptions::batch_size / batch_for_size); set_step_samples warns once when not.
//
// Empty and short steps (docs/torch.md, "Empty and short steps"): every rank calls
// set_step_samples(n) (0 included) and step() in every step, and skips backward when n == 0.
// The program's own collectives may share a step with the gradient allreduces when they have a fixed
// name of their own (not "edl.*") and every rank issues them every step (docs/torch.md, "Your own
// collectives in a step").
//
// Collectives go to the process-global world of edl::init() (the current elastic generation), or to
// an explicit Communicator (tests run ranks as threads); every rank must create its optimizers and
// call the broadcasts in the same order with the same module structure. A module whose parameters
// (names, shapes) differ across ranks gets MismatchError from the first step() of each generation and
// from the broadcasts, never a hang. Only dense float32 parameters are supported (InvalidArgument),
// all on the CPU or all on one CUDA device. CUDA parameters (docs/torch.md, section 10; NOT RUN ON A
// GPU YET) are reduced in device memory by edl::cuda (edl/cuda.h) on the global world: the hooks
// enqueue each gradient's allreduce after the work on the device's current stream, step() makes the
// current stream wait for them; needs an edl::torch built with a CUDA libtorch and edl::cuda.
//
// Thread-safety: one training thread uses a DistributedOptimizer; backward() must run on that thread
// (libtorch runs CPU backward on the calling thread; CUDA backward on its device thread while the
// calling thread waits) and not concurrently with step(). The free
// functions are collective: call them from the training thread on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "edl/collectives.h"
#include "edl/communicator.h"
#include "edl/optim.h"
#include "edl/state.h"

namespace edl::torch {

struct DistributedOptimizerOptions {
  // LR policy (rescaling with the world size, warmup, momentum compensation, batch plan; see
  // edl/optim/rescale.h). Unless a schedule or a callback is set, base_lr is replaced by the wrapped
  // optimizer's first param-group LR at construction; group g then trains with lr() * (its initial
  // LR / group 0's initial LR). Default: linear scaling from base_size 1, as edl::DistributedOptimizer.
  optim::ScalingPolicy scaling;
  // Set the param groups' learning rates from `scaling` before every step (and compensate SGD
  // momentum after resizes). false: the LRs are left alone (your own scheduler; Horovod's
  // behaviour). Default true.
  bool rescale = true;
  // The group to reduce over; null = the process-global world (edl::init). Default null.
  std::shared_ptr<Communicator> comm;
  // A world of one without any communication (no edl::init needed). Default false.
  bool local = false;
  // Bucket capacity, fusion and overlap as edl::DistributedOptimizerOptions. Defaults 512 KiB, on, on.
  size_t bucket_cap_bytes = size_t{512} << 10;
  bool fuse = true;
  bool overlap = true;
  // Send gradients as float16 (see edl::DistributedOptimizerOptions). Default off.
  bool fp16_compression = false;
  // CUDA parameters only: send gradients as bfloat16 (edl::cuda::Compression::kBf16; wins over
  // fp16_compression). InvalidArgument with CPU parameters. Default off.
  bool bf16_compression = false;
  // Backward passes per step: libtorch sums the passes into p.grad(); the last pass's hooks launch
  // the reduction and step() applies the MEAN over ranks and passes (each pass's loss is a mean, so
  // K passes of batch b equal one pass of batch K*b). Default 1.
  int accumulation_steps = 1;
  // Reproducible mode (edl::DistributedOptimizerOptions::deterministic, docs/torch.md): every
  // micro-batch is its own backward pass after begin_micro_batch(); step() applies the exact
  // weighted mean over all micro-batches of all ranks, and the module's float buffers (batch-norm
  // statistics; module constructor only) end the step at the exact mean of the micro-batches'
  // results, its integer buffers (num_batches_tracked) one count further. Use deterministic torch
  // algorithms and a fixed thread count. Exclusive with fp16_compression and accumulation_steps > 1;
  // CPU parameters only (CUDA parameters: InvalidArgument).
  bool deterministic = false;
};

class DistributedOptimizer : public elastic::Stateful {
 public:
  // Wraps `optimizer` (kept by the caller, must outlive this object) for the parameters it holds
  // that require a gradient; names come from `module`'s named_parameters() (they must cover every
  // such parameter of the optimizer; InvalidArgument otherwise). Installs the autograd hooks.
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                       DistributedOptimizerOptions options = {});
  // Same with explicit (name, parameter) pairs: exactly the parameters that will be reduced.
  DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                       std::vector<std::pair<std::string, ::torch::Tensor>> named_parameters,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer() override;  // removes the hooks; waits for reductions in flight
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // optimizer().zero_grad(): call it once per step, before the step's first backward pass.
  void zero_grad();
  // Waits for the reductions, fills in the parameters whose gradient did not arrive (see below),
  // writes the mean gradient into every p.grad(), sets the LRs (rescale), compensates momentum and
  // calls optimizer().step(). CommError / MismatchError propagate (also an error raised inside a
  // hook); the step's gradients are then discarded and the parameters are untouched.
  //
  // Parameters that got no gradient in this step (unused branch, frozen this step): as Horovod,
  // they take part in the allreduce with a zero gradient — so all ranks issue the same collectives —
  // and p.grad() is set to the average over the ranks (the other ranks' gradients / size), even
  // where it was undefined. A gradient computed some other way (autograd::grad, manual) that is
  // defined when step() starts is used as is.
  void step();
  // Weighted mean for the shard loader (edl::DistributedOptimizer::set_step_samples): `samples`
  // records this rank trains in this step, its loss the mean over them; the step applies the mean
  // over all records of all ranks. A step in which no rank had a record leaves parameters and
  // optimizer state untouched. Call it before the step's backward pass, on every rank in every step
  // (0 on a rank with nothing to train, which skips backward but still calls step()). Logs one
  // warning when the counts do not fit the policy's local batch (edl::DistributedOptimizer).
  void set_step_samples(uint64_t samples);
  // Reproducible mode: the next backward pass is one micro-batch of `samples` records (its loss the
  // mean over them). Clears every p.grad() first; ends the micro-batch before it.
  void begin_micro_batch(uint64_t samples);
  // Discards the step in progress (after an error or a rollback): pending reductions are awaited,
  // hook counters reset.
  void discard_step();

  // The LR param group 0 gets at the next step (applies a pending generation's rescaling first);
  // with rescale = false, group 0's current LR.
  double lr();
  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // The reduce-only EDL optimizer underneath (bucket layout, step statistics, rescaler).
  edl::DistributedOptimizer& reducer() { return *reducer_; }
  size_t num_parameters() const { return params_.size(); }
  int64_t step_count() const { return reducer_->step_count(); }
  void set_epoch(int64_t epoch) { reducer_->set_epoch(epoch); }
  // Uses `comm` from the next step on (thread-as-rank worlds).
  void set_communicator(std::shared_ptr<Communicator> comm);

  // elastic::Stateful: the rescaler bookkeeping and the SGD momentum-compensation buffers. The
  // wrapped optimizer's own state is registered separately by register_state().
  std::string save() override;
  void load(const std::string& snapshot) override;
  void on_generation(const elastic::GenerationInfo& info) override;

  struct Hook;  // internal: the autograd post-hook

 private:
  void init(std::vector<std::pair<std::string, ::torch::Tensor>> named, DistributedOptimizerOptions options);
  void on_gradient(size_t index);
  void fill_missing();
  void launch_device(size_t index);
  void wait_device();
  void write_back(bool from_slots);
  void apply_lrs(double lr);
  void compensate_before(int64_t t, int previous_size);
  void compensate_after();
  void reset_step();
  void add_module_buffers(const ::torch::nn::Module& module);
  void finish_exact_step(const std::vector<::torch::Tensor>& at_start);

  ::torch::optim::Optimizer* optimizer_ = nullptr;
  DistributedOptimizerOptions options_;
  std::unique_ptr<edl::DistributedOptimizer> reducer_;
  std::vector<std::string> names_;
  std::vector<::torch::Tensor> params_;
  std::vector<std::shared_ptr<::torch::autograd::Node>> accumulators_;  // keeps the hooked nodes alive
  std::vector<uintptr_t> hook_keys_;
  std::vector<int> passes_seen_;  // backward passes that reached parameter i's accumulator this step
  std::vector<bool> reported_;
  std::vector<double> group_lr_ratio_;  // initial LR of group g / initial LR of group 0
  std::exception_ptr hook_error_;       // raised inside a hook, rethrown by step()
  bool weighted_ = false;               // set_step_samples() was called for this step
  uint64_t samples_ = 0;                // its samples
  // CUDA parameters: the gradients' device allreduces of this step; the reducer's control float.
  bool cuda_ = false;
  std::vector<edl::Handle> handles_;
  float control_param_ = 0, control_grad_ = 0;
  int step_size_ = 0;                   // ranks this step reduces over (0: step not begun)
  // SGD momentum compensation (u-form buffers, docs/torch.md).
  int last_size_ = 0;                    // world size the previous step trained at (0: none yet)
  int64_t comp_t0_ = -1;                 // step of the resize being compensated (-1: none)
  double comp_k_ = 1.0;                  // LR factor of that resize
  double comp_scale_ = 1.0;              // current scale of the pre-resize momentum in the buffers
  std::vector<::torch::Tensor> comp_;    // decayed pre-resize buffers s (undefined: no buffer)
  // Reproducible mode: the module's integer buffers and their values when the step began.
  std::vector<::torch::Tensor> int_buffers_, int_buffers_at_start_;
  bool micro_open_ = false;               // a micro-batch's backward pass is open
};

// Every rank takes root's parameters and buffers. Collective; MismatchError when the module's
// parameters / buffers (names, shapes, dtypes) differ across ranks. comm == null: the global world.
void broadcast_parameters(::torch::nn::Module& module, int root, std::shared_ptr<Communicator> comm = nullptr);
// Every rank takes root's optimizer state (serialized by torch, broadcast as bytes). Collective.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root,
                               std::shared_ptr<Communicator> comm = nullptr);

// Registers `module`'s parameters and buffers as tensors "<prefix>.param.<name>" / "<prefix>.buffer.<name>"
// (float32/float64/int64, contiguous; the module must not reallocate them afterwards), the wrapped
// optimizer's state as the blob "<prefix>.optimizer" (torch serialization: momentum buffers, Adam
// moments and step counts, param-group options including the LR) and `opt` as the component
// "<prefix>.edl" (rescaling bookkeeping; gets on_generation). Default prefix "torch".
void register_state(elastic::State& state, ::torch::nn::Module& module, DistributedOptimizer& opt,
                    const std::string& prefix = "torch");
// The same without a DistributedOptimizer (e.g. evaluation-only state): module + optimizer state.
void register_state(elastic::State& state, ::torch::nn::Module& module, ::torch::optim::Optimizer* optimizer,
                    const std::string& prefix = "torch");

// The device this rank trains on, for --device style flags: "cpu" -> the CPU; "cuda" -> the CUDA
// device EDL's GPU path uses in this process (edl::cuda::device(), chosen at the first generation:
// local rank % visible devices). Call it after edl::init(). InvalidArgument for another kind, or
// for "cuda" when this edl::torch has no CUDA support or no device is usable.
::torch::Device training_device(const std::string& kind);

// The wrapped optimizer's state as bytes (torch serialization) and back; used by the blob above and
// by broadcast_optimizer_state. load: DataError when the bytes are not an optimizer archive.
std::string save_optimizer_state(::torch::optim::Optimizer& optimizer);
void load_optimizer_state(::torch::optim::Optimizer& optimizer, const std::string& bytes);

}  // namespace edl::torch
