// DistributedOptimizer's implementation state (private to src/optim): the parameter and bucket
// layout and DistributedOptimizer::Impl, the per-step protocol (passes, launch order, wait, update)
// and momentum compensation. Shared by distributed_optimizer.cc (the public methods) and
// distributed_optimizer_snapshot.cc (save / load). Thread-safety: as DistributedOptimizer (one
// training thread; the engine completes bucket jobs on its own thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "collective/engine.h"
#include "collective/runtime_state.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"
#include "edl/optim.h"
#include "optim/batch_check.h"
#include "optim/bucket_reducer.h"
#include "optim/exact_sum.h"
#include "optim/update.h"

namespace edl {
namespace optim::detail {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Param {
  std::string name;
  float* data = nullptr;
  float* user_grad = nullptr;  // null: the gradient lives in the bucket (grad_slot)
  size_t count = 0;
  size_t bucket = 0;
  size_t offset = 0;  // element offset inside the bucket
  bool reported = false;
  std::vector<float> slot1;  // SGD velocity v / Adam first moment m
  std::vector<float> slot2;  // Adam second moment
  std::vector<float> comp;   // momentum compensation buffer s = mu^(t-t0) v_t0 (during a ramp)
};

struct Bucket {
  std::vector<size_t> params;
  size_t count = 0;
  std::vector<float> buf;
  std::vector<float> accum;   // zero-copy parameters with accumulation: sum of earlier passes
  std::vector<uint16_t> half;  // fp16 wire buffer
  size_t pending = 0;          // parameters not yet final in the last pass
  bool ready = false;
  bool launched = false;
  ReduceJob job;
};

// A buffer the forward pass updates (add_buffer): in the reproducible mode, each micro-batch starts
// from its value at the start of the step and the step ends with the exact mean of their results.
struct StateBuffer {
  std::string name;
  float* data = nullptr;
  size_t count = 0;
  size_t offset = 0;                 // in the flat micro-batch layout (ExactSum)
  std::vector<float> at_step_start;  // the value when the step began
};

// Control values appended to the last bucket: accumulation passes, learning rate, the step's sample
// count and the "weighted" flag (set_step_samples() called on this rank for this step).
constexpr size_t kControl = 4;

}  // namespace optim::detail

struct DistributedOptimizer::Impl {
  using Param = optim::detail::Param;
  using Bucket = optim::detail::Bucket;
  using BucketReducer = optim::detail::BucketReducer;
  using EngineReducer = optim::detail::EngineReducer;
  using ReduceJob = optim::detail::ReduceJob;
  using Reducer = optim::detail::Reducer;
  static double now_s() { return optim::detail::now_s(); }
  static constexpr size_t kControl = optim::detail::kControl;
  DistributedOptimizerOptions opt;
  optim::Rescaler rescaler;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<optim::detail::StateBuffer> state_buffers;
  bool finalized = false;

  std::shared_ptr<Communicator> explicit_comm;  // options.comm or set_communicator()
  std::shared_ptr<Communicator> comm;           // the one in use (null: world of 1)
  std::unique_ptr<Reducer> reducer;             // null when the world has one member
  std::shared_ptr<collective::Engine> engine;   // the global world's engine (null otherwise)
  std::shared_ptr<Communicator> layout_checked;  // check_layout: the communicator already verified
  std::string name_prefix;                      // "edl.optim.<n>." (n-th optimizer of this process)
  int world_size = 1;

  bool in_step = false;
  int passes = 1;
  int pass = 0;
  size_t reported = 0;
  size_t next_launch = 0;
  double step_start = 0;
  double backward_end = 0;  // entry of the last grad_ready(), or of step() when it ended the pass
  int64_t comp_t0 = -1;  // resize step whose compensation buffer was taken
  double step_lr = 0;    // learning rate of the step in progress
  std::optional<uint64_t> next_samples;  // set_step_samples() before the step began
  std::optional<uint64_t> step_samples;  // the step in progress: weighted mean when set
  double total_samples = 0;              // sum over the ranks (weighted steps; after the allreduce)
  optim::detail::BatchCheck batch_check;  // weighted steps' records against the policy's local batch
  OptimizerStepStats stats;
  // Reproducible mode (opt.deterministic; deterministic_step.cc).
  optim::detail::ExactSum exact;         // this step's micro-batch gradients and buffers
  std::optional<uint64_t> micro_samples; // begin_micro_batch() of the pass in progress
  std::vector<double> maxima;            // per tensor, then the learning-rate check
  std::vector<int64_t> sums;             // the step's sum on the grid, then records, micro-batches, ranks
  std::vector<float> exact_mean;         // the mean in the flat layout

  explicit Impl(DistributedOptimizerOptions o) : opt(std::move(o)), rescaler(opt.scaling), explicit_comm(opt.comm) {
    static std::atomic<uint64_t> instances{0};
    name_prefix = "edl.optim." + std::to_string(instances++) + ".";
    EDL_CHECK(opt.bucket_cap_bytes >= sizeof(float), InvalidArgument,
              "DistributedOptimizerOptions.bucket_cap_bytes must be >= 4, got " + std::to_string(opt.bucket_cap_bytes));
    EDL_CHECK(opt.accumulation_steps >= 0, InvalidArgument,
              "DistributedOptimizerOptions.accumulation_steps must be >= 0, got " +
                  std::to_string(opt.accumulation_steps));
    EDL_CHECK(!(opt.local && opt.comm), InvalidArgument,
              "DistributedOptimizerOptions: local = true and a communicator are exclusive");
    const auto& o2 = opt.optimizer;
    EDL_CHECK(o2.momentum >= 0 && o2.momentum < 1, InvalidArgument,
              "OptimizerOptions.momentum must be in [0, 1), got " + std::to_string(o2.momentum));
    EDL_CHECK(o2.weight_decay >= 0, InvalidArgument,
              "OptimizerOptions.weight_decay must be >= 0, got " + std::to_string(o2.weight_decay));
    EDL_CHECK(o2.beta1 >= 0 && o2.beta1 < 1 && o2.beta2 >= 0 && o2.beta2 < 1, InvalidArgument,
              "OptimizerOptions.beta1 / beta2 must be in [0, 1)");
    EDL_CHECK(o2.eps > 0, InvalidArgument, "OptimizerOptions.eps must be > 0");
    EDL_CHECK(!o2.nesterov || o2.momentum > 0, InvalidArgument, "OptimizerOptions.nesterov needs momentum > 0");
    EDL_CHECK(!(opt.deterministic && opt.fp16_compression), InvalidArgument,
              "DistributedOptimizerOptions: deterministic and fp16_compression are exclusive (the exact sum needs the "
              "float32 gradients)");
  }

  ~Impl() { drain(); }

  bool is_sgd() const { return opt.optimizer.kind == OptimizerKind::kSGD; }

  void finalize() {
    if (finalized) return;
    EDL_CHECK(!params.empty(), InvalidArgument, "DistributedOptimizer: no parameter registered");
    const size_t cap = std::max<size_t>(1, opt.bucket_cap_bytes / sizeof(float));
    for (size_t k = params.size(); k-- > 0;) {  // reverse registration order
      Param& p = params[k];
      if (buckets.empty() || !opt.fuse || (buckets.back().count > 0 && buckets.back().count + p.count > cap))
        buckets.emplace_back();
      Bucket& b = buckets.back();
      p.bucket = buckets.size() - 1;
      p.offset = b.count;
      b.params.push_back(k);
      b.count += p.count;
    }
    for (auto& b : buckets) b.buf.assign(b.count, 0.0f);
    // The last bucket carries the control values (accumulation passes, learning rate, sample count,
    // weighted flag) so that ranks whose hyper-parameters diverged fail with MismatchError instead of
    // silently drifting apart, and the weighted mean gets its denominator from the same allreduce.
    buckets.back().buf.resize(buckets.back().count + kControl, 0.0f);
    if (opt.deterministic) {
      exact_layout();
      exact_mean.assign(exact.elements(), 0.0f);
    }
    for (auto& p : params) {
      if (opt.optimizer.kind == OptimizerKind::kNone) continue;  // reduce only: no slots
      if (is_sgd()) {
        if (opt.optimizer.momentum > 0) p.slot1.assign(p.count, 0.0f);
      } else {
        p.slot1.assign(p.count, 0.0f);
        p.slot2.assign(p.count, 0.0f);
      }
    }
    finalized = true;
  }

  // Picks the communicator of this step and applies its generation (idempotent per generation).
  void resolve() {
    EDL_CHECK(!in_step, InvalidArgument, "DistributedOptimizer: cannot change the communicator during a step");
    std::shared_ptr<Communicator> next;
    engine.reset();
    if (!opt.local) {
      if (explicit_comm) {
        next = explicit_comm;
      } else {  // the process-global world: its engine thread owns the communicator
        auto gen = detail::Runtime::instance().generation();
        next = gen->comm;
        engine = gen->engine;
      }
    }
    if (next != comm) {
      reducer.reset();
      comm = next;
      world_size = comm ? comm->size() : 1;
      if (comm && comm->size() > 1) {
        if (engine) {
          reducer = std::make_unique<EngineReducer>(engine);
        } else {
          reducer = std::make_unique<BucketReducer>(comm);
        }
      }
    }
    if (comm) {
      elastic::GenerationInfo info;
      info.generation = comm->generation();
      info.rank = comm->rank();
      info.size = policy_size(comm->size());
      info.previous_size = rescaler.has_generation() ? rescaler.size() : 0;
      rescaler.apply_generation(info);
    } else if (!rescaler.has_generation()) {
      elastic::GenerationInfo info;  // world of one: generation 0, size 1
      info.size = policy_size(1);
      rescaler.apply_generation(info);
    }
  }

  // The world size the scaling policy sees: the real one, or in the reproducible mode always
  // base_size (the global batch is fixed, so the LR is the same at every world size).
  int policy_size(int size) const { return opt.deterministic ? std::max(1, opt.scaling.base_size) : size; }

  // check_layout: one allgather of (parameters, elements, hash of names and counts) per communicator.
  void verify_layout() {
    if (!opt.check_layout || !comm || comm->size() < 2 || layout_checked == comm) return;
    uint64_t hash = 1469598103934665603ull, elements = 0;  // FNV-1a
    auto mix = [&](const void* bytes, size_t n) {
      for (size_t i = 0; i < n; ++i) hash = (hash ^ static_cast<const uint8_t*>(bytes)[i]) * 1099511628211ull;
    };
    for (const auto& p : params) {
      mix(p.name.data(), p.name.size());
      mix(&p.count, sizeof p.count);
      elements += p.count;
    }
    const int64_t mine[3] = {static_cast<int64_t>(params.size()), static_cast<int64_t>(elements),
                             static_cast<int64_t>(hash)};
    std::vector<uint8_t> all;
    if (engine) {
      engine->allgather(mine, 3, DataType::kInt64, &all, nullptr, name_prefix + "layout", true).wait();
    } else {
      comm->allgatherv(mine, 3, DataType::kInt64, all);
    }
    EDL_CHECK(all.size() == 3 * sizeof(int64_t) * static_cast<size_t>(comm->size()), MismatchError,
              "DistributedOptimizer: parameter layout check got " + std::to_string(all.size()) + " bytes");
    std::vector<int64_t> v(all.size() / sizeof(int64_t));
    std::memcpy(v.data(), all.data(), all.size());
    for (int r = 0; r < comm->size(); ++r) {
      const int64_t* o = v.data() + 3 * r;
      if (o[0] == v[0] && o[1] == v[1] && o[2] == v[2]) continue;
      std::string first;
      for (const auto& p : params) first += (first.empty() ? "" : ", ") + p.name;
      if (first.size() > 300) first = first.substr(0, 300) + "...";
      throw MismatchError("DistributedOptimizer: ranks registered different parameters: rank 0 has " +
                          std::to_string(v[0]) + " parameters / " + std::to_string(v[1]) + " elements, rank " +
                          std::to_string(r) + " has " + std::to_string(o[0]) + " / " + std::to_string(o[1]) +
                          (o[0] == v[0] && o[1] == v[1] ? " (same counts, different names or shapes)" : "") +
                          "; this rank (" + std::to_string(comm->rank()) + ") has [" + first + "]");
    }
    layout_checked = comm;
  }

  void begin_step() {
    if (in_step) return;
    finalize();
    resolve();
    verify_layout();
    passes = opt.accumulation_steps > 0 ? opt.accumulation_steps : rescaler.batch_plan().accumulation_steps;
    if (opt.deterministic) {  // any number of micro-batches, each one pass
      passes = std::numeric_limits<int>::max();
      exact.clear();
      micro_samples.reset();
      for (auto& b : state_buffers) b.at_step_start.assign(b.data, b.data + b.count);
    }
    step_lr = rescaler.step_params().lr;
    step_samples = next_samples;
    next_samples.reset();
    total_samples = step_samples ? static_cast<double>(*step_samples) : 0.0;
    if (step_samples) check_batch(*step_samples);
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.ready = false;
      b.launched = false;
    }
    for (auto& p : params) p.reported = false;
    pass = 0;
    reported = 0;
    next_launch = 0;
    stats = OptimizerStepStats{};
    step_start = now_s();
    in_step = true;
  }

  // Logs once when the records of weighted steps do not match the policy's local batch (batch_check.h):
  // this worker's records when a step begins, or with straggler rebalancing (the workers' batches
  // differ by design) the step's records summed over the workers, when the allreduce has summed them.
  void check_batch(uint64_t samples) {
    if (!rebalancing()) log_batch_warning(batch_check.observe(samples, rescaler.batch_plan(), rescaler.generation()));
  }
  void check_batch_sum() {
    if (step_samples && rebalancing())
      log_batch_warning(batch_check.observe_global(static_cast<uint64_t>(total_samples), rescaler.batch_plan(),
                                                   rescaler.generation()));
  }
  static bool rebalancing() {
    const auto& rt = detail::Runtime::instance();
    return rt.initialized() && rt.config().rebalance_stragglers;
  }
  static void log_batch_warning(const std::string& warning) {
    if (!warning.empty()) {
      EDL_LOG(1) << warning;
    }
  }

  void take_grad(Param& p) {
    Bucket& b = buckets[p.bucket];
    float* slot = b.buf.data() + p.offset;
    const size_t n = p.count;
    if (p.user_grad != nullptr) {
      if (pass == 0 || opt.deterministic) {
        std::memcpy(slot, p.user_grad, n * sizeof(float));
      } else {
        for (size_t i = 0; i < n; ++i) slot[i] += p.user_grad[i];
      }
    } else if (passes > 1 && !opt.deterministic) {  // zero-copy: the model overwrote the slot; keep the sum of earlier passes aside
      if (b.accum.size() != b.count) b.accum.assign(b.count, 0.0f);
      float* acc = b.accum.data() + p.offset;
      if (pass == 0) {
        std::memcpy(acc, slot, n * sizeof(float));
      } else if (pass < passes - 1) {
        for (size_t i = 0; i < n; ++i) acc[i] += slot[i];
      } else {
        for (size_t i = 0; i < n; ++i) slot[i] += acc[i];
      }
    }
    p.reported = true;
    ++reported;
    if (pass == passes - 1 && --b.pending == 0) b.ready = true;
  }

  void launch_ready(bool force) {
    if (!opt.overlap && !force) return;
    while (next_launch < buckets.size() && buckets[next_launch].ready) {
      Bucket& b = buckets[next_launch++];
      b.launched = true;
      b.job = ReduceJob{};
      if (!reducer) {
        b.job.done = true;
        continue;
      }
      b.job.data = b.buf.data();
      const bool last = next_launch == buckets.size();
      b.job.count = b.count + (last ? kControl : 0);
      if (step_samples) {  // weighted mean: this rank contributes samples x its mean gradient
        const float w = static_cast<float>(*step_samples) / static_cast<float>(passes);
        if (w != 1.0f)
          for (size_t i = 0; i < b.count; ++i) b.buf[i] *= w;
      }
      const float prescale = wire_prescale();
      if (last) {  // written so that they read their own values after the fp16 prescale
        b.buf[b.count] = static_cast<float>(passes) / prescale;
        b.buf[b.count + 1] = static_cast<float>(lr_code()) / prescale;
        b.buf[b.count + 2] = static_cast<float>(step_samples ? *step_samples : 0) / prescale;
        b.buf[b.count + 3] = (step_samples ? 1.0f : 0.0f) / prescale;
      }
      b.job.name = name_prefix + std::to_string(next_launch - 1);
      if (opt.fp16_compression) {
        if (b.half.size() != b.job.count) b.half.assign(b.job.count, 0);
        b.job.half = b.half.data();
        b.job.prescale = prescale;
      }
      stats.bytes += b.job.count * (opt.fp16_compression ? 2 : 4);
      reducer->launch(&b.job);
    }
  }

  void end_pass() {
    for (auto& p : params)
      if (!p.reported) take_grad(p);
    if (opt.deterministic) keep_micro_batch();
    ++pass;
    reported = 0;
    for (auto& p : params) p.reported = false;
    if (pass == passes) launch_ready(false);
  }

  void grad_ready(size_t index) {
    EDL_CHECK(index < params.size(), InvalidArgument,
              "DistributedOptimizer::grad_ready: parameter index " + std::to_string(index) + " out of range (" +
                  std::to_string(params.size()) + " registered)");
    begin_step();
    backward_end = now_s();
    EDL_CHECK(pass < passes, InvalidArgument,
              "DistributedOptimizer::grad_ready(" + std::to_string(index) + "): all " + std::to_string(passes) +
                  " backward passes of this step are done; call step()");
    Param& p = params[index];
    EDL_CHECK(!p.reported, InvalidArgument,
              "DistributedOptimizer::grad_ready: parameter " + std::to_string(index) + " ('" + p.name +
                  "') reported twice in one backward pass");
    take_grad(p);
    if (pass == passes - 1) launch_ready(false);
    if (reported == params.size()) end_pass();
  }

  // Waits for every launched job (their buffers must not be touched while the thread owns them).
  void drain() {
    if (!reducer) return;
    for (size_t b = 0; b < next_launch && b < buckets.size(); ++b) reducer->wait(&buckets[b].job);
  }

  void discard() {
    if (!in_step) return;
    drain();
    in_step = false;
  }

  // Timeline (EDL_TIMELINE), "optimizer" lane: "backward" from the step's first gradient to its
  // last, then "step" (args step, buckets, bytes) with "wait" (the allreduces) and "update" inside.
  void trace_step(double t_entry, double t_wait, double t_update, double t_end) const {
    using timeline::Event;
    using timeline::Lane;
    using timeline::steady_seconds_to_us;
    const int64_t step_no = rescaler.step();
    Event e[4] = {Event(Lane::kOptimizer, "backward"), Event(Lane::kOptimizer, "step"),
                  Event(Lane::kOptimizer, "wait"), Event(Lane::kOptimizer, "update")};
    e[0].span(steady_seconds_to_us(step_start), steady_seconds_to_us(std::min(backward_end, t_entry)))
        .arg("step", step_no).arg("passes", passes);
    e[1].span(steady_seconds_to_us(t_entry), steady_seconds_to_us(t_end)).arg("step", step_no);
    e[1].arg("buckets", static_cast<int64_t>(buckets.size())).arg("bytes", static_cast<int64_t>(stats.bytes));
    e[1].arg("world_size", world_size);
    e[2].span(steady_seconds_to_us(t_wait), steady_seconds_to_us(t_update)).arg("step", step_no);
    e[3].span(steady_seconds_to_us(t_update), steady_seconds_to_us(t_end)).arg("step", step_no);
    timeline::record(e, 4);
  }

  void step() {
    if (opt.deterministic) return exact_step();
    const double t_entry = now_s();
    begin_step();
    if (pass < passes) {
      backward_end = now_s();
      end_pass();
    }
    if (pass < passes) {
      int done = pass;
      discard();
      throw InvalidArgument("DistributedOptimizer::step() after " + std::to_string(done) + " of " +
                            std::to_string(passes) +
                            " gradient-accumulation passes: call backward_done() after each backward pass");
    }
    launch_ready(true);
    double t_wait = now_s();
    std::exception_ptr error;
    if (reducer) {
      for (auto& b : buckets) {
        reducer->wait(&b.job);
        stats.comm_s += b.job.busy_s;
        stats.hidden_s += std::max(0.0, std::min(b.job.end_s, backward_end) - b.job.start_s);
        if (b.job.error && !error) error = b.job.error;
      }
    }
    stats.wait_s = now_s() - t_wait;
    stats.buckets = buckets.size();
    in_step = false;
    if (error) std::rethrow_exception(error);
    if (reducer) check_control();
    double t_update = now_s();
    // A weighted step in which no rank had a record (an epoch's tail) changes nothing.
    if (!(step_samples && total_samples <= 0)) apply_update();
    stats.update_s = now_s() - t_update;
    stats.samples = step_samples ? static_cast<uint64_t>(total_samples) : 0;
    check_batch_sum();
    if (timeline::on()) trace_step(t_entry, t_wait, t_update, t_update + stats.update_s);
    rescaler.advance();
  }

  // Factor applied to a bucket before float16 conversion (the same on every rank, so the sum stays
  // a sum): 1 / (size * passes), or for a weighted step 1 / (size * planned local batch), which
  // keeps the float16 values near the size of one gradient. 1 without compression.
  float wire_prescale() {
    if (!opt.fp16_compression) return 1.0f;
    if (!step_samples) return 1.0f / static_cast<float>(world_size * passes);
    const int local = rescaler.batch_plan().local_batch;
    return 1.0f / static_cast<float>(world_size * std::max(1, local));
  }

  // The learning rate as sent: itself in float32; log2 in float16, whose range (6e-5 .. 65504)
  // would flush small learning rates to zero (the average then agrees to ~1% of the LR).
  double lr_code() const {
    if (!opt.fp16_compression) return static_cast<float>(step_lr);
    return step_lr > 0 ? std::log2(step_lr) : -1000.0;
  }

  // Every rank must have used the same number of accumulation passes and the same learning rate.
  void check_control() {
    const Bucket& b = buckets.back();
    const double sum_passes = b.buf[b.count], sum_lr = b.buf[b.count + 1];
    const double sum_samples = b.buf[b.count + 2], sum_weighted = b.buf[b.count + 3];
    const double expect_passes = static_cast<double>(world_size) * passes;
    const double tol = opt.fp16_compression ? 5e-3 : 1e-5;
    const double own = lr_code(), avg = sum_lr / world_size;
    const bool lr_ok = opt.fp16_compression ? std::fabs(avg - own) <= 0.02
                                            : std::fabs(avg - own) <= tol * std::fabs(own) + 1e-12;
    const double avg_lr = opt.fp16_compression ? std::exp2(avg) : avg;
    EDL_CHECK(std::fabs(sum_passes - expect_passes) <= tol * expect_passes, MismatchError,
              "DistributedOptimizer: ranks disagree on gradient-accumulation passes per step: this rank (" +
                  std::to_string(comm ? comm->rank() : 0) + ") used " + std::to_string(passes) +
                  ", the average over " + std::to_string(world_size) + " ranks is " +
                  std::to_string(sum_passes / world_size));
    const double want_weighted = step_samples ? world_size : 0.0;
    EDL_CHECK(std::fabs(sum_weighted - want_weighted) <= 0.5, MismatchError,
              "DistributedOptimizer: ranks disagree on the weighted mean at step " + std::to_string(rescaler.step()) +
                  ": this rank (" + std::to_string(comm ? comm->rank() : 0) + ") " +
                  (step_samples ? "called" : "did not call") + " set_step_samples(), " +
                  std::to_string(static_cast<int>(std::lround(sum_weighted))) + " of " + std::to_string(world_size) +
                  " ranks did");
    if (step_samples) total_samples = std::max(0.0, std::round(sum_samples));
    EDL_CHECK(lr_ok, MismatchError,
              "DistributedOptimizer: ranks disagree on the learning rate of step " + std::to_string(rescaler.step()) +
                  ": this rank (" + std::to_string(comm ? comm->rank() : 0) + ") uses " + std::to_string(step_lr) +
                  ", the average over " + std::to_string(world_size) + " ranks is " +
                  std::to_string(avg_lr) + " (different scaling policies or rescaler states?)");
  }

  void apply_update() {
    const optim::StepParams sp = rescaler.step_params();  // lr: step_lr, fixed when the step began
    const bool prescaled = opt.fp16_compression && reducer != nullptr;
    float grad_scale = prescaled ? 1.0f : 1.0f / static_cast<float>(world_size * passes);
    if (opt.deterministic) grad_scale = 1.0f;  // the buckets hold the exact mean already
    if (step_samples && reducer && !opt.deterministic) {  // weighted: sum over ranks of samples x mean gradient, / all samples
      const double p = prescaled ? wire_prescale() : 1.0;
      grad_scale = static_cast<float>(1.0 / (total_samples * p));
    }
    const auto& o = opt.optimizer;
    if (o.kind == OptimizerKind::kNone) {  // reduce only: the mean gradient goes back to the caller
      for (auto& p : params) {
        float* g = buckets[p.bucket].buf.data() + p.offset;
        float* out = p.user_grad != nullptr ? p.user_grad : g;
        if (out == g && grad_scale == 1.0f) continue;  // a world of one (or fp16-prescaled): already the mean
        for (size_t i = 0; i < p.count; ++i) out[i] = g[i] * grad_scale;
      }
    } else if (is_sgd()) {
      optim::detail::SgdStep s;
      s.lr = static_cast<float>(step_lr);
      s.momentum = static_cast<float>(o.momentum);
      s.weight_decay = static_cast<float>(o.weight_decay);
      s.nesterov = o.nesterov;
      s.grad_scale = grad_scale;
      const bool compensate = sp.compensating && o.momentum > 0;
      const int64_t t0 = rescaler.resize_step();
      if (compensate && comp_t0 != t0) {  // first step of a ramp: keep v_t0 aside
        for (auto& p : params) p.comp = p.slot1;
        comp_t0 = t0;
      }
      s.comp_delta = compensate ? static_cast<float>(sp.gamma - sp.prev_gamma) : 0.0f;
      for (auto& p : params) {
        float* comp = compensate && !p.comp.empty() ? p.comp.data() : nullptr;
        sgd_update(p.data, p.slot1.empty() ? nullptr : p.slot1.data(), comp,
                   buckets[p.bucket].buf.data() + p.offset, p.count, s);
      }
      if (compensate && rescaler.step() - t0 >= rescaler.policy().compensation_steps) {
        for (auto& p : params) std::vector<float>().swap(p.comp);  // ramp finished: gamma reached k
      }
    } else {
      optim::detail::AdamStep s;
      const double t = static_cast<double>(rescaler.step() + 1);
      s.lr = static_cast<float>(step_lr);
      s.beta1 = static_cast<float>(o.beta1);
      s.beta2 = static_cast<float>(o.beta2);
      s.eps = static_cast<float>(o.eps);
      s.weight_decay = static_cast<float>(o.weight_decay);
      s.decoupled = o.kind == OptimizerKind::kAdamW;
      s.grad_scale = grad_scale;
      s.bias_correction1 = static_cast<float>(1.0 - std::pow(o.beta1, t));
      s.bias_correction2 = static_cast<float>(1.0 - std::pow(o.beta2, t));
      for (auto& p : params)
        adam_update(p.data, p.slot1.data(), p.slot2.data(), buckets[p.bucket].buf.data() + p.offset, p.count, s);
    }
  }

  // Reproducible mode (deterministic_step.cc).
  void exact_layout();
  void begin_micro_batch(uint64_t samples);
  void keep_micro_batch();
  void exact_collective(void* data, size_t count, DataType type, ReduceOp op, const char* tag);
  void agree_maxima();
  uint64_t exact_sum();
  void exact_step();
  void restore_buffers();
};

}  // namespace edl
