// controlplane_bench: control-plane faults on emulated hosts (docs/multihost.md). Every scenario of
// bench/controlplane_scenarios.h runs --runs times on a fresh job of --hosts network namespaces;
// one row per scenario: the median pause and exit time, the most lost and split-brain steps of any
// run, ok = every run passed its checks. Targets (docs/benchmarks.md): etcd leader kill pause
// <= 3000 ms with 0 lost steps; host crash pause <= lease + 1000 ms; partition: minority exit <= 10 s,
// split_brain_steps 0; Redis restart ok.
//
//   controlplane_bench [--store redis|etcd|embedded[,...]] [--scenarios a,b] [--runs 5] [--hosts 3]
//                      [--lease-ms 3000] [--keep-logs] [--json PATH]
// Root only (network namespaces); a store that cannot run here (not root, server not installed, no
// etcd:// store in this build) is skipped with a message. Exit 1 when a row is not ok, 2 on bad flags.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/bench_util.h"
#include "testing/commit_log.h"
#include "testing/controlplane_scenarios.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_MULTIHOST_WORKER_PATH
#define EDL_MULTIHOST_WORKER_PATH "multihost_worker"
#endif

namespace edl::bench {
using namespace edl::testing;  // the scenarios and their results (testing/controlplane_scenarios.h)
}
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

// Runs every scenario `runs` times on `so.store`; prints each run, writes one row per scenario.
std::vector<eb::Json> run_store(const eb::ScenarioOptions& so, const std::vector<std::string>& scenarios, int runs,
                                eb::JsonRows& json) {
  std::vector<eb::Json> rows;
  for (const auto& s : scenarios) {
    if (!eb::scenario_applies(s, so.store)) continue;
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
      std::cout << "  " << s << " (" << so.store << ") run " << i + 1 << "/" << runs << ": pause_ms="
                << eb::fmt(r.pause_ms, 1) << " lost=" << r.lost_steps << " split_brain=" << r.split_brain_steps
                << " exit_s=" << eb::fmt(r.exit_s, 2) << " ok=" << (r.ok ? "true" : "false")
                << (r.detail.empty() ? "" : " (" + r.detail + ")") << std::endl;
    }
    rows.push_back(row_of(results));
    json.write(rows.back());
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("controlplane_bench", "Control-plane faults on emulated hosts (network namespaces)");
  opts.add_options()
    ("store", "redis, etcd, embedded, or a comma-separated list of them",
     cxxopts::value<std::string>()->default_value("redis"))
    ("scenarios", "comma-separated; default: every scenario that applies to each store",
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
  std::vector<std::string> stores = eb::split(a["store"].as<std::string>());
  if (stores.empty()) return usage("--store is empty");
  for (const auto& st : stores)
    if (st != "redis" && st != "etcd" && st != "embedded") return usage("bad --store '" + st + "'");
  if (runs < 1) return usage("--runs must be >= 1");
  if (so.hosts < 3 || so.hosts > 16) return usage("--hosts must be 3..16 (a majority must survive one host)");
  if (so.lease_ms < 300) return usage("--lease-ms must be >= 300");
  std::vector<std::string> scenarios = eb::split(a["scenarios"].as<std::string>());
  for (const auto& s : scenarios) {  // named ones must exist and apply to a store (default: all that apply)
    if (std::find(eb::scenario_names().begin(), eb::scenario_names().end(), s) == eb::scenario_names().end())
      return usage("unknown scenario '" + s + "'");
    bool any = false;
    for (const auto& st : stores) any = any || eb::scenario_applies(s, st);
    if (!any) return usage("scenario '" + s + "' applies to none of --store " + a["store"].as<std::string>());
  }
  if (scenarios.empty()) scenarios = eb::scenario_names();
  eb::JsonRows json(a["json"].as<std::string>());
  std::vector<eb::Json> rows;
  for (const auto& st : stores) {
    so.store = st;
    std::string why = eb::store_unavailable(st);
    if (!why.empty()) {
      std::cout << "controlplane_bench: store " << st << " skipped: " << why << "\n";
      continue;
    }
    auto more = run_store(so, scenarios, runs, json);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  eb::Table t({"scenario", "store", "hosts", "pause_ms", "lost_steps", "split_brain", "exit_s", "ok"}, 12);
  std::cout << "\n";
  t.header();
  bool all_ok = true;
  for (const auto& row : rows) {
    t.row({row["scenario"].get<std::string>(), row["store"].get<std::string>(), std::to_string(so.hosts),
           cell(row["pause_ms"]), cell(row["lost_steps"]), cell(row["split_brain_steps"]), cell(row["exit_s"]),
           row["ok"].get<bool>() ? "true" : "false"});
    all_ok = all_ok && row["ok"].get<bool>();
  }
  return all_ok ? 0 : 1;
}
