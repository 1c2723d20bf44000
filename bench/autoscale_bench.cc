// autoscale_bench: edl-run's autoscaling advice (docs/observability.md "Autoscaling") on a real model.
// ResNet20 (models/, 1 thread per worker, synthetic CIFAR-shaped batches) trains under edl-run in
// elastic mode:
//   1. fixed runs at 1..--max-np workers (`--min-np k --max-np k -np k`): images/s per world size,
//      measured by rank 0 over the steps after --warmup (samples / seconds, as edl-run's R_k), in
//      --repeats rounds of alternating order (1..N, N..1, ...; the median round per size counts);
//   2. one `--autoscale` run (`--min-np 1 --max-np N -np 1`, --scaling-interval K,
//      --scaling-threshold S) that starts at 1 worker and follows the advice (probes out while
//      s_{k,d} > S, back in when the last worker is not worth it); the recommendation is the last
//      `event=autoscale recommended=` of edl-run's event log, with the R_k table it was computed from.
// Check: the recommended world size's images/s (fixed runs) is within --tolerance (5%) of the best.
// The live run's S is --threshold, default 0.1: the check asks for the best images/s, i.e. scaling
// while an added worker brings more than noise. edl-run's default S = 0.7 stops earlier by design
// (at the size where the next worker brings less than 0.7 of a worker's throughput); the summary
// also gives what the same schedule recommends at S = 0.7 (--compare-threshold) on the fixed runs'
// R_k table (the Autoscaler replayed offline from 1 worker, probes allowed).
//
//   autoscale_bench [--max-np 4] [--batch 32] [--steps 12] [--warmup 3] [--repeats 3] [--interval 10]
//                   [--threshold 0.1] [--compare-threshold 0.7] [--autoscale-steps 90] [--tolerance 0.05]
//                   [--json PATH]
// Rows: {"bench":"autoscale_bench","workers":k,"images_per_s":..,"step_ms":..,"runs":..,"autoscale_rate":..}
// (autoscale_rate: R_k as edl-run measured it in the autoscale run, when it ran at k), then
// {"bench":"autoscale_bench","recommended":k,"best":k,"ok":..,"path":"1,2,3,2",...}.
// Exit code 1 when the check fails or a run fails.
//
// The same executable is the worker: `autoscale_bench --worker ...` (started by edl-run).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include <cxxopts.hpp>

#include <edl/edl.h>
#include <edl/optim.h>

#include "common/bench_util.h"
#include "launcher/autoscaler.h"
#include "models/resnet20/resnet20.h"
#include "testing/process.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif

namespace {

using edl::bench::fmt;
using edl::bench::Json;

// --- worker ----------------------------------------------------------------------------------

int run_worker(const cxxopts::ParseResult& a) {
  edl::init();
  const int batch = a["batch"].as<int>(), steps = a["steps"].as<int>(), warmup = a["warmup"].as<int>();
  edl::set_samples_per_batch(batch);
  edl::models::ModelConfig mc;
  mc.threads = 1;
  edl::models::ResNet20 model(mc);
  edl::DistributedOptimizerOptions o;
  o.scaling.base_lr = 0.01;
  edl::DistributedOptimizer opt(o);
  edl::elastic::State state;
  for (const auto& p : model.parameters()) {
    opt.add_parameter(p.name, p.data, p.grad, p.count);
    state.register_tensor("param." + p.name, p.data, p.count, edl::DataType::kFloat32);
  }
  state.register_component("optimizer", &opt);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  std::vector<float> images(static_cast<size_t>(batch) * mc.channels * mc.height * mc.width);
  std::vector<int32_t> labels(batch);
  for (float& v : images) v = pixel(rng);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % mc.classes);
  std::vector<double> step_s;  // this generation's steps after the warm-up
  int generation_steps = 0;
  bool finite = true;
  state.on_generation([&](const edl::elastic::GenerationInfo&) {
    step_s.clear();
    generation_steps = 0;
  });
  edl::elastic::run(state, [&] {
    double t0 = edl::bench::now_s();
    while (state.step < steps) {
      auto loss = model.forward(images.data(), labels.data(), batch, true);
      model.backward([&](size_t k) { opt.grad_ready(k); });
      opt.step();
      finite = finite && std::isfinite(loss.loss);
      edl::notify_batch_end();
      const double t1 = edl::bench::now_s();
      if (++generation_steps > warmup) step_s.push_back(t1 - t0);
      t0 = t1;
    }
  });
  if (edl::rank() == 0 && !a["out"].as<std::string>().empty() && !step_s.empty()) {
    // images/s over the whole timed window (as edl-run's R_k: samples / seconds), step_s its median.
    double total = 0;
    for (double s : step_s) total += s;
    Json r{{"size", edl::size()}, {"step_s", edl::bench::median(step_s)},
           {"images_per_s", edl::size() * batch * static_cast<double>(step_s.size()) / total}, {"finite", finite}};
    std::ofstream(a["out"].as<std::string>()) << r.dump() << "\n";
  }
  edl::shutdown();
  return finite ? 0 : 3;
}

// --- driver ----------------------------------------------------------------------------------

struct Run {
  int code = -1;
  std::string log;
};

// edl-run ARGS... -- this executable --worker WORKER_ARGS, output to `log`, bounded by timeout_s.
Run launch(const std::vector<std::string>& edl_args, const std::vector<std::string>& worker_args,
           const std::string& log, double timeout_s) {
  std::vector<std::string> argv{EDL_RUN_PATH};
  argv.insert(argv.end(), edl_args.begin(), edl_args.end());
  argv.push_back(std::filesystem::read_symlink("/proc/self/exe"));
  argv.push_back("--worker");
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  edl::testing::SpawnOptions so;
  so.log = log;
  edl::testing::Process p(argv, so);
  Run r;
  r.code = p.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (r.code < 0) {
    p.stop(std::chrono::seconds(5));
    r.code = 124;
  }
  std::ifstream f(log);
  r.log.assign(std::istreambuf_iterator<char>(f), {});
  return r;
}

std::vector<std::string> worker_args(const cxxopts::ParseResult& a, int steps, const std::string& out) {
  return {"--batch", std::to_string(a["batch"].as<int>()), "--steps", std::to_string(steps), "--warmup",
          std::to_string(a["warmup"].as<int>()), "--out", out};
}

// The last recommendation of an --autoscale run, the sizes it recommended in order, and its R_k table.
struct Advice {
  int recommended = 0;
  std::vector<int> path{1};
  std::map<int, double> rates;
  std::string last_line;
};

Advice parse_advice(const std::string& log) {
  Advice adv;
  std::regex line_re(R"(event=autoscale recommended=(\d+) current=(\d+) .*rates=([0-9:.,]+))");
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, line_re)) continue;
    adv.recommended = std::stoi(m[1]);
    if (adv.path.back() != adv.recommended) adv.path.push_back(adv.recommended);
    adv.rates.clear();
    for (const auto& kv : edl::bench::split(m[3])) {
      auto colon = kv.find(':');
      if (colon != std::string::npos) adv.rates[std::stoi(kv.substr(0, colon))] = std::stod(kv.substr(colon + 1));
    }
    adv.last_line = line;
  }
  return adv;
}

// The Autoscaler's schedule replayed on a table of measured rates, from 1 worker with probes
// allowed: each visited size contributes one window of `interval` steps at its measured rate.
// Returns the sizes recommended in order (the last one is the recommendation).
std::vector<int> replay(const std::map<int, double>& rates, double threshold, int interval, int max_np, int batch) {
  edl::launcher::AutoscaleOptions o;
  o.threshold = threshold;
  o.interval = interval;
  o.max_np = max_np;
  o.probe = true;
  edl::launcher::Autoscaler as(o);
  std::vector<int> path{1};
  int k = 1;
  for (uint64_t gen = 1; gen <= 16 && rates.count(k); ++gen) {
    edl::launcher::ThroughputSample s;
    s.gen = gen;
    s.size = k;
    s.steps = interval;
    s.local_batch = batch;
    s.seconds = static_cast<double>(interval) * k * batch / rates.at(k);
    as.observe(s);
    const int next = as.recommended_world_size();
    if (next == k) break;  // settled
    k = next;
    path.push_back(k);
  }
  return path;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

int run_driver(const cxxopts::ParseResult& a) {
  const int max_np = a["max-np"].as<int>();
  const double timeout_s = a["timeout-s"].as<double>();
  const std::string dir = std::filesystem::temp_directory_path() / ("autoscale_bench." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  edl::bench::JsonRows json(a["json"].as<std::string>());
  // Fixed runs: --repeats rounds, every other one in reverse order (1..N, N..1, ...), so that a load
  // drift of the shared machine does not favour one size; per size the median round counts.
  std::map<int, std::vector<Json>> rounds;
  bool failed = false;
  for (int rep = 0; rep < a["repeats"].as<int>(); ++rep) {
    for (int i = 1; i <= max_np; ++i) {
      const int k = rep % 2 == 0 ? i : max_np + 1 - i;
      const std::string out = dir + "/fixed" + std::to_string(k) + ".json";
      std::filesystem::remove(out);
      const int steps = a["warmup"].as<int>() + a["steps"].as<int>();
      Run r = launch({"--min-np", std::to_string(k), "--max-np", std::to_string(k), "-np", std::to_string(k)},
                     worker_args(a, steps, out), dir + "/fixed" + std::to_string(k) + ".log", timeout_s);
      if (r.code != 0 || !std::filesystem::exists(out)) {
        std::cerr << "autoscale_bench: the fixed run at " << k << " workers failed (status " << r.code << "):\n"
                  << r.log.substr(r.log.size() > 3000 ? r.log.size() - 3000 : 0) << "\n";
        failed = true;
        continue;
      }
      rounds[k].push_back(Json::parse(std::ifstream(out)));
    }
  }
  std::map<int, Json> fixed;
  for (auto& [k, v] : rounds) {
    std::sort(v.begin(), v.end(), [](const Json& x, const Json& y) {
      return x.at("images_per_s").get<double>() < y.at("images_per_s").get<double>();
    });
    fixed[k] = v[(v.size() - 1) / 2];
    fixed[k]["runs"] = v.size();
  }
  const std::string out = dir + "/autoscale.json";
  Run as = launch({"--min-np", "1", "--max-np", std::to_string(max_np), "-np", "1", "--autoscale",
                   "--scaling-interval", std::to_string(a["interval"].as<int>()), "--scaling-threshold",
                   fmt(a["threshold"].as<double>(), 3), "--grace-period", "30"},
                  worker_args(a, a["autoscale-steps"].as<int>(), out), dir + "/autoscale.log", timeout_s * 3);
  Advice adv = parse_advice(as.log);
  if (as.code != 0 || adv.recommended == 0) {
    std::cerr << "autoscale_bench: the --autoscale run failed (status " << as.code << ", "
              << (adv.recommended ? "" : "no recommendation") << "):\n"
              << as.log.substr(as.log.size() > 3000 ? as.log.size() - 3000 : 0) << "\n";
    failed = true;
  }

  edl::bench::Table t({"workers", "images_per_s", "step_ms", "autoscale_R_k"});
  t.header();
  int best = 0;
  for (const auto& [k, r] : fixed) {
    const double ips = r.at("images_per_s").get<double>();
    if (best == 0 || ips > fixed[best].at("images_per_s").get<double>()) best = k;
    Json row{{"bench", "autoscale_bench"}, {"model", "resnet20"}, {"workers", k}, {"batch", a["batch"].as<int>()},
             {"images_per_s", ips}, {"step_ms", r.at("step_s").get<double>() * 1000}, {"runs", r.at("runs")}};
    if (adv.rates.count(k)) row["autoscale_rate"] = adv.rates[k];
    json.write(row);
    t.row({std::to_string(k), fmt(ips, 1), fmt(r.at("step_s").get<double>() * 1000, 1),
           adv.rates.count(k) ? fmt(adv.rates[k], 1) : "-"});
  }
  const double tol = a["tolerance"].as<double>();
  bool ok = !failed && best > 0 && fixed.count(adv.recommended) &&
            fixed[adv.recommended].at("images_per_s").get<double>() >=
                (1 - tol) * fixed[best].at("images_per_s").get<double>();
  Json summary{{"bench", "autoscale_bench"}, {"recommended", adv.recommended}, {"best", best},
               {"ok", ok}, {"tolerance", tol}, {"threshold", a["threshold"].as<double>()},
               {"interval", a["interval"].as<int>()}, {"max_np", max_np}, {"path", join(adv.path)}};
  if (fixed.count(adv.recommended) && best > 0)
    summary["recommended_share_of_best"] =
        fixed[adv.recommended].at("images_per_s").get<double>() / fixed[best].at("images_per_s").get<double>();
  std::map<int, double> table;
  for (const auto& [k, r] : fixed) table[k] = r.at("images_per_s").get<double>();
  const double cmp = a["compare-threshold"].as<double>();
  const std::vector<int> offline = replay(table, cmp, a["interval"].as<int>(), max_np, a["batch"].as<int>());
  summary["compare_threshold"] = cmp;
  summary["replay_path"] = join(offline);
  summary["replay_recommended"] = offline.back();
  if (best > 0 && table.count(offline.back())) summary["replay_share_of_best"] = table[offline.back()] / table[best];
  json.write(summary);
  std::cout << "recommended " << adv.recommended << " workers (path " << join(adv.path) << "), best measured "
            << best << ": " << (ok ? "ok" : "NOT within tolerance") << "\n"
            << "last advice: " << adv.last_line << "\n"
            << "the same schedule at S = " << cmp << " on the fixed runs' table: path " << join(offline) << "\n";
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options o("autoscale_bench", "edl-run --autoscale on ResNet20: recommendation vs measured images/s");
  o.add_options()
      ("worker", "run as a training worker (started by edl-run)")
      ("max-np", "largest world size", cxxopts::value<int>()->default_value("4"))
      ("batch", "local batch size", cxxopts::value<int>()->default_value("32"))
      ("steps", "timed steps of a fixed run (worker: total steps)", cxxopts::value<int>()->default_value("12"))
      ("warmup", "untimed steps per generation", cxxopts::value<int>()->default_value("3"))
      ("interval", "--scaling-interval K of the autoscale run", cxxopts::value<int>()->default_value("10"))
      ("threshold", "--scaling-threshold S of the autoscale run", cxxopts::value<double>()->default_value("0.1"))
      ("compare-threshold", "S of the offline replay on the fixed runs' table", cxxopts::value<double>()->default_value("0.7"))
      ("repeats", "rounds of fixed runs (alternating order); the median round per size counts",
       cxxopts::value<int>()->default_value("3"))
      ("autoscale-steps", "steps of the autoscale run", cxxopts::value<int>()->default_value("90"))
      ("tolerance", "the recommendation's images/s may be this share below the best", cxxopts::value<double>()->default_value("0.05"))
      ("timeout-s", "limit of one fixed run (the autoscale run gets 3x)", cxxopts::value<double>()->default_value("300"))
      ("out", "worker: result file (rank 0)", cxxopts::value<std::string>()->default_value(""))
      ("json", "write JSON rows here", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "usage");
  auto a = edl::bench::parse_flags(o, argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  try {
    return a.count("worker") ? run_worker(a) : run_driver(a);
  } catch (const std::exception& e) {
    std::cerr << "autoscale_bench: " << e.what() << "\n";
    return 1;
  }
}
