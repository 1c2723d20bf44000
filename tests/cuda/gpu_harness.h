// Harness of the `gpu` tests: ranks as forked processes sharing one GPU (docs/gpu.md, "Testing on
// one GPU"). The test process itself never initialises CUDA — its children are forked from it and
// CUDA does not survive a fork — so whether a GPU is usable is asked in a child of its own.
//
// Each rank child (testing/rank_process.h) gets its own NCCL_HOSTID, so that several ranks share
// one GPU, writes its output to <dir>/rank<r>.log and installs generations directly in the
// collective layer's Runtime (over a FileStore in <dir>), as edl::init() would.
//
// Thread-safety: Catch2 test thread only (the children are processes).
#pragma once

#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective/harness.h"
#include "collective/reference.h"
#include "collective/runtime_state.h"
#include "common/config.h"
#include "edl/cuda.h"
#include "testing/process.h"
#include "testing/rank_process.h"
#include "testing/require_dep.h"

namespace edl::test::gpu {

using Clock = std::chrono::steady_clock;

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

inline bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Whether a GPU is usable, asked once in a forked child; the reason when not.
inline bool gpu_present(std::string* why) {
  static std::pair<bool, std::string> answer = [] {
    const std::string dir = make_temp_dir();
    const std::string file = dir + "/why";
    testing::Process p = testing::Process::forked([file] {
      std::string w;
      const bool ok = edl::cuda::available(&w);
      write_file(file, w);
      return ok ? 0 : 1;
    });
    const int status = p.wait(std::chrono::seconds(60));
    const std::string w = read_file(file);
    if (status == 0) return std::make_pair(true, std::string());
    return std::make_pair(false, status < 0 ? std::string("the probe did not finish in 60 s") : w);
  }();
  if (why) *why = answer.second;
  return answer.first;
}

// The first statement of every `gpu` test: skip (one line) or fail (EDL_REQUIRE_GPU=1) without a GPU.
#define EDL_GPU_TEST_OR_SKIP()                                                 \
  do {                                                                         \
    std::string gpu_why_;                                                      \
    const bool gpu_ok_ = ::edl::test::gpu::gpu_present(&gpu_why_);             \
    if (!::edl::testing::require_gpu(gpu_ok_, gpu_why_)) return;               \
  } while (0)

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// The configuration of a rank child: short deadlines, TCP host transport.
inline Config rank_config(int timeout_ms = 20000, int connect_ms = 20000) {
  Config c = Config::from_env();
  c.timeout_ms = timeout_ms;
  c.connect_timeout_ms = connect_ms;
  c.transport = "tcp";
  return c;
}

// Starts the process's runtime over the FileStore in `dir`.
inline void start_runtime(const std::string& dir, const Config& c) {
  auto& rt = detail::Runtime::instance();
  rt.start(c, std::make_shared<FileStore>(dir));
  rt.mark_initialized();
}

// Builds and installs generation `id` (rank / size; local rank = rank: one GPU, one host).
inline void install_generation(uint64_t id, int rank, int size) {
  auto& rt = detail::Runtime::instance();
  rt.set_generation(rt.make_generation(id, "g" + std::to_string(id) + "/", rank, size, rank, size));
  cuda_ok(cudaSetDevice(edl::cuda::device()), "cudaSetDevice");
}

// Device memory for a test, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : bytes(n) { cuda_ok(cudaMalloc(&p, n ? n : 1), "cudaMalloc"); }
  ~DeviceBuffer() { (void)cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // cudaMemcpy from pageable memory may return before the DMA has finished (CUDA's documented
  // behaviour): the synchronize orders the upload before work on any stream, non-blocking ones too.
  void upload(const void* h, size_t n) {
    cuda_ok(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaDeviceSynchronize(), "upload (synchronize)");
  }
  std::vector<uint8_t> download(size_t n) const {
    std::vector<uint8_t> h(n);
    cuda_ok(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void* p = nullptr;
  size_t bytes;
};

// Runs fn(rank) in n forked rank children; returns each child's exit status (-1: still running
// after `timeout`, then killed). A child that throws prints the error to its log and exits 1.
struct Ranks {
  std::string dir = make_temp_dir();
  std::vector<testing::Process> procs;

  void start(int n, const std::function<int(int)>& fn, const std::vector<std::string>& env = {}) {
    for (int r = 0; r < n; ++r)
      procs.push_back(testing::fork_rank(r, dir + "/rank" + std::to_string(r) + ".log", "edl-gpu-test", env,
                                         [r, fn] { return fn(r); }));
  }
  std::vector<int> wait(std::chrono::seconds timeout) {
    std::vector<int> st;
    const auto end = Clock::now() + timeout;
    for (auto& p : procs) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      int s = p.wait(std::max(left, std::chrono::milliseconds(1)));
      if (s < 0) s = -1;
      st.push_back(s);
    }
    return st;
  }
  std::string log(int r) const { return read_file(dir + "/rank" + std::to_string(r) + ".log"); }
  std::string logs() const {
    std::string all;
    for (size_t r = 0; r < procs.size(); ++r) all += "--- rank " + std::to_string(r) + ":\n" + log(static_cast<int>(r));
    return all;
  }
  // Waits until every rank in `ranks` wrote <dir>/<name><rank>; false after `timeout`.
  bool await_files(const std::string& name, const std::vector<int>& ranks, std::chrono::seconds timeout) const {
    const auto end = Clock::now() + timeout;
    for (;;) {
      bool all = true;
      for (int r : ranks) all = all && file_exists(dir + "/" + name + std::to_string(r));
      if (all) return true;
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

// Seconds on the monotonic clock, comparable between the processes of one machine.
inline double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

}  // namespace edl::test::gpu
