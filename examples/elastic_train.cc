// edl-elastic-train: a complete elastic training program — the optimizer, the shard generator, the
// elastic State and elastic::run together (docs/training.md walks through it).
//   edl-run --min-np 1 --max-np 4 -np 2 build/examples/edl-elastic-train --epochs 3
// The model is a linear regression on synthetic records (record i: features x_i, target <a, x_i>),
// so the program needs no dataset files; kill, add or remove workers at any time and it still
// trains every record of every epoch exactly once and ends with the same parameters on every worker.
// Prints the final mean squared error on rank 0; exits 1 when it is not small (training failed).
#include <edl/data.h>
#include <edl/edl.h>
#include <edl/optim.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 16;
constexpr uint64_t kRecords = 4096;

// Deterministic synthetic record: features in [-1, 1) and the target of the true weights a_j = sin(j).
void record(uint64_t i, float* x, float* y) {
  double t = 0;
  for (int j = 0; j < kDim; ++j) {
    uint64_t h = (i * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(j) * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[j] = static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    t += std::sin(static_cast<double>(j)) * x[j];
  }
  *y = static_cast<float>(t);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t epochs = argc > 2 && std::string(argv[1]) == "--epochs" ? std::atoll(argv[2]) : 3;
  try {
    edl::init();  // joins the job edl-run started (elastic with --min-np/--max-np), or a world of 1

    // The batch policy: a fixed global batch of 64 records, split over however many workers there are.
    edl::DistributedOptimizerOptions oo;
    oo.optimizer.kind = edl::OptimizerKind::kSGD;
    oo.optimizer.momentum = 0.9;
    oo.scaling.base_lr = 0.05;
    oo.scaling.lr_scaling = edl::optim::LrScaling::kNone;  // the global batch does not change
    oo.scaling.batch.mode = edl::optim::BatchMode::kFixedGlobal;
    oo.scaling.batch.global_batch = 64;
    edl::DistributedOptimizer opt(oo);
    std::vector<float> w(kDim, 0.0f), grad(kDim, 0.0f);
    opt.add_parameter("w", w.data(), grad.data(), w.size());

    // Shards of 256 records; each worker's batch follows the world size (64 / size).
    edl::data::ShardOptions so;
    so.records = kRecords;
    so.records_per_shard = 256;
    so.seed = 7;
    so.epochs = epochs;
    so.batch_size = 64;
    so.batch_for_size = [&](int size) {
      return static_cast<uint64_t>(edl::optim::plan_batch(oo.scaling.batch, size).local_batch);
    };
    edl::data::ShardGenerator shards(so);  // uses the job's store

    // Everything a restarted or newly joined worker must receive lives in the State.
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    state.register_component("optimizer", &opt);  // momentum, rescaling bookkeeping
    state.register_component("shards", &shards);  // which records are trained (exactly once)

    const auto outcome = edl::elastic::run(state, [&] {
      std::vector<float> x(kDim);
      for (;;) {
        edl::data::StepRecords rec = shards.next();  // every member calls it once per step
        if (rec.end_of_data) break;
        // Mean-squared-error gradient over this worker's records (zero for an empty step).
        std::fill(grad.begin(), grad.end(), 0.0f);
        for (uint64_t i : rec.records) {
          float y = 0;
          record(i, x.data(), &y);
          float err = -y;
          for (int j = 0; j < kDim; ++j) err += w[j] * x[j];
          for (int j = 0; j < kDim; ++j) grad[j] += 2.0f * err * x[j] / static_cast<float>(rec.records.size());
        }
        opt.set_step_samples(rec.records.size());  // weighted mean: short and empty batches count right
        opt.step();                                // allreduce + SGD update
        edl::notify_batch_end();                   // commit; joins and graceful leaves happen here
      }
    });

    if (outcome == edl::elastic::RunOutcome::kLeft) {  // this worker left (SIGTERM); the others go on
      edl::shutdown();
      return 0;
    }
    double mse = 0;  // on the first 512 records
    std::vector<float> x(kDim);
    for (uint64_t i = 0; i < 512; ++i) {
      float y = 0, p = 0;
      record(i, x.data(), &y);
      for (int j = 0; j < kDim; ++j) p += w[j] * x[j];
      mse += (p - y) * (p - y) / 512.0;
    }
    if (edl::rank() == 0)
      std::printf("trained %lld epochs in %lld steps on %d worker(s): mse %.6f\n", static_cast<long long>(epochs),
                  static_cast<long long>(state.step), edl::size(), mse);
    edl::shutdown();
    return mse < 1e-2 ? 0 : 1;
  } catch (const edl::Error& e) {  // JobError (reset limit, below --min-np), StoreError, ...
    std::fprintf(stderr, "edl-elastic-train: %s\n", e.what());
    edl::shutdown();
    return 1;
  }
}
