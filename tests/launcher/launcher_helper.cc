// A worker program for the edl-run tests. Usage: edl_launcher_helper MODE [ARGS]
//   env                  print every EDL_* variable as NAME=value (sorted)
//   exit-rank R CODE     rank R exits with CODE at once; the others wait for a signal
//   wait-signal CODE     print "ready", wait for SIGINT/SIGTERM, print "got signal N", exit CODE
//   ignore-term          ignore SIGTERM, print "ready", sleep (only SIGKILL ends it)
//   lines N              write N long lines to stdout and to stderr, partly in small pieces
//   store-barrier        every rank adds 1 to "barrier" in EDL_STORE and waits until it reaches EDL_SIZE
//   incarnation-exit C0 C1 ...  the worker's incarnation k (EDL_WORKER_ID host:slot.k) exits with Ck
//                        (the last code repeats); after a short sleep
//   sleep-ms MS          sleep, exit 0
//   fail-at-start LINE   print LINE on stderr and exit 1 at once (a deterministic failure)
//   elastic-train STEPS STEP_MS [--print-mb N] [--user-error-at-step K]
//                        train a toy model under edl::elastic::run (the real elastic runtime), print
//                        "done STEP CHECKSUM" at the end. --print-mb: a second thread writes N MiB of
//                        1 KiB lines to stdout meanwhile. --user-error-at-step K: the rank-0 worker
//                        acts as the runtime does on a non-retryable error (writes <job>/failed with
//                        the reason, exits 3) at step K. --own-sigterm-handler: install a SIGTERM
//                        handler before init, print the runtime's handler (SA_RESTART) during the
//                        job and whether the own one is back after shutdown. --print-every N: print
//                        "step S" every N steps (rank 0) and "start step S" at the first batch.
//                        --crash-after-steps N --crash-incarnations K: the worker of slot 1 with
//                        incarnation < K exits 1 (_exit, "crash after N steps") after N batches of
//                        its own (it commits every batch: failures with progress). --catch: an
//                        exception is printed on stderr ("elastic-train: <what>") and the program
//                        returns 1 from main without edl::shutdown(), as bench/shard_audit_worker
//                        does
//   flood                print 1 KiB lines to stdout until killed (default SIGTERM action)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edl/collectives.h"
#include "edl/edl.h"
#include "edl/elastic.h"
#include "edl/state.h"
#include "edl/store.h"

extern char** environ;

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int s) { g_signal = s; }

int rank() {
  const char* r = std::getenv("EDL_RANK");
  return r ? std::atoi(r) : -1;
}

void wait_for_signal() {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::printf("ready\n");
  std::fflush(stdout);
  for (int i = 0; i < 6000 && !g_signal; ++i) usleep(10000);  // at most 60 s
}

// What the runtime does on a non-retryable error (docs/launcher.md, "Failures"): record the reason
// in <job>/failed, then exit 3 at once.
[[noreturn]] void user_error(int64_t step) {
  edl::StoreOptions o;
  o.secret = std::getenv("EDL_JOB_SECRET") ? std::getenv("EDL_JOB_SECRET") : "";
  auto store = edl::connect_store(std::getenv("EDL_STORE"), o);
  std::string job = std::getenv("EDL_JOB_ID");
  store->set(job + "/failed", "ValueError in user code at step " + std::to_string(step) + ": bad label 11");
  std::fprintf(stderr, "user error at step %lld\n", static_cast<long long>(step));
  std::fflush(stderr);
  _exit(3);
}

struct TrainFlags {
  int64_t steps = 0;
  int step_ms = 0;
  long print_mb = 0;
  int64_t error_at = -1;
  bool own_handler = false;
  int64_t print_every = 0;
  int64_t crash_after = -1;
  int crash_incarnations = 0;
  bool catch_errors = false;
};

TrainFlags train_flags(int argc, char** argv) {
  TrainFlags f;
  f.steps = std::atoll(argv[2]);
  f.step_ms = std::atoi(argv[3]);
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--own-sigterm-handler") f.own_handler = true;
    if (a == "--catch") f.catch_errors = true;
    if (!has_value) continue;
    if (a == "--print-mb") f.print_mb = std::atol(argv[i + 1]);
    if (a == "--user-error-at-step") f.error_at = std::atoll(argv[i + 1]);
    if (a == "--print-every") f.print_every = std::atoll(argv[i + 1]);
    if (a == "--crash-after-steps") f.crash_after = std::atoll(argv[i + 1]);
    if (a == "--crash-incarnations") f.crash_incarnations = std::atoi(argv[i + 1]);
  }
  return f;
}

// Slot and incarnation of EDL_WORKER_ID (host:slot.incarnation); -1 each when unset.
std::pair<int, int> slot_incarnation() {
  const char* id = std::getenv("EDL_WORKER_ID");
  std::string s = id ? id : "";
  const size_t colon = s.rfind(':'), dot = s.rfind('.');
  if (colon == std::string::npos || dot == std::string::npos || dot < colon) return {-1, -1};
  return {std::atoi(s.substr(colon + 1, dot - colon - 1).c_str()), std::atoi(s.substr(dot + 1).c_str())};
}

int train(const TrainFlags& f) {
  std::thread printer;
  if (f.print_mb > 0)
    printer = std::thread([mb = f.print_mb] {
      std::string line(1023, 'p');
      line.push_back('\n');
      for (long i = 0; i < mb * 1024; ++i)
        if (write(1, line.data(), line.size()) < 0) return;
    });
  edl::init();
  if (f.own_handler) {  // the runtime's SIGTERM handler while the job runs: restartable system calls
    struct sigaction cur {};
    sigaction(SIGTERM, nullptr, &cur);
    std::printf("sigterm handler during the job: %s, SA_RESTART %s\n",
                cur.sa_handler == on_signal ? "the program's" : "the runtime's",
                (cur.sa_flags & SA_RESTART) ? "on" : "off");
  }
  const auto [slot, incarnation] = slot_incarnation();
  const bool crashes = f.crash_after >= 0 && slot == 1 && incarnation < f.crash_incarnations;
  std::vector<float> w(1024, static_cast<float>(getpid() % 97)), grad(1024);  // differs per process until sync
  edl::elastic::State state;
  state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
  int64_t own_steps = 0;
  edl::elastic::run(state, [&] {
    if (f.print_every > 0 && own_steps == 0) std::printf("start step %lld\n", static_cast<long long>(state.step));
    std::fflush(stdout);
    while (state.step < f.steps) {
      for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>((state.step + i) % 7) * 0.01f;
      edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kSum, "grad");
      for (size_t i = 0; i < w.size(); ++i) w[i] -= grad[i];
      usleep(f.step_ms * 1000);
      if (state.step == f.error_at && edl::rank() == 0) user_error(state.step);
      edl::notify_batch_end();
      ++own_steps;
      if (f.print_every > 0 && edl::rank() == 0 && state.step % f.print_every == 0) {
        std::printf("step %lld\n", static_cast<long long>(state.step));
        std::fflush(stdout);
      }
      if (crashes && own_steps >= f.crash_after) {
        std::fprintf(stderr, "crash after %lld steps\n", static_cast<long long>(own_steps));
        _exit(1);
      }
    }
  });
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += w[i] * static_cast<double>(i + 1);
  if (printer.joinable()) printer.join();
  std::printf("done %lld %.6f\n", static_cast<long long>(state.step), sum);
  edl::shutdown();
  if (f.own_handler) {
    struct sigaction cur {};
    sigaction(SIGTERM, nullptr, &cur);
    std::printf("sigterm handler %s\n", cur.sa_handler == on_signal ? "restored" : "NOT restored");
  }
  return 0;
}

int elastic_train(int argc, char** argv) {
  const TrainFlags f = train_flags(argc, argv);
  if (f.own_handler) signal(SIGTERM, on_signal);  // must be what SIGTERM does again after shutdown()
  if (!f.catch_errors) return train(f);
  try {
    return train(f);
  } catch (const std::exception& e) {  // no edl::shutdown(): the process ends with the runtime live
    std::fprintf(stderr, "elastic-train: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  std::string mode = argv[1];
  if (mode == "env") {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "EDL_", 4) == 0) vars.push_back(*e);
    std::sort(vars.begin(), vars.end());
    for (auto& v : vars) std::printf("%s\n", v.c_str());
    return 0;
  }
  if (mode == "exit-rank" && argc == 4) {
    if (rank() == std::atoi(argv[2])) {
      usleep(100000);
      return std::atoi(argv[3]);
    }
    wait_for_signal();
    std::printf("got signal %d\n", static_cast<int>(g_signal));
    return g_signal ? 0 : 1;
  }
  if (mode == "wait-signal" && argc == 3) {
    wait_for_signal();
    std::printf("got signal %d\n", static_cast<int>(g_signal));
    return std::atoi(argv[2]);
  }
  if (mode == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    std::printf("ready\n");
    std::fflush(stdout);
    sleep(60);
    return 0;
  }
  if (mode == "lines" && argc == 3) {
    int n = std::atoi(argv[2]);
    std::string body(200, 'x');
    for (int i = 0; i < n; ++i) {
      std::string line = "line " + std::to_string(i) + " " + body + " end\n";
      // Write in pieces so that lines cross pipe reads.
      for (size_t off = 0; off < line.size(); off += 37) {
        size_t len = std::min<size_t>(37, line.size() - off);
        if (write(1, line.data() + off, len) < 0) return 1;
        if (write(2, line.data() + off, len) < 0) return 1;
      }
    }
    return 0;
  }
  if (mode == "shm-allreduce") {
    // Allreduce forever over the generation's communicator (EDL_TRANSPORT=auto: shared memory on one
    // host); prints once whether this process maps the shared segment (a memfd, never /dev/shm).
    edl::init();
    std::vector<float> grad(1 << 16, 1.0f);
    for (long it = 0;; ++it) {
      edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32, edl::ReduceOp::kSum, "grad");
      if (it == 3) {
        std::ifstream maps("/proc/self/maps");
        std::string line;
        bool mapped = false;
        while (std::getline(maps, line)) mapped = mapped || line.find("memfd:edl-shm") != std::string::npos;
        std::printf("segment %s\n", mapped ? "mapped" : "absent");
        std::fflush(stdout);
      }
    }
  }
  if (mode == "store-barrier") {
    edl::StoreOptions o;
    o.secret = std::getenv("EDL_JOB_SECRET") ? std::getenv("EDL_JOB_SECRET") : "";
    auto store = edl::connect_store(std::getenv("EDL_STORE"), o);
    int size = std::atoi(std::getenv("EDL_SIZE"));
    store->add("barrier", 1);
    for (;;) {
      auto v = store->get("barrier");
      if (v && std::stoi(*v) >= size) break;
      if (!store->wait_change("barrier", v, std::chrono::seconds(20)).has_value()) return 3;
    }
    std::printf("barrier passed by %d ranks\n", size);
    return 0;
  }
  if (mode == "incarnation-exit" && argc >= 3) {
    const char* id = std::getenv("EDL_WORKER_ID");
    std::string s = id ? id : "";
    int k = std::atoi(s.substr(s.rfind('.') + 1).c_str());
    int idx = std::min(k, argc - 3);
    usleep(150000);
    std::printf("incarnation %d exits with %s\n", k, argv[2 + idx]);
    return std::atoi(argv[2 + idx]);
  }
  if (mode == "fail-at-start" && argc == 3) {
    std::fprintf(stderr, "%s\n", argv[2]);
    return 1;
  }
  if (mode == "sleep-ms" && argc == 3) {
    signal(SIGTERM, on_signal);
    for (int i = 0; i < std::atoi(argv[2]) / 10 && !g_signal; ++i) usleep(10000);
    return 0;
  }
  if (mode == "flood") {
    std::string line(1023, 'f');
    line.push_back('\n');
    for (;;)
      if (write(1, line.data(), line.size()) < 0) return 1;
  }
  if (mode == "elastic-train" && argc >= 4) return elastic_train(argc, argv);
  return 64;
}
