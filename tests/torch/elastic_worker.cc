// edl_torch_elastic_worker: the worker of tests/torch/kill_join_test.sh. A small libtorch MLP trained
// with edl::torch under edl-run (fixed global batch, shard generator, elastic State). With
// --pause-dir D, the worker of rank 1 stops INSIDE backward at step --pause-step (an autograd hook on
// the first layer's weight, whose gradient comes last, so later buckets are already in flight): it
// writes its pid to D/paused and sleeps until the test kills it (only once: the file marks it done).
// At the end every worker that trained all steps writes its parameters to D/params.<pid> (raw float32).
// Every step also runs a collective of the program's own, "user.records" (the step's records summed
// over the ranks), between backward and step(), while the gradient buckets are in flight; it must
// equal the optimizer's own count of the step (issue 22, item 7), else the worker fails.
// --device cuda: the model, the data and the reduction on the GPU (edl::torch's CUDA path; run it
// under edl-run --one-gpu-test); --probe 1 then only says whether CUDA is usable (exit 0, or 3 and why).
// For doubled_batch_test.sh: --fixed 1 trains step s on records [24 s, 24 s + 24) split evenly over
// the ranks instead of the shard generator (so 2 ranks and 1 process see the same global batches),
// --optimizer sgd|adam (sgd: SGD with momentum), --hidden-rank1 H gives rank 1 another hidden width
// (different parameter shapes across ranks: the optimizer's MismatchError), --min-world W: the parameter file is
// written by workers that end in a world of at least W (default 2).
// Usage: edl_torch_elastic_worker --dir D [--steps 120] [--pause-step 10] [--sleep-ms 20] [--device cpu]
//          [--fixed 0] [--optimizer sgd] [--hidden-rank1 64] [--min-world 2]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <edl/data.h>
#include <edl/edl.h>
#include <edl/torch.h>

namespace {

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int hidden = 64)
      : fc1(register_module("fc1", torch::nn::Linear(16, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 64))),
        fc3(register_module("fc3", torch::nn::Linear(64, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Net);

// Record i: 16 features and one of 4 classes, a pure function of i.
void record(uint64_t i, float* x, int64_t* y) {
  uint64_t h = i * 0x9E3779B97F4A7C15ull + 1;
  float s = 0;
  for (int j = 0; j < 16; ++j) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[j] = static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    s += x[j] * static_cast<float>(j % 3 - 1);
  }
  *y = (s > 0 ? 1 : 0) + (x[0] > 0 ? 2 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"dir", ""},      {"steps", "120"},  {"pause-step", "10"},
                                          {"sleep-ms", "20"}, {"device", "cpu"}, {"probe", "0"},
                                          {"fixed", "0"},     {"optimizer", "sgd"}, {"hidden-rank1", "64"},
                                          {"min-world", "2"}};
  for (int i = 1; i + 1 < argc; i += 2) a[std::string(argv[i]).substr(2)] = argv[i + 1];
  const bool cuda = a["device"] == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::printf("edl_torch_elastic_worker: no usable GPU (torch::cuda::is_available() is false)\n");
    return 3;
  }
  if (a["probe"] != "0") return 0;
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const std::string dir = a["dir"];
  const int64_t steps = std::stoll(a["steps"]), pause_step = std::stoll(a["pause-step"]);
  const int sleep_ms = std::stoi(a["sleep-ms"]);
  try {
    edl::init();
    torch::set_num_threads(1);
    torch::manual_seed(1);  // the same initial parameters in every run (the State syncs them anyway)
    const int hidden1 = std::stoi(a["hidden-rank1"]);
    Net net(edl::rank() == 1 ? hidden1 : 64);
    net->to(device);
    std::unique_ptr<torch::optim::Optimizer> inner;
    if (a["optimizer"] == "adam") {
      inner = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
    } else {
      inner = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    }
    const bool fixed = a["fixed"] != "0";
    edl::torch::DistributedOptimizerOptions oo;
    oo.scaling.lr_scaling = edl::optim::LrScaling::kNone;
    oo.scaling.batch.mode = edl::optim::BatchMode::kFixedGlobal;
    oo.scaling.batch.global_batch = 24;
    oo.bucket_cap_bytes = 8 << 10;  // several buckets: some are in flight when rank 1 stops
    edl::torch::DistributedOptimizer opt(*inner, *net, oo);
    edl::data::ShardOptions so;
    so.records = 24 * 1000;
    so.records_per_shard = 240;
    so.seed = 3;
    so.batch_size = 24;
    so.batch_for_size = [&](int size) {
      return static_cast<uint64_t>(edl::optim::plan_batch(oo.scaling.batch, size).local_batch);
    };
    edl::data::ShardGenerator shards(so);
    edl::elastic::State state;
    // Another width on rank 1: the module stays out of the State, whose sync would meet the
    // difference first (a DataError naming the item); the optimizer's layout check must.
    if (hidden1 == 64) edl::torch::register_state(state, *net, opt);
    state.register_component("shards", &shards);

    const std::string marker = dir + "/paused";
    net->fc1->weight.register_hook([&](torch::Tensor g) {
      if (state.step == pause_step && edl::rank() == 1 && !dir.empty() && access(marker.c_str(), F_OK) != 0) {
        std::ofstream(marker + ".tmp") << getpid() << "\n";
        std::rename((marker + ".tmp").c_str(), marker.c_str());
        std::this_thread::sleep_for(std::chrono::seconds(60));  // killed here by the test
      }
      return g;
    });

    // After the pause (the marker exists) the members go on past --steps until the replacement has
    // joined (size 2 again; at most 20x the steps), so a slow start of the joiner under load cannot
    // end the job first. Every member evaluates this alike (same step, same size, same file).
    auto more = [&] {
      if (state.step < steps) return true;
      return !dir.empty() && access(marker.c_str(), F_OK) == 0 && edl::size() < 2 && state.step < 20 * steps;
    };
    edl::elastic::run(state, [&] {
      while (more()) {
        edl::data::StepRecords rec;
        if (fixed) {  // step s: records [24 s, 24 s + 24), rank r of W takes its 24 / W of them
          const uint64_t w = static_cast<uint64_t>(edl::size()), per = 24 / w;
          for (uint64_t i = 0; i < per; ++i)
            rec.records.push_back(24 * static_cast<uint64_t>(state.step) + per * static_cast<uint64_t>(edl::rank()) + i);
        } else {
          rec = shards.next();
        }
        const int64_t n = static_cast<int64_t>(rec.records.size());
        opt.zero_grad();
        opt.set_step_samples(static_cast<uint64_t>(n));
        if (n > 0) {
          auto x = torch::empty({n, 16});
          auto y = torch::empty({n}, torch::kLong);
          for (int64_t i = 0; i < n; ++i)
            record(rec.records[i], x.data_ptr<float>() + 16 * i, y.data_ptr<int64_t>() + i);
          torch::nn::functional::cross_entropy(net->forward(x.to(device)), y.to(device)).backward();
        }
        int64_t records = n;  // the program's own collective in the step (docs/torch.md)
        edl::allreduce(&records, 1, edl::ReduceOp::kSum, "user.records");
        opt.step();
        if (static_cast<uint64_t>(records) != opt.reducer().last_step_stats().samples)
          throw std::runtime_error("user.records = " + std::to_string(records) + " but the optimizer's step trained " +
                                   std::to_string(opt.reducer().last_step_stats().samples) + " records");
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));  // leaves time for a join
        edl::notify_batch_end();
      }
    });
    if (state.step >= steps && edl::size() >= std::stoi(a["min-world"]) && !dir.empty()) {
      std::ofstream out(dir + "/params." + std::to_string(getpid()), std::ios::binary);
      for (const auto& p : net->parameters()) {
        auto c = p.detach().to(torch::kCPU).contiguous();
        out.write(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * sizeof(float));
      }
    }
    std::printf("worker %d: %lld steps, world %d\n", static_cast<int>(getpid()), static_cast<long long>(state.step),
                edl::size());
    edl::shutdown();
    return 0;
  } catch (const edl::elastic::JobFailed& e) {
    std::fprintf(stderr, "edl_torch_elastic_worker: %s\n", e.what());
    edl::shutdown();
    return edl::elastic::kJobFailedExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edl_torch_elastic_worker: %s\n", e.what());
    edl::shutdown();
    return 1;
  }
}
