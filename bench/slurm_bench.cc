// slurm_bench: EDL on a real Slurm cluster of emulated nodes (testing/slurm_scenarios.h,
// docs/launcher.md "Slurm"). Each scenario runs --runs times on a fresh 3-node cluster; one row per
// measure of a scenario:
//   node_loss  loss_to_step_ms   a node is lost (link cut, slurmd and every process on it killed) ->
//                                the survivors' first step in their next generation
//   scale_up   alloc_to_step_ms  the second allocation's batch script starts -> its worker's first step
//              submit_to_step_ms its `sbatch` -> that step (Slurm's scheduling and step launch too)
//   leave      leave_to_step_ms  `scancel --signal=TERM` of its step -> the others' first step without it
// Row fields: scenario, measure, nodes, lease_ms, runs, median_ms, min_ms, max_ms (over the runs that
// produced the measure; null when none), lost_steps and split_brain_steps (the most of any run),
// ok (every run passed the scenario's checks).
//
//   slurm_bench [--scenarios node_loss,scale_up] [--runs 5] [--lease-ms 3000] [--step-ms 30]
//               [--keep-logs] [--json PATH]
// Root with network namespaces, Slurm, munge and etcd: otherwise it prints why and exits 0 with no
// rows. Exit 1 when a row is not ok, 2 on a bad flag.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/bench_util.h"
#include "testing/slurm_scenarios.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_ELASTIC_WORKER_PATH
#define EDL_ELASTIC_WORKER_PATH "elastic_worker"
#endif
#ifndef EDL_SLURM_SCRIPTS
#define EDL_SLURM_SCRIPTS "examples/slurm"
#endif

namespace eb = edl::bench;
using edl::testing::SlurmScenarioResult;

namespace {

struct Measure {
  const char* scenario;
  const char* name;
  double SlurmScenarioResult::*field;
};

const std::vector<Measure>& measures() {
  static const std::vector<Measure> m = {{"node_loss", "loss_to_step_ms", &SlurmScenarioResult::loss_to_step_ms},
                                         {"scale_up", "alloc_to_step_ms", &SlurmScenarioResult::alloc_to_step_ms},
                                         {"scale_up", "submit_to_step_ms", &SlurmScenarioResult::submit_to_step_ms},
                                         {"leave", "leave_to_step_ms", &SlurmScenarioResult::leave_to_step_ms}};
  return m;
}

eb::Json row_of(const std::vector<SlurmScenarioResult>& runs, const Measure& m, int lease_ms) {
  std::vector<double> v;
  int lost = 0, split = 0;
  bool ok = !runs.empty();
  for (const auto& r : runs) {
    if (r.*m.field >= 0) v.push_back(r.*m.field);
    lost = std::max(lost, r.lost_steps);
    split = std::max(split, r.split_brain_steps);
    ok = ok && r.ok;
  }
  auto num = [&](double x) { return v.empty() ? eb::Json(nullptr) : eb::Json(std::round(x * 10) / 10); };
  eb::Json j;
  j["scenario"] = m.scenario;
  j["measure"] = m.name;
  j["nodes"] = runs.empty() ? 0 : runs.front().nodes;
  j["lease_ms"] = lease_ms;
  j["runs"] = static_cast<int>(runs.size());
  j["median_ms"] = num(v.empty() ? 0 : eb::median(v));
  j["min_ms"] = num(v.empty() ? 0 : *std::min_element(v.begin(), v.end()));
  j["max_ms"] = num(v.empty() ? 0 : *std::max_element(v.begin(), v.end()));
  j["lost_steps"] = lost;
  j["split_brain_steps"] = split;
  j["ok"] = ok;
  return j;
}

std::string cell(const eb::Json& v) { return v.is_null() ? "-" : v.is_number_float() ? eb::fmt(v.get<double>(), 1) : v.dump(); }

SlurmScenarioResult run_once(const std::string& s, const edl::testing::SlurmScenarioOptions& so) {
  try {
    return edl::testing::run_slurm_scenario(s, so);
  } catch (const std::exception& e) {
    SlurmScenarioResult r;
    r.scenario = s;
    r.detail = std::string("harness: ") + e.what();
    return r;
  }
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("slurm_bench", "EDL on a real Slurm cluster of emulated nodes (network namespaces)");
  opts.add_options()
    ("scenarios", "comma-separated: node_loss, scale_up, leave",
     cxxopts::value<std::string>()->default_value("node_loss,scale_up"))
    ("runs", "runs per scenario (medians)", cxxopts::value<int>()->default_value("5"))
    ("lease-ms", "EDL_LEASE_MS of the job", cxxopts::value<int>()->default_value("3000"))
    ("step-ms", "the synthetic worker's step time", cxxopts::value<double>()->default_value("30"))
    ("edl-run", "edl-run binary", cxxopts::value<std::string>()->default_value(EDL_RUN_PATH))
    ("worker", "testing/elastic_worker binary", cxxopts::value<std::string>()->default_value(EDL_ELASTIC_WORKER_PATH))
    ("scripts", "directory of edl-job.sbatch", cxxopts::value<std::string>()->default_value(EDL_SLURM_SCRIPTS))
    ("keep-logs", "keep each cluster's directory (the paths are printed)")
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  auto a = eb::parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  auto usage = [](const std::string& why) {
    std::cerr << "slurm_bench: " << why << " (run with --help for usage)\n";
    return 2;
  };
  edl::testing::SlurmScenarioOptions so;
  so.edl_run = a["edl-run"].as<std::string>();
  so.worker = a["worker"].as<std::string>();
  so.scripts = a["scripts"].as<std::string>();
  so.keep_dir = a.count("keep-logs") > 0;
  so.lease_ms = a["lease-ms"].as<int>();
  so.step_ms = a["step-ms"].as<double>();
  const int runs = a["runs"].as<int>();
  std::vector<std::string> scenarios = eb::split(a["scenarios"].as<std::string>());
  if (scenarios.empty()) return usage("--scenarios is empty");
  for (const auto& s : scenarios) {
    bool measured = std::any_of(measures().begin(), measures().end(), [&](const Measure& m) { return s == m.scenario; });
    if (!measured) return usage("--scenarios: '" + s + "' is not node_loss, scale_up or leave");
  }
  if (runs < 1) return usage("--runs must be >= 1");
  if (so.lease_ms < 300) return usage("--lease-ms must be >= 300");
  if (!(so.step_ms > 0)) return usage("--step-ms must be > 0");
  std::string why = edl::testing::slurm_scenarios_unavailable();
  if (!why.empty()) {
    std::cout << "slurm_bench: skipped: " << why << "\n";
    return 0;
  }
  eb::JsonRows json(a["json"].as<std::string>());
  std::vector<eb::Json> rows;
  for (const auto& s : scenarios) {
    std::vector<SlurmScenarioResult> results;
    for (int i = 0; i < runs; ++i) {
      results.push_back(run_once(s, so));
      const auto& r = results.back();
      std::cout << "  " << s << " run " << i + 1 << "/" << runs << ":";
      for (const auto& m : measures())
        if (s == m.scenario) std::cout << " " << m.name << "=" << eb::fmt(r.*m.field, 1);
      std::cout << " lost=" << r.lost_steps << " ok=" << (r.ok ? "true" : "false")
                << (r.detail.empty() ? "" : " (" + r.detail + ")") << std::endl;
    }
    for (const auto& m : measures()) {
      if (s != m.scenario) continue;
      rows.push_back(row_of(results, m, so.lease_ms));
      json.write(rows.back());
    }
  }
  eb::Table t({"scenario", "measure", "runs", "median_ms", "min_ms", "max_ms", "lost", "ok"}, 18);
  std::cout << "\n";
  t.header();
  bool all_ok = true;
  for (const auto& row : rows) {
    t.row({row["scenario"].get<std::string>(), row["measure"].get<std::string>(), cell(row["runs"]),
           cell(row["median_ms"]), cell(row["min_ms"]), cell(row["max_ms"]), cell(row["lost_steps"]),
           row["ok"].get<bool>() ? "true" : "false"});
    all_ok = all_ok && row["ok"].get<bool>();
  }
  return all_ok ? 0 : 1;
}
