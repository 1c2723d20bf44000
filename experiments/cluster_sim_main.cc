// cluster_sim: Experiments 1 and 2 of the ElasticDL benchmark (gang vs elastic scheduling on a
// simulated GPU cluster), run once with the seed's published costs and once with EDL's own
// measured scaling curve and resize pauses.
//
//   cluster_sim [--scaling scaling.jsonl --elastic elastic.jsonl] [--model resnet20] [--link loopback]
//               [--fit-max-workers 2] [--batch 64] [--launch-s 53] [--checkpoint-every-s 60]
//               [--experiments 1,2] [--json PATH] [--series-dir DIR]
//
// Rows: {"experiment","policy","costs","job","submit_s","start_s","end_s","resizes","restarts"},
// {"experiment","policy","costs","utilization","contended_utilization","makespan_s"} and one
// {"costs","model","link","speedup":{k:..},"alpha","beta","pause_shrink_s":{k:..},"pause_grow_s":{k:..}}
// per cost set. --series-dir writes exp<E>_<costs>_<policy>.dat (time, GPUs per job, serving,
// busy GPUs) for gnuplot.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>

#include "cluster_sim.h"
#include "common/bench_util.h"

namespace {

using edl::bench::Json;
using edl::bench::fmt;
namespace sim = edl::bench::sim;

// The published outcomes (seed 000/001) shown beside ours.
struct Published {
  double gang_end = 0, elastic_end = 0, gang_util = 0, elastic_util = 0;
};
const Published kPublishedExp1{968, 809, 0.666, 1.0};

Json cost_row(const sim::Costs& c, const std::string& model, const std::string& link) {
  Json sp = Json::object(), sh = Json::object(), gr = Json::object();
  for (int k = 1; k <= 8; ++k) {
    sp[std::to_string(k)] = c.curve.speedup(k);
    if (k >= 2) gr[std::to_string(k)] = c.pause.grow(k - 1, k).seconds;
    if (k < 8) sh[std::to_string(k)] = c.pause.shrink(k + 1, k).seconds;
  }
  return {{"costs", c.name}, {"model", model}, {"link", link}, {"speedup", sp}, {"alpha", c.curve.alpha()},
          {"beta", c.curve.beta()}, {"pause_shrink_s", sh}, {"pause_grow_s", gr}, {"step_s", c.step_s},
          {"launch_s", c.launch_s}};
}

void write_series(const std::string& dir, const sim::Scenario& s, const sim::Costs& c, sim::Policy p,
                  const sim::SimResult& r) {
  std::filesystem::create_directories(dir);
  std::string path = dir + "/exp" + s.name + "_" + c.name + "_" + sim::policy_name(p) + ".dat";
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << "# t_s";
  for (const auto& j : s.jobs) out << ' ' << j.name;
  out << " serving busy_gpus utilization\n# gpus " << s.gpus << "\n";
  auto line = [&](double t, const sim::Sample& x) {
    out << t;
    for (int g : x.gpus) out << ' ' << g;
    out << ' ' << x.serving << ' ' << x.busy_gpus << ' ' << static_cast<double>(x.busy_gpus) / s.gpus << '\n';
  };
  for (const auto& x : r.timeline) {
    if (x.t > r.makespan) break;
    line(x.t, x);
  }
  if (!r.timeline.empty()) line(r.makespan, r.timeline.back());
}

struct Outcome {
  double makespan = 0, util = 0, cutil = 0;
};

Outcome run_one(const sim::Scenario& s, const sim::Costs& c, sim::Policy p, edl::bench::JsonRows& json,
                const std::string& series_dir) {
  sim::SimResult r = sim::simulate(s, c, p);
  edl::bench::Table t({"experiment", "costs", "policy", "job", "submit_s", "start_s", "end_s", "resizes",
                       "restarts"}, 11);
  for (const auto& j : r.jobs) {
    t.row({s.name, c.name, sim::policy_name(p), j.name, fmt(j.submit_s, 1), fmt(j.start_s, 1), fmt(j.end_s, 1),
           std::to_string(j.resizes), std::to_string(j.restarts)});
    json.write({{"experiment", s.name}, {"policy", sim::policy_name(p)}, {"costs", c.name}, {"job", j.name},
                {"submit_s", j.submit_s}, {"start_s", j.start_s}, {"end_s", j.end_s}, {"resizes", j.resizes},
                {"restarts", j.restarts}});
  }
  json.write({{"experiment", s.name}, {"policy", sim::policy_name(p)}, {"costs", c.name},
              {"utilization", r.utilization}, {"contended_utilization", r.contended_utilization},
              {"makespan_s", r.makespan}});
  if (!series_dir.empty()) write_series(series_dir, s, c, p, r);
  return {r.makespan, r.utilization, r.contended_utilization};
}

void run_experiment(const sim::Scenario& s, const sim::Costs& c, edl::bench::JsonRows& json,
                    const std::string& series_dir) {
  std::cout << "\nExperiment " << s.name << " (" << s.gpus << " GPUs), costs: " << c.name << "\n";
  edl::bench::Table({"experiment", "costs", "policy", "job", "submit_s", "start_s", "end_s", "resizes",
                     "restarts"}, 11).header();
  Outcome g = run_one(s, c, sim::Policy::kGang, json, series_dir);
  Outcome e = run_one(s, c, sim::Policy::kElastic, json, series_dir);
  std::cout << "  total time: gang " << fmt(g.makespan, 1) << " s, elastic " << fmt(e.makespan, 1) << " s ("
            << fmt(100.0 * (g.makespan - e.makespan) / g.makespan, 1) << "% shorter)\n";
  std::cout << "  utilisation over the run: gang " << fmt(100 * g.util, 1) << "%, elastic " << fmt(100 * e.util, 1)
            << "%; while the cluster is full: gang " << fmt(100 * g.cutil, 1) << "%, elastic "
            << fmt(100 * e.cutil, 1) << "%\n";
  if (s.name == "1") {
    const Published& p = kPublishedExp1;
    std::cout << "  published (seed): gang " << p.gang_end << " s, elastic " << p.elastic_end << " s ("
              << fmt(100.0 * (p.gang_end - p.elastic_end) / p.gang_end, 1) << "% shorter); utilisation "
              << fmt(100 * p.gang_util, 1) << "% vs ~" << fmt(100 * p.elastic_util, 0) << "%\n";
  }
}

using edl::bench::split;

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("cluster_sim", "Gang vs elastic scheduling on a simulated GPU cluster (Experiments 1, 2)");
  opts.add_options()
    ("scaling", "scaling_bench JSONL (EDL's scaling curve)", cxxopts::value<std::string>()->default_value(""))
    ("elastic", "elastic_bench JSONL (EDL's recovery/join/rendezvous times)",
     cxxopts::value<std::string>()->default_value(""))
    ("model", "model of the scaling rows to use", cxxopts::value<std::string>()->default_value("resnet20"))
    ("link", "link of the scaling rows to use", cxxopts::value<std::string>()->default_value("loopback"))
    ("fit-max-workers", "ignore scaling rows above this many workers (oversubscribed); 0 = keep all",
     cxxopts::value<int>()->default_value("2"))
    ("batch", "per-worker batch of the scaling runs (step time = batch / images_per_s)",
     cxxopts::value<int>()->default_value("64"))
    ("launch-s", "job launch time, admission -> first step (cluster property; seed: 53)",
     cxxopts::value<double>()->default_value("53"))
    ("checkpoint-every-s", "checkpoint period of training jobs", cxxopts::value<double>()->default_value("60"))
    ("experiments", "which experiments", cxxopts::value<std::string>()->default_value("1,2"))
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("series-dir", "write utilisation-over-time .dat files here", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  try {
    auto a = opts.parse(argc, argv);
    if (a.count("help")) {
      std::cout << opts.help() << std::endl;
      return 0;
    }
    sim::Costs seed = sim::seed_costs();
    seed.launch_s = a["launch-s"].as<double>();
    seed.checkpoint_every_s = a["checkpoint-every-s"].as<double>();
    std::vector<sim::Costs> sets{seed};
    std::string scaling = a["scaling"].as<std::string>(), elastic = a["elastic"].as<std::string>();
    if (scaling.empty() != elastic.empty()) {
      throw std::invalid_argument("--scaling and --elastic go together (EDL's costs need both files)");
    }
    std::string model = a["model"].as<std::string>(), link = a["link"].as<std::string>();
    if (!scaling.empty()) {
      sim::ScalingRows rows = sim::load_scaling(scaling, model, link);
      sim::Costs edl = seed;
      edl.name = "edl";
      edl.curve = sim::ScalingCurve::fit(rows.speedup, a["fit-max-workers"].as<int>());
      edl.pause = sim::load_pauses(elastic);
      edl.step_s = a["batch"].as<int>() / rows.images_per_s_1;
      sets.push_back(edl);
    } else {
      std::cout << "note: no --scaling/--elastic files: only the seed's published costs are simulated\n";
    }
    edl::bench::JsonRows json(a["json"].as<std::string>());
    std::string series = a["series-dir"].as<std::string>();
    edl::bench::Table ct({"costs", "k", "speedup", "shrink_s", "grow_s"}, 11);
    std::cout << "Cost sets (speed-up at k workers; stall when shrinking to / growing to k)\n";
    ct.header();
    for (const auto& c : sets) {
      json.write(cost_row(c, c.name == "seed" ? "resnet50 (seed GPU cluster)" : model,
                          c.name == "seed" ? "seed" : link));
      for (int k = 1; k <= 6; ++k) {
        ct.row({c.name, std::to_string(k), fmt(c.curve.speedup(k), 3), fmt(c.pause.shrink(k + 1, k).seconds, 3),
                k > 1 ? fmt(c.pause.grow(k - 1, k).seconds, 3) : "-"});
      }
    }
    // Job sizes are calibrated once, on the seed's costs, and kept for every cost set.
    for (const std::string& e : split(a["experiments"].as<std::string>())) {
      sim::Scenario s;
      if (e == "1") {
        s = sim::experiment1(seed);
      } else if (e == "2") {
        s = sim::experiment2(seed);
      } else {
        throw std::invalid_argument("--experiments: unknown experiment '" + e + "' (1, 2)");
      }
      for (const auto& c : sets) run_experiment(s, c, json, series);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster_sim: %s\n", e.what());
    return 2;
  }
  return 0;
}
