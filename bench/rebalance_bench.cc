// rebalance_bench: straggler rebalancing against waiting and eviction (issue 26, part 3).
//
// Each run is an elastic job of 3 workers under edl-run (--hostname t --min-np 2 --max-np 3 -np 3) of
// bench/rebalance_worker: a normal worker computes --record-ms per record, the one of slot 2 (every
// incarnation: a slow machine) runs at --slow-factor of that speed. The global batch is 3 x --batch
// records. Modes, one job each, run in turn in every round (so load changes hit all of them):
//   wait       no flag: every step waits for the slow worker;
//   evict      --evict-stragglers (default straggler rule: 1.5x the median for 20 steps): the slow worker
//              is removed, its slot restarted, the newcomer is slow again and evicted again;
//   rebalance  --rebalance-stragglers: the slow worker gets fewer records, the others more.
// Throughput: the records trained per second from the step after --warmup-steps to the last step
// (rank 0's log). The ideal is the sum of the workers' speeds, (2 + slow_factor) x 1000 / record_ms
// records per second; ratio_to_ideal = samples_per_s / ideal_samples_per_s. Target: rebalance >= 0.9
// and above both others (printed as a verdict; the exit status is 0 whenever every job ran).
//
// Rows (--json PATH): {"bench":"rebalance","mode","round","samples_per_s","ideal_samples_per_s",
// "ratio_to_ideal","workers","slow_factor","record_ms","batch","steps"} per job, then one
// {"bench":"rebalance","mode":...,"round":"median",...} per mode.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "common/bench_util.h"
#include "testing/process.h"

using namespace edl::bench;

namespace {

struct Config {
  std::string edl_run, worker;
  int64_t steps = 120, warmup = 20;
  uint64_t batch = 32;
  double record_ms = 5, slow_factor = 0.5;
  int timeout_s = 300;
};

// One job in `mode`; the records per second over the steps after the warm-up (-1 when it failed).
double run_job(const Config& c, const std::string& mode, const std::string& dir, std::string* error) {
  const std::string log = dir + "/" + mode + ".log";
  std::filesystem::remove(log);
  std::vector<std::string> argv = {c.edl_run, "--hostname", "t", "--min-np", "2", "--max-np", "3", "-np", "3"};
  if (mode == "evict") argv.push_back("--evict-stragglers");
  if (mode == "rebalance") argv.push_back("--rebalance-stragglers");
  for (const std::string& s : {c.worker, std::string("--log"), log, std::string("--steps"), std::to_string(c.steps),
                               std::string("--batch"), std::to_string(c.batch), std::string("--record-ms"),
                               fmt(c.record_ms, 4), std::string("--slow-factor"), fmt(c.slow_factor, 4)})
    argv.push_back(s);
  edl::testing::SpawnOptions so;
  so.log = dir + "/" + mode + ".out";
  edl::testing::Process job(argv, so);
  const int rc = job.wait(std::chrono::seconds(c.timeout_s));
  if (rc != 0) {
    job.stop(std::chrono::seconds(2));
    *error = mode + ": edl-run " + (rc < 0 ? "timed out" : "exited " + std::to_string(rc)) + " (log " + so.log + ")";
    return -1;
  }
  std::istringstream in(slurp(log));
  std::string word;
  long long step = 0;
  unsigned long long records = 0;
  double t = 0, t0 = -1, t1 = -1, total = 0;
  int size = 0;
  std::map<long long, std::pair<unsigned long long, double>> by_step;  // a step replayed after a failure: its last line
  while (in >> word >> step >> records >> t >> size) by_step[step] = {records, t};
  for (const auto& [s, v] : by_step) {
    if (s == c.warmup) t0 = v.second;
    if (s > c.warmup) {
      total += static_cast<double>(v.first);
      t1 = v.second;
    }
  }
  if (t0 < 0 || t1 <= t0) {
    *error = mode + ": the log " + log + " has no steps after the warm-up";
    return -1;
  }
  return total / ((t1 - t0) / 1000.0);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("rebalance_bench", "straggler rebalancing vs waiting and eviction: 3 workers, one slowed");
  opts.add_options()("modes", "wait,evict,rebalance", cxxopts::value<std::string>()->default_value("wait,evict,rebalance"))(
      "rounds", "jobs per mode (modes interleaved)", cxxopts::value<int>()->default_value("1"))(
      "steps", "steps per job", cxxopts::value<int64_t>()->default_value("120"))(
      "warmup-steps", "steps before the measured window", cxxopts::value<int64_t>()->default_value("20"))(
      "batch", "records per worker per step (global batch = 3x)", cxxopts::value<uint64_t>()->default_value("32"))(
      "record-ms", "compute per record of a normal worker (5: a step of 160 ms at batch 32, about ResNet20's on "
                   "one core)", cxxopts::value<double>()->default_value("5"))(
      "slow-factor", "speed of the slow worker", cxxopts::value<double>()->default_value("0.5"))(
      "job-timeout-s", "a job longer than this failed", cxxopts::value<int>()->default_value("300"))(
      "edl-run", "path of edl-run (default: the build tree's)", cxxopts::value<std::string>()->default_value(""))(
      "worker", "path of rebalance_worker (default: next to this program)", cxxopts::value<std::string>()->default_value(""))(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto a = parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  Config c;
  c.steps = a["steps"].as<int64_t>();
  c.warmup = a["warmup-steps"].as<int64_t>();
  c.batch = a["batch"].as<uint64_t>();
  c.record_ms = a["record-ms"].as<double>();
  c.slow_factor = a["slow-factor"].as<double>();
  c.timeout_s = a["job-timeout-s"].as<int>();
  const int rounds = a["rounds"].as<int>();
  std::vector<std::string> modes = split(a["modes"].as<std::string>());
  std::string bad;
  for (const auto& m : modes)
    if (m != "wait" && m != "evict" && m != "rebalance") bad = "--modes: unknown mode '" + m + "' (wait, evict, rebalance)";
  if (modes.empty()) bad = "--modes is empty";
  if (rounds < 1) bad = "--rounds must be >= 1";
  if (c.warmup < 1 || c.steps < c.warmup + 10) bad = "--warmup-steps must be >= 1 and --steps >= warm-up + 10";
  if (c.batch < 1) bad = "--batch must be >= 1";
  if (!(c.record_ms > 0)) bad = "--record-ms must be > 0";
  if (!(c.slow_factor > 0 && c.slow_factor <= 1)) bad = "--slow-factor must be in (0, 1]";
  if (c.timeout_s < 5) bad = "--job-timeout-s must be >= 5";
  if (!bad.empty()) {
    std::fprintf(stderr, "rebalance_bench: %s\n", bad.c_str());
    return 2;
  }
  const std::string bin = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  c.edl_run = a["edl-run"].as<std::string>().empty() ? bin + "/../src/launcher/edl-run" : a["edl-run"].as<std::string>();
  c.worker = a["worker"].as<std::string>().empty() ? bin + "/rebalance_worker" : a["worker"].as<std::string>();
  for (const auto& p : {c.edl_run, c.worker})
    if (::access(p.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "rebalance_bench: %s is not an executable (build it, or pass --edl-run / --worker)\n", p.c_str());
      return 2;
    }
  char tmpl[] = "/tmp/rebalance_bench.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl) ? tmpl : "/tmp";
  const double ideal = (2.0 + c.slow_factor) * 1000.0 / c.record_ms;
  JsonRows json(a["json"].as<std::string>());
  Table table({"round", "mode", "samples_per_s", "ideal", "ratio"}, 14);
  table.header();
  std::map<std::string, std::vector<double>> ratios;
  int failed = 0;
  auto row = [&](const std::string& mode, const Json& round, double sps) {
    json.write({{"bench", "rebalance"}, {"mode", mode}, {"round", round}, {"samples_per_s", sps},
                {"ideal_samples_per_s", ideal}, {"ratio_to_ideal", sps / ideal}, {"workers", 3},
                {"slow_factor", c.slow_factor}, {"record_ms", c.record_ms}, {"batch", c.batch}, {"steps", c.steps}});
  };
  for (int r = 0; r < rounds; ++r) {
    for (const auto& mode : modes) {
      std::string error;
      const double sps = run_job(c, mode, dir, &error);
      if (sps < 0) {
        ++failed;
        std::printf("FAILED %s\n", error.c_str());
        continue;
      }
      ratios[mode].push_back(sps / ideal);
      table.row({std::to_string(r), mode, fmt(sps, 1), fmt(ideal, 1), fmt(sps / ideal, 3)});
      std::fflush(stdout);
      row(mode, r, sps);
    }
  }
  std::printf("\nmedian ratio to the ideal (%.0f records/s = the sum of the workers' speeds):\n", ideal);
  for (const auto& mode : modes) {
    if (ratios[mode].empty()) continue;
    const double m = median(ratios[mode]);
    std::printf("  %-10s %.3f\n", mode.c_str(), m);
    row(mode, "median", m * ideal);
  }
  if (ratios.count("rebalance") && !ratios["rebalance"].empty()) {
    const double reb = median(ratios["rebalance"]);
    bool above = true;
    for (const char* other : {"wait", "evict"})
      if (ratios.count(other) && !ratios[other].empty()) above = above && reb > median(ratios[other]);
    std::printf("target (rebalance >= 0.9 x ideal and above the others): %s\n",
                reb >= 0.9 && above ? "met" : "NOT met");
  }
  std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}
