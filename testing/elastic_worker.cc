// elastic_worker: the small synthetic training program driven by elastic_bench and the elastic
// process tests. It trains a toy model under edl::elastic::run and appends one line per event to a
// shared log (O_APPEND, one write per line; times are CLOCK_MONOTONIC milliseconds, comparable
// across processes on one machine):
//   start <worker> <pid> <t>
//   gen <worker> <generation> <rank> <size> <previous_size> <after_failure> <t> <reform_ms>
//   step <worker> <step> <generation> <rank> <size> <t>
//   done <worker> <step> <params_crc> <hist>
//   error <worker> <message>
// reform_ms: from the start of the last notify_batch_end (the batch boundary that changed
// membership) or the failure to the end of rendezvous + sync in the new generation.
//
//   elastic_worker --steps N --step-ms MS --params P --log PATH
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "edl/edl.h"
#include "edl/elastic.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int g_log = -1;
std::string g_id;

void log_line(const std::string& s) {
  std::string line = s + "\n";
  if (g_log >= 0) {
    ssize_t w = ::write(g_log, line.data(), line.size());
    (void)w;
  }
}

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 200;
  double step_ms = 20;
  size_t params = 1 << 16;
  std::string log_path = "/dev/stderr";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--steps") steps = std::stoll(argv[i + 1]);
    else if (a == "--step-ms") step_ms = std::stod(argv[i + 1]);
    else if (a == "--params") params = std::stoull(argv[i + 1]);
    else if (a == "--log") log_path = argv[i + 1];
    else {
      std::fprintf(stderr, "elastic_worker: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  g_log = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const char* wid = std::getenv("EDL_WORKER_ID");
  g_id = wid ? wid : ("pid" + std::to_string(::getpid()));
  log_line("start " + g_id + " " + std::to_string(::getpid()) + " " + fmt(now_ms()));
  try {
    edl::init();
    std::vector<float> w(params), grad(params);
    for (size_t i = 0; i < params; ++i) w[i] = static_cast<float>(::getpid() % 97) + 0.001f * i;  // differs per process
    int64_t hist = 0;
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    state.register_scalar("hist", &hist);
    uint64_t generation = 0;
    double boundary_t = now_ms();
    state.on_generation([&](const edl::elastic::GenerationInfo& g) {
      generation = g.generation;
      double t = now_ms();
      log_line("gen " + g_id + " " + std::to_string(g.generation) + " " + std::to_string(g.rank) + " " +
               std::to_string(g.size) + " " + std::to_string(g.previous_size) + " " + (g.after_failure ? "1" : "0") +
               " " + fmt(t) + " " + fmt(t - boundary_t));
    });
    edl::elastic::run(state, [&] {
      while (state.step < steps) {
        int rank = edl::rank();
        for (size_t i = 0; i < params; ++i)
          grad[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(state.step) + 1e-4 * i)) * (rank + 1);
        auto t_end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(step_ms * 1000));
        edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kAverage, "grad");
        for (size_t i = 0; i < params; ++i) w[i] -= 0.01f * grad[i];
        hist = static_cast<int64_t>(static_cast<uint64_t>(hist) * 1000003u + static_cast<uint64_t>(state.step + 1));
        std::this_thread::sleep_until(t_end);  // the "compute" of a step
        boundary_t = now_ms();
        edl::notify_batch_end();
        log_line("step " + g_id + " " + std::to_string(state.step) + " " + std::to_string(generation) + " " +
                 std::to_string(edl::rank()) + " " + std::to_string(edl::size()) + " " + fmt(now_ms()));
      }
    });
    uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(w.data()), static_cast<uInt>(w.size() * sizeof(float)));
    log_line("done " + g_id + " " + std::to_string(state.step) + " " + std::to_string(crc) + " " + std::to_string(hist));
    edl::shutdown();
  } catch (const std::exception& e) {
    log_line("error " + g_id + " " + e.what());
    std::fprintf(stderr, "elastic_worker %s: %s\n", g_id.c_str(), e.what());
    return 1;
  }
  return 0;
}
