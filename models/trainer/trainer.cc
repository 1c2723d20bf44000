// The elastic training program (see trainer.h), as named phases: build the optimizer and the shard
// generator from the options, register the elastic state, then train step by step under
// elastic::run, closing each epoch with an evaluation and a report.
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <edl/data.h>
#include <edl/edl.h>
#include <edl/elastic.h>
#include <edl/optim.h>

#include "datasets.h"
#include "models/mobilenetv2/mobilenetv2.h"
#include "models/resnet20/resnet20.h"
#include "progress.h"
#include "step_log.h"

namespace edl::trainer {
namespace {

std::unique_ptr<models::Model> make_model(const TrainerOptions& o, const data::Shape& shape) {
  models::ModelConfig mc;
  mc.channels = shape.channels;
  mc.height = shape.height;
  mc.width = shape.width;
  mc.classes = 10;
  mc.threads = o.threads;
  mc.seed = o.seed;
  if (o.model == "mobilenetv2") return std::make_unique<models::MobileNetV2>(mc);
  return std::make_unique<models::ResNet20>(mc);
}

double schedule(const TrainerOptions& o, int64_t epoch) {
  if (o.lr_schedule == "const") return o.lr;
  if (o.lr_schedule == "step") {
    double f = 1.0;
    if (epoch >= o.epochs / 2) f *= 0.1;
    if (epoch >= o.epochs * 3 / 4) f *= 0.1;
    return o.lr * f;
  }
  return o.lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(epoch) / o.epochs));  // cosine per epoch
}

// The distributed optimizer: LR follows the world size, momentum compensated on resize.
DistributedOptimizerOptions optimizer_options(const TrainerOptions& o) {
  DistributedOptimizerOptions oo;
  oo.optimizer.kind = OptimizerKind::kSGD;
  oo.optimizer.momentum = o.momentum;
  oo.optimizer.nesterov = o.nesterov;
  oo.optimizer.weight_decay = o.weight_decay;
  oo.scaling.base_lr = o.lr;
  oo.scaling.base_size = o.base_size;
  oo.scaling.schedule = [o](int64_t epoch, int64_t) { return schedule(o, epoch); };
  oo.scaling.lr_scaling = o.lr_scaling == "sqrt" ? optim::LrScaling::kSqrt
                          : o.lr_scaling == "none" ? optim::LrScaling::kNone
                                                   : optim::LrScaling::kLinear;
  oo.scaling.warmup_steps = o.warmup_steps;
  oo.scaling.momentum_compensation = o.momentum_compensation;
  oo.scaling.compensation_steps = o.compensation_steps;
  oo.scaling.batch.mode = optim::BatchMode::kFixedLocal;
  oo.scaling.batch.local_batch = o.batch;
  oo.deterministic = o.deterministic;  // the LR is then the base_size one at every world size
  return oo;
}

// Elastic data shards: each record of an epoch trained exactly once.
data::ShardOptions shard_options(const TrainerOptions& o, uint64_t records) {
  data::ShardOptions so;
  so.records = records;
  so.records_per_shard = static_cast<uint64_t>(o.records_per_shard);
  so.batch_size = static_cast<uint64_t>(o.batch);
  so.seed = o.seed;
  so.epochs = o.epochs;
  so.name = "train-shards";
  so.deterministic = o.deterministic;  // batch_size is then the micro-batch
  so.micro_batches = static_cast<uint64_t>(o.micro_batches);
  return so;
}

// One worker's run: the model, the distributed optimizer, the shard generator and the elastic state
// that ties them together. Construct after edl::init(); run() once.
class Training {
 public:
  explicit Training(const TrainerOptions& o)
      : o_(o),
        d_(open_datasets(o)),
        model_(make_model(o, d_.train->shape())),
        params_(model_->parameters()),
        buffers_(model_->buffers()),
        opt_(optimizer_options(o)),
        shards_(shard_options(o, d_.train_n)),
        progress_(o.epochs, d_.train_n),
        step_log_(o.loss_log_path, o.run_name) {
    for (const auto& p : params_) opt_.add_parameter(p.name, p.data, p.grad, p.count);
    if (o.deterministic)  // batch-norm statistics: the exact mean over the step's micro-batches
      for (const auto& b : buffers_) opt_.add_buffer(b.name, b.data, b.count);
    register_state();
  }

  void run() {
    announce();
    const auto outcome = elastic::run(state_, [&] {
      for (;;) {
        data::StepRecords rec = shards_.next();
        if (rec.end_of_data) break;
        if (rec.epoch - 1 > evaluated_epoch_) finish_epoch(rec.epoch - 1);
        train_step(rec);
        edl::notify_batch_end();
      }
      if (evaluated_epoch_ + 1 < o_.epochs) finish_epoch(o_.epochs - 1);
    });
    if (outcome == elastic::RunOutcome::kLeft) {  // SIGTERM: the others train on; no result of ours to print
      if (o_.verbose) std::printf("left the job at step %lld\n", static_cast<long long>(state_.step));
      return;
    }
    if (talk() && final_acc_ >= 0) {
      std::printf("final test accuracy: %.2f%% (%llu test images, %d worker%s at the end)\n", 100.0 * final_acc_,
                  static_cast<unsigned long long>(d_.test_n), edl::size(), edl::size() == 1 ? "" : "s");
      std::fflush(stdout);
    }
    if (talk()) {
      std::printf("CHECKSUM %016llx\n", static_cast<unsigned long long>(checksum()));
      std::fflush(stdout);
    }
  }

 private:
  // Rank 0 talks (whoever is rank 0 in the current generation); with --verbose every rank does.
  bool talk() const { return o_.verbose || edl::rank() == 0; }

  // The elastic state: everything needed to continue after a failure or a resize.
  void register_state() {
    for (const auto& p : params_) state_.register_tensor("param." + p.name, p.data, p.count, DataType::kFloat32);
    for (const auto& b : buffers_) state_.register_tensor("buffer." + b.name, b.data, b.count, DataType::kFloat32);
    state_.register_tensor("epoch_stats", stats_.data(), stats_.size(), DataType::kFloat64);
    state_.register_scalar("evaluated_epoch", &evaluated_epoch_);
    state_.register_scalar("bn_trained", &bn_trained_);
    state_.register_component("optimizer", &opt_);
    state_.register_component("shards", &shards_);
    if (!o_.checkpoint_dir.empty()) state_.set_checkpoint_dir(o_.checkpoint_dir);
    state_.on_generation([this](const elastic::GenerationInfo& g) {
      if (talk() && (g.size != last_size_ || g.after_failure)) {
        std::printf("generation %llu: %d worker%s (was %d)%s, lr %.4g\n", static_cast<unsigned long long>(g.generation),
                    g.size, g.size == 1 ? "" : "s", g.previous_size, g.after_failure ? " after a failure" : "",
                    opt_.lr());
        std::fflush(stdout);
      }
      last_size_ = g.size;
    });
  }

  // FNV-1a 64 over the parameters, then the buffers (their float bytes, registration order).
  uint64_t checksum() const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const float* data, size_t count) {
      const auto* p = reinterpret_cast<const unsigned char*>(data);
      for (size_t i = 0; i < count * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    };
    for (const auto& p : params_) mix(p.data, p.count);
    for (const auto& b : buffers_) mix(b.data, b.count);
    return h;
  }

  void announce() const {
    if (!talk()) return;
    if (o_.deterministic)
      std::printf("reproducible mode: %d micro-batches of %d records per step (global batch %d) at every world size\n",
                  o_.micro_batches, o_.batch, o_.micro_batches * o_.batch);
    std::printf("%s on %s: %llu training records%s, %llu test records, %d epochs, batch %d per worker, %d thread%s\n",
                model_->name().c_str(), d_.train->name().c_str(), static_cast<unsigned long long>(d_.train_n),
                d_.train_n < d_.train->size() ? " (a subset)" : "", static_cast<unsigned long long>(d_.test_n),
                o_.epochs, o_.batch, o_.threads, o_.threads == 1 ? "" : "s");
  }

  // One optimizer step on this worker's records of the step (none: a zero gradient), then the
  // world's loss / accuracy counters, the --loss-log row and the progress line.
  void train_step(const data::StepRecords& rec) {
    opt_.set_epoch(rec.epoch);
    StepRow srow;  // --loss-log: the hyper-parameters of this step, read before step() advances them
    srow.lr = opt_.lr();
    srow.momentum_gamma = opt_.rescaler().step_params().gamma;
    double local[3] = {0, 0, 0};
    if (o_.deterministic) {
      train_micro_batches(rec, local);
    } else {
      train_records(rec, local);
    }
    opt_.step();
    edl::allreduce(local, 3, ReduceOp::kSum, "train.stats");
    for (int i = 0; i < 3; ++i) stats_[i] += local[i];
    if (local[0] > 0) {
      srow.step = opt_.step_count();
      srow.epoch_progress = static_cast<double>(rec.epoch) + stats_[0] / static_cast<double>(d_.train_n);
      srow.loss = local[1] / local[0];  // world mean over this step's records
      srow.workers = edl::size();
      step_log_.write(edl::rank() == 0, srow);
    }
    progress_.step(talk(), rec.epoch, stats_[0], stats_[0] > 0 ? stats_[1] / stats_[0] : 0.0,
                   stats_[0] > 0 ? stats_[2] / stats_[0] : 0.0);
    if (o_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o_.step_delay_ms));
  }

  // This worker's records of the step as one backward pass (none: a zero gradient), weighted by
  // their number in the optimizer's mean.
  void train_records(const data::StepRecords& rec, double* local) {
    opt_.set_step_samples(rec.records.size());  // weighted mean: short and empty steps count for what they hold
    if (rec.records.empty()) {  // nothing left for this worker in this epoch: contribute a zero gradient
      for (const auto& p : params_) std::fill(p.grad, p.grad + p.count, 0.0f);
      opt_.backward_done();
      return;
    }
    train_batch(rec.records.data(), rec.records.size(), rec.epoch, local);
  }

  // Reproducible mode: each of this worker's micro-batches is a backward pass of its own.
  void train_micro_batches(const data::StepRecords& rec, double* local) {
    for (const data::MicroBatch& mb : rec.micro_batches) {
      opt_.begin_micro_batch(mb.size);
      train_batch(rec.records.data() + mb.begin, mb.size, rec.epoch, local);
    }
  }

  // Forward and backward over n records (augmentation salt: the epoch); local += records, loss sum, correct.
  void train_batch(const uint64_t* records, size_t n, int64_t epoch, double* local) {
    data::assemble_batch(*d_.train, records, n, d_.norm, static_cast<uint64_t>(epoch), &batch_);
    auto res = model_->forward(batch_.images.data(), batch_.labels.data(), static_cast<int>(batch_.size), true);
    model_->backward([&](size_t i) { opt_.grad_ready(i); });
    bn_trained_ = 1;
    local[0] += static_cast<double>(batch_.size);
    local[1] += res.loss * static_cast<double>(batch_.size);
    local[2] += res.correct;
  }

  // Closes an epoch: evaluation when due, one report per epoch (an epoch redone after a rollback is
  // reported once), and fresh counters.
  void finish_epoch(int64_t epoch) {
    const bool last = epoch + 1 >= o_.epochs;
    double acc = -1.0;
    if (last || (epoch + 1) % o_.eval_every == 0)
      acc = evaluate(*model_, d_, buffers_, bn_trained_ != 0, /*average_bn=*/!o_.deterministic);
    const double loss = stats_[0] > 0 ? stats_[1] / stats_[0] : 0.0;
    const double train_acc = stats_[0] > 0 ? stats_[2] / stats_[0] : 0.0;
    if (epoch > reported_epoch_) {
      reported_epoch_ = epoch;
      const double ips = progress_.end_epoch(talk(), epoch, stats_[0], loss, train_acc, acc, edl::size());
      write_epoch_row(epoch, acc, loss, train_acc, ips);
    }
    if (acc >= 0) final_acc_ = acc;
    std::fill(stats_.begin(), stats_.end(), 0.0);
    evaluated_epoch_ = epoch;
  }

  // --json: one row per epoch, appended by whoever is rank 0 when the row is due.
  void write_epoch_row(int64_t epoch, double acc, double loss, double train_acc, double ips) {
    if (o_.json_path.empty() || edl::rank() != 0) return;
    if (!json_.is_open()) json_.open(o_.json_path, std::ios::app);
    char row[512];
    std::snprintf(row, sizeof(row),
                  "{\"run\":\"%s\",\"epoch\":%lld,\"test_acc\":%.6f,\"train_loss\":%.6f,\"train_acc\":%.6f,"
                  "\"images_per_s\":%.1f,\"workers\":%d,\"lr\":%.6g}",
                  o_.run_name.c_str(), static_cast<long long>(epoch + 1), acc, loss, train_acc, ips, edl::size(),
                  opt_.lr());
    json_ << row << '\n';
    json_.flush();
  }

  const TrainerOptions& o_;
  Datasets d_;
  std::unique_ptr<models::Model> model_;
  std::vector<models::ParamRef> params_;
  std::vector<models::BufferRef> buffers_;
  DistributedOptimizer opt_;
  data::ShardGenerator shards_;
  elastic::State state_;
  // Part of the elastic state (restored on a rollback, synced to newcomers):
  std::vector<double> stats_ = std::vector<double>(3, 0.0);  // this epoch, world: records, loss * records, correct
  int64_t evaluated_epoch_ = -1;
  int64_t bn_trained_ = 0;  // 1 once these batch-norm statistics saw a training batch
  // Local only:
  Progress progress_;
  StepLog step_log_;
  std::ofstream json_;
  data::Batch batch_;
  double final_acc_ = -1.0;
  int64_t last_size_ = 0;
  int64_t reported_epoch_ = -1;
};

}  // namespace

int run_training(const TrainerOptions& o) {
  edl::init();
  {
    Training training(o);
    training.run();
  }
  edl::shutdown();
  return 0;
}

}  // namespace edl::trainer
