// rebalance_worker: the training program of bench/rebalance_bench, run under edl-run (elastic mode).
//
// Every step it takes its records from the job's shard generator (EDL_REBALANCE_STRAGGLERS=1, i.e.
// edl-run --rebalance-stragglers, splits the global batch by speed), "computes" --record-ms per
// record, an optimizer step with the weighted mean over --params parameters, and notify_batch_end.
// The compute is a sleep: the bench measures how the job shares work between workers of different
// speeds, not arithmetic, and sleeps keep a shared 2-core machine's load out of the figure. The
// worker whose EDL_WORKER_ID starts with --slow-prefix (a slot of edl-run: every incarnation of it,
// like a slow machine) runs at --slow-factor of the speed (0.5: each record takes twice as long).
// Rank 0 appends "step <step> <records of the step, all ranks> <t_ms> <workers>" to --log after each
// step (t_ms: CLOCK_MONOTONIC milliseconds).
//
//   rebalance_worker --log PATH [--steps 200 --batch 32 --record-ms 5 --slow-prefix t:2. --slow-factor 0.5
//                    --records 1000000 --records-per-shard 2048 --params 4096]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_util.h"
#include "edl/data.h"
#include "edl/edl.h"
#include "edl/optim.h"

int main(int argc, char** argv) {
  cxxopts::Options opts("rebalance_worker", "elastic worker with a per-record compute time (run by rebalance_bench)");
  opts.add_options()("log", "rank 0 appends one line per step here", cxxopts::value<std::string>())(
      "steps", "steps to train", cxxopts::value<int64_t>()->default_value("200"))(
      "batch", "records per worker per step (before rebalancing)", cxxopts::value<uint64_t>()->default_value("32"))(
      "record-ms", "compute time per record of a normal worker", cxxopts::value<double>()->default_value("5"))(
      "slow-prefix", "workers whose id starts with this are slow", cxxopts::value<std::string>()->default_value("t:2."))(
      "slow-factor", "speed of a slow worker (0.5 = half)", cxxopts::value<double>()->default_value("0.5"))(
      "records", "records in the dataset", cxxopts::value<uint64_t>()->default_value("1000000"))(
      "records-per-shard", "records per shard", cxxopts::value<uint64_t>()->default_value("2048"))(
      "params", "float32 parameters", cxxopts::value<size_t>()->default_value("4096"));
  auto a = edl::bench::parse_flags(opts, argc, argv);
  if (!a.count("log") || !(a["record-ms"].as<double>() >= 0) || !(a["slow-factor"].as<double>() > 0)) {
    std::fprintf(stderr, "rebalance_worker: --log is required, --record-ms must be >= 0, --slow-factor > 0\n");
    return 2;
  }
  const int log = ::open(a["log"].as<std::string>().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const char* wid = std::getenv("EDL_WORKER_ID");
  const std::string id = wid ? wid : "";
  const bool slow = !id.empty() && id.rfind(a["slow-prefix"].as<std::string>(), 0) == 0;
  const double ms_per_record = a["record-ms"].as<double>() / (slow ? a["slow-factor"].as<double>() : 1.0);
  const size_t P = a["params"].as<size_t>();
  try {
    edl::init();
    edl::data::ShardOptions so;
    so.records = a["records"].as<uint64_t>();
    so.records_per_shard = a["records-per-shard"].as<uint64_t>();
    so.batch_size = a["batch"].as<uint64_t>();
    so.seed = 5;
    edl::data::ShardGenerator shards(so);  // the job's store: EDL_REBALANCE_STRAGGLERS applies
    std::vector<float> w(P, 0.0f), grad(P);
    edl::DistributedOptimizerOptions oo;
    oo.optimizer.momentum = 0;
    oo.scaling.lr_scaling = edl::optim::LrScaling::kNone;
    edl::DistributedOptimizer opt(oo);
    opt.add_parameter("w", w.data(), grad.data(), P);
    edl::elastic::State state;
    state.register_tensor("w", w.data(), P, edl::DataType::kFloat32);
    state.register_component("optimizer", &opt);
    state.register_component("shards", &shards);
    const int64_t steps = a["steps"].as<int64_t>();
    edl::elastic::run(state, [&] {
      while (state.step < steps) {
        edl::data::StepRecords rec = shards.next();
        const size_t n = rec.records.size();
        opt.set_step_samples(n);
        auto until = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(ms_per_record * 1000.0 * static_cast<double>(n)));
        for (size_t i = 0; i < P; ++i) grad[i] = n ? static_cast<float>(std::sin(1e-3 * static_cast<double>(rec.records[0] + i))) : 0.0f;
        std::this_thread::sleep_until(until);
        opt.backward_done();
        opt.step();
        edl::notify_batch_end();
        if (edl::rank() == 0) {
          const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
          char line[160];
          const int len = std::snprintf(line, sizeof line, "step %lld %llu %.3f %d\n", static_cast<long long>(state.step),
                                        static_cast<unsigned long long>(opt.last_step_stats().samples), t, edl::size());
          if (log >= 0 && ::write(log, line, static_cast<size_t>(len)) < 0) std::perror("rebalance_worker: log");
        }
      }
    });
    edl::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rebalance_worker %s: %s\n", id.c_str(), e.what());
    return 1;
  }
  return 0;
}
