// The Eigen ResNet20 in the reproducible mode (docs/optim.md, "Reproducible mode"): 1, 2 and 3 ranks
// (threads, each with its own model, Communicator, deterministic DistributedOptimizer and fixed-schedule
// ShardGenerator over one memory store) train the same micro-batches and end with bitwise identical
// parameters and batch-norm statistics. The process-level check with edl-run, a kill -9 and a join is
// tests/trainer/reproducible_test.sh.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edl/data.h"
#include "edl/optim.h"
#include "models/resnet20/resnet20.h"
#include "optim/rank_threads.h"

using namespace edl;

namespace {

constexpr uint64_t kMicro = 3, kMicroBatches = 5, kRecords = 40;

models::ModelConfig small_resnet() {  // 3x16x16 inputs: the same network, a quarter of the work
  models::ModelConfig mc;
  mc.channels = 3;
  mc.height = 16;
  mc.width = 16;
  mc.seed = 2;
  return mc;
}

std::vector<float> train_resnet20(int ranks) {
  data::SyntheticOptions so;
  so.records = kRecords;
  so.shape = data::Shape{3, 16, 16};
  so.seed = 4;
  std::shared_ptr<data::Dataset> dataset = data::make_synthetic(so);
  auto store = make_memory_store();
  std::vector<std::vector<float>> out(ranks);
  test::run_rank_threads(ranks, "r20/" + std::to_string(ranks) + "/", std::chrono::milliseconds(60000),
                         [&](int r, std::shared_ptr<Communicator> comm) {
    models::ResNet20 model(small_resnet());
    auto params = model.parameters();
    auto buffers = model.buffers();
    DistributedOptimizerOptions oo;
    oo.comm = comm;
    oo.deterministic = true;
    oo.optimizer.momentum = 0.9;
    oo.optimizer.weight_decay = 5e-4;
    oo.scaling.base_lr = 0.05;
    DistributedOptimizer opt(oo);
    for (const auto& p : params) opt.add_parameter(p.name, p.data, p.grad, p.count);
    for (const auto& b : buffers) opt.add_buffer(b.name, b.data, b.count);
    data::ShardOptions sh;
    sh.records = kRecords;
    sh.records_per_shard = 8;
    sh.batch_size = kMicro;
    sh.micro_batches = kMicroBatches;
    sh.deterministic = true;
    sh.epochs = 2;  // 3 steps per epoch, the last one 10 records: short and empty micro-batches
    sh.seed = 9;
    data::ShardGenerator shards(store, sh);
    elastic::GenerationInfo info;
    info.generation = 1;
    info.rank = r;
    info.size = ranks;
    shards.on_generation(info);
    data::Batch batch;
    for (;;) {
      data::StepRecords s = shards.next();
      if (s.end_of_data) break;
      for (const data::MicroBatch& mb : s.micro_batches) {
        opt.begin_micro_batch(mb.size);
        data::assemble_batch(*dataset, s.records.data() + mb.begin, mb.size, data::BatchOptions{}, 0, &batch);
        model.forward(batch.images.data(), batch.labels.data(), static_cast<int>(batch.size), true);
        model.backward([&](size_t i) { opt.grad_ready(i); });
      }
      opt.step();
    }
    for (const auto& p : params) out[r].insert(out[r].end(), p.data, p.data + p.count);
    for (const auto& b : buffers) out[r].insert(out[r].end(), b.data, b.data + b.count);
  });
  for (int r = 1; r < ranks; ++r) CHECK(out[r] == out[0]);
  return out[0];
}

}  // namespace

TEST_CASE("reproducible mode: ResNet20 on 1, 2 and 3 ranks ends bitwise identical", "[models][reproducible]") {
  const std::vector<float> one = train_resnet20(1);
  CHECK(train_resnet20(2) == one);
  CHECK(train_resnet20(3) == one);
  models::ResNet20 init(small_resnet());
  std::vector<float> before;
  for (const auto& p : init.parameters()) before.insert(before.end(), p.data, p.data + p.count);
  size_t moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += before[i] != one[i];
  CHECK(moved > before.size() / 2);  // training changed the parameters: the comparison is not vacuous
}
