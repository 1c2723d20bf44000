// edl::DistributedOptimizer — data-parallel SGD / Adam / AdamW with bucketed, fused, overlapped
// gradient allreduce and the rescaling hooks of edl/optim/rescale.h.
//
// Usage (one instance per training process, or per thread-as-rank in tests):
//   DistributedOptimizerOptions o;  o.optimizer.kind = OptimizerKind::kSGD;  o.scaling.base_lr = 0.1;
//   DistributedOptimizer opt(o);
//   for (auto& p : model.parameters()) opt.add_parameter(p.name, p.data, p.grad, p.count);
//   state.register_component("optimizer", &opt);           // rescaling exactly once per generation
//   loop: opt.set_step_samples(records this rank trains in the step);  // weighted mean (shard loader)
//         for pass in 0..opt.batch_plan().accumulation_steps:
//           model.backward([&](size_t i) { opt.grad_ready(i); });   // allreduce overlaps backward
//         opt.step();                                                // waits, averages, applies
//
// Buckets: parameters are packed in REVERSE registration order (the order backward produces them)
// into flat float32 buckets of at most bucket_cap_bytes (a parameter larger than the cap gets a
// bucket of its own). When the last gradient of a bucket arrives in the last accumulation pass, the
// bucket is handed over for summing over all ranks (collective engine or the optimizer's own
// communication thread, see below) while backward goes on. Buckets are launched strictly in bucket
// order, so every rank issues the same collectives in the same order whatever order its gradients
// arrive in. step() waits for all buckets, divides by size * accumulation_steps (or, after
// set_step_samples(), by the records of all ranks: the weighted mean) and applies the update.
// Zero-copy: register a parameter with grad == nullptr and write its gradient to grad_slot(i),
// which points into the bucket buffer (no packing copy; each backward pass overwrites it, the
// optimizer keeps the sum of earlier accumulation passes aside); otherwise grad_ready(i) copies
// (first pass) or adds (later passes) the user's gradient into the bucket.
//
// Where the collectives come from (DistributedOptimizerOptions::comm):
//   - null (default): the process-global world of edl::init() — each bucket is a named asynchronous
//     allreduce ("edl.optim.<n>.<bucket>", n = this optimizer's creation index in the process) on
//     the current Runtime generation's collective engine, which owns that communicator; a new
//     generation is picked up at the next step. Every rank must create its optimizers in the same
//     order (the names must match across ranks).
//   - a Communicator: that group, reduced by the optimizer's own communication thread (tests run
//     ranks as threads, each with its own Communicator over a shared memory store);
//     set_communicator() installs the next generation's. That thread is the only user of the
//     Communicator from the first grad_ready() to the end of step(): issue no other collectives on
//     it meanwhile.
//   - local = true: a world of size 1 with no communication at all.
// In a world of size 1 no collective is issued whichever way it was reached.
//
// Reproducible mode (DistributedOptimizerOptions::deterministic, docs/optim.md "Reproducible mode"):
// a step is a set of fixed micro-batches (ShardOptions::deterministic hands them out), each trained
// as its own backward pass after begin_micro_batch(records). step() sums their gradients exactly
// (per-tensor fixed point, int64 allreduce) into the weighted mean over all records, so the result
// does not depend on how many ranks trained the micro-batches, in which order, or on a rollback and
// replay; the learning rate is the base_size one at every world size. Buffers registered with
// add_buffer() (batch-norm statistics) end the step at the exact mean of the micro-batches' results.
// Costs: no overlap (everything is reduced in step()), 8 bytes per element on the wire, and one
// gradient copy per micro-batch this rank trains.
//
// Contracts: a gradient handed to grad_ready() is read at once (it may be overwritten afterwards).
// Parameters and gradients stay owned by the caller and must outlive the optimizer.
// Errors: InvalidArgument for misuse (unknown index, double report, step() before all accumulation
// passes); CommError / MismatchError from the allreduce are rethrown by step(), after which the
// step's gradients are discarded (parameters and optimizer slots are untouched) so the elastic
// loop can restore and retry the step on a new communicator.
//
// Thread-safety: one training thread calls every method; the internal communication thread only
// touches bucket buffers between launch and completion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "edl/communicator.h"
#include "edl/export.h"
#include "edl/optim/rescale.h"
#include "edl/state.h"

namespace edl {

enum class OptimizerKind : uint8_t {
  kSGD = 0,    // v = mu * v + lr * (g + wd * w);  w -= v   (Nesterov: w -= mu * v + lr * g)
  kAdam = 1,   // Adam (Kingma & Ba 2015) with L2 weight decay added to the gradient
  kAdamW = 2,  // Adam with decoupled weight decay (Loshchilov & Hutter 2019): w -= lr * wd * w
  // Reduce only: step() averages the gradients and writes the mean back (into the user's gradient
  // buffer, or into grad_slot() for zero-copy parameters) without touching the parameters; another
  // optimizer applies the update (edl::torch::DistributedOptimizer wraps torch's optimizers this way).
  // The optimizer options below are ignored; the scaling policy still drives lr() and rescaler().
  kNone = 3,
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSGD;
  double momentum = 0.9;      // SGD momentum mu. Default 0.9; 0 = plain SGD.
  bool nesterov = false;      // SGD Nesterov momentum. Default off.
  double weight_decay = 0.0;  // L2 (SGD, Adam) or decoupled (AdamW). Default 0.
  double beta1 = 0.9;         // Adam/AdamW. Default 0.9.
  double beta2 = 0.999;       // Adam/AdamW. Default 0.999.
  double eps = 1e-8;          // Adam/AdamW. Default 1e-8.
};

struct DistributedOptimizerOptions {
  OptimizerOptions optimizer;
  // LR (base_lr / schedule / callback), warmup, momentum compensation and batch split.
  optim::ScalingPolicy scaling;
  // The group to reduce over; null = the current Runtime generation (see the header comment).
  std::shared_ptr<Communicator> comm;
  // A world of size 1 without a Communicator (no edl::init() needed). Default false.
  bool local = false;
  // Bucket capacity. Default 512 KiB. PyTorch DDP's 25 MB default is sized for GPU models 10-100x
  // larger than the CPU models here: a bucket can only start when its last gradient is ready, so a
  // model that fits one bucket (ResNet20: 1 MiB of gradients) overlaps nothing (optimizer_bench:
  // 0% hidden with one bucket, ~60-80% with 3-6). ResNet20 -> 3 buckets, MobileNetV2 (8.5 MiB) -> ~17.
  size_t bucket_cap_bytes = size_t{512} << 10;
  // false: one bucket per parameter (fusion off, for comparison). Default true.
  bool fuse = true;
  // false: buckets are launched only by step() (no overlap with backward). Default true.
  bool overlap = true;
  // Send gradients as float16 (scaled by 1 / (size * passes) first, summed in float32 inside the
  // collective, converted back). Halves the bytes on the wire; ~3 significant digits. Default off.
  bool fp16_compression = false;
  // Backward passes per step; 0 = the scaling policy's batch plan (max_local_batch). Default 0.
  int accumulation_steps = 0;
  // Verify once per communicator (at the first step of each generation, before any bucket is
  // launched) that every rank registered the same parameters: one allgather of (parameter count,
  // elements, hash of the names and counts). Ranks that differ all get MismatchError naming the
  // first rank that differs, instead of a hang or a silent mix-up when bucket sizes happen to
  // agree. Encode shapes in the names to check shapes. Default off (edl::torch turns it on).
  bool check_layout = false;
  // Reproducible mode (see the header comment). Default off; programs built for it set it from
  // edl::deterministic() (EDL_DETERMINISTIC=1). Exclusive with fp16_compression.
  bool deterministic = false;
};

// Timing of the last completed step (seconds), for benchmarks and logs.
struct EDL_API OptimizerStepStats {
  double comm_s = 0;        // sum over buckets of launch-to-completion time (convert + allreduce)
  double hidden_s = 0;      // the part of comm_s that ran before the backward pass ended (the
                            // last grad_ready(), or step() when it ended the pass)
  double wait_s = 0;        // time step() blocked waiting for buckets
  double update_s = 0;      // time applying the update
  size_t buckets = 0;       // buckets reduced
  size_t bytes = 0;         // bytes sent into the allreduce (per rank)
  uint64_t samples = 0;     // weighted steps: records trained by all ranks together (else 0)
  // Share of communication hidden behind backward: hidden_s / comm_s (0 without communication).
  double overlap_fraction() const;
};

class EDL_API DistributedOptimizer : public elastic::Stateful {
 public:
  explicit DistributedOptimizer(DistributedOptimizerOptions options = {});
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // --- registration (before the first grad_slot / grad_ready / step) ----------------------------
  // Registers a float32 parameter of `count` elements; returns its index (registration order).
  // grad == nullptr: the gradient lives in the optimizer (write it to grad_slot(index)).
  size_t add_parameter(const std::string& name, float* data, float* grad, size_t count);
  size_t num_parameters() const;
  // Registers a float32 buffer that the forward pass updates (batch-norm running statistics). In the
  // reproducible mode every micro-batch starts from the buffer's value at the start of the step, and
  // step() sets it to the exact mean of the micro-batches' results weighted by their records (the
  // same on every rank). Outside that mode the optimizer leaves it alone. Before the first step.
  void add_buffer(const std::string& name, float* data, size_t count);
  // Where parameter `index`'s gradient lives inside its bucket (valid for the optimizer's life).
  float* grad_slot(size_t index);
  // Number of buckets and the bucket of a parameter (bucket 0 holds the LAST registered ones).
  size_t num_buckets();
  size_t bucket_of(size_t index);

  // --- the training step --------------------------------------------------------------------------
  // Starts the step now when none is in progress (the first grad_ready(), backward_done() or step()
  // does it implicitly): picks the communicator of the step and applies its pending generation, so
  // the answer holds until step() or discard_step(). Returns the number of ranks the step reduces
  // over. A caller that gets 1 may leave its gradients where they are: nothing is summed, and a
  // kNone step then writes nothing (the mean of one rank is its own zero-copy slot, untouched).
  int begin_step();
  // Parameter `index`'s gradient of the current backward pass is final.
  void grad_ready(size_t index);
  // Ends the current backward pass (gradients not reported are taken now). Passes also end by
  // themselves once every parameter was reported.
  void backward_done();
  // Completes the step: ends the last pass, waits for every bucket, averages, applies the update
  // with the hyper-parameters of this step, advances the step counter.
  void step();
  // Weighted mean (the default to use with the shard loader, whose batches differ in size at a
  // shard's or an epoch's tail and may be empty): `samples` records this rank trained in this step,
  // all accumulation passes together, and its gradient is the MEAN over them (each pass's mean
  // loss; passes are averaged). The step then applies sum_r samples_r * mean_r / sum_r samples_r —
  // the gradient of one big batch — instead of the plain mean over ranks. The count rides in the
  // step's last bucket (no extra collective). Call it once per step before the step's backward pass
  // (InvalidArgument after the first bucket was launched); every rank must call it in the same
  // steps (MismatchError otherwise). A step in which no rank had a record leaves the parameters and
  // the optimizer slots untouched (the step counter still advances). Without it: the plain mean.
  // The counts are also checked against the scaling policy's local batch (scaling.batch, default 32):
  // the first step with more samples than planned, or 8 non-empty steps of one generation none of
  // which reaches the plan, logs one warning naming both numbers (docs/optim.md, "Weighted mean").
  void set_step_samples(uint64_t samples);
  // Reproducible mode: the next backward pass is one micro-batch of `samples` records (its gradient
  // the mean over them; 0: an empty micro-batch, which contributes nothing). Ends the micro-batch
  // before it if that one's pass is still open. InvalidArgument outside the reproducible mode; a
  // backward pass there without it is InvalidArgument too. set_step_samples() is ignored in the mode.
  void begin_micro_batch(uint64_t samples);
  // Drops the gradients of the step in progress (after an error or a rollback).
  void discard_step();

  // --- elastic hooks --------------------------------------------------------------------------------
  // Uses `comm` from the next step on (thread-as-rank worlds); applies its generation.
  void set_communicator(std::shared_ptr<Communicator> comm);
  // Applies the rescaling policy once per generation (also called from elastic::State).
  void on_generation(const elastic::GenerationInfo& info) override;
  // Snapshot: rescaler bookkeeping + optimizer slots (momentum / Adam moments + compensation buffer).
  std::string save() override;
  void load(const std::string& snapshot) override;  // DataError when it does not fit the parameters

  // --- introspection ----------------------------------------------------------------------------------
  void set_epoch(int64_t epoch);
  int64_t step_count() const;
  // LR the next step() will use (applies the pending generation first when needed).
  double lr();
  int accumulation_steps();
  const optim::BatchPlan& batch_plan();
  const optim::Rescaler& rescaler() const;
  const OptimizerStepStats& last_step_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl
