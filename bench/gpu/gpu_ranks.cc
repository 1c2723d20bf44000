#include "gpu/gpu_ranks.h"

#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "collective/runtime_state.h"
#include "common/bench_util.h"
#include "common/config.h"
#include "edl/cuda.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "testing/rank_process.h"

namespace edl::bench::gpu {
namespace {

std::string version_text(int v) {  // CUDA: 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

GpuInfo probe_gpu(const std::string& dir) {
  const std::string file = dir + "/gpu-info";
  testing::Process p = testing::Process::forked([file] {
    std::string why;
    const bool ok = edl::cuda::available(&why);
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);  // 0 without a driver
    (void)cudaRuntimeGetVersion(&runtime);
    bool rs = false;
    const std::string nccl = edl::cuda::nccl_version(&rs);  // the loaded libnccl: no GPU needed
    cudaDeviceProp prop{};
    if (ok) (void)cudaGetDeviceProperties(&prop, 0);
    write_file(file, std::string(ok ? "1\n" : "0\n") + why + "\n" + (ok ? prop.name : "none") + "\n" +
                         version_text(driver) + "\n" + version_text(runtime) + "\n" + nccl + "\n" + (rs ? "1" : "0") +
                         "\n");
    return 0;
  });
  GpuInfo g;
  if (p.wait(std::chrono::seconds(60)) != 0) {
    g.why = "the GPU probe did not finish";
    return g;
  }
  std::vector<std::string> lines;
  std::string text = slurp(file), line;
  for (char c : text) {
    if (c == '\n') {
      lines.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  g.ok = !lines.empty() && lines[0] == "1";
  if (lines.size() > 1) g.why = lines[1];
  if (lines.size() >= 7) {
    g.device = lines[2];
    g.driver = lines[3];
    g.cuda = lines[4];
    g.nccl = lines[5];
    g.revoke_and_shrink = lines[6] == "1";
  }
  return g;
}

StoreProcess::StoreProcess(const std::string& dir) {
  const std::string file = dir + "/store-url";
  proc_ = testing::Process::forked([file] {
    StoreServer server;
    write_file(file, server.url());
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    return 0;
  });
  if (!await_file(file, 30)) throw std::runtime_error("gpu_allreduce_bench: the store server did not start");
  url_ = slurp(file);
}

RankSet::RankSet(std::string dir, int n, const std::function<int(int)>& fn, const std::vector<std::string>& env)
    : dir_(std::move(dir)) {
  for (int r = 0; r < n; ++r)
    procs_.push_back(testing::fork_rank(r, dir_ + "/rank" + std::to_string(r) + ".log", "edl-gpu-bench", env,
                                        [r, fn] { return fn(r); }));
}

std::vector<int> RankSet::wait(double timeout_s) {
  std::vector<int> st;
  const double end = now_s() + timeout_s;
  for (auto& p : procs_) {
    const double left = std::max(0.001, end - now_s());
    st.push_back(p.wait(std::chrono::milliseconds(static_cast<int64_t>(left * 1000))));
  }
  return st;
}

void RankSet::kill(int rank) { procs_[static_cast<size_t>(rank)].signal(SIGKILL); }

std::string RankSet::logs() const {
  std::string all;
  for (size_t r = 0; r < procs_.size(); ++r)
    all += "--- rank " + std::to_string(r) + ":\n" + slurp(dir_ + "/rank" + std::to_string(r) + ".log");
  return all;
}

bool await_file(const std::string& path, double timeout_s) {
  const double end = now_s() + timeout_s;
  while (access(path.c_str(), F_OK) != 0) {
    if (now_s() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void start_rank_runtime(const std::string& url, int timeout_ms) {
  Config c = Config::from_env();
  c.timeout_ms = timeout_ms;
  c.connect_timeout_ms = 30000;
  c.transport = "tcp";
  auto& rt = detail::Runtime::instance();
  rt.start(c, connect_store(url));
  rt.mark_initialized();
}

void install_generation(const std::string& tag, uint64_t id, int rank, int size) {
  auto& rt = detail::Runtime::instance();
  rt.set_generation(rt.make_generation(id, "bench/" + tag + "/g" + std::to_string(id) + "/", rank, size, rank, size));
  if (cudaSetDevice(edl::cuda::device()) != cudaSuccess) throw std::runtime_error("cudaSetDevice failed");
}

}  // namespace edl::bench::gpu
