// The EDL-on-Slurm scenarios (see slurm_scenarios.h; docs/launcher.md, "Slurm").
#include "testing/slurm_scenarios.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "testing/commit_log.h"
#include "testing/controlplane_scenarios.h"
#include "testing/etcd_cluster.h"
#include "testing/slurm_cluster.h"

namespace edl::testing {
namespace {

constexpr int kNodes = 3;
constexpr int kWarmSteps = 20;      // steps trained before the event
constexpr int kProgressSteps = 20;  // steps the job must train after it
constexpr double kWaitMs = 60000;   // bound of every wait for the job (a hang guard, not a target)
// Bound of the wait for an allocation to end: the rest of its data first (on a loaded machine the
// steps are slower: the CI machine is shared); a hang guard as well.
constexpr double kEndWaitMs = 180000;
constexpr int kEtcdPort = 2379;
constexpr int kEndGraceS = 5;       // EDL_SLURM_END_GRACE: a lost node's srun never returns
const char* const kJobId = "edl-slurm";

double mono_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double real_ms() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, size_t n = 800) { return s.size() > n ? "..." + s.substr(s.size() - n) : s; }

bool final_state(const std::string& s) {
  return !s.empty() && s != "PENDING" && s != "RUNNING" && s != "CONFIGURING" && s != "COMPLETING" &&
         s != "SUSPENDED" && s != "REQUEUED" && s != "RESIZING";
}

// One EDL job on a fresh 3-node Slurm cluster: the etcd store on the controller host, the batch
// script submitted once per allocation, the workers' shared log.
class SlurmJob {
 public:
  SlurmJob(const SlurmScenarioOptions& o, SlurmScenarioResult& r, const std::vector<std::string>& conf_lines)
      : o_(o), r_(r) {
    SlurmClusterOptions co;
    co.nodes = kNodes;
    co.keep_dir = o.keep_dir;
    co.conf_lines = conf_lines;
    cluster_ = std::make_unique<SlurmCluster>(co);
    r.dir = cluster_->dir();
    start_etcd();
  }

  SlurmCluster& cluster() { return *cluster_; }
  CommitLog log() const { return CommitLog::parse_elastic_worker(read_text(dir() + "/jobs/steps.log")); }

  // Submits edl-job.sbatch on `nodelist` with `records` records of data; the Slurm job id.
  long submit(const std::string& nodelist, int nodes, uint64_t records) {
    std::string a = cluster_->controller_address();
    std::vector<std::string> env = {"EDL_RUN=" + o_.edl_run, "EDL_SLURM_DIR=" + o_.scripts,
                                    "EDL_JOB_SECRET=slurm-test-secret-" + std::to_string(getpid()),
                                    "EDL_LEASE_MS=" + std::to_string(o_.lease_ms),
                                    "EDL_HEARTBEAT_MS=" + std::to_string(std::max(50, o_.lease_ms / 6)),
                                    "EDL_SLURM_END_GRACE=" + std::to_string(kEndGraceS)};
    std::vector<std::string> args = {
        "-N", std::to_string(nodes), "-w", nodelist, "-o", dir() + "/jobs/slurm-%j.out", "-D", dir() + "/jobs",
        o_.scripts + "/edl-job.sbatch", "--store", "etcd://" + a + ":" + std::to_string(kEtcdPort), "--job-id", kJobId,
        "--min-np", "2", "--rendezvous-timeout", "30", "--grace-period", "5", "--",
        o_.worker, "--steps", "1000000", "--step-ms", std::to_string(o_.step_ms), "--params", "4096",
        "--records", std::to_string(records), "--log", dir() + "/jobs/steps.log"};
    return cluster_->submit(args, env);
  }

  std::string dir() const { return cluster_->dir(); }
  std::string output(long job) const { return read_text(dir() + "/jobs/slurm-" + std::to_string(job) + ".out"); }

  // Monotonic ms at which the batch script of `job` logged its allocation (-1: not yet).
  double allocation_ms(long job) const {
    std::string out = output(job);
    size_t p = out.find("event=allocation");
    if (p == std::string::npos) return -1;
    size_t line = out.rfind('\n', p);
    line = line == std::string::npos ? 0 : line + 1;
    size_t t = out.find("t=", line);
    if (t == std::string::npos || t > p) return -1;
    return std::stod(out.substr(t + 2)) * 1e3 - (real_ms() - mono_ms());
  }

  template <typename Pred>
  bool wait_log(Pred pred, double timeout_ms) const {
    double deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
      if (pred(log())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pred(log());
  }

  // Waits for `job` to end; its final JobState and ExitCode ("" after timeout_ms).
  std::pair<std::string, std::string> wait_end(long job, double timeout_ms) const {
    double deadline = mono_ms() + timeout_ms;
    do {
      auto f = cluster_->job(job);
      if (final_state(f["JobState"])) return {f["JobState"], f["ExitCode"]};
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    } while (mono_ms() < deadline);
    return {"", ""};
  }

  // The job ended as expected: batch script exit `code` (JobState COMPLETED for 0, FAILED otherwise).
  // The job ended as expected: in `want_state` (default: COMPLETED for code 0, else FAILED) with its
  // batch script's exit `code` (-1: any).
  bool ended(long job, int code, const std::string& what, std::string want_state = "") {
    auto [state, exit] = wait_end(job, kEndWaitMs);
    if (want_state.empty()) want_state = code == 0 ? "COMPLETED" : "FAILED";
    std::string want = code < 0 ? exit : std::to_string(code) + ":0";
    if (exit == want && state == want_state) return true;
    fail(what + ": Slurm job " + std::to_string(job) + " ended " + (state.empty() ? "never" : state + " " + exit) +
         " (expected " + want_state + (code < 0 ? "" : " " + want) + "); its output: " + tail(output(job)));
    return false;
  }

  void fail(const std::string& what) { r_.detail += (r_.detail.empty() ? "" : "; ") + what; }

  // The discovery script of the nodes (edl-slurm-hosts) prints `want` for Slurm job `job`.
  bool discovers(long job, const std::string& want, const std::string& when) {
    CommandResult d = cluster_->slurm_command({o_.scripts + "/edl-slurm-hosts"}, {"EDL_SLURM_JOB_ID=" + std::to_string(job)});
    if (d.status == 0 && d.output == want) return true;
    fail("edl-slurm-hosts " + when + " printed '" + d.output + "' (status " + std::to_string(d.status) +
         "), expected '" + want + "'");
    return false;
  }

  // The workers of one allocation train kWarmSteps steps in a generation of `size`.
  bool warm_up(int size) {
    bool ok = wait_log(
        [&](const CommitLog& l) {
          int n = 0;
          for (const Commit& c : l.commits) n += c.size == size;
          return n >= kWarmSteps * size;
        },
        kWaitMs);
    if (!ok) fail("no generation of " + std::to_string(size) + " trained " + std::to_string(kWarmSteps) + " steps");
    return ok;
  }

 private:
  void start_etcd() {
    std::string a = cluster_->controller_address();
    std::string client = "http://" + a + ":" + std::to_string(kEtcdPort), peer = "http://" + a + ":2380";
    std::vector<std::string> argv = cluster_->net().exec_prefix(cluster_->controller_ns());
    for (const auto& s : etcd_member_command("m0", dir() + "/etcd", client, peer, "m0=" + peer, kJobId,
                                             {"--log-level", "error"}))
      argv.push_back(s);
    SpawnOptions so;
    so.log = dir() + "/log/etcd.log";
    so.null_stdin = true;
    so.die_with_parent = true;
    etcd_ = Process(argv, so);
    for (int i = 0; i < 100; ++i) {  // listening is not serving: wait until it has elected itself
      CommandResult h = run_command({"ip", "netns", "exec", cluster_->net().ns(cluster_->controller_ns()), "etcdctl",
                                     "--endpoints=" + a + ":" + std::to_string(kEtcdPort), "--dial-timeout=1s",
                                     "endpoint", "health"});
      if (h.status == 0) return;
      if (etcd_.poll() != -1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw std::runtime_error("SlurmJob: etcd on the controller host is not healthy: " + tail(read_text(so.log)));
  }

  const SlurmScenarioOptions& o_;
  SlurmScenarioResult& r_;
  std::unique_ptr<SlurmCluster> cluster_;  // destroyed after etcd_ (declared first)
  Process etcd_;
};

std::set<std::string> workers_of(const CommitLog& l, const std::set<std::string>& hosts, double after_ms = -1) {
  std::set<std::string> w;
  for (const Commit& c : l.commits)
    if (hosts.count(c.host) && c.mono_ms > after_ms) w.insert(c.worker);
  return w;
}

uint64_t generation_at(const CommitLog& l, double t) {
  uint64_t g = 0;
  for (const Commit& c : l.commits)
    if (c.mono_ms <= t) g = std::max(g, c.generation);
  return g;
}

// Monotonic ms of the first commit of a generation after `gen` by a worker of `hosts` (-1: none).
double first_step_after(const CommitLog& l, uint64_t gen, const std::set<std::string>& hosts) {
  double t = -1;
  for (const Commit& c : l.commits)
    if (c.generation > gen && hosts.count(c.host) && (t < 0 || c.mono_ms < t)) t = c.mono_ms;
  return t;
}

// The workers of `hosts` train kProgressSteps steps in a generation of `size` after `since`.
bool progressed(SlurmJob& job, const std::set<std::string>& hosts, int size, double since, const std::string& what) {
  int64_t base = -1;
  for (const Commit& c : job.log().commits)
    if (c.mono_ms <= since) base = std::max(base, c.step);
  bool ok = job.wait_log(
      [&](const CommitLog& l) {
        for (const Commit& c : l.commits)
          if (c.mono_ms > since && hosts.count(c.host) && c.size == size && c.step >= base + kProgressSteps) return true;
        return false;
      },
      kWaitMs);
  if (!ok) job.fail(what + ": no generation of " + std::to_string(size) + " trained " + std::to_string(kProgressSteps) +
                    " steps after it");
  return ok;
}

// Every generation that `hosts`' workers entered after `since` was formed without a failure.
bool no_failure_after(SlurmJob& job, const std::set<std::string>& hosts, double since, const std::string& what) {
  for (const Generation& g : job.log().generations) {
    if (g.mono_ms > since && hosts.count(g.host) && g.after_failure) {
      job.fail(what + ": " + g.worker + " entered generation " + std::to_string(g.generation) + " after a failure");
      return false;
    }
  }
  return true;
}

bool check_exactly_once(SlurmJob& job, const std::set<std::string>& finishers, uint64_t records) {
  std::string why = exactly_once(job.log(), {finishers.begin(), finishers.end()}, records);
  if (!why.empty()) job.fail("exactly-once: " + why);
  return why.empty();
}

// --- the scenarios ---------------------------------------------------------------------------

bool train(SlurmJob& job, SlurmScenarioResult&) {
  const uint64_t records = 720;  // 60 steps of 3 workers x 4 records
  long a = job.submit("n[0-2]", 3, records);
  if (!job.ended(a, 0, "train")) return false;
  return check_exactly_once(job, workers_of(job.log(), {"n0", "n1", "n2"}), records);
}

bool node_loss(SlurmJob& job, SlurmScenarioResult& r) {
  const uint64_t records = 2400;
  long a = job.submit("n[0-2]", 3, records);
  if (!job.warm_up(3)) return false;
  if (!job.discovers(a, "n0:1\nn1:1\nn2:1\n", "before the node loss")) return false;
  std::set<std::string> before = workers_of(job.log(), {"n0", "n1"});
  const double t_fault = job.cluster().crash_node(2);
  const uint64_t gen = generation_at(job.log(), t_fault);
  job.cluster().set_node_state(2, "down", "edl-test-node-lost");
  auto f = job.cluster().job(a);  // --no-kill: the allocation lives on without the node
  if (f["JobState"] != "RUNNING" || f["NodeList"] != "n[0-1]") {
    job.fail("after n2 went down the allocation is " + f["JobState"] + " on " + f["NodeList"] +
             " (expected RUNNING on n[0-1])");
    return false;
  }
  if (!job.discovers(a, "n0:1\nn1:1\n", "after the node loss") ||
      !progressed(job, {"n0", "n1"}, 2, t_fault, "node loss"))
    return false;
  r.loss_to_step_ms = first_step_after(job.log(), gen, {"n0", "n1"}) - t_fault;
  std::set<std::string> after = workers_of(job.log(), {"n0", "n1"}, t_fault);
  if (after != before) {
    job.fail("the workers of n0, n1 were replaced (in place means the same processes)");
    return false;
  }
  return job.ended(a, 0, "node loss") && check_exactly_once(job, after, records);
}

// A 2-node allocation trains, a second one on n2 joins; *b = its job id. Measures the join.
bool join_second_allocation(SlurmJob& job, SlurmScenarioResult& r, uint64_t records, long* a, long* b) {
  *a = job.submit("n[0-1]", 2, records);
  if (!job.warm_up(2)) return false;
  const double t_submit = mono_ms();
  *b = job.submit("n2", 1, records);
  double first = -1;
  job.wait_log(
      [&](const CommitLog& l) {
        for (const Commit& c : l.commits)
          if (c.host == "n2" && c.size == 3) first = first < 0 ? c.mono_ms : std::min(first, c.mono_ms);
        return first > 0;
      },
      kWaitMs);
  if (first < 0) {
    job.fail("the second allocation's worker did not train in a generation of 3; its output: " +
             tail(job.output(*b)));
    return false;
  }
  r.submit_to_step_ms = first - t_submit;
  const double alloc = job.allocation_ms(*b);
  if (alloc > 0) r.alloc_to_step_ms = first - alloc;
  // At a batch boundary: the generation of 3 formed without a failure, nobody was replaced.
  return no_failure_after(job, {"n0", "n1", "n2"}, t_submit, "scale-up") &&
         progressed(job, {"n0", "n1", "n2"}, 3, first, "scale-up");
}

bool scale_up(SlurmJob& job, SlurmScenarioResult& r) {
  const uint64_t records = 3600;
  long a = 0, b = 0;
  if (!join_second_allocation(job, r, records, &a, &b)) return false;
  return job.ended(a, 0, "scale-up (first allocation)") && job.ended(b, 0, "scale-up (second allocation)") &&
         check_exactly_once(job, workers_of(job.log(), {"n0", "n1", "n2"}), records);
}

// The second allocation `b` (n2) is made to leave by `trigger`: its worker leaves gracefully at a
// batch boundary (a done line, the next generation not after a failure, no lost step), the batch
// script of `b` ends in `b_state` with `b_code` (-1: any code), the first allocation trains on.
bool second_leaves(SlurmJob& job, SlurmScenarioResult& r, uint64_t records, long a, long b,
                   const std::function<bool()>& trigger, const std::string& b_state, int b_code,
                   const std::string& what) {
  const double t_leave = mono_ms();
  const uint64_t gen = generation_at(job.log(), t_leave);
  if (!trigger() || !progressed(job, {"n0", "n1"}, 2, t_leave, what)) return false;
  r.leave_to_step_ms = first_step_after(job.log(), gen, {"n0", "n1"}) - t_leave;
  if (!job.ended(b, b_code, what + " (the second allocation)", b_state) ||
      !no_failure_after(job, {"n0", "n1"}, t_leave, what))
    return false;
  std::set<std::string> leaver = workers_of(job.log(), {"n2"});
  bool leaver_done = false;
  for (const WorkerEnd& e : job.log().ends) leaver_done = leaver_done || (!e.error && leaver.count(e.worker));
  if (!leaver_done) {
    job.fail(what + ": the worker of n2 logged no done line (it did not leave gracefully)");
    return false;
  }
  return job.ended(a, 0, what + " (first allocation)") &&
         check_exactly_once(job, workers_of(job.log(), {"n0", "n1"}), records);
}

bool leave(SlurmJob& job, SlurmScenarioResult& r) {
  const uint64_t records = 4800;
  long a = 0, b = 0;
  if (!join_second_allocation(job, r, records, &a, &b)) return false;
  CommandResult steps = job.cluster().slurm_command({"squeue", "-h", "-s", "-j", std::to_string(b), "-o", "%i"});
  std::string step;
  std::istringstream in(steps.output);
  for (std::string s; in >> s;)
    if (s.find(".batch") == std::string::npos) step = s;
  if (step.empty()) {
    job.fail("no step of the second allocation in `squeue -s`: " + steps.output);
    return false;
  }
  // SIGTERM to the step's edl-run and worker; edl-run exits 128 + 15, so does the batch script.
  auto scancel = [&] {
    CommandResult c = job.cluster().slurm_command({"scancel", "--signal=TERM", step});
    if (c.status != 0) job.fail("scancel --signal=TERM " + step + " failed: " + c.output);
    return c.status == 0;
  };
  return second_leaves(job, r, records, a, b, scancel, "FAILED", 143, "leave");
}

// Partitions for preempt: "serve" (PriorityTier 2) preempts "train" (the default): SIGTERM to the
// training job's tasks at once, SIGKILL after GraceTime.
const std::vector<std::string>& preemption_conf() {
  static const std::vector<std::string> c = {
      "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
      "PartitionName=train Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=30",
      "PartitionName=serve Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2"};
  return c;
}

bool preempt(SlurmJob& job, SlurmScenarioResult& r) {
  const uint64_t records = 4800;
  long a = 0, b = 0;
  if (!join_second_allocation(job, r, records, &a, &b)) return false;
  long serving = 0;
  auto submit_serving = [&] {  // needs n2, which only the training allocation b holds
    serving = job.cluster().submit({"-p", "serve", "-N", "1", "-w", "n2", "-o", job.dir() + "/jobs/slurm-%j.out",
                                    "--wrap", "sleep 1"});
    return true;
  };
  // The allocation ends by itself within GraceTime, once its node left: Slurm records its batch
  // script's exit 143, as for the scancel.
  return second_leaves(job, r, records, a, b, submit_serving, "FAILED", 143, "preempt") &&
         job.ended(serving, 0, "preempt (the serving job)");
}

bool drain(SlurmJob& job, SlurmScenarioResult&) {
  const uint64_t records = 4800;
  long a = job.submit("n[0-2]", 3, records);
  if (!job.warm_up(3)) return false;
  const std::set<std::string> first = workers_of(job.log(), {"n2"});
  const double t_drain = mono_ms();
  job.cluster().set_node_state(2, "drain", "edl-test-maintenance");
  if (!job.discovers(a, "n0:1\nn1:1\n", "while n2 drains")) return false;
  // Its edl-run sees the node dropped at its next discovery run and stops the worker: a graceful
  // leave ends its run (a done line).
  bool left = job.wait_log(
      [&](const CommitLog& l) {
        for (const WorkerEnd& e : l.ends)
          if (!e.error && first.count(e.worker)) return true;
        return false;
      },
      kWaitMs);
  if (!left) {
    job.fail("drain: the worker of n2 logged no done line (it did not leave gracefully)");
    return false;
  }
  if (!progressed(job, {"n0", "n1"}, 2, mono_ms(), "drain") || !no_failure_after(job, {"n0", "n1"}, t_drain, "drain"))
    return false;
  const double t_resume = mono_ms();
  job.cluster().set_node_state(2, "resume", "");
  bool back = job.wait_log(
      [&](const CommitLog& l) {
        for (const Commit& c : l.commits)
          if (c.mono_ms > t_resume && c.host == "n2" && c.size == 3 && !first.count(c.worker)) return true;
        return false;
      },
      kWaitMs);
  if (!back) {
    job.fail("drain: after the resume no new worker of n2 trained in a generation of 3");
    return false;
  }
  return no_failure_after(job, {"n0", "n1", "n2"}, t_resume, "resume") && job.ended(a, 0, "drain") &&
         check_exactly_once(job, workers_of(job.log(), {"n0", "n1", "n2"}, t_resume), records);
}

}  // namespace

const std::vector<std::string>& slurm_scenario_names() {
  static const std::vector<std::string> names = {"train", "node_loss", "scale_up", "leave", "preempt", "drain"};
  return names;
}

std::string slurm_scenarios_unavailable() {
  std::string why = SlurmCluster::unavailable();
  return why.empty() ? store_unavailable("etcd") : why;
}

SlurmScenarioResult run_slurm_scenario(const std::string& scenario, const SlurmScenarioOptions& o) {
  const auto& names = slurm_scenario_names();
  if (std::find(names.begin(), names.end(), scenario) == names.end())
    throw std::invalid_argument("unknown Slurm scenario '" + scenario + "'");
  if (o.edl_run.empty() || o.worker.empty() || o.scripts.empty())
    throw std::invalid_argument("run_slurm_scenario: the edl-run, worker and scripts paths are required");
  SlurmScenarioResult r;
  r.scenario = scenario;
  r.nodes = kNodes;
  SlurmJob job(o, r, scenario == "preempt" ? preemption_conf() : std::vector<std::string>{});
  bool ok = false;
  if (scenario == "train") ok = train(job, r);
  else if (scenario == "node_loss") ok = node_loss(job, r);
  else if (scenario == "scale_up") ok = scale_up(job, r);
  else if (scenario == "leave") ok = leave(job, r);
  else if (scenario == "preempt") ok = preempt(job, r);
  else ok = drain(job, r);
  CommitLog log = job.log();
  r.lost_steps = lost_steps(log);
  r.split_brain_steps = split_brain_steps(log);
  if (!log.commits.empty()) r.final_size = log.commits.back().size;
  if (r.lost_steps > 0) job.fail(std::to_string(r.lost_steps) + " committed steps were rolled back");
  if (r.split_brain_steps > 0) job.fail(std::to_string(r.split_brain_steps) + " split-brain steps");
  r.ok = ok && r.lost_steps == 0 && r.split_brain_steps == 0;
  if (o.keep_dir) r.detail += (r.detail.empty() ? "" : "; ") + std::string("logs in ") + r.dir;
  return r;
}

}  // namespace edl::testing
