// elastic_worker: the small synthetic training program driven by elastic_bench and the elastic
// process tests. It trains a toy model under edl::elastic::run and appends one line per event to a
// shared log (O_APPEND, one write per line; times are CLOCK_MONOTONIC milliseconds, comparable
// across processes on one machine):
//   start <worker> <pid> <t>
//   gen <worker> <generation> <rank> <size> <previous_size> <after_failure> <t> <reform_ms> <role> <reason>
//   step <worker> <step> <generation> <rank> <size> <t>
//   outcome <worker> <finished|left> <rank> <size> <collective>   (after run; collective, after a
//                                          leave: what an allreduce does then, "ok" or its error class)
//   done <worker> <step> <params_crc> <hist>
//   catchup <worker> <0|1> <step> <t>   (a stop-free newcomer started / finished receiving the state)
//   error <worker> <message>
// reform_ms: from the start of the last notify_batch_end (the batch boundary that changed
// membership) or the failure to the end of rendezvous + sync in the new generation.
//
//   elastic_worker --steps N --step-ms MS --params P --log PATH [--throw-at STEP] [--stall-at STEP --stall-ms MS]
//                  [--slow-ms MS [--slow-worker ID]] [--batch N] [--step-ms-by-size K:MS,...] [--records N]
//                  [--state-mb M] [--compute-first 1]
// --stall-at: the first time the worker reaches that step it sleeps --stall-ms inside the batch
// (alive and heartbeating: a rank stuck in user code).
// --slow-ms MS [--slow-worker ID]: sleep MS more per step before the step's collective (the
// "compute" part: a straggler), in every worker or only in the one whose EDL_WORKER_ID is ID (a
// restarted incarnation has a new id, so it is not slow).
// --batch N: tell the runtime the local batch size (edl::set_samples_per_batch).
// --step-ms-by-size K:MS,...: the step takes MS at world size K (a scripted throughput per size;
// sizes not listed use --step-ms).
// --records N: train on N records through the shard generator (edl/data.h; 16 records per shard,
// 4 per worker per step, one epoch; the run ends with the data, --steps stays a cap): every step
// sum-allreduces marks of the records it trained into per-record counters in the State, and the
// worker logs "audit <worker> <records trained exactly once> <N>" at the end (exactly-once data).
// --state-mb M: a further M MiB float32 tensor "table" in the State, a 1 MiB window of which is
// updated every step from the averaged gradient (a large state with cheap steps: the join bench).
// --compute-first 1: the step's compute (--step-ms) comes before its gradient allreduce, as in a
// real training step (forward and backward, then the reduction): every rank leaves the allreduce at
// the same time, so the ranks' boundaries line up. By default the compute is timed from before the
// allreduce and overlaps it (a rank that waits there does not wait again), so ranks keep whatever
// phase offset they started with.
// While the worker is a stop-free newcomer catching up (edl::elastic::catching_up()) it trains no
// records, contributes a zero gradient and skips the step's compute; it logs the catchup lines.
// --throw-at: the user's function throws at that step (a deterministic user error): the job fails
// (JobFailed) and the worker exits with edl::elastic::kJobFailedExitCode.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "edl/data.h"
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

// The command line (every flag takes one value; see the file comment).
struct Flags {
  int64_t steps = 200;
  double step_ms = 20;
  size_t params = 1 << 16;
  std::string log_path = "/dev/stderr";
  int64_t throw_at = -1;
  int64_t stall_at = -1;
  double stall_ms = 0;
  double slow_ms = 0;
  std::string slow_worker;
  int64_t batch = 0;
  uint64_t records = 0;
  uint64_t state_mb = 0;
  bool compute_first = false;
  std::map<int, double> step_ms_by_size;
};

// Parses argv into *f; false after printing what is wrong (exit status 2).
bool parse_flags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--steps") f->steps = std::stoll(argv[i + 1]);
    else if (a == "--step-ms") f->step_ms = std::stod(argv[i + 1]);
    else if (a == "--params") f->params = std::stoull(argv[i + 1]);
    else if (a == "--log") f->log_path = argv[i + 1];
    else if (a == "--throw-at") f->throw_at = std::stoll(argv[i + 1]);
    else if (a == "--stall-at") f->stall_at = std::stoll(argv[i + 1]);
    else if (a == "--stall-ms") f->stall_ms = std::stod(argv[i + 1]);
    else if (a == "--slow-ms") f->slow_ms = std::stod(argv[i + 1]);
    else if (a == "--slow-worker") f->slow_worker = argv[i + 1];
    else if (a == "--batch") f->batch = std::stoll(argv[i + 1]);
    else if (a == "--records") f->records = std::stoull(argv[i + 1]);
    else if (a == "--state-mb") f->state_mb = std::stoull(argv[i + 1]);
    else if (a == "--compute-first") f->compute_first = std::stoi(argv[i + 1]) != 0;
    else if (a == "--step-ms-by-size") {
      std::string list = argv[i + 1];
      for (size_t p = 0; p < list.size();) {
        size_t comma = list.find(',', p), colon = list.find(':', p);
        if (comma == std::string::npos) comma = list.size();
        if (colon == std::string::npos || colon > comma) {
          std::fprintf(stderr, "elastic_worker: --step-ms-by-size wants K:MS,... got %s\n", list.c_str());
          return false;
        }
        f->step_ms_by_size[std::stoi(list.substr(p, colon - p))] = std::stod(list.substr(colon + 1, comma - colon - 1));
        p = comma + 1;
      }
    }
    else {
      std::fprintf(stderr, "elastic_worker: unknown flag %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

// After run: the outcome, what rank() / size() say now and, after a leave, whether a collective runs
// (one that finished does not try: a peer of the final generation may be gone already).
void log_outcome(edl::elastic::RunOutcome outcome) {
  std::string collective = "-";
  if (outcome != edl::elastic::RunOutcome::kFinished) {
    try {
      float x = 1.0f;
      edl::allreduce(&x, 1, edl::DataType::kFloat32, edl::ReduceOp::kSum, "after-run");
      collective = "ok";
    } catch (const edl::InvalidArgument&) {
      collective = "InvalidArgument";
    } catch (const std::exception&) {
      collective = "error";
    }
  }
  log_line("outcome " + g_id + " " + edl::elastic::outcome_name(outcome) + " " + std::to_string(edl::rank()) + " " +
           std::to_string(edl::size()) + " " + collective);
}

// The large state of --state-mb: a window of 2^18 floats per step, from the averaged gradient (the
// same on every member), so each element evolves from its own value and shared data only.
void update_table(std::vector<float>& table, const std::vector<float>& grad, int64_t step) {
  const size_t window = size_t{1} << 18;
  if (table.empty()) return;
  const size_t start = (static_cast<size_t>(step) * window) % table.size();
  for (size_t k = 0; k < window && k < table.size(); ++k) {
    float& x = table[(start + k) % table.size()];
    x = 0.5f * x + grad[k % grad.size()];
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!parse_flags(argc, argv, &f)) return 2;
  g_log = ::open(f.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const char* wid = std::getenv("EDL_WORKER_ID");
  g_id = wid ? wid : ("pid" + std::to_string(::getpid()));
  log_line("start " + g_id + " " + std::to_string(::getpid()) + " " + fmt(now_ms()));
  try {
    edl::init();
    if (f.batch > 0) edl::set_samples_per_batch(f.batch);
    const bool slow = f.slow_ms > 0 && (f.slow_worker.empty() || f.slow_worker == g_id);
    std::vector<float> w(f.params), grad(f.params);
    for (size_t i = 0; i < f.params; ++i) w[i] = static_cast<float>(::getpid() % 97) + 0.001f * i;  // differs per process
    int64_t hist = 0;
    std::vector<float> table(f.state_mb * (size_t{1} << 18), 0.0f);
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    if (!table.empty()) state.register_tensor("table", table.data(), table.size(), edl::DataType::kFloat32);
    state.register_scalar("hist", &hist);
    std::unique_ptr<edl::data::ShardGenerator> shards;
    std::vector<int32_t> counts(f.records, 0), marks(f.records, 0);
    if (f.records > 0) {
      edl::data::ShardOptions so;
      so.records = f.records;
      so.records_per_shard = 16;
      so.batch_size = 4;
      so.epochs = 1;
      so.seed = 3;
      shards = std::make_unique<edl::data::ShardGenerator>(so);
      state.register_tensor("counts", counts.data(), counts.size(), edl::DataType::kInt32);
      state.register_component("shards", shards.get());
    }
    uint64_t generation = 0;
    double boundary_t = now_ms();
    state.on_generation([&](const edl::elastic::GenerationInfo& g) {
      generation = g.generation;
      double t = now_ms();
      log_line("gen " + g_id + " " + std::to_string(g.generation) + " " + std::to_string(g.rank) + " " +
               std::to_string(g.size) + " " + std::to_string(g.previous_size) + " " + (g.after_failure ? "1" : "0") +
               " " + fmt(t) + " " + fmt(t - boundary_t) + " " + edl::elastic::role_name(g.role) + " " +
               edl::elastic::reason_name(g.reason));
    });
    bool catching = false;
    const edl::elastic::RunOutcome outcome = edl::elastic::run(state, [&] {
      while (state.step < f.steps) {
        if (edl::elastic::catching_up() != catching) {
          catching = !catching;
          log_line("catchup " + g_id + " " + (catching ? "1 " : "0 ") + std::to_string(state.step) + " " + fmt(now_ms()));
        }
        if (state.step == f.throw_at) throw std::runtime_error("elastic_worker: injected failure at step " + std::to_string(f.throw_at));
        if (state.step == f.stall_at) {
          f.stall_at = -1;
          std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(f.stall_ms * 1000)));
        }
        if (shards) {
          edl::data::StepRecords rec = shards->next();  // every member calls it once per step
          if (rec.end_of_data) break;
          std::fill(marks.begin(), marks.end(), 0);
          for (uint64_t r : rec.records) marks[r] += 1;
          edl::allreduce(marks.data(), marks.size(), edl::DataType::kInt32, edl::ReduceOp::kSum, "marks");
          for (size_t i = 0; i < counts.size(); ++i) counts[i] += marks[i];
        }
        if (slow) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(f.slow_ms * 1000)));
        int rank = edl::rank();
        for (size_t i = 0; i < f.params; ++i)
          grad[i] = catching ? 0.0f : static_cast<float>(std::sin(0.01 * static_cast<double>(state.step) + 1e-4 * i)) * (rank + 1);
        auto by_size = f.step_ms_by_size.find(edl::size());
        const double this_step_ms = catching ? 0.0 : by_size != f.step_ms_by_size.end() ? by_size->second : f.step_ms;
        auto t_end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(this_step_ms * 1000));
        if (f.compute_first) std::this_thread::sleep_until(t_end);
        edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kAverage, "grad");
        for (size_t i = 0; i < f.params; ++i) w[i] -= 0.01f * grad[i];
        update_table(table, grad, state.step);
        hist = static_cast<int64_t>(static_cast<uint64_t>(hist) * 1000003u + static_cast<uint64_t>(state.step + 1));
        std::this_thread::sleep_until(t_end);  // the "compute" of a step
        boundary_t = now_ms();
        edl::notify_batch_end();
        log_line("step " + g_id + " " + std::to_string(state.step) + " " + std::to_string(generation) + " " +
                 std::to_string(edl::rank()) + " " + std::to_string(edl::size()) + " " + fmt(now_ms()));
      }
    });
    log_outcome(outcome);
    uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(w.data()), static_cast<uInt>(w.size() * sizeof(float)));
    log_line("done " + g_id + " " + std::to_string(state.step) + " " + std::to_string(crc) + " " + std::to_string(hist));
    if (f.records > 0) {
      const auto once = std::count(counts.begin(), counts.end(), 1);
      log_line("audit " + g_id + " " + std::to_string(once) + " " + std::to_string(f.records));
    }
    edl::shutdown();
  } catch (const edl::elastic::JobFailed& e) {  // final: edl-run must not restart anyone
    log_line("error " + g_id + " " + e.what());
    std::fprintf(stderr, "elastic_worker %s: %s\n", g_id.c_str(), e.what());
    return edl::elastic::kJobFailedExitCode;
  } catch (const std::exception& e) {
    log_line("error " + g_id + " " + e.what());
    std::fprintf(stderr, "elastic_worker %s: %s\n", g_id.c_str(), e.what());
    return 1;
  }
  return 0;
}
