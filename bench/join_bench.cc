// join_bench: what a join costs the workers already training (issue 26 part 1), the old path
// (EDL_JOIN=stop: the job stops while the best member broadcasts its whole commit) against stop-free
// joins (EDL_JOIN=stopfree: the newcomer receives the tensors in the background, docs/elastic.md).
//
// For each state size in --sizes-mb and each path in --paths, in one run: --survivors processes of
// the synthetic worker (testing/elastic_worker.cc: a 65,536-float model, --step-ms of compute per
// step then one averaged gradient allreduce (--compute-first: the survivors' boundaries line up as
// in real training, instead of keeping the phase offset they started with), a further --state-mb M
// tensor of which a 1 MiB window changes every step, a commit every step) train against an
// in-process store. From step --join-at
// on, --joins newcomers come one after the other (--large-joins at sizes of --large-mb and more,
// whose steps commit that much state each: a 1 GiB trial takes minutes per join): each joins, trains
// --after steps once it holds the state, and leaves gracefully (SIGTERM) before the next one starts.
// From the workers' step log (CLOCK_MONOTONIC times):
//   step_ms          the survivors' median step time before the first join (median over survivors)
//   extra_ms         around a join: for each survivor the time between its last step line before
//                    the newcomer's generation and its first in it, minus as many of its median
//                    steps; the largest over the survivors (the slowest survivor); the median over
//                    the joins (extra_min_ms / extra_max_ms: the smallest and largest join)
//   catchup_steps    stop-free: steps from the join to the newcomer's "caught up" boundary (0 for stop)
//   catchup_extra_ms stop-free: the slowest survivor's extra time summed over those steps (the
//                    background serving's cost, spread over the catch-up); medians over the joins
//   noise_ms         the same measure as extra_ms over two-step windows without a membership change
//                    (first generation, after the warm-up steps): the median over those windows, and
//   noise_p90_ms     their 90th percentile — what extra_ms would read if a join cost nothing (a
//                    loaded machine delays steps by itself)
//   peak_rss_mb      the largest sum of the workers' resident memory, sampled every 20 ms
// Rows (--json PATH): {"bench":"join","state_bytes","path","survivors","step_ms","extra_ms",
//                      "extra_min_ms","extra_max_ms","joins","catchup_steps","catchup_extra_ms",
//                      "noise_ms","noise_p90_ms","peak_rss_mb"}
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "edl/store_server.h"
#include "testing/process.h"

#ifndef EDL_ELASTIC_WORKER_PATH
#define EDL_ELASTIC_WORKER_PATH "elastic_worker"
#endif

namespace {

using namespace edl::bench;

struct Options {
  std::vector<uint64_t> sizes_mb;
  std::vector<std::string> paths;
  int survivors = 2;
  double step_ms = 100;
  int join_at = 15;
  int after = 10;
  int joins = 5;
  uint64_t large_mb = 512;
  int large_joins = 1;
  double trial_timeout_s = 1800;
  std::string worker = EDL_ELASTIC_WORKER_PATH;
  std::string dir;
  std::string timeline_dir;  // --timeline: each worker's EDL_TIMELINE file goes there
};

struct Step {
  int64_t step;
  uint64_t gen;
  int size;
  double t;
};

// The workers' shared log, parsed.
struct Log {
  std::map<std::string, std::vector<Step>> steps;  // worker -> its step lines in order
  std::map<std::string, uint64_t> joined_gen;      // worker -> the generation of its first gen line
  std::map<std::string, int64_t> caught_at;        // worker -> step of its "catchup 0" line
  std::vector<std::string> errors;

  void parse_line(const std::string& line) {
    std::istringstream is(line);
    std::string kind, worker;
    is >> kind >> worker;
    if (kind == "step") {
      Step s;
      int rank = 0;
      is >> s.step >> s.gen >> rank >> s.size >> s.t;
      steps[worker].push_back(s);
    } else if (kind == "gen") {
      uint64_t g = 0;
      is >> g;
      joined_gen.emplace(worker, g);
    } else if (kind == "catchup") {
      int on = 0;
      int64_t step = 0;
      is >> on >> step;
      if (on == 0) caught_at[worker] = step;
    } else if (kind == "error") {
      errors.push_back(line);
    }
  }
};

// What one join cost the slowest survivor.
struct JoinCost {
  double extra = -1e300, catchup_extra = -1e300;
  int64_t catchup_steps = 0;
};

struct Row {
  double step_ms = 0, extra_ms = 0, extra_min = 0, extra_max = 0, catchup_extra_ms = 0, noise_ms = 0, noise_p90 = 0;
  double peak_rss_mb = 0;
  int64_t catchup_steps = 0;
  int joins = 0;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

constexpr size_t kWarmup = 4;  // step lines of the first generation left out of the medians

// A survivor's median step before the first join (first generation, warm-up steps left out).
double median_step(const std::vector<Step>& s) {
  std::vector<double> d;
  for (size_t i = kWarmup; i < s.size() && s[i].gen == s.front().gen; ++i)
    if (s[i].step == s[i - 1].step + 1) d.push_back(s[i].t - s[i - 1].t);
  return median_of(d);
}

// extra_ms's measure over the two-step windows of the first generation (no membership change): for
// each step, the largest over the survivors of (its time two steps back to it) minus two medians.
std::vector<double> quiet_windows(const std::vector<const std::vector<Step>*>& survivors, const std::vector<double>& medians) {
  std::map<int64_t, double> worst;
  std::map<int64_t, size_t> seen;
  for (size_t k = 0; k < survivors.size(); ++k) {
    const auto& s = *survivors[k];
    for (size_t i = kWarmup + 2; i < s.size() && s[i].gen == s.front().gen; ++i) {
      if (s[i].step != s[i - 2].step + 2) continue;
      const double x = s[i].t - s[i - 2].t - 2 * medians[k];
      auto it = worst.find(s[i].step);
      worst[s[i].step] = it == worst.end() ? x : std::max(it->second, x);
      ++seen[s[i].step];
    }
  }
  std::vector<double> v;
  for (const auto& [step, x] : worst)
    if (seen[step] == survivors.size()) v.push_back(x);
  return v;
}

// The resident memory of a process in MiB (0 when it is gone).
double rss_mb(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/statm").c_str(), "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20) : 0;
}

// Survivor s's extra time across the change into generation g (its last step line before g to
// its first in g, minus as many median steps), and summed over the steps of g up to `caught`.
void add_survivor(const std::vector<Step>& s, double median, uint64_t g, int64_t caught, JoinCost* c) {
  size_t b = 0;
  while (b < s.size() && s[b].gen < g) ++b;
  if (b == 0 || b >= s.size() || s[b].gen != g) return;
  const auto gap = [&](size_t i) { return (s[i].t - s[i - 1].t) - static_cast<double>(s[i].step - s[i - 1].step) * median; };
  c->extra = std::max(c->extra, gap(b));
  if (caught < 0) return;
  double sum = 0;
  for (size_t i = b + 1; i < s.size() && s[i].gen == g && s[i - 1].step <= caught; ++i) sum += gap(i);
  c->catchup_extra = std::max(c->catchup_extra, sum);
  c->catchup_steps = caught - s[b - 1].step;
}

// One job: the survivors train; `joins` times a newcomer joins, trains `after` steps once it holds
// the state, and leaves gracefully (SIGTERM) before the next one starts.
Row run_trial(const Options& o, uint64_t mb, const std::string& path, const std::string& tag) {
  edl::StoreServerOptions so;
  so.secret = "join-bench";
  edl::StoreServer store(so);
  const std::string log_path = o.dir + "/" + tag + ".log";
  std::map<std::string, edl::testing::Process> procs;
  auto spawn = [&](const std::string& id) {
    edl::testing::SpawnOptions sp;
    sp.env = {"EDL_STORE=" + store.url(), "EDL_JOB_SECRET=join-bench", "EDL_JOB_ID=" + tag, "EDL_ELASTIC=1",
              "EDL_MIN_NP=" + std::to_string(o.survivors), "EDL_MAX_NP=" + std::to_string(o.survivors + 1),
              "EDL_WORKER_ID=" + id, "EDL_JOIN=" + path, "EDL_START_WINDOW_MS=300", "EDL_LOG_LEVEL=1"};
    if (!o.timeline_dir.empty()) sp.env.push_back("EDL_TIMELINE=" + o.timeline_dir + "/" + tag + "." + id + ".json");
    sp.log = o.dir + "/" + tag + "." + id + ".out";
    sp.die_with_parent = true;
    procs[id] = edl::testing::Process({o.worker, "--steps", "100000000", "--step-ms", std::to_string(o.step_ms), "--params",
                                       "65536", "--state-mb", std::to_string(mb), "--compute-first", "1", "--log", log_path},
                                      sp);
  };
  for (int i = 0; i < o.survivors; ++i) spawn("s" + std::to_string(i));
  LineTail tail(log_path);
  Log log;
  const double t_end = now_s() + o.trial_timeout_s;
  const int joins = mb >= o.large_mb ? o.large_joins : o.joins;
  double peak_rss = 0;
  int j = 0;             // the newcomer in the job or next to come
  int64_t next_at = o.join_at;
  while (j < joins) {
    double rss = 0;
    for (const auto& [id, p] : procs) rss += rss_mb(p.pid());
    peak_rss = std::max(peak_rss, rss);
    for (const auto& line : tail.new_lines()) log.parse_line(line);
    if (!log.errors.empty()) throw std::runtime_error("join_bench: a worker failed: " + log.errors.front());
    if (now_s() > t_end) throw std::runtime_error("join_bench: trial " + tag + " did not finish in time");
    const std::string id = "new" + std::to_string(j);
    const auto& s0 = log.steps["s0"];
    if (!procs.count(id) && !s0.empty() && s0.back().step >= next_at && s0.back().size == o.survivors) spawn(id);
    const auto& n = log.steps[id];
    const auto c = log.caught_at.find(id);
    const bool trained = !n.empty() && (path == "stopfree" ? c != log.caught_at.end() && n.back().step >= c->second + o.after
                                                          : n.size() >= static_cast<size_t>(o.after));
    if (trained) {  // it leaves; the next one joins once the survivors trained a few steps alone again
      procs[id].stop(std::chrono::milliseconds(30000));
      next_at = n.back().step + 5;
      ++j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [id, p] : procs) p.stop(std::chrono::milliseconds(0));
  Row row;
  std::vector<double> medians, extras, catchups;
  std::vector<JoinCost> costs(joins);
  std::vector<const std::vector<Step>*> survivors;
  for (int i = 0; i < o.survivors; ++i) {
    const auto& s = log.steps["s" + std::to_string(i)];
    const double m = median_step(s);
    medians.push_back(m);
    survivors.push_back(&s);
    for (int k = 0; k < joins; ++k) {
      const std::string id = "new" + std::to_string(k);
      const auto c = log.caught_at.find(id);
      add_survivor(s, m, log.joined_gen[id], c == log.caught_at.end() ? -1 : c->second, &costs[k]);
    }
  }
  std::vector<double> steps;
  for (const auto& c : costs) {
    extras.push_back(c.extra);
    catchups.push_back(path == "stopfree" ? c.catchup_extra : 0.0);
    steps.push_back(static_cast<double>(c.catchup_steps));
  }
  row.step_ms = median_of(medians);
  row.extra_ms = median_of(extras);
  row.extra_min = *std::min_element(extras.begin(), extras.end());
  row.extra_max = *std::max_element(extras.begin(), extras.end());
  row.catchup_extra_ms = median_of(catchups);
  row.catchup_steps = path == "stopfree" ? static_cast<int64_t>(median_of(steps)) : 0;
  row.joins = joins;
  const std::vector<double> quiet = quiet_windows(survivors, medians);
  row.noise_ms = median_of(quiet);
  row.noise_p90 = percentile(quiet, 0.9);
  row.peak_rss_mb = peak_rss;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("join_bench", "the survivors' cost of a join: stop vs stop-free (EDL_JOIN)");
  opts.add_options()("sizes-mb", "state sizes in MiB (the --state-mb tensor)", cxxopts::value<std::string>()->default_value("1,100,1024"))(
      "paths", "join paths to compare", cxxopts::value<std::string>()->default_value("stop,stopfree"))(
      "survivors", "workers training before the join", cxxopts::value<int>()->default_value("2"))(
      "step-ms", "compute per step (ms)", cxxopts::value<double>()->default_value("100"))(
      "join-at", "the newcomer starts when the job reaches this step", cxxopts::value<int>()->default_value("15"))(
      "after", "steps each newcomer trains (after catching up) before it leaves", cxxopts::value<int>()->default_value("10"))(
      "joins", "joins per trial (one newcomer after the other; the median is reported)", cxxopts::value<int>()->default_value("5"))(
      "large-mb", "sizes of this many MiB and more are large (--large-joins)", cxxopts::value<uint64_t>()->default_value("512"))(
      "large-joins", "joins per trial at the large sizes", cxxopts::value<int>()->default_value("1"))(
      "trial-timeout-s", "give up on a trial after this long", cxxopts::value<double>()->default_value("1800"))(
      "worker", "path of the synthetic worker", cxxopts::value<std::string>()->default_value(EDL_ELASTIC_WORKER_PATH))(
      "timeline", "write each worker's timeline (EDL_TIMELINE) into this directory", cxxopts::value<std::string>()->default_value(""))(
      "json", "append one JSON object per row to PATH", cxxopts::value<std::string>()->default_value(""))(
      "help", "usage");
  auto r = parse_flags(opts, argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  Options o;
  for (const auto& s : split(r["sizes-mb"].as<std::string>())) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || mb == 0 || mb > (1ull << 20)) {
      std::fprintf(stderr, "join_bench: --sizes-mb takes positive MiB counts, got '%s'\n", s.c_str());
      return 2;
    }
    o.sizes_mb.push_back(mb);
  }
  o.paths = split(r["paths"].as<std::string>());
  for (const auto& p : o.paths)
    if (p != "stop" && p != "stopfree") {
      std::fprintf(stderr, "join_bench: --paths takes stop and/or stopfree, got '%s'\n", p.c_str());
      return 2;
    }
  o.survivors = r["survivors"].as<int>();
  o.step_ms = r["step-ms"].as<double>();
  o.join_at = r["join-at"].as<int>();
  o.after = r["after"].as<int>();
  o.joins = r["joins"].as<int>();
  o.large_mb = r["large-mb"].as<uint64_t>();
  o.large_joins = r["large-joins"].as<int>();
  o.worker = r["worker"].as<std::string>();
  o.trial_timeout_s = r["trial-timeout-s"].as<double>();
  o.timeline_dir = r["timeline"].as<std::string>();
  if (o.survivors < 1 || o.sizes_mb.empty() || o.paths.empty() || o.join_at < 5 || o.after < 1 || o.joins < 1 || o.large_joins < 1) {
    std::fprintf(stderr,
                 "join_bench: needs --survivors >= 1, --join-at >= 5, --after >= 1, --joins >= 1, --large-joins >= 1, "
                 "sizes and paths\n");
    return 2;
  }
  char tmpl[] = "/tmp/edl_join_bench_XXXXXX";
  if (!::mkdtemp(tmpl)) return 1;
  o.dir = tmpl;
  JsonRows json(r["json"].as<std::string>());
  Table table({"state_MiB", "path", "step_ms", "extra_ms", "extra_%", "extra_min", "extra_max", "catchup_steps",
               "catchup_extra", "noise", "noise_p90", "peak_rss_MiB"});
  table.header();
  int trial = 0;
  for (uint64_t mb : o.sizes_mb)
    for (const auto& path : o.paths) {
      Row row;
      try {
        row = run_trial(o, mb, path, "join" + std::to_string(::getpid()) + "_" + std::to_string(trial++));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (logs in %s)\n", e.what(), o.dir.c_str());
        return 1;
      }
      const double pct = row.step_ms > 0 ? 100.0 * row.extra_ms / row.step_ms : 0;
      table.row({std::to_string(mb), path, fmt(row.step_ms, 1), fmt(row.extra_ms, 1), fmt(pct, 1), fmt(row.extra_min, 1),
                 fmt(row.extra_max, 1), std::to_string(row.catchup_steps), fmt(row.catchup_extra_ms, 1), fmt(row.noise_ms, 1), fmt(row.noise_p90, 1),
                 fmt(row.peak_rss_mb, 0)});
      Json j;
      j["bench"] = "join";
      j["state_bytes"] = mb << 20;
      j["path"] = path;
      j["survivors"] = o.survivors;
      j["step_ms"] = row.step_ms;
      j["extra_ms"] = row.extra_ms;
      j["extra_min_ms"] = row.extra_min;
      j["extra_max_ms"] = row.extra_max;
      j["joins"] = row.joins;
      j["catchup_steps"] = row.catchup_steps;
      j["catchup_extra_ms"] = row.catchup_extra_ms;
      j["noise_ms"] = row.noise_ms;
      j["noise_p90_ms"] = row.noise_p90;
      j["peak_rss_mb"] = row.peak_rss_mb;
      json.write(j);
    }
  std::filesystem::remove_all(o.dir);  // the workers' logs; kept when a trial fails
  return 0;
}
