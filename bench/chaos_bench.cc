// chaos_bench: random fault schedules against a small elastic job under edl-run (issue 13 item 7).
//
// Trials (default): --trials N jobs of chaos_worker (bench/chaos_worker.cc) under edl-run, each with
// 1..--max-faults faults drawn from --seed and the trial number, of the kinds in --faults:
//   kill        kill -9 of a random member (rank 0 included) in a phase drawn from --phases:
//                 step        the bench sends SIGKILL at a random moment of training;
//                 commit      the worker of a drawn rank SIGKILLs itself inside State::commit
//                             (marker arm.commit, Stateful::save of chaos_worker);
//                 sync        the same inside Stateful::load (marker arm.sync), which runs while a new
//                             generation syncs the State: the bench arms it and adds a slot, so the
//                             newcomer's generation broadcasts a snapshot to every member (at --max-np
//                             it kills another member instead: load() then runs in restore());
//                 rendezvous  kill -9 of one member, then of another 10-150 ms later, while the
//                             survivors re-rendezvous (the row says "rendezvous" only when no new
//                             generation had formed before the second kill, else "step");
//   kill2       two kills -9 within a second (0-1000 ms apart, any live workers);
//   stop        SIGSTOP of a member, SIGCONT 0.5-5 s later (past the 3 s lease: evicted, rejoins);
//   stopforever SIGSTOP of a member, never continued (edl-run must end it once the job finished);
//   join        one slot more in the host-discovery file (up to --max-np);
//   leave       one slot fewer (edl-run sends SIGTERM: a graceful leave; at least 2 slots stay);
//   stuck       a member sleeps forever inside a step (marker `stuck`): needs a progress deadline;
//   flood       a member writes --flood-mib MiB to stdout inside a step (marker `flood`);
//   hostile     a misbehaving client of the store (chaos_job.h: garbage, a 4 GiB frame header, a
//               cut frame, 64 idle connections, a slow dribbler) for the rest of the trial.
// A trial is ok when edl-run exits 0 within --trial-timeout-s, every worker that finished wrote the
// same (step, parameters, counters) hashes, and every record of every epoch was trained exactly once.
// --deterministic runs the workers in the reproducible mode (docs/optim.md; --micro-batches K of
// --batch records per step) and adds the check matches_reference: the final hashes must equal those
// of the same job run by one worker without edl-run and without faults (run before each trial).
// recovery_ms, per kill: the kill (the bench's signal, or the worker's self-kill line) to the first
// step trained by a newer generation than the newest one formed before the kill.
//
// MTBF mode (--mtbf-s S): --pairs times, a failure-free run of a longer job, then the same job with
// a kill -9 of a random member at exponential intervals of mean S; goodput = (final step / training
// span) of the faulty run over that of the failure-free run of the same pair (median over pairs).
//
// Rows (--json PATH): one per trial {"trial","seed","faults","ok","wall_s","lost_steps",
// "params_identical","exactly_once","recovery_ms",...; with --deterministic "matches_reference"}, then {"trial":"summary",...,"recovery_p50_ms",
// "recovery_p99_ms"}; MTBF: one per pair {"mode":"mtbf","pair","mtbf_s","goodput",...} and a summary.
// Exit code 0 only if every trial (every run) was ok.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "chaos_job.h"
#include "chaos_trial.h"
#include "common/bench_util.h"

using namespace edl::bench;
using namespace edl::bench::chaos;

namespace {

const std::vector<std::string> kKinds = {"kill", "kill2", "stop", "stopforever", "join", "leave", "stuck", "flood",
                                         "hostile"};
const std::vector<std::string> kPhases = {"step", "commit", "sync", "rendezvous"};

// Validates a comma list against `allowed`; exits 2 with a message naming the bad item.
std::vector<std::string> parse_list(const std::string& flag, const std::string& csv,
                                    const std::vector<std::string>& allowed) {
  std::vector<std::string> out = split(csv);
  if (out.empty()) {
    std::fprintf(stderr, "chaos_bench: --%s is empty\n", flag.c_str());
    std::exit(2);
  }
  for (const auto& k : out)
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string all;
      for (const auto& a : allowed) all += (all.empty() ? "" : ",") + a;
      std::fprintf(stderr, "chaos_bench: --%s: unknown '%s' (one of %s)\n", flag.c_str(), k.c_str(), all.c_str());
      std::exit(2);
    }
  return out;
}

void need(bool ok, const std::string& msg) {
  if (!ok) {
    std::fprintf(stderr, "chaos_bench: %s\n", msg.c_str());
    std::exit(2);
  }
}

std::string self_dir(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) return p.parent_path().string();
  std::string s = argv0;
  auto pos = s.rfind('/');
  return pos == std::string::npos ? "." : s.substr(0, pos);
}

int run_trials(const TrialConfig& base, const cxxopts::ParseResult& a, JsonRows& json) {
  const int trials = a["trials"].as<int>();
  const uint64_t seed = a["seed"].as<uint64_t>();
  Table table({"trial", "ok", "wall_s", "faults", "lost", "recovery_ms"}, 12);
  table.header();
  std::vector<double> recoveries;
  int ok = 0;
  std::map<std::string, int> kind_count, kind_fail;
  const int first = a["first-trial"].as<int>();
  for (int i = first; i < first + trials; ++i) {
    TrialConfig cfg = base;
    cfg.seed = seed * 1000003ull + static_cast<uint64_t>(i);
    cfg.trial = i;
    TrialResult r = run_trial(cfg);
    ok += r.ok;
    std::string faults, rec;
    std::set<std::string> kinds;
    for (const auto& f : r.faults) {
      faults += (faults.empty() ? "" : " ") + f.label();
      kinds.insert(f.kind);
    }
    for (const auto& k : kinds) {
      ++kind_count[k];
      kind_fail[k] += !r.ok;
    }
    Json rj = Json::array();
    for (double x : r.recovery_ms) {
      rec += (rec.empty() ? " " : ",") + fmt(x, 0);
      rj.push_back(x);
      recoveries.push_back(x);
    }
    table.row({std::to_string(i), r.ok ? "yes" : "NO", fmt(r.wall_s, 1), std::to_string(r.faults.size()),
               std::to_string(r.lost_steps), rec});
    std::printf("    faults: %s%s%s\n", faults.c_str(), r.error.empty() ? "" : "\n    FAILED: ", r.error.c_str());
    if (cfg.deterministic) std::printf("    matches_reference: %s\n", r.matches_reference ? "yes" : "NO");
    std::fflush(stdout);
    Json fj = Json::array();
    for (const auto& f : r.faults) fj.push_back(f.label());
    Json row = {{"bench", "chaos_bench"}, {"trial", i}, {"seed", cfg.seed}, {"faults", fj}, {"ok", r.ok},
                {"wall_s", r.wall_s}, {"lost_steps", r.lost_steps}, {"params_identical", r.params_identical},
                {"exactly_once", r.exactly_once}, {"recovery_ms", rj}, {"exit_status", r.exit_status},
                {"final_workers", r.final_workers}, {"error", r.error}};
    if (cfg.deterministic) row["matches_reference"] = r.matches_reference;
    json.write(row);
  }
  Json summary = {{"bench", "chaos_bench"}, {"trial", "summary"}, {"trials", trials}, {"ok", ok},
                  {"kills", recoveries.size()}, {"store", base.job.store.empty() ? "embedded" : base.job.store}};
  std::printf("\n%d/%d trials ok (store %s)\n", ok, trials, base.job.store.empty() ? "embedded" : base.job.store.c_str());
  if (!recoveries.empty()) {
    summary["recovery_p50_ms"] = quantile(recoveries, 0.5);
    summary["recovery_p99_ms"] = quantile(recoveries, 0.99);
    summary["recovery_max_ms"] = quantile(recoveries, 1.0);
    std::printf("recovery over %zu kills: p50 %.0f ms, p99 %.0f ms, max %.0f ms (target p99 <= 1000)\n",
                recoveries.size(), quantile(recoveries, 0.5), quantile(recoveries, 0.99), quantile(recoveries, 1.0));
  }
  Json per_kind = Json::object();
  for (const auto& [k, n] : kind_count) {
    per_kind[k] = std::to_string(n - kind_fail[k]) + "/" + std::to_string(n);
    std::printf("  %-12s in %3d trials, %3d of them ok\n", k.c_str(), n, n - kind_fail[k]);
  }
  summary["ok_by_kind"] = per_kind;
  json.write(summary);
  return ok == trials ? 0 : 1;
}

int run_mtbf(const TrialConfig& base, const cxxopts::ParseResult& a, JsonRows& json) {
  const double mtbf = a["mtbf-s"].as<double>();
  const int pairs = a["pairs"].as<int>();
  Table table({"pair", "clean_sps", "faulty_sps", "goodput", "kills", "ok"}, 12);
  table.header();
  std::vector<double> goodputs, goodputs_records;
  bool all_ok = true;
  for (int p = 0; p < pairs; ++p) {
    TrialConfig cfg = base;
    cfg.seed = a["seed"].as<uint64_t>() * 1000003ull + static_cast<uint64_t>(p);
    cfg.trial = p;
    cfg.mtbf_s = 0;
    cfg.kinds.clear();  // the failure-free run: no drawn faults
    TrialResult clean = run_trial(cfg);
    cfg.mtbf_s = mtbf;
    TrialResult faulty = run_trial(cfg);
    double g = clean.steps_per_s > 0 ? faulty.steps_per_s / clean.steps_per_s : 0;
    // The same records in more time: also counts the time spent with fewer workers (a killed
    // worker's replacement still starting), which committed steps per second do not see.
    double g_records = faulty.span_s > 0 ? clean.span_s / faulty.span_s : 0;
    goodputs_records.push_back(g_records);
    bool ok = clean.ok && faulty.ok;
    all_ok = all_ok && ok;
    goodputs.push_back(g);
    table.row({std::to_string(p), fmt(clean.steps_per_s, 1), fmt(faulty.steps_per_s, 1), fmt(g, 3),
               std::to_string(faulty.recovery_ms.size()), ok ? "yes" : "NO"});
    if (!clean.error.empty()) std::printf("    clean run FAILED: %s\n", clean.error.c_str());
    if (!faulty.error.empty()) std::printf("    faulty run FAILED: %s\n", faulty.error.c_str());
    std::fflush(stdout);
    Json rj = Json::array();
    for (double x : faulty.recovery_ms) rj.push_back(x);
    json.write({{"bench", "chaos_bench"}, {"mode", "mtbf"}, {"pair", p}, {"mtbf_s", mtbf}, {"seed", cfg.seed},
                {"workers", base.job.np}, {"clean_steps", clean.final_step}, {"clean_span_s", clean.span_s},
                {"faulty_steps", faulty.final_step}, {"faulty_span_s", faulty.span_s},
                {"clean_steps_per_s", clean.steps_per_s}, {"faulty_steps_per_s", faulty.steps_per_s},
                {"goodput", g}, {"goodput_records", g_records}, {"kills", faulty.recovery_ms.size()}, {"recovery_ms", rj}, {"ok", ok},
                {"error", clean.error.empty() ? faulty.error : clean.error}});
  }
  double m = median(goodputs), mr = median(goodputs_records);
  std::printf("\nMTBF %.0f s, %d workers: goodput median %.3f (records/s ratio %.3f) over %d pairs\n", mtbf,
              base.job.np, m, mr, pairs);
  json.write({{"bench", "chaos_bench"}, {"mode", "mtbf"}, {"pair", "summary"}, {"mtbf_s", mtbf},
              {"workers", base.job.np}, {"pairs", pairs}, {"goodput_median", m}, {"goodput_records_median", mr},
              {"ok", all_ok}});
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("chaos_bench", "random fault schedules against an elastic job under edl-run");
  opts.add_options()("trials", "trials", cxxopts::value<int>()->default_value("100"))(
      "seed", "seed of the fault schedules", cxxopts::value<uint64_t>()->default_value("1"))(
      "first-trial", "number of the first trial (trial i uses seed * 1000003 + i: --first-trial 41 --trials 1 "
                     "repeats trial 41)",
      cxxopts::value<int>()->default_value("0"))(
      "faults", "fault kinds: kill,kill2,stop,stopforever,join,leave,stuck,flood,hostile",
      cxxopts::value<std::string>()->default_value("kill,kill2,stop,stopforever,join,leave,stuck,flood,hostile"))(
      "phases", "phases of the `kill` kind: step,commit,sync,rendezvous",
      cxxopts::value<std::string>()->default_value("step,commit,sync,rendezvous"))(
      "max-faults", "faults per trial: 1..this many", cxxopts::value<int>()->default_value("3"))(
      "store", "external store for edl-run (redis://HOST:PORT, etcd://HOST:PORT); default: embedded",
      cxxopts::value<std::string>()->default_value(""))(
      "edl-run", "path of edl-run (default: the build tree's)", cxxopts::value<std::string>()->default_value(""))(
      "worker", "path of chaos_worker (default: next to this program)",
      cxxopts::value<std::string>()->default_value(""))("np", "initial workers", cxxopts::value<int>()->default_value("3"))(
      "max-np", "most workers (joins stop there)", cxxopts::value<int>()->default_value("5"))(
      "records", "records per epoch (trials)", cxxopts::value<uint64_t>()->default_value("480"))(
      "epochs", "epochs (trials)", cxxopts::value<int>()->default_value("3"))(
      "batch", "records per worker per step", cxxopts::value<uint64_t>()->default_value("4"))(
      "step-ms", "simulated compute per step", cxxopts::value<int>()->default_value("10"))(
      "params", "float32 parameters of the model", cxxopts::value<int>()->default_value("4096"))(
      "flood-mib", "MiB a flooding worker writes", cxxopts::value<int>()->default_value("16"))(
      "trial-timeout-s", "a trial longer than this is a hang (failed)", cxxopts::value<int>()->default_value("90"))(
      "collective-timeout-ms",
      "EDL_TIMEOUT_MS of the workers: the collective deadline and the floor of the progress deadline, so "
      "what a stuck rank costs (the library default, 30 s, would make two stuck ranks outlast a trial)",
      cxxopts::value<int>()->default_value("5000"))(
      "mtbf-s", "MTBF mode: mean seconds between kills (exponential); 0 = trials mode",
      cxxopts::value<double>()->default_value("0"))(
      "mtbf-run-s", "MTBF mode: length of the failure-free run (sets the records)",
      cxxopts::value<double>()->default_value("70"))("pairs", "MTBF mode: paired runs",
                                                     cxxopts::value<int>()->default_value("3"))(
      "keep", "keep the work directories of ok trials too")(
      "deterministic", "reproducible mode: fixed micro-batches summed exactly; every trial must also match the "
                       "final state of the same job run by one worker without faults (matches_reference)")(
      "micro-batches", "reproducible mode: micro-batches of --batch records per step",
      cxxopts::value<int>()->default_value("4"))(
      "negative-control", "the workers do not register their data position in the State: after a kill "
                          "records are trained twice or never, and trials must FAIL (shows what the audit catches)")(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto a = parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  TrialConfig cfg;
  cfg.kinds = parse_list("faults", a["faults"].as<std::string>(), kKinds);
  cfg.phases = parse_list("phases", a["phases"].as<std::string>(), kPhases);
  need(a["trials"].as<int>() >= 1, "--trials must be >= 1");
  need(a["first-trial"].as<int>() >= 0, "--first-trial must be >= 0");
  need(a["max-faults"].as<int>() >= 1, "--max-faults must be >= 1");
  need(a["np"].as<int>() >= 2, "--np must be >= 2");
  need(a["max-np"].as<int>() >= a["np"].as<int>(), "--max-np must be >= --np");
  need(a["records"].as<uint64_t>() >= 16, "--records must be >= 16");
  need(a["epochs"].as<int>() >= 1, "--epochs must be >= 1");
  need(a["batch"].as<uint64_t>() >= 1, "--batch must be >= 1");
  need(a["step-ms"].as<int>() >= 0, "--step-ms must be >= 0");
  need(a["collective-timeout-ms"].as<int>() >= 100, "--collective-timeout-ms must be >= 100");
  need(a["params"].as<int>() >= 1, "--params must be >= 1");
  need(a["micro-batches"].as<int>() >= 1, "--micro-batches must be >= 1");
  need(a["flood-mib"].as<int>() >= 1, "--flood-mib must be >= 1");
  need(a["trial-timeout-s"].as<int>() >= 5, "--trial-timeout-s must be >= 5");
  need(a["mtbf-s"].as<double>() >= 0, "--mtbf-s must be >= 0");
  need(a["mtbf-run-s"].as<double>() >= 5, "--mtbf-run-s must be >= 5");
  need(a["pairs"].as<int>() >= 1, "--pairs must be >= 1");
  const std::string store = a["store"].as<std::string>();
  need(store.empty() || store.rfind("redis://", 0) == 0 || store.rfind("etcd://", 0) == 0 ||
           store.rfind("tcp://", 0) == 0,
       "--store must be redis://HOST:PORT, etcd://HOST:PORT or tcp://HOST:PORT, got '" + store + "'");
  const std::string bin = self_dir(argv[0]);
  cfg.job.edl_run = a["edl-run"].as<std::string>();
  if (cfg.job.edl_run.empty()) cfg.job.edl_run = bin + "/../src/launcher/edl-run";
  cfg.job.worker = a["worker"].as<std::string>();
  if (cfg.job.worker.empty()) cfg.job.worker = bin + "/chaos_worker";
  for (const auto& p : {cfg.job.edl_run, cfg.job.worker})
    need(::access(p.c_str(), X_OK) == 0, p + " is not an executable (build it, or pass --edl-run / --worker)");
  cfg.job.store = store;
  cfg.job.np = a["np"].as<int>();
  cfg.job.max_np = a["max-np"].as<int>();
  cfg.records = a["records"].as<uint64_t>();
  cfg.epochs = a["epochs"].as<int>();
  cfg.batch = a["batch"].as<uint64_t>();
  cfg.step_ms = a["step-ms"].as<int>();
  cfg.params = a["params"].as<int>();
  cfg.flood_mib = a["flood-mib"].as<int>();
  cfg.max_faults = a["max-faults"].as<int>();
  cfg.timeout_s = a["trial-timeout-s"].as<int>();
  cfg.job.timeout_ms = a["collective-timeout-ms"].as<int>();
  cfg.keep = a.count("keep") > 0;
  cfg.negative_control = a.count("negative-control") > 0;
  cfg.deterministic = a.count("deterministic") > 0;
  cfg.micro_batches = a["micro-batches"].as<int>();
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  JsonRows json(a["json"].as<std::string>());
  if (a["mtbf-s"].as<double>() > 0) {
    // One epoch sized so that the failure-free run lasts about --mtbf-run-s (a step takes about
    // step-ms + 5 ms here).
    const double steps = a["mtbf-run-s"].as<double>() * 1000.0 / (cfg.step_ms + 5.0);
    cfg.epochs = 1;
    cfg.records = static_cast<uint64_t>(steps) * cfg.batch * static_cast<uint64_t>(cfg.job.np);
    cfg.records_per_shard = 100;
    cfg.timeout_s = std::max(cfg.timeout_s, static_cast<int>(a["mtbf-run-s"].as<double>() * 4));
    return run_mtbf(cfg, a, json);
  }
  return run_trials(cfg, a, json);
}
