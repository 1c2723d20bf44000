// optimizer_bench's ranks: one rank's training steps on the synthetic ResNet20 workload
// (optimizer_workload.h) through a DistributedOptimizer, and the two ways of running a group of them:
// threads of this process (each with its own Communicator) or forked processes in an edl::init()
// world. Either group can run over emulated cluster links (testing/netns.h): each rank then lives in its own
// network namespace and binds its sockets to the cluster address of its slot.
//
// Thread-safety: run_threads / run_processes are called from one thread; run_processes forks and
// must be called while this process runs no other thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edl/communicator.h"
#include "optimizer_workload.h"
#include "testing/netns.h"

namespace edl::bench {

using edl::testing::NetnsCluster;

struct OptBenchConfig {
  int ranks = 2;
  int steps = 5;                       // timed steps per run of a mode
  int warmup = 2;                      // untimed steps per run of a mode
  size_t bucket_bytes = 256 << 10;     // DistributedOptimizer bucket capacity
  bool fp16 = false;                   // fp16 compression on the wire
  const NetnsCluster* cluster = nullptr;  // emulated links: rank r lives in cluster->ns(r); null = loopback
};

enum class OptMode { kComputeOnly, kNoOverlap, kOverlap };
const char* mode_name(OptMode m);

// One run of one mode, merged over its ranks.
struct ModeResult {
  std::vector<double> steps_ms;  // per timed step: the slowest rank's step time
  std::vector<double> overlap;   // optimizer's measure per rank and step: hidden / comm
  std::vector<double> comm_ms;   // summed bucket intervals per rank and step
  std::vector<double> backward_ms;  // per rank and step: start of the step to the last grad_ready()
  size_t buckets = 0;
  long wrong = 0;                // sampled gradient elements that did not hold the expected reduction
};

// The workload every rank runs: layers in forward order and GEMMs per layer.
struct Workload {
  std::vector<SyntheticLayer> layers;
  std::vector<long> reps;
};

// Runs every (mode) of `order` once, in order, with cfg.ranks rank threads each; returns one
// ModeResult per entry. `tag` keeps store prefixes of different calls apart.
std::vector<ModeResult> run_threads(const OptBenchConfig& cfg, const Workload& w, const std::vector<OptMode>& order,
                                    const std::string& tag);

// The same with cfg.ranks forked processes that join one edl::init() world (buckets go through the
// collective engine) hosted by a StoreServer in this process. Throws std::runtime_error when a rank
// fails or stalls (a rank that does not report in time is killed).
std::vector<ModeResult> run_processes(const OptBenchConfig& cfg, const Workload& w, const std::vector<OptMode>& order);

// --- shared by the two drivers ----------------------------------------------------------------

// How a rank reaches its peers: its own Communicator (threads), or the edl::init() world (processes).
struct RankEnv {
  std::shared_ptr<Communicator> comm;  // threads mode
  bool global_world = false;           // processes mode: the Runtime generation's engine
  std::function<void()> lockstep;      // compute_only: start every step together
};

// One rank's per-step measurements.
struct RankResult {
  std::vector<double> step_ms, overlap, comm_ms, backward_ms;
  size_t buckets = 0;
  long wrong = 0;
};

// One rank: builds the synthetic model in the optimizer's gradient arena and runs the steps.
RankResult run_rank(const OptBenchConfig& cfg, OptMode mode, const RankEnv& env, int rank, const Workload& w);

// Merges the ranks of one run: per-step maximum of the step times, all ranks' overlap / comm samples.
ModeResult merge(const std::vector<RankResult>& ranks);

}  // namespace edl::bench
