// shard_audit: does every record of every epoch contribute exactly once to the model that survives
// random kills, joins and graceful leaves? (issue 4; docs/data.md)
//
// --mode processes (default): starts `edl-run` in elastic mode with shard_audit_worker, then injects
//   --events random events: kill -9 of a worker (edl-run restarts it: it rejoins), a join (one more
//   slot in the host-discovery file) or a graceful leave (one slot fewer: edl-run sends SIGTERM).
//   The workers' model is a per-record counter vector in the elastic State; the final committed
//   counters are written by every worker that finished, and audited here.
// --mode threads: the same audit on the in-process simulation (tests/data/shard_sim.h: ranks as
//   objects sharing a memory store, kills before/after the step's allreduce with partial commits).
// Rows (per epoch): {"bench":"shard_audit","mode","epoch","records","trained_once","trained_twice",
// "never","events"}; exit code 0 only if every epoch has trained_once = records.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <algorithm>
#include <iostream>
#include <memory>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "../tests/data/shard_sim.h"
#include "common/bench_util.h"
#include "testing/process.h"

using namespace edl::bench;

namespace {

struct Audit {
  std::vector<edl::test::EpochAudit> epochs;
  int kills = 0, joins = 0, leaves = 0, restarts = 0;
  std::string error;
};

std::string dir_of(const std::string& path) {
  auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : path.substr(0, pos);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path + ".tmp");
  f << text;
  f.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// The edl-run child: its own process group so that everything it started can be killed at the end.
class Job {
 public:
  Job(const std::vector<std::string>& argv, const std::string& log, const std::string& checkpoint_dir)
      : proc_(argv, options(log, checkpoint_dir)) {}
  ~Job() { proc_.stop(std::chrono::seconds(5)); }  // SIGTERM to the group, then SIGKILL
  pid_t pgid() const { return proc_.pid(); }
  // A crash of the whole job: SIGKILL to edl-run's group (its workers die with it: PR_SET_PDEATHSIG).
  void crash() {
    if (poll() < 0) proc_.stop(std::chrono::milliseconds(0));
  }
  // Exit status once edl-run has exited; -1 while it runs.
  int poll() { return proc_.poll(); }

 private:
  static edl::testing::SpawnOptions options(const std::string& log, const std::string& checkpoint_dir) {
    edl::testing::SpawnOptions o;
    o.log = log;
    o.env = {"EDL_CHECKPOINT_DIR=" + checkpoint_dir};
    return o;
  }
  edl::testing::Process proc_;
};

// Parent pid of a process (from /proc), -1 when it is gone.
pid_t parent_of(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  long ppid = -1;
  rest >> state >> ppid;
  return static_cast<pid_t>(ppid);
}

// Workers listed in edl-run's --pid-file ("<slot> <pid> <worker-id>" lines) that are alive children
// of the job's edl-run process — never anything else.
std::vector<pid_t> live_workers(const std::string& pid_file, pid_t job_pgid) {
  std::vector<pid_t> pids;
  std::istringstream in(slurp(pid_file));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    long slot = -1, pid = -1;
    if (!(fields >> slot >> pid) || pid <= 1 || pid == job_pgid) continue;
    if (parent_of(static_cast<pid_t>(pid)) != job_pgid) continue;
    pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

Audit run_processes(const cxxopts::ParseResult& a, const std::string& self) {
  Audit res;
  const std::string bin = dir_of(self);
  std::string edl_run = a["edl-run"].as<std::string>();
  if (edl_run.empty()) edl_run = bin + "/../src/elastic/edl-run";
  std::string worker = a["worker"].as<std::string>();
  if (worker.empty()) worker = bin + "/shard_audit_worker";
  for (const auto& p : {edl_run, worker})
    if (access(p.c_str(), X_OK) != 0) {
      res.error = p + " is not an executable (build it, or pass --edl-run / --worker)";
      return res;
    }
  char tmpl[] = "/tmp/edl-shard-audit-XXXXXX";
  if (!mkdtemp(tmpl)) {
    res.error = "mkdtemp failed";
    return res;
  }
  const std::string dir = tmpl;
  const int np = a["np"].as<int>(), max_np = a["max-np"].as<int>();
  const uint64_t N = a["records"].as<uint64_t>();
  const int epochs = a["epochs"].as<int>();
  int slots = np;
  write_file(dir + "/hosts", "localhost:" + std::to_string(slots) + "\n");
  write_file(dir + "/discover.sh", "#!/bin/sh\ncat " + dir + "/hosts\n");
  chmod((dir + "/discover.sh").c_str(), 0755);
  std::vector<std::string> argv = {edl_run, "--min-np", "1", "--max-np", std::to_string(max_np),
                                   "--host-discovery-script", dir + "/discover.sh", "--discovery-interval-ms", "200",
                                   "--blacklist-cooldown-range", "0,0", "--pid-file", dir + "/pids",
                                   "--grace-period", "20", "--rendezvous-timeout", "60", worker,
                                   "--out", dir, "--records", std::to_string(N),
                                   "--records-per-shard", std::to_string(a["records-per-shard"].as<uint64_t>()),
                                   "--batch", std::to_string(a["batch"].as<uint64_t>()),
                                   "--epochs", std::to_string(epochs), "--seed", std::to_string(a["seed"].as<uint64_t>()),
                                   "--step-ms", std::to_string(a["step-ms"].as<int>())};
  if (!a["store"].as<std::string>().empty()) argv.insert(argv.begin() + 1, {"--store", a["store"].as<std::string>()});
  if (a.count("negative-control")) argv.push_back("--negative-control");
  std::printf("shard_audit: %s (workdir %s, log %s/edl-run.log)\n", edl_run.c_str(), dir.c_str(), dir.c_str());
  std::vector<int> events_in_epoch(epochs + 1, 0);
  const std::string ckpt = dir + "/checkpoints";
  mkdir(ckpt.c_str(), 0755);
  const int want_restarts = a["job-restarts"].as<int>();
  {
    auto job = std::make_unique<Job>(argv, dir + "/edl-run.log", ckpt);
    std::mt19937_64 rng(a["seed"].as<uint64_t>());
    const double deadline = now_s() + a["timeout-s"].as<int>();
    const int want_events = a["events"].as<int>();
    const int gap_ms = a["event-gap-ms"].as<int>();
    double next_at = now_s() + 1.0 + (rng() % gap_ms) / 1000.0;
    int done = 0;
    // Events are spread over the epochs: at most ceil(events / epochs) per epoch, and the next one
    // waits until training advanced a fraction of an epoch (so each event hits a running job, not one
    // still recovering from the previous event).
    const int per_epoch = (want_events + epochs - 1) / epochs;
    int64_t last_event_step = -1000000;
    std::vector<int> kinds = {0, 1, 2};
    int64_t crash_step = -1;
    while (job->poll() < 0 && now_s() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (done >= want_events || now_s() < next_at) continue;
      std::istringstream prog(slurp(dir + "/progress"));
      int64_t epoch = -1, step = -1;
      prog >> epoch >> step;
      if (epoch < 0) continue;
      if (crash_step >= 0) {  // the first progress of the restarted job: did it resume?
        std::printf("  resumed   at epoch %lld step %lld (crashed at step %lld)\n", (long long)epoch, (long long)step,
                    (long long)crash_step);
        if (step < crash_step / 2) {
          res.error = "the restarted job began again at step " + std::to_string(step) + " instead of resuming near " +
                      std::to_string(crash_step) + " from the checkpoint";
          return res;
        }
        crash_step = -1;
      }
      if (epoch >= epochs || events_in_epoch[epoch] >= per_epoch) continue;
      const int64_t epoch_steps = static_cast<int64_t>(N / (slots * a["batch"].as<uint64_t>()));
      if (step < last_event_step + std::max<int64_t>(5, epoch_steps / (per_epoch + 1))) continue;
      std::vector<pid_t> live = live_workers(dir + "/pids", job->pgid());
      if (res.restarts < want_restarts && done == (want_events / 2) * (res.restarts + 1) / want_restarts) {
        // A whole-job crash: every worker dies; a new edl-run resumes from the persisted checkpoint.
        job->crash();
        for (pid_t p : live)
          for (int i = 0; i < 100 && ::kill(p, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++res.restarts;
        std::remove((dir + "/progress").c_str());
        crash_step = step;
        job = std::make_unique<Job>(argv, dir + "/edl-run." + std::to_string(res.restarts + 1) + ".log", ckpt);
        ++events_in_epoch[std::min<int64_t>(epoch, epochs)];
        last_event_step = step;
        std::printf("  restart   at epoch %lld step %lld: kill -9 of the whole job, new edl-run from %s\n",
                    (long long)epoch, (long long)step, ckpt.c_str());
        std::fflush(stdout);
        next_at = now_s() + (gap_ms / 2 + rng() % gap_ms) / 1000.0;
        continue;
      }
      // Kinds come in shuffled triples (kill, join, leave): balanced counts, random order.
      if (done % 3 == 0) std::shuffle(kinds.begin(), kinds.end(), rng);
      int kind = kinds[done % 3];
      if (kind == 1 && slots >= max_np) kind = 2;
      if (kind == 2 && slots <= 2) kind = 1;
      if (kind == 0 && live.size() < 2) continue;
      std::string what;
      if (kind == 0) {
        pid_t victim = live[rng() % live.size()];
        if (victim <= 1 || parent_of(victim) != job->pgid()) continue;
        ::kill(victim, SIGKILL);
        ++res.kills;
        what = "kill -9 pid " + std::to_string(victim);
      } else {
        slots += kind == 1 ? 1 : -1;
        write_file(dir + "/hosts", "localhost:" + std::to_string(slots) + "\n");
        ++(kind == 1 ? res.joins : res.leaves);
        what = std::string(kind == 1 ? "join" : "graceful leave") + " -> " + std::to_string(slots) + " slots";
      }
      ++events_in_epoch[std::min<int64_t>(epoch, epochs)];
      ++done;
      last_event_step = step;
      std::printf("  event %2d at epoch %lld step %lld: %s\n", done, (long long)epoch, (long long)step, what.c_str());
      std::fflush(stdout);
      next_at = now_s() + (gap_ms / 2 + rng() % gap_ms) / 1000.0;
    }
    if (job->poll() < 0) {
      res.error = "the job did not finish within --timeout-s (see " + dir + "/edl-run.log)";
      return res;
    }
    if (job->poll() != 0) {
      res.error = "edl-run exited with " + std::to_string(job->poll()) + " (see " + dir + "/edl-run*.log)";
      return res;
    }
  }
  // Every worker that finished wrote the committed counters; they must all agree.
  std::string counts;
  int files = 0;
  for (int i = 0; i < 1; ++i) {
    FILE* ls = popen(("ls " + dir + " | grep '^final\\.' | grep -v '\\.tmp$'").c_str(), "r");
    char line[512];
    while (ls && std::fgets(line, sizeof line, ls)) {
      std::string name(line);
      name.erase(name.find_last_not_of("\n") + 1);
      std::string c = slurp(dir + "/" + name);
      if (files++ == 0) counts = c;
      else if (c != counts) res.error = "workers' final committed counters differ (" + name + ")";
    }
    if (ls) pclose(ls);
  }
  if (files == 0 || counts.size() != N * epochs * sizeof(int32_t)) {
    res.error = "no complete final counters in " + dir;
    return res;
  }
  const int32_t* c = reinterpret_cast<const int32_t*>(counts.data());
  for (int e = 0; e < epochs; ++e) {
    edl::test::EpochAudit row;
    row.epoch = e;
    row.records = N;
    row.events = events_in_epoch[e];
    for (uint64_t r = 0; r < N; ++r) {
      int32_t v = c[e * N + r];
      row.trained_once += v == 1;
      row.trained_twice += v >= 2;
      row.never += v == 0;
    }
    res.epochs.push_back(row);
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return res;
}

Audit run_threads(const cxxopts::ParseResult& a) {
  edl::test::SimOptions o;
  o.records = a["records"].as<uint64_t>();
  o.records_per_shard = a["records-per-shard"].as<uint64_t>();
  o.epochs = a["epochs"].as<int>();
  o.initial_workers = a["np"].as<int>();
  o.max_workers = a["max-np"].as<int>();
  o.events = a["events"].as<int>();
  o.seed = a["seed"].as<uint64_t>();
  o.threads = true;
  o.min_batch = o.max_batch = a["batch"].as<uint64_t>();
  edl::test::Simulation sim(o);
  auto r = sim.run();
  Audit res;
  res.epochs = r.epochs;
  res.kills = r.kills;
  res.joins = r.joins;
  res.leaves = r.leaves;
  res.error = r.error;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("shard_audit", "exactly-once records per epoch under random kills, joins and leaves");
  opts.add_options()("mode", "processes (edl-run) | threads (in-process simulation)",
                     cxxopts::value<std::string>()->default_value("processes"))(
      "edl-run", "path of edl-run (default: the build tree's)", cxxopts::value<std::string>()->default_value(""))(
      "worker", "path of shard_audit_worker (default: next to this program)",
      cxxopts::value<std::string>()->default_value(""))("np", "initial workers", cxxopts::value<int>()->default_value("3"))(
      "max-np", "most workers", cxxopts::value<int>()->default_value("5"))(
      "events", "random kills + joins + leaves", cxxopts::value<int>()->default_value("12"))(
      "event-gap-ms", "mean gap between events", cxxopts::value<int>()->default_value("600"))(
      "epochs", "epochs", cxxopts::value<int>()->default_value("3"))(
      "records", "records per epoch", cxxopts::value<uint64_t>()->default_value("4000"))(
      "records-per-shard", "records per shard", cxxopts::value<uint64_t>()->default_value("50"))(
      "batch", "records per worker per step", cxxopts::value<uint64_t>()->default_value("8"))(
      "step-ms", "simulated compute per step (processes)", cxxopts::value<int>()->default_value("15"))(
      "seed", "seed of the events and the shuffle", cxxopts::value<uint64_t>()->default_value("1"))(
      "timeout-s", "give up after this long (processes)", cxxopts::value<int>()->default_value("300"))(
      "store", "processes: external store for edl-run (redis://HOST:PORT); default: edl-run's embedded store",
      cxxopts::value<std::string>()->default_value(""))(
      "job-restarts", "processes: whole-job crashes (kill -9 of edl-run and all workers) in mid-run, each "
                      "followed by a new edl-run resuming from EDL_CHECKPOINT_DIR",
      cxxopts::value<int>()->default_value("1"))(
      "negative-control", "processes: the workers do not register the dispatcher in their State, so a rollback "
                          "does not roll the shard progress back — the audit must then FAIL")(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  const std::string mode = args["mode"].as<std::string>();
  if (mode != "processes" && mode != "threads") {
    std::fprintf(stderr, "shard_audit: --mode must be processes or threads, got '%s'\n", mode.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  Audit res = mode == "threads" ? run_threads(args) : run_processes(args, argv[0]);
  JsonRows json(args["json"].as<std::string>());
  Table table({"epoch", "records", "trained_once", "trained_twice", "never", "events"}, 14);
  std::printf("mode %s: %d kills, %d joins, %d graceful leaves, %d whole-job restarts from a checkpoint\n",
              mode.c_str(), res.kills, res.joins, res.leaves, res.restarts);
  table.header();
  bool ok = res.error.empty() && !res.epochs.empty();
  for (const auto& e : res.epochs) {
    table.row({std::to_string(e.epoch), std::to_string(e.records), std::to_string(e.trained_once),
               std::to_string(e.trained_twice), std::to_string(e.never), std::to_string(e.events)});
    json.write({{"bench", "shard_audit"}, {"mode", mode}, {"epoch", e.epoch}, {"records", e.records},
                {"trained_once", e.trained_once}, {"trained_twice", e.trained_twice}, {"never", e.never},
                {"events", e.events}});
    ok = ok && e.trained_once == e.records && e.trained_twice == 0 && e.never == 0;
  }
  if (!res.error.empty()) std::fprintf(stderr, "shard_audit: %s\n", res.error.c_str());
  const int events = res.kills + res.joins + res.leaves + res.restarts;
  std::printf("%d events (target >= 10)\n", events);
  std::printf("%s\n", ok ? "PASS: every record of every epoch trained exactly once" : "FAIL");
  return ok ? 0 : 1;
}
