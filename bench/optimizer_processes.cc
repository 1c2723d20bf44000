// optimizer_bench's processes driver (see optimizer_rank.h): each rank is a forked process in an
// edl::init() world (the default setting of DistributedOptimizer: buckets go through the
// generation's collective engine), reporting its measurements to the parent through a pipe.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <thread>

#include "common/bench_util.h"
#include "testing/process.h"
#include "edl/edl.h"
#include "edl/store_server.h"
#include "optimizer_rank.h"

namespace edl::bench {

namespace {

// Wire record per run of a mode: steps, buckets, wrong, then steps x {step_ms, overlap, comm_ms, backward_ms}.
[[noreturn]] void child_main(const OptBenchConfig& cfg, int rank, int url_fd, int out_fd, const Workload& w,
                             const std::vector<OptMode>& order) {
  int code = 1;
  try {
    char url[256] = {0};
    if (!read_all(url_fd, url, sizeof url, now_s() + 60)) _exit(3);
    if (cfg.cluster) {
      NetnsCluster::enter(cfg.cluster->ns(rank));  // single-threaded here: the whole process moves
      setenv("EDL_BIND_ADDR", cfg.cluster->address(rank).c_str(), 1);
    }
    setenv("EDL_STORE", url, 1);
    setenv("EDL_RANK", std::to_string(rank).c_str(), 1);
    setenv("EDL_SIZE", std::to_string(cfg.ranks).c_str(), 1);
    setenv("EDL_LOG_LEVEL", "0", 1);
    init();
    RankEnv env;
    env.global_world = true;
    env.lockstep = [] { barrier(); };
    for (OptMode mode : order) {
      RankResult r = run_rank(cfg, mode, env, rank, w);
      uint64_t head[3] = {r.step_ms.size(), r.buckets, static_cast<uint64_t>(r.wrong)};
      bool ok = write_all(out_fd, head, sizeof head);
      for (size_t i = 0; ok && i < r.step_ms.size(); ++i) {
        double row[4] = {r.step_ms[i], r.overlap[i], r.comm_ms[i], r.backward_ms[i]};
        ok = write_all(out_fd, row, sizeof row);
      }
      if (!ok) _exit(4);
    }
    shutdown();
    code = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optimizer_bench rank %d: %s\n", rank, e.what());
    code = 2;
  }
  _exit(code);  // never the parent's atexit handlers (they remove the emulated namespaces)
}

// The job's store: on loopback, or (emulated links) on the switch address, listening in the
// switch namespace so every rank namespace reaches it over the bridge.
std::unique_ptr<StoreServer> start_store(const OptBenchConfig& cfg) {
  if (!cfg.cluster) return std::make_unique<StoreServer>();
  std::unique_ptr<StoreServer> server;
  std::exception_ptr error;
  std::thread t([&] {  // only this helper thread enters the namespace; the socket stays there
    try {
      NetnsCluster::enter(cfg.cluster->switch_ns());
      StoreServerOptions so;
      so.bind_address = NetnsCluster::switch_address();
      server = std::make_unique<StoreServer>(so);
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
  return server;
}

}  // namespace

std::vector<ModeResult> run_processes(const OptBenchConfig& cfg, const Workload& w, const std::vector<OptMode>& order) {
  const int n = cfg.ranks;
  std::vector<int> url_w(n), out_r(n);
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    int up[2], op[2];
    if (pipe(up) != 0 || pipe(op) != 0) throw std::runtime_error("pipe failed");
    edl::testing::SpawnOptions so;
    so.own_group = false;
    pids[r] = edl::testing::fork_call(
        [&]() -> int {
          close(up[1]);
          close(op[0]);
          child_main(cfg, r, up[0], op[1], w, order);
        },
        so);
    close(up[0]);
    close(op[1]);
    url_w[r] = up[1];
    out_r[r] = op[0];
  }
  std::vector<ModeResult> results;
  bool ok = true;
  std::string error;
  try {
    std::unique_ptr<StoreServer> server = start_store(cfg);
    char url[256] = {0};
    std::snprintf(url, sizeof url, "%s", server->url().c_str());
    for (int r = 0; r < n; ++r) ok = ok && write_all(url_w[r], url, sizeof url);
    // Bounded: every run of a mode gets a generous deadline; a stuck rank is killed below.
    const double deadline = now_s() + 60 + order.size() * (cfg.warmup + cfg.steps) * 5.0;
    for (size_t k = 0; ok && k < order.size(); ++k) {
      std::vector<RankResult> ranks(n);
      for (int r = 0; ok && r < n; ++r) {
        uint64_t head[3];
        ok = read_all(out_r[r], head, sizeof head, deadline);
        ranks[r].buckets = ok ? head[1] : 0;
        ranks[r].wrong = ok ? static_cast<long>(head[2]) : 0;
        for (uint64_t i = 0; ok && i < head[0]; ++i) {
          double row[4];
          ok = read_all(out_r[r], row, sizeof row, deadline);
          ranks[r].step_ms.push_back(row[0]);
          ranks[r].overlap.push_back(row[1]);
          ranks[r].comm_ms.push_back(row[2]);
          ranks[r].backward_ms.push_back(row[3]);
        }
      }
      if (ok) results.push_back(merge(ranks));
    }
  } catch (const std::exception& e) {
    ok = false;
    error = e.what();
  }
  for (int r = 0; r < n; ++r) {
    if (!ok) kill(pids[r], SIGKILL);
    int status = 0;
    waitpid(pids[r], &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    close(url_w[r]);
    close(out_r[r]);
  }
  if (!ok) {
    throw std::runtime_error(error.empty() ? "a rank process failed or timed out (see its message above)"
                                           : "cannot host the store: " + error);
  }
  return results;
}

}  // namespace edl::bench
