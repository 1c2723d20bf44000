// shard_audit --mode processes (see shard_audit.h): the edl-run job, the injected events and the
// audit of the workers' committed counters, one named phase each.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "common/bench_util.h"
#include "shard_audit.h"
#include "testing/process.h"

namespace edl::bench {
namespace {

std::string dir_of(const std::string& path) {
  auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : path.substr(0, pos);
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

// The job under audit and the events injected into it. run() is the whole audit.
class ProcessAudit {
 public:
  ProcessAudit(const cxxopts::ParseResult& a, const std::string& self)
      : a_(a), self_(self), np_(a["np"].as<int>()), max_np_(a["max-np"].as<int>()),
        records_(a["records"].as<uint64_t>()), epochs_(a["epochs"].as<int>()), batch_(a["batch"].as<uint64_t>()),
        want_events_(a["events"].as<int>()), want_restarts_(a["job-restarts"].as<int>()),
        gap_ms_(a["event-gap-ms"].as<int>()), rng_(a["seed"].as<uint64_t>()), events_in_epoch_(epochs_ + 1, 0),
        per_epoch_((want_events_ + epochs_ - 1) / epochs_), slots_(np_) {}

  Audit run() {
    if (prepare() && drive()) audit_counters();
    return std::move(res_);
  }

 private:
  // Paths, the work directory, the host-discovery script and edl-run's command line.
  bool prepare() {
    const std::string bin = dir_of(self_);
    edl_run_ = a_["edl-run"].as<std::string>();
    if (edl_run_.empty()) edl_run_ = bin + "/../src/launcher/edl-run";
    std::string worker = a_["worker"].as<std::string>();
    if (worker.empty()) worker = bin + "/shard_audit_worker";
    for (const auto& p : {edl_run_, worker})
      if (access(p.c_str(), X_OK) != 0) return fail(p + " is not an executable (build it, or pass --edl-run / --worker)");
    char tmpl[] = "/tmp/edl-shard-audit-XXXXXX";
    if (!mkdtemp(tmpl)) return fail("mkdtemp failed");
    dir_ = tmpl;
    write_slots();
    write_file(dir_ + "/discover.sh", "#!/bin/sh\ncat " + dir_ + "/hosts\n");
    chmod((dir_ + "/discover.sh").c_str(), 0755);
    argv_ = {edl_run_, "--min-np", "1", "--max-np", std::to_string(max_np_),
             "--host-discovery-script", dir_ + "/discover.sh", "--discovery-interval-ms", "200",
             "--blacklist-cooldown-range", "0,0", "--pid-file", dir_ + "/pids",
             "--grace-period", "20", "--rendezvous-timeout", "60", worker,
             "--out", dir_, "--records", std::to_string(records_),
             "--records-per-shard", std::to_string(a_["records-per-shard"].as<uint64_t>()),
             "--batch", std::to_string(batch_),
             "--epochs", std::to_string(epochs_), "--seed", std::to_string(a_["seed"].as<uint64_t>()),
             "--step-ms", std::to_string(a_["step-ms"].as<int>())};
    if (!a_["store"].as<std::string>().empty()) argv_.insert(argv_.begin() + 1, {"--store", a_["store"].as<std::string>()});
    if (a_.count("negative-control")) argv_.push_back("--negative-control");
    ckpt_ = dir_ + "/checkpoints";
    mkdir(ckpt_.c_str(), 0755);
    std::printf("shard_audit: %s (workdir %s, log %s/edl-run.log)\n", edl_run_.c_str(), dir_.c_str(), dir_.c_str());
    return true;
  }

  // Runs the job to its end, injecting the events; false (with res_.error) when it failed.
  bool drive() {
    job_ = std::make_unique<Job>(argv_, dir_ + "/edl-run.log", ckpt_);
    const double deadline = now_s() + a_["timeout-s"].as<int>();
    next_at_ = now_s() + 1.0 + (rng_() % gap_ms_) / 1000.0;
    while (job_->poll() < 0 && now_s() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (done_ >= want_events_ || now_s() < next_at_) continue;
      std::istringstream prog(slurp(dir_ + "/progress"));
      int64_t epoch = -1, step = -1;
      prog >> epoch >> step;
      if (epoch < 0) continue;
      if (!check_resumed(epoch, step)) return false;
      if (!event_due(epoch, step)) continue;
      std::vector<pid_t> live = live_workers(dir_ + "/pids", job_->pgid());
      if (res_.restarts < want_restarts_ && done_ == (want_events_ / 2) * (res_.restarts + 1) / want_restarts_) {
        restart_job(epoch, step, live);
      } else {
        inject_event(epoch, step, live);
      }
    }
    if (job_->poll() < 0) return fail("the job did not finish within --timeout-s (see " + dir_ + "/edl-run.log)");
    if (job_->poll() != 0)
      return fail("edl-run exited with " + std::to_string(job_->poll()) + " (see " + dir_ + "/edl-run*.log)");
    job_.reset();
    return true;
  }

  // The first progress of a restarted job: it must resume near the crash, not begin again.
  bool check_resumed(int64_t epoch, int64_t step) {
    if (crash_step_ < 0) return true;
    std::printf("  resumed   at epoch %lld step %lld (crashed at step %lld)\n", (long long)epoch, (long long)step,
                (long long)crash_step_);
    if (step < crash_step_ / 2)
      return fail("the restarted job began again at step " + std::to_string(step) + " instead of resuming near " +
                  std::to_string(crash_step_) + " from the checkpoint");
    crash_step_ = -1;
    return true;
  }

  // Events are spread over the epochs: at most ceil(events / epochs) per epoch, and the next one
  // waits until training advanced a fraction of an epoch (so each event hits a running job, not one
  // still recovering from the previous event).
  bool event_due(int64_t epoch, int64_t step) const {
    if (epoch >= epochs_ || events_in_epoch_[epoch] >= per_epoch_) return false;
    const int64_t epoch_steps = static_cast<int64_t>(records_ / (slots_ * batch_));
    return step >= last_event_step_ + std::max<int64_t>(5, epoch_steps / (per_epoch_ + 1));
  }

  // A whole-job crash: every worker dies; a new edl-run resumes from the persisted checkpoint.
  void restart_job(int64_t epoch, int64_t step, const std::vector<pid_t>& live) {
    job_->crash();
    for (pid_t p : live)
      for (int i = 0; i < 100 && ::kill(p, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++res_.restarts;
    std::remove((dir_ + "/progress").c_str());
    crash_step_ = step;
    job_ = std::make_unique<Job>(argv_, dir_ + "/edl-run." + std::to_string(res_.restarts + 1) + ".log", ckpt_);
    count_event(epoch, step);
    std::printf("  restart   at epoch %lld step %lld: kill -9 of the whole job, new edl-run from %s\n",
                (long long)epoch, (long long)step, ckpt_.c_str());
    std::fflush(stdout);
  }

  // A kill -9 of a worker, a join or a graceful leave. Kinds come in shuffled triples (kill, join,
  // leave): balanced counts, random order.
  void inject_event(int64_t epoch, int64_t step, const std::vector<pid_t>& live) {
    if (done_ % 3 == 0) std::shuffle(kinds_.begin(), kinds_.end(), rng_);
    int kind = kinds_[done_ % 3];
    if (kind == 1 && slots_ >= max_np_) kind = 2;
    if (kind == 2 && slots_ <= 2) kind = 1;
    if (kind == 0 && live.size() < 2) return;
    std::string what;
    if (kind == 0) {
      pid_t victim = live[rng_() % live.size()];
      if (victim <= 1 || parent_of(victim) != job_->pgid()) return;
      ::kill(victim, SIGKILL);
      ++res_.kills;
      what = "kill -9 pid " + std::to_string(victim);
    } else {
      slots_ += kind == 1 ? 1 : -1;
      write_slots();
      ++(kind == 1 ? res_.joins : res_.leaves);
      what = std::string(kind == 1 ? "join" : "graceful leave") + " -> " + std::to_string(slots_) + " slots";
    }
    ++done_;
    count_event(epoch, step);
    std::printf("  event %2d at epoch %lld step %lld: %s\n", done_, (long long)epoch, (long long)step, what.c_str());
    std::fflush(stdout);
  }

  void count_event(int64_t epoch, int64_t step) {
    ++events_in_epoch_[std::min<int64_t>(epoch, epochs_)];
    last_event_step_ = step;
    next_at_ = now_s() + (gap_ms_ / 2 + rng_() % gap_ms_) / 1000.0;
  }

  void write_slots() { write_file(dir_ + "/hosts", "localhost:" + std::to_string(slots_) + "\n"); }

  // Every worker that finished wrote the committed counters; they must all agree, and each record
  // of each epoch must have been counted once.
  void audit_counters() {
    std::string counts;
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("final.", 0) != 0 || name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") == 0) continue;
      std::string c = slurp(entry.path().string());
      if (files++ == 0) counts = c;
      else if (c != counts) res_.error = "workers' final committed counters differ (" + name + ")";
    }
    if (files == 0 || counts.size() != records_ * epochs_ * sizeof(int32_t)) {
      fail("no complete final counters in " + dir_);
      return;
    }
    const int32_t* c = reinterpret_cast<const int32_t*>(counts.data());
    for (int e = 0; e < epochs_; ++e) {
      edl::testing::EpochAudit row;
      row.epoch = e;
      row.records = records_;
      row.events = events_in_epoch_[e];
      for (uint64_t r = 0; r < records_; ++r) {
        int32_t v = c[e * records_ + r];
        row.trained_once += v == 1;
        row.trained_twice += v >= 2;
        row.never += v == 0;
      }
      res_.epochs.push_back(row);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool fail(const std::string& why) {
    res_.error = why;
    return false;
  }

  const cxxopts::ParseResult& a_;
  const std::string self_;
  const int np_, max_np_;
  const uint64_t records_;
  const int epochs_;
  const uint64_t batch_;
  const int want_events_, want_restarts_, gap_ms_;
  std::mt19937_64 rng_;
  std::vector<int> events_in_epoch_;
  const int per_epoch_;
  Audit res_;
  std::string edl_run_, dir_, ckpt_;
  std::vector<std::string> argv_;
  std::unique_ptr<Job> job_;
  int slots_;
  int done_ = 0;
  int64_t last_event_step_ = -1000000;
  int64_t crash_step_ = -1;
  double next_at_ = 0;
  std::vector<int> kinds_ = {0, 1, 2};
};

}  // namespace

Audit run_processes(const cxxopts::ParseResult& a, const std::string& self) { return ProcessAudit(a, self).run(); }

}  // namespace edl::bench
