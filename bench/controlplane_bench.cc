// controlplane_bench: control-plane faults on emulated hosts (docs/multihost.md). Every scenario of
// bench/controlplane_scenarios.h runs --runs times on a fresh job of --hosts network namespaces;
// one row per scenario: the median pause and exit time, the most lost and split-brain steps of any
// run, ok = every run passed its checks. Targets (docs/benchmarks.md): etcd leader kill pause
// <= 3000 ms with 0 lost steps; host crash pause <= lease + 1000 ms; partition: minority exit <= 10 s,
// split_brain_steps 0; Redis restart ok.
//
//   controlplane_bench [--store redis|etcd|embedded] [--scenarios a,b] [--runs 5] [--hosts 3]
//                      [--lease-ms 3000] [--keep-logs] [--json PATH]
// Root only (network namespaces); skipped with a message otherwise.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/bench_util.h"
#include "commit_log.h"
#include "controlplane_scenarios.h"
#include "netns.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_MULTIHOST_WORKER_PATH
#define EDL_MULTIHOST_WORKER_PATH "multihost_worker"
#endif

namespace eb = edl::bench;

namespace {

eb::Json row_of(const std::vector<eb::ScenarioResult>& runs) {
  std::vector<double> pause, exit_s;
  int lost = 0, split = 0;
  bool ok = !runs.empty();
  for (const auto& r : runs) {
    if (r.pause_ms >= 0) pause.push_back(r.pause_ms);
    if (r.exit_s >= 0) exit_s.push_back(r.exit_s);
    lost = std::max(lost, r.lost_steps);
    split = std::max(split, r.split_brain_steps);
    ok = ok && r.ok;
  }
  auto num = [](const std::vector<double>& v) {
    return v.empty() ? eb::Json(nullptr) : eb::Json(std::round(eb::median(v) * 1000) / 1000);
  };
  eb::Json j;
  j["scenario"] = runs.front().scenario;
  j["store"] = runs.front().store;
  j["hosts"] = runs.front().hosts;
  j["pause_ms"] = num(pause);
  j["lost_steps"] = lost;
  j["split_brain_steps"] = split;
  j["exit_s"] = num(exit_s);
  j["ok"] = ok;
  return j;
}

std::string cell(const eb::Json& v) { return v.is_null() ? "-" : v.is_number_float() ? eb::fmt(v.get<double>(), 1) : v.dump(); }

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("controlplane_bench", "Control-plane faults on emulated hosts (network namespaces)");
  opts.add_options()
    ("store", "redis, etcd or embedded", cxxopts::value<std::string>()->default_value("redis"))
    ("scenarios", "comma-separated; default: every scenario that applies to --store",
     cxxopts::value<std::string>()->default_value(""))
    ("runs", "runs per scenario (medians)", cxxopts::value<int>()->default_value("5"))
    ("hosts", "emulated hosts", cxxopts::value<int>()->default_value("3"))
    ("lease-ms", "EDL_LEASE_MS of the job", cxxopts::value<int>()->default_value("3000"))
    ("edl-run", "edl-run binary", cxxopts::value<std::string>()->default_value(EDL_RUN_PATH))
    ("worker", "multihost_worker binary", cxxopts::value<std::string>()->default_value(EDL_MULTIHOST_WORKER_PATH))
    ("keep-logs", "keep each job's logs (the paths are printed)")
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  auto a = eb::parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  eb::ScenarioOptions so;
  so.store = a["store"].as<std::string>();
  so.hosts = a["hosts"].as<int>();
  so.lease_ms = a["lease-ms"].as<int>();
  so.edl_run = a["edl-run"].as<std::string>();
  so.worker = a["worker"].as<std::string>();
  so.keep_dir = a.count("keep-logs") > 0;
  int runs = a["runs"].as<int>();
  auto usage = [](const std::string& why) {
    std::cerr << "controlplane_bench: " << why << " (run with --help for usage)\n";
    return 2;
  };
  if (so.store != "redis" && so.store != "etcd" && so.store != "embedded") return usage("bad --store '" + so.store + "'");
  if (runs < 1) return usage("--runs must be >= 1");
  if (so.hosts < 3 || so.hosts > 16) return usage("--hosts must be 3..16 (a majority must survive one host)");
  if (so.lease_ms < 300) return usage("--lease-ms must be >= 300");
  std::vector<std::string> scenarios = eb::split(a["scenarios"].as<std::string>());
  if (scenarios.empty()) {
    for (const auto& s : eb::scenario_names())
      if (eb::scenario_applies(s, so.store)) scenarios.push_back(s);
  }
  for (const auto& s : scenarios) {
    if (std::find(eb::scenario_names().begin(), eb::scenario_names().end(), s) == eb::scenario_names().end())
      return usage("unknown scenario '" + s + "'");
    if (!eb::scenario_applies(s, so.store)) return usage("scenario '" + s + "' does not apply to --store " + so.store);
  }
  std::string why = eb::NetnsCluster::unsupported_reason();
  if (!why.empty()) {
    std::cout << "controlplane_bench: skipped: " << why << "\n";
    return 0;
  }
  eb::JsonRows json(a["json"].as<std::string>());
  eb::Table t({"scenario", "store", "hosts", "pause_ms", "lost_steps", "split_brain", "exit_s", "ok"}, 12);
  bool all_ok = true;
  std::vector<eb::Json> rows;
  for (const auto& s : scenarios) {
    std::vector<eb::ScenarioResult> results;
    for (int i = 0; i < runs; ++i) {
      try {
        results.push_back(eb::run_scenario(s, so));
      } catch (const std::exception& e) {
        eb::ScenarioResult r;
        r.scenario = s;
        r.store = so.store;
        r.hosts = so.hosts;
        r.detail = std::string("harness: ") + e.what();
        results.push_back(r);
      }
      const auto& r = results.back();
      std::cout << "  " << s << " run " << i + 1 << "/" << runs << ": pause_ms=" << eb::fmt(r.pause_ms, 1)
                << " lost=" << r.lost_steps << " split_brain=" << r.split_brain_steps << " exit_s=" << eb::fmt(r.exit_s, 2)
                << " ok=" << (r.ok ? "true" : "false") << (r.detail.empty() ? "" : " (" + r.detail + ")") << std::endl;
    }
    eb::Json row = row_of(results);
    json.write(row);
    rows.push_back(row);
    all_ok = all_ok && row["ok"].get<bool>();
  }
  std::cout << "\n";
  t.header();
  for (const auto& row : rows)
    t.row({row["scenario"].get<std::string>(), so.store, std::to_string(so.hosts), cell(row["pause_ms"]),
           cell(row["lost_steps"]), cell(row["split_brain_steps"]), cell(row["exit_s"]),
           row["ok"].get<bool>() ? "true" : "false"});
  return all_ok ? 0 : 1;
}
