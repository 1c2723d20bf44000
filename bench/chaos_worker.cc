// chaos_worker: the training program that bench/chaos_bench runs under `edl-run` (elastic mode).
//
// The model is (a) a per-record counter vector, one int32 per record per epoch, summed by allreduce
// from each step's records (so the final committed counters say how many times each record
// contributed: the exactly-once audit of bench/shard_audit), and (b) --params float32 parameters
// updated by SGD with averaged gradients that depend on the step's records (the final parameters of
// every worker must be bitwise identical). Both live in the elastic State together with the
// ShardGenerator and a fault-point component (below).
//
// Fault points driven by marker files in --dir (the bench writes "<rank>\n", the first worker of that
// rank that rename()s the marker to <marker>.claimed.<worker-id> acts on it; rename is atomic, so
// exactly one worker does):
//   arm.commit   raise(SIGKILL) inside Stateful::save(), i.e. inside State::commit (notify_batch_end)
//   arm.sync     raise(SIGKILL) inside Stateful::load(), i.e. while the State is being synced or
//                restored (the bench arms it, then makes a worker join so that the next generation's
//                sync broadcasts a snapshot to every member)
//   stuck        sleep forever inside a step (before the allreduce): a live, heartbeating, stuck rank
//   flood        write --flood-mib MiB of lines to stdout inside a step, then go on training
// Every event is one line appended (O_APPEND, one write) to <dir>/log, times in CLOCK_MONOTONIC ms:
//   start <worker> <pid> <t> <store-url>
//   gen <worker> <generation> <rank> <size> <t>
//   step <worker> <step> <generation> <rank> <size> <t>       (after notify_batch_end: step committed)
//   selfkill <worker> <phase> <rank> <t>
//   stuck|flood <worker> <rank> <t>
//   done <worker> <step> <t>
// A worker that finished training writes <dir>/final.<worker>.hash ("<step> <params fnv64> <counts
// fnv64>") and <dir>/final.<worker>.counts (the committed counters, int32 little-endian).
//
// --deterministic: the reproducible mode (docs/optim.md): the shard generator's fixed schedule of
// --micro-batches micro-batches of --batch records per step, one gradient per micro-batch (a function
// of its records) summed exactly by a deterministic DistributedOptimizer (SGD), parameters initialised
// from a constant instead of the pid. The final hash then equals that of the same job run by one
// worker without edl-run and without faults (chaos_bench's matches_reference).
//
//   chaos_worker --dir D [--records N --records-per-shard R --batch B --epochs E --seed S
//                         --step-ms MS --params P --flood-mib M --deterministic --micro-batches K]
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_util.h"
#include "common/record_audit.h"
#include "edl/data.h"
#include "edl/edl.h"
#include "edl/optim.h"

namespace {

std::string g_dir, g_id;
int g_log = -1;
uint64_t g_generation = 0;  // 0 until the first generation is installed (ranks are unknown before)

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void log_line(const std::string& s) {
  std::string line = s + "\n";
  if (g_log >= 0) {
    ssize_t w = ::write(g_log, line.data(), line.size());
    (void)w;
  }
}

std::string ms(double t) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", t);
  return b;
}

// True when <dir>/<marker> targets this worker's rank and this worker claimed it.
bool claim(const char* marker) {
  if (g_generation == 0) return false;
  std::string path = g_dir + "/" + marker;
  if (::access(path.c_str(), F_OK) != 0) return false;
  int target = -1;
  {
    std::ifstream f(path);
    if (!(f >> target)) return false;  // being written (the bench writes tmp + rename, so rarely)
  }
  if (target != edl::rank()) return false;
  return std::rename(path.c_str(), (path + ".claimed." + g_id).c_str()) == 0;
}

[[noreturn]] void self_kill(const char* phase) {
  log_line(std::string("selfkill ") + g_id + " " + phase + " " + std::to_string(edl::rank()) + " " + ms(now_ms()));
  ::raise(SIGKILL);
  std::abort();
}

// Fault points inside the State protocol: commit() calls save(), restore() / sync() call load().
class FaultPoints : public edl::elastic::Stateful {
 public:
  std::string save() override {
    if (claim("arm.commit")) self_kill("commit");
    return {};
  }
  void load(const std::string&) override {
    if (claim("arm.sync")) self_kill("sync");
  }
};

uint64_t fnv64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void write_atomic(const std::string& path, const void* data, size_t n) {
  {
    std::ofstream f(path + ".tmp", std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Reproducible mode: one gradient per micro-batch, a function of its records, summed exactly.
void train_micro_batches(const edl::data::StepRecords& s, edl::DistributedOptimizer& opt, std::vector<float>& grad) {
  for (const edl::data::MicroBatch& mb : s.micro_batches) {
    double key = 0;
    for (size_t i = mb.begin; i < mb.begin + mb.size; ++i) key += static_cast<double>(s.records[i]);
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(std::sin(1e-3 * key + 1e-4 * static_cast<double>(i)));
    opt.begin_micro_batch(mb.size);
    opt.backward_done();
  }
  opt.step();
}

void flood(int mib) {
  std::string line(1023, 'x');
  line += '\n';
  for (int i = 0; i < mib * 1024; ++i) std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("chaos_worker", "elastic training worker with fault points (run by chaos_bench)");
  opts.add_options()("dir", "shared directory (log, markers, final files)", cxxopts::value<std::string>())(
      "params", "float32 parameters", cxxopts::value<size_t>()->default_value("4096"))(
      "flood-mib", "MiB written to stdout when the flood marker appears", cxxopts::value<int>()->default_value("16"))(
      "deterministic", "reproducible mode: fixed micro-batches, summed exactly (the result of one worker)")(
      "micro-batches", "reproducible mode: micro-batches of --batch records per step",
      cxxopts::value<uint64_t>()->default_value("4"));
  edl::bench::AuditDefaults audit_defaults;
  audit_defaults.records = 480;
  audit_defaults.records_per_shard = 20;
  audit_defaults.batch = 4;
  audit_defaults.step_ms = 10;
  edl::bench::add_audit_flags(opts, audit_defaults,
                              "do NOT register the data position in the State (a rollback then re-trains or skips "
                              "records: the bench's exactly-once audit must fail)");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (!args.count("dir")) {
    std::fprintf(stderr, "chaos_worker: --dir is required\n");
    return 2;
  }
  g_dir = args["dir"].as<std::string>();
  const char* wid = std::getenv("EDL_WORKER_ID");
  g_id = wid ? wid : "pid" + std::to_string(::getpid());
  g_log = ::open((g_dir + "/log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const char* store = std::getenv("EDL_STORE");
  log_line("start " + g_id + " " + std::to_string(::getpid()) + " " + ms(now_ms()) + " " + (store ? store : "-"));
  const uint64_t N = args["records"].as<uint64_t>();
  const int64_t epochs = args["epochs"].as<int64_t>();
  const int step_ms = args["step-ms"].as<int>();
  const size_t P = args["params"].as<size_t>();
  const bool deterministic = args.count("deterministic") > 0;
  try {
    edl::init();
    edl::data::ShardOptions so = edl::bench::audit_shard_options(args);
    so.deterministic = deterministic;
    so.micro_batches = args["micro-batches"].as<uint64_t>();
    edl::data::ShardGenerator shards(so);
    edl::bench::RecordCounts audit(N, epochs);
    std::vector<int32_t>& counts = audit.counts;
    std::vector<float> w(P), grad(P);
    const float w0 = deterministic ? 0.0f : static_cast<float>(::getpid() % 97);  // differs per process
    for (size_t i = 0; i < P; ++i) w[i] = w0 + 0.001f * i;
    edl::DistributedOptimizerOptions oo;
    oo.deterministic = true;
    oo.optimizer.momentum = 0;
    oo.scaling.base_lr = 0.01;
    edl::DistributedOptimizer opt(oo);
    opt.add_parameter("w", w.data(), grad.data(), P);
    FaultPoints faults;
    edl::elastic::State state;
    state.register_tensor("counts", counts.data(), counts.size(), edl::DataType::kInt32);
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    if (deterministic) state.register_component("optimizer", &opt);
    if (!args.count("negative-control")) state.register_component("shards", &shards);
    state.register_component("faults", &faults);
    state.on_generation([&](const edl::elastic::GenerationInfo& g) {
      g_generation = g.generation;
      log_line("gen " + g_id + " " + std::to_string(g.generation) + " " + std::to_string(g.rank) + " " +
               std::to_string(g.size) + " " + ms(now_ms()));
    });
    bool finished = false;  // false for a worker that left gracefully or was never admitted
    edl::elastic::run(state, [&] {
      for (;;) {
        edl::data::StepRecords s = shards.next();
        if (s.end_of_data) {
          finished = true;
          break;
        }
        auto t_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(step_ms);
        const double key = audit.mark(s);
        if (claim("stuck")) {
          log_line("stuck " + g_id + " " + std::to_string(edl::rank()) + " " + ms(now_ms()));
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        }
        if (claim("flood")) {
          log_line("flood " + g_id + " " + std::to_string(edl::rank()) + " " + ms(now_ms()));
          flood(args["flood-mib"].as<int>());
        }
        audit.reduce();
        if (deterministic) {
          train_micro_batches(s, opt, grad);
        } else {
          for (size_t i = 0; i < P; ++i) grad[i] = static_cast<float>(std::sin(1e-3 * key + 1e-4 * static_cast<double>(i)));
          edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kAverage, "grad");
          for (size_t i = 0; i < P; ++i) w[i] -= 0.01f * grad[i];
        }
        std::this_thread::sleep_until(t_end);
        edl::notify_batch_end();
        log_line("step " + g_id + " " + std::to_string(state.step) + " " + std::to_string(g_generation) + " " +
                 std::to_string(edl::rank()) + " " + std::to_string(edl::size()) + " " + ms(now_ms()));
      }
    });
    if (!finished) {
      edl::shutdown();
      return 0;
    }
    state.commit();
    const std::string base = g_dir + "/final." + g_id;
    write_atomic(base + ".counts", counts.data(), counts.size() * sizeof(int32_t));
    std::string hash = std::to_string(state.step) + " " + std::to_string(fnv64(w.data(), P * sizeof(float))) + " " +
                       std::to_string(fnv64(counts.data(), counts.size() * sizeof(int32_t))) + "\n";
    write_atomic(base + ".hash", hash.data(), hash.size());
    log_line("done " + g_id + " " + std::to_string(state.step) + " " + ms(now_ms()));
    edl::shutdown();
  } catch (const std::exception& e) {
    log_line("error " + g_id + " " + e.what());
    std::fprintf(stderr, "chaos_worker %s: %s\n", g_id.c_str(), e.what());
    return 1;
  }
  return 0;
}
