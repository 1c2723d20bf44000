// multihost_worker: the training program of the emulated-host scenarios (bench/emulated_hosts.h,
// tests/multihost, controlplane_bench). It trains a toy model under edl::elastic::run and appends
// one line per event to a shared commit log (O_APPEND, one write(2) per line). Times are
// CLOCK_MONOTONIC milliseconds (one clock for every network namespace of this machine) and
// wall-clock milliseconds:
//   start  <worker> <host> <pid> <mono> <wall>
//   gen    <worker> <host> <generation> <rank> <size> <mono> <wall>
//   commit <worker> <host> <step> <generation> <rank> <size> <params_crc> <mono> <wall>
//   done   <worker> <host> <step> <params_crc> <mono> <wall>
//   error  <worker> <host> <mono> <wall> <message>
// A `commit` line is written after notify_batch_end returned, i.e. after step <step> was agreed and
// committed in <generation>; params_crc is the CRC-32 of the parameters after that step. The
// update depends on the world size only (not on which process holds which rank), so every member of
// one generation must log the same crc for the same step.
//
// Training ends at --steps, or earlier at the step written (decimal) into --stop-file once it
// exists: the harness writes it to end every member at the same step.
//
//   multihost_worker --log PATH [--steps N] [--step-ms MS] [--params P] [--stop-file PATH]
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "edl/edl.h"
#include "edl/elastic.h"

namespace {

int g_log = -1;
std::string g_prefix;  // "<worker> <host>"

std::string clocks() {
  timespec m{}, w{};
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &w);
  char b[64];
  std::snprintf(b, sizeof b, "%.3f %.3f", m.tv_sec * 1e3 + m.tv_nsec / 1e6, w.tv_sec * 1e3 + w.tv_nsec / 1e6);
  return b;
}

void log_line(const std::string& kind, const std::string& rest) {
  std::string line = kind + " " + g_prefix + " " + rest + "\n";
  if (g_log >= 0) {
    ssize_t w = ::write(g_log, line.data(), line.size());
    (void)w;
  }
}

// The step to stop at: --steps, or the number in the stop file once it exists.
int64_t stop_step(int64_t steps, const std::string& stop_file) {
  if (stop_file.empty()) return steps;
  std::ifstream in(stop_file);
  int64_t s = 0;
  if (in >> s && s > 0 && s < steps) return s;
  return steps;
}

uint32_t crc_of(const std::vector<float>& w) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(w.data()), static_cast<uInt>(w.size() * sizeof(float))));
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 1000000;
  double step_ms = 20;
  size_t params = 4096;
  std::string log_path = "/dev/stderr", stop_file;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "multihost_worker: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--steps") steps = std::stoll(argv[i + 1]);
    else if (a == "--step-ms") step_ms = std::stod(argv[i + 1]);
    else if (a == "--params") params = std::stoull(argv[i + 1]);
    else if (a == "--log") log_path = argv[i + 1];
    else if (a == "--stop-file") stop_file = argv[i + 1];
    else {
      std::fprintf(stderr, "multihost_worker: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  g_log = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const char* wid = std::getenv("EDL_WORKER_ID");
  const char* host = std::getenv("EDL_HOSTNAME");
  g_prefix = std::string(wid ? wid : "pid" + std::to_string(::getpid())) + " " + (host && *host ? host : "-");
  log_line("start", std::to_string(::getpid()) + " " + clocks());
  try {
    edl::init();
    std::vector<float> w(params, 0.0f), grad(params);
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    uint64_t generation = 0;
    state.on_generation([&](const edl::elastic::GenerationInfo& g) {
      generation = g.generation;
      log_line("gen", std::to_string(g.generation) + " " + std::to_string(g.rank) + " " + std::to_string(g.size) +
                          " " + clocks());
    });
    edl::elastic::run(state, [&] {
      while (state.step < stop_step(steps, stop_file)) {
        int rank = edl::rank(), size = edl::size();
        auto t_end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(step_ms * 1000));
        for (size_t i = 0; i < params; ++i)  // the average over ranks depends on the size only
          grad[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(state.step) + 1e-3 * i)) * (rank + 1);
        edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kAverage, "grad");
        for (size_t i = 0; i < params; ++i) w[i] -= 0.01f * grad[i] / static_cast<float>(size + 1);
        std::this_thread::sleep_until(t_end);  // the "compute" of a step
        edl::notify_batch_end();
        log_line("commit", std::to_string(state.step) + " " + std::to_string(generation) + " " +
                               std::to_string(edl::rank()) + " " + std::to_string(edl::size()) + " " +
                               std::to_string(crc_of(w)) + " " + clocks());
      }
    });
    log_line("done", std::to_string(state.step) + " " + std::to_string(crc_of(w)) + " " + clocks());
    edl::shutdown();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    log_line("error", clocks() + " " + msg);
    std::fprintf(stderr, "multihost_worker %s: %s\n", g_prefix.c_str(), e.what());
    return 1;
  }
  return 0;
}
