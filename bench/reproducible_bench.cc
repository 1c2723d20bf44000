// reproducible_bench: what the reproducible mode costs (issue 26, part 2; docs/optim.md "Reproducible
// mode"), next to the normal mode in the same run.
//
//   reproducible_bench [--ranks 2] [--global-batch 32] [--micro-batches 8] [--steps 6] [--warmup 2]
//                      [--rounds 3] [--json PATH]
//
// Workload: the reference ResNet20 (models/resnet20, CIFAR shape 3x32x32, one compute thread per rank)
// on synthetic records, `--ranks` ranks as threads of this process, each with its own Communicator
// (TCP on loopback) over one memory store and its own DistributedOptimizer (SGD, momentum 0.9). Both
// modes train the same global batch per step:
//   normal         each rank trains global/ranks records in one backward pass; buckets of gradients
//                  summed in float32 while backward runs (overlap), the weighted mean;
//   deterministic  the step is --micro-batches micro-batches of global/micro-batches records split over
//                  the ranks, each its own backward pass; step() agrees on the per-tensor maxima (a
//                  float64 max-allreduce) and sums on the fixed-point grid (an int64 allreduce).
// The modes alternate round by round (normal, deterministic, deterministic, normal, ...), so load
// changes of a shared machine hit both. step_ms: the slowest rank's step (data assembly, forward,
// backward, step()), median over the timed steps of all rounds; bytes_per_step: the bytes one rank
// hands to the allreduces per step (OptimizerStepStats::bytes). Rows:
//   {"bench":"reproducible","mode","ranks","global_batch","micro_batches","step_ms","step_ms_p10",
//    "step_ms_p90","bytes_per_step","wrong"}
// then {"bench":"reproducible","mode":"ratio","step_ms_ratio","bytes_ratio"} (deterministic / normal).
// Correctness: `wrong` counts ranks whose parameters differ from rank 0's at the end of a round (every
// rank applies the same reduced gradient in both modes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "edl/communicator.h"
#include "edl/data.h"
#include "edl/optim.h"
#include "edl/store.h"
#include "models/resnet20/resnet20.h"

namespace {

using namespace edl;
using bench::Json;

struct Config {
  int ranks = 2, global = 32, micro_batches = 8, steps = 6, warmup = 2, rounds = 3;
};

struct RoundResult {
  std::vector<double> step_ms;  // the slowest rank's time of each timed step
  size_t bytes = 0;
  int wrong = 0;
};

// One rank's steps in `mode`; times[s] = this rank's wall time of step s.
void run_rank(const Config& c, bool det, int r, std::shared_ptr<Communicator> comm, const data::Dataset& ds,
              std::vector<double>* times, size_t* bytes, std::vector<float>* final_params) {
  models::ModelConfig mc;  // CIFAR shape, one compute thread
  mc.seed = 3;
  models::ResNet20 model(mc);
  auto params = model.parameters();
  DistributedOptimizerOptions oo;
  oo.comm = std::move(comm);
  oo.deterministic = det;
  oo.scaling.base_lr = 0.02;
  oo.scaling.lr_scaling = optim::LrScaling::kNone;
  DistributedOptimizer opt(oo);
  for (const auto& p : params) opt.add_parameter(p.name, p.data, p.grad, p.count);
  data::Batch batch;
  const int W = c.ranks, M = c.micro_batches, m = c.global / M;
  for (int s = 0; s < c.warmup + c.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t first = static_cast<uint64_t>(s) * c.global % (ds.size() - c.global);
    auto train = [&](uint64_t begin, int n) {
      std::vector<uint64_t> idx(n);
      for (int i = 0; i < n; ++i) idx[i] = begin + i;
      data::assemble_batch(ds, idx.data(), idx.size(), data::BatchOptions{}, 0, &batch);
      model.forward(batch.images.data(), batch.labels.data(), n, true);
      model.backward([&](size_t i) { opt.grad_ready(i); });
    };
    if (det) {
      for (int j = r * M / W; j < (r + 1) * M / W; ++j) {
        opt.begin_micro_batch(m);
        train(first + static_cast<uint64_t>(j) * m, m);
      }
    } else {
      const int lo = r * c.global / W, hi = (r + 1) * c.global / W;
      opt.set_step_samples(hi - lo);
      train(first + lo, hi - lo);
    }
    opt.step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= c.warmup) (*times)[s - c.warmup] = ms;
    *bytes = opt.last_step_stats().bytes;
  }
  for (const auto& p : params) final_params->insert(final_params->end(), p.data, p.data + p.count);
}

RoundResult run_round(const Config& c, bool det, const data::Dataset& ds, int round) {
  auto store = make_memory_store();
  std::vector<std::vector<double>> times(c.ranks, std::vector<double>(c.steps, 0.0));
  std::vector<size_t> bytes(c.ranks, 0);
  std::vector<std::vector<float>> params(c.ranks);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(c.ranks);
  const std::string prefix = "rb/" + std::to_string(round) + (det ? "d/" : "n/");
  for (int r = 0; r < c.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::create(store, prefix, r, c.ranks);
        run_rank(c, det, r, comm, ds, &times[r], &bytes[r], &params[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  RoundResult out;
  for (int s = 0; s < c.steps; ++s) {
    double slowest = 0;
    for (int r = 0; r < c.ranks; ++r) slowest = std::max(slowest, times[r][s]);
    out.step_ms.push_back(slowest);
  }
  out.bytes = bytes[0];
  for (int r = 1; r < c.ranks; ++r) out.wrong += params[r] != params[0];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("reproducible_bench", "cost of the reproducible mode vs the normal mode (ResNet20, ranks as threads)");
  opts.add_options()("ranks", "ranks (threads)", cxxopts::value<int>()->default_value("2"))(
      "global-batch", "records per step over all ranks", cxxopts::value<int>()->default_value("32"))(
      "micro-batches", "micro-batches per step (reproducible mode)", cxxopts::value<int>()->default_value("8"))(
      "steps", "timed steps per round", cxxopts::value<int>()->default_value("6"))(
      "warmup", "untimed steps per round", cxxopts::value<int>()->default_value("2"))(
      "rounds", "rounds per mode (alternating)", cxxopts::value<int>()->default_value("3"))(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto a = bench::parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  Config c;
  c.ranks = a["ranks"].as<int>();
  c.global = a["global-batch"].as<int>();
  c.micro_batches = a["micro-batches"].as<int>();
  c.steps = a["steps"].as<int>();
  c.warmup = a["warmup"].as<int>();
  c.rounds = a["rounds"].as<int>();
  std::string bad;
  if (c.ranks < 1 || c.ranks > 16) bad = "--ranks must be in 1..16";
  else if (c.micro_batches < 1 || c.global < c.micro_batches || c.global % c.micro_batches != 0)
    bad = "--global-batch must be a positive multiple of --micro-batches";
  else if (c.global < c.ranks) bad = "--global-batch must be >= --ranks";
  else if (c.steps < 1 || c.warmup < 0 || c.rounds < 1) bad = "--steps and --rounds must be >= 1, --warmup >= 0";
  if (!bad.empty()) {
    std::fprintf(stderr, "reproducible_bench: %s\n", bad.c_str());
    return 2;
  }
  data::SyntheticOptions so;
  so.records = 4096;
  so.shape = data::Shape{3, 32, 32};
  so.seed = 1;
  auto ds = data::make_synthetic(so);
  bench::JsonRows json(a["json"].as<std::string>());
  std::vector<double> ms[2];
  size_t bytes[2] = {0, 0};
  int wrong[2] = {0, 0};
  for (int round = 0; round < c.rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool det = (round % 2 == 0) == (k == 1);  // normal, det / det, normal / ...
      RoundResult r = run_round(c, det, *ds, round);
      ms[det].insert(ms[det].end(), r.step_ms.begin(), r.step_ms.end());
      bytes[det] = r.bytes;
      wrong[det] += r.wrong;
    }
  }
  bench::Table table({"mode", "ranks", "step_ms", "p10", "p90", "bytes/step", "wrong"}, 14);
  table.header();
  const char* names[2] = {"normal", "deterministic"};
  for (int det = 0; det < 2; ++det) {
    const double med = bench::median(ms[det]), p10 = bench::quantile(ms[det], 0.1), p90 = bench::quantile(ms[det], 0.9);
    table.row({names[det], std::to_string(c.ranks), bench::fmt(med, 1), bench::fmt(p10, 1), bench::fmt(p90, 1),
               std::to_string(bytes[det]), std::to_string(wrong[det])});
    json.write({{"bench", "reproducible"}, {"mode", names[det]}, {"ranks", c.ranks}, {"global_batch", c.global},
                {"micro_batches", det ? c.micro_batches : 0}, {"step_ms", med}, {"step_ms_p10", p10},
                {"step_ms_p90", p90}, {"bytes_per_step", bytes[det]}, {"wrong", wrong[det]}});
  }
  const double ratio = bench::median(ms[1]) / bench::median(ms[0]);
  const double bratio = bytes[0] ? static_cast<double>(bytes[1]) / static_cast<double>(bytes[0]) : 0.0;
  std::printf("\nreproducible / normal: step time x%.3f, bytes on the wire x%.3f\n", ratio, bratio);
  json.write({{"bench", "reproducible"}, {"mode", "ratio"}, {"ranks", c.ranks}, {"step_ms_ratio", ratio},
              {"bytes_ratio", bratio}});
  return wrong[0] + wrong[1] == 0 ? 0 : 1;
}
