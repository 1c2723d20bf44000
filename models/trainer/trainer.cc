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

#include "models/mobilenetv2/mobilenetv2.h"
#include "models/resnet20/resnet20.h"
#include "progress.h"
#include "step_log.h"

namespace edl::trainer {
namespace {

using Clock = std::chrono::steady_clock;

struct Datasets {
  std::shared_ptr<data::Dataset> train;
  std::shared_ptr<data::Dataset> test;
  uint64_t train_n = 0;
  uint64_t test_offset = 0;  // test record i is test->pixels(test_offset + i)
  uint64_t test_n = 0;
  data::BatchOptions norm;
};

Datasets open_datasets(const TrainerOptions& o) {
  Datasets d;
  if (o.dataset == "fashion-mnist") {
    std::string dir = o.data_path.empty() ? data::kFashionMnistDir : o.data_path;
    d.train = data::open_fashion_mnist(dir, true);
    d.test = data::open_fashion_mnist(dir, false);
    d.norm = data::fashion_mnist_normalization();
  } else if (o.dataset == "cifar10") {
    if (o.data_path.empty()) throw InvalidArgument("--dataset cifar10 needs --data-path (directory with data_batch_*.bin)");
    std::vector<std::string> files;
    for (int i = 1; i <= 5; ++i) files.push_back(o.data_path + "/data_batch_" + std::to_string(i) + ".bin");
    d.train = data::open_cifar10(files);
    d.test = data::open_cifar10({o.data_path + "/test_batch.bin"});
    d.norm = data::cifar10_normalization(o.augment);
  } else {  // synthetic: one deterministic dataset, the last 20% held out for testing
    data::SyntheticOptions so;
    so.records = 12000;
    so.shape = {1, 28, 28};
    so.seed = o.seed;
    d.train = data::make_synthetic(so);
    d.test = d.train;
    d.norm = data::BatchOptions{};
  }
  uint64_t train_total = d.train->size();
  uint64_t test_total = d.test->size();
  if (o.dataset == "synthetic") {
    train_total = d.train->size() * 4 / 5;
    d.test_offset = train_total;
    test_total = d.train->size() - train_total;
  }
  d.train_n = o.train_records > 0 ? std::min<uint64_t>(o.train_records, train_total) : train_total;
  d.test_n = o.test_records > 0 ? std::min<uint64_t>(o.test_records, test_total) : test_total;
  d.norm.seed = o.seed;
  return d;
}

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

// Evaluates the first test_n test records, split across ranks; returns the world's accuracy.
double evaluate(models::Model& model, const Datasets& d, const std::vector<models::BufferRef>& buffers,
                bool bn_trained) {
  // Batch-norm running statistics differ slightly between workers: evaluate with their average over
  // the workers whose statistics saw training batches (a worker that got no shard yet keeps the
  // initial mean 0 / variance 1, which must not dilute the others').
  double weight = bn_trained ? 1.0 : 0.0;
  edl::allreduce(&weight, 1, ReduceOp::kSum, "eval.bn_weight");
  for (const auto& b : buffers) {
    if (weight > 0 && !bn_trained) std::fill(b.data, b.data + b.count, 0.0f);
    edl::allreduce(b.data, b.count, ReduceOp::kSum, "eval." + b.name);
    if (weight > 0) for (size_t i = 0; i < b.count; ++i) b.data[i] /= static_cast<float>(weight);
  }
  const int r = edl::rank(), n = edl::size();
  std::vector<uint64_t> mine;
  for (uint64_t i = static_cast<uint64_t>(r); i < d.test_n; i += static_cast<uint64_t>(n)) mine.push_back(d.test_offset + i);
  data::Batch batch;
  std::vector<int32_t> pred;
  int64_t counts[2] = {0, static_cast<int64_t>(mine.size())};
  const size_t kEvalBatch = 200;
  for (size_t s = 0; s < mine.size(); s += kEvalBatch) {
    size_t m = std::min(kEvalBatch, mine.size() - s);
    data::BatchOptions eval_norm = d.norm;
    eval_norm.augment = false;
    data::assemble_batch(*d.test, mine.data() + s, m, eval_norm, 0, &batch);
    pred.resize(m);
    model.predict(batch.images.data(), static_cast<int>(m), pred.data());
    for (size_t i = 0; i < m; ++i) counts[0] += pred[i] == batch.labels[i];
  }
  edl::allreduce(counts, 2, ReduceOp::kSum, "eval.counts");
  return counts[1] > 0 ? static_cast<double>(counts[0]) / static_cast<double>(counts[1]) : 0.0;
}

}  // namespace

int run_training(const TrainerOptions& o) {
  edl::init();
  // Rank 0 talks (whoever is rank 0 in the current generation); with --verbose every rank does.
  auto talk = [&o] { return o.verbose || edl::rank() == 0; };
  Datasets d = open_datasets(o);
  auto model = make_model(o, d.train->shape());
  auto params = model->parameters();
  auto buffers = model->buffers();

  // --- the distributed optimizer: LR follows the world size, momentum compensated on resize ------
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
  DistributedOptimizer opt(oo);
  for (const auto& p : params) opt.add_parameter(p.name, p.data, p.grad, p.count);

  // --- elastic data shards: each record of an epoch trained exactly once -----------------------
  data::ShardOptions so;
  so.records = d.train_n;
  so.records_per_shard = static_cast<uint64_t>(o.records_per_shard);
  so.batch_size = static_cast<uint64_t>(o.batch);
  so.seed = o.seed;
  so.epochs = o.epochs;
  so.name = "train-shards";
  data::ShardGenerator shards(so);

  // --- the elastic state: everything needed to continue after a failure or a resize -------------
  elastic::State state;
  for (const auto& p : params) state.register_tensor("param." + p.name, p.data, p.count, DataType::kFloat32);
  for (const auto& b : buffers) state.register_tensor("buffer." + b.name, b.data, b.count, DataType::kFloat32);
  std::vector<double> stats(3, 0.0);  // this epoch, world totals: records, loss * records, correct
  state.register_tensor("epoch_stats", stats.data(), stats.size(), DataType::kFloat64);
  int64_t evaluated_epoch = -1;
  state.register_scalar("evaluated_epoch", &evaluated_epoch);
  int64_t bn_trained = 0;  // 1 once these batch-norm statistics saw a training batch (synced with them)
  state.register_scalar("bn_trained", &bn_trained);
  state.register_component("optimizer", &opt);
  state.register_component("shards", &shards);
  if (!o.checkpoint_dir.empty()) state.set_checkpoint_dir(o.checkpoint_dir);

  Progress progress(o.epochs, d.train_n);
  std::ofstream json;  // opened by whoever is rank 0 when a row is due
  StepLog step_log(o.loss_log_path, o.run_name);
  double final_acc = -1.0;
  int64_t last_size = 0;
  int64_t reported_epoch = -1;  // not part of the state: an epoch redone after a rollback is reported once
  state.on_generation([&](const elastic::GenerationInfo& g) {
    if (talk() && (g.size != last_size || g.after_failure)) {
      std::printf("generation %llu: %d worker%s (was %d)%s, lr %.4g\n", static_cast<unsigned long long>(g.generation),
                  g.size, g.size == 1 ? "" : "s", g.previous_size, g.after_failure ? " after a failure" : "", opt.lr());
      std::fflush(stdout);
    }
    last_size = g.size;
  });
  if (talk())
    std::printf("%s on %s: %llu training records%s, %llu test records, %d epochs, batch %d per worker, %d thread%s\n",
                model->name().c_str(), d.train->name().c_str(), static_cast<unsigned long long>(d.train_n),
                d.train_n < d.train->size() ? " (a subset)" : "", static_cast<unsigned long long>(d.test_n), o.epochs,
                o.batch, o.threads, o.threads == 1 ? "" : "s");

  auto finish_epoch = [&](int64_t epoch) {
    bool last = epoch + 1 >= o.epochs;
    double acc = -1.0;
    if (last || (epoch + 1) % o.eval_every == 0) acc = evaluate(*model, d, buffers, bn_trained != 0);
    double loss = stats[0] > 0 ? stats[1] / stats[0] : 0.0;
    double train_acc = stats[0] > 0 ? stats[2] / stats[0] : 0.0;
    if (epoch > reported_epoch) {
      reported_epoch = epoch;
      double ips = progress.end_epoch(talk(), epoch, stats[0], loss, train_acc, acc, edl::size());
      if (!o.json_path.empty() && edl::rank() == 0 && !json.is_open()) json.open(o.json_path, std::ios::app);
      if (json.is_open() && edl::rank() == 0) {
        char row[512];
        std::snprintf(row, sizeof(row),
                    "{\"run\":\"%s\",\"epoch\":%lld,\"test_acc\":%.6f,\"train_loss\":%.6f,\"train_acc\":%.6f,"
                    "\"images_per_s\":%.1f,\"workers\":%d,\"lr\":%.6g}",
                    o.run_name.c_str(), static_cast<long long>(epoch + 1), acc, loss, train_acc, ips, edl::size(),
                    opt.lr());
        json << row << '\n';
        json.flush();
      }
    }
    if (acc >= 0) final_acc = acc;
    std::fill(stats.begin(), stats.end(), 0.0);
    evaluated_epoch = epoch;
  };

  data::Batch batch;
  data::BatchOptions train_norm = d.norm;
  elastic::run(state, [&] {
    for (;;) {
      data::StepRecords rec = shards.next();
      if (rec.end_of_data) break;
      if (rec.epoch - 1 > evaluated_epoch) finish_epoch(rec.epoch - 1);
      opt.set_epoch(rec.epoch);
      StepRow srow;  // --loss-log: the hyper-parameters of this step, read before step() advances them
      srow.lr = opt.lr();
      srow.momentum_gamma = opt.rescaler().step_params().gamma;
      double local[3] = {0, 0, 0};
      opt.set_step_samples(rec.records.size());  // weighted mean: short and empty steps count for what they hold
      if (!rec.records.empty()) {
        data::assemble_batch(*d.train, rec.records.data(), rec.records.size(), train_norm,
                             static_cast<uint64_t>(rec.epoch), &batch);
        auto res = model->forward(batch.images.data(), batch.labels.data(), static_cast<int>(batch.size), true);
        model->backward([&](size_t i) { opt.grad_ready(i); });
        bn_trained = 1;
        local[0] = static_cast<double>(batch.size);
        local[1] = res.loss * static_cast<double>(batch.size);
        local[2] = res.correct;
      } else {  // nothing left for this worker in this epoch: contribute a zero gradient
        for (const auto& p : params) std::fill(p.grad, p.grad + p.count, 0.0f);
        opt.backward_done();
      }
      opt.step();
      edl::allreduce(local, 3, ReduceOp::kSum, "train.stats");
      for (int i = 0; i < 3; ++i) stats[i] += local[i];
      if (local[0] > 0) {
        srow.step = opt.step_count();
        srow.epoch_progress = static_cast<double>(rec.epoch) + stats[0] / static_cast<double>(d.train_n);
        srow.loss = local[1] / local[0];  // world mean over this step's records
        srow.workers = edl::size();
        step_log.write(edl::rank() == 0, srow);
      }
      progress.step(talk(), rec.epoch, stats[0], stats[0] > 0 ? stats[1] / stats[0] : 0.0,
                    stats[0] > 0 ? stats[2] / stats[0] : 0.0);
      if (o.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.step_delay_ms));
      edl::notify_batch_end();
    }
    if (evaluated_epoch + 1 < o.epochs) finish_epoch(o.epochs - 1);
  });
  if (talk() && final_acc >= 0) {
    std::printf("final test accuracy: %.2f%% (%llu test images, %d worker%s at the end)\n", 100.0 * final_acc,
                static_cast<unsigned long long>(d.test_n), edl::size(), edl::size() == 1 ? "" : "s");
    std::fflush(stdout);
  }
  edl::shutdown();
  return 0;
}

}  // namespace edl::trainer
