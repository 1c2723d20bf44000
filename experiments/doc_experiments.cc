// docs/experiments.md from docs/experiments.md.in (see doc_benchmarks.h): the generated blocks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "convergence_analysis.h"
#include "doc_benchmarks.h"

namespace edl::docs {

namespace cv = edl::bench::convergence;

namespace {

using Block = std::function<void(std::ostream&, const DataSet&, const Plots&)>;

std::string pct(double fraction, int decimals = 1) { return fixed(100 * fraction, decimals) + "%"; }

void no_rows(std::ostream& md, const std::string& bench) {
  md << "_Not run in this data set (`" << bench << "` has no rows in docs/data/)._\n";
}

// --- Experiments 1 and 2 ------------------------------------------------------------------------

const Json* cost_row(const DataSet& d, const std::string& costs) {
  for (const Json& r : d.of("cluster_sim")) {
    if (r.contains("speedup") && r.value("costs", "") == costs) return &r;
  }
  return nullptr;
}

void cluster_costs(std::ostream& md, const DataSet& d, const Plots&) {
  const Json* edl = cost_row(d, "edl");
  if (!edl) {
    md << "_This data set has no `edl` cost set (cluster_sim ran without scaling_bench and elastic_bench rows, or "
          "did not run): only the seed's costs below._\n";
    return;
  }
  std::map<std::string, std::vector<double>> rec, lost;
  for (const Json& r : d.of("elastic_bench")) {
    std::string e = r.value("event", "");
    if (e != "kill" && e != "join") continue;
    std::string key = e + " " + std::to_string(r.value("ranks_before", 0)) + " -> " + std::to_string(r.value("ranks_after", 0));
    rec[key].push_back(num(r, "recovery_ms"));
    lost[key].push_back(num(r, "lost_steps"));
  }
  std::vector<std::vector<std::string>> body;
  for (auto& [k, v] : rec) {
    std::string all, ls;
    for (double x : v) all += (all.empty() ? "" : " / ") + fixed(x, 0);
    for (double x : lost[k]) ls += (ls.empty() ? "" : " / ") + fixed(x, 0);
    body.push_back({k, all, fixed(median(v), 0), ls});
  }
  md << "The `edl` cost set of this data set (`elastic_bench` and `scaling_bench` rows, as `cluster_sim` read them):\n";
  table(md, {"event", "recovery ms (each)", "median ms", "lost steps (each)"}, body);
  std::vector<std::string> head{"k"}, sp{"speed-up"};
  for (int k = 1; k <= 6; ++k) {
    head.push_back(std::to_string(k));
    sp.push_back(fixed((*edl)["speedup"].value(std::to_string(k), 0.0), 3));
  }
  md << "Speed-up curve (" << edl->value("model", "?") << ", " << edl->value("link", "?") << "; fitted alpha = "
     << fixed(num(*edl, "alpha"), 3) << ", beta = " << fixed(num(*edl, "beta"), 3) << "):\n";
  table(md, head, {sp});
}

struct PolicyResult {
  std::map<std::string, Json> jobs;
  Json util;
};

std::map<std::string, std::map<std::string, PolicyResult>> cluster_results_by(const DataSet& d, const std::string& exp) {
  std::map<std::string, std::map<std::string, PolicyResult>> out;  // costs -> policy
  for (const Json& r : d.of("cluster_sim")) {
    if (r.value("experiment", "") != exp) continue;
    auto& p = out[r.value("costs", "")][r.value("policy", "")];
    if (r.contains("job")) p.jobs[r.value("job", "")] = r;
    if (r.contains("utilization")) p.util = r;
  }
  return out;
}

void cluster_results(std::ostream& md, const DataSet& d, const Plots&) {
  if (d.of("cluster_sim").empty()) return no_rows(md, "cluster_sim");
  std::vector<std::vector<std::string>> body;
  body.push_back({"1", "published", "gang", "- / 465", "518 / 968", "968", "", "66.6%"});
  body.push_back({"1", "published", "elastic", "- / 474", "120 / 809", "809 (-16.4%)", "", "~100%"});
  for (const std::string exp : {"1", "2"}) {
    for (const auto& [costs, pol] : cluster_results_by(d, exp)) {
      double gang_end = pol.count("gang") ? num(pol.at("gang").util, "makespan_s") : 0;
      for (const std::string policy : {"gang", "elastic"}) {
        if (!pol.count(policy)) continue;
        const PolicyResult& p = pol.at(policy);
        std::vector<std::string> line{exp, costs, policy};
        int shown = 0;
        for (const auto& [name, j] : p.jobs) {
          std::string extra;
          if (j.value("restarts", 0) > 0) extra = " (" + std::to_string(j.value("restarts", 0)) + " restarts)";
          if (j.value("resizes", 0) > 0) extra += " (" + std::to_string(j.value("resizes", 0)) + " resizes)";
          line.push_back(fixed(num(j, "start_s"), 1) + " / " + fixed(num(j, "end_s"), 1) + extra);
          if (++shown == 2) break;
        }
        while (shown++ < 2) line.push_back("");
        double end = num(p.util, "makespan_s");
        std::string total = fixed(end, 1);
        if (policy == "elastic" && gang_end > 0) total += " (" + signed_fixed(100 * (end - gang_end) / gang_end, 1) + "%)";
        line.push_back(total);
        line.push_back(pct(num(p.util, "utilization")));
        line.push_back(exp == "1" ? pct(num(p.util, "contended_utilization")) : "");
        body.push_back(line);
      }
    }
  }
  table(md, {"experiment", "costs", "policy", "job 1 first step / end (s)", "job 2 first step / end (s)", "total (s)",
             "utilisation, whole run", "utilisation, cluster full"},
        body);
}

void cluster_verdict(std::ostream& md, const DataSet& d, const Plots&) {
  if (d.of("cluster_sim").empty()) return no_rows(md, "cluster_sim");
  const double seed_gain = 100.0 * (968 - 809) / 968;
  for (const std::string exp : {"1", "2"}) {
    for (const auto& [costs, pol] : cluster_results_by(d, exp)) {
      if (!pol.count("gang") || !pol.count("elastic")) continue;
      const Json& g = pol.at("gang").util;
      const Json& e = pol.at("elastic").util;
      double ge = num(g, "makespan_s"), ee = num(e, "makespan_s");
      double gain = 100 * (ge - ee) / ge;
      md << "- Experiment " << exp << ", `" << costs << "` costs: elastic ends " << fixed(gain, 1) << "% earlier than gang";
      if (exp == "1") {
        md << " (the seed: " << fixed(seed_gain, 1) << "%: " << (gain >= seed_gain ? "**met**" : "**not met**")
           << "); utilisation over the whole run " << pct(num(g, "utilization")) << " -> " << pct(num(e, "utilization"))
           << ", while the cluster is full " << pct(num(g, "contended_utilization")) << " -> "
           << pct(num(e, "contended_utilization")) << " (the seed: 66.6% -> ~100%: "
           << (num(e, "contended_utilization") - num(g, "contended_utilization") >= 1.0 - 0.666 ? "**met**"
                                                                                             : "**not met**")
           << ").\n";
      } else {
        md << " (gang takes " << fixed(ge / ee, 1) << "x as long); elastic utilisation over the run "
           << pct(num(e, "utilization")) << " (gang " << pct(num(g, "utilization")) << ").\n";
      }
    }
  }
}

// --- scaling ----------------------------------------------------------------------------------------

void netns_links(std::ostream& md, const DataSet& d, const Plots&) {
  if (d.of("netns_check").empty()) return no_rows(md, "netns_check");
  table(md, d.of("netns_check"));
}

void scaling_results(std::ostream& md, const DataSet& d, const Plots&) {
  const Rows& rows = d.of("scaling_bench");
  if (rows.empty()) return no_rows(md, "scaling_bench");
  table(md, rows, {"model", "workers", "link", "effective_link", "images_per_s", "speedup", "efficiency", "comm_share",
                   "step_ms", "oversubscribed"});
}

void scaling_verdict(std::ostream& md, const DataSet& d, const Plots&) {
  const Rows& rows = d.of("scaling_bench");
  if (rows.empty()) return no_rows(md, "scaling_bench");
  const std::map<std::string, double> target{{"resnet20", 1.85}, {"mobilenetv2", 1.8}};
  std::vector<std::vector<std::string>> body;
  for (const Json& r : rows) {
    if (r.value("workers", 0) != 2 || r.value("link", "") == "independent") continue;
    const std::string model = r.value("model", "?");
    double ceiling = std::nan("");
    for (const Json& c : matching(matching(rows, "model", model), "link", "independent")) {
      if (c.value("workers", 0) == 2) ceiling = num(c, "speedup");
    }
    double s = num(r, "speedup");
    std::string t = target.count(model) ? fixed(target.at(model), 2) + (s >= target.at(model) ? " met" : " not met") : "";
    body.push_back({model, r.value("link", "?"), fixed(s, 3), std::isnan(ceiling) ? "not measured" : fixed(ceiling, 3),
                    r["efficiency"].is_number() ? fixed(num(r, "efficiency"), 3) : "", t});
  }
  table(md, {"model", "link", "speed-up at 2", "independent ceiling at 2 (same run)", "efficiency", "earlier target"},
        body);
}

// --- Experiment 3 -----------------------------------------------------------------------------------

struct Conv {
  Json config;
  std::vector<std::string> runs;  // in row order
  std::map<std::string, std::vector<cv::LossPoint>> series;
  std::map<std::string, Rows> epochs, spikes;
  std::map<std::string, Json> finals;
};

Conv conv_of(const DataSet& d) {
  Conv c;
  for (const Json& r : d.of("convergence")) {
    if (r.contains("config")) {
      c.config = r;
      continue;
    }
    if (!r.contains("run")) continue;
    const std::string run = r.value("run", "");
    if (std::find(c.runs.begin(), c.runs.end(), run) == c.runs.end() && !r.contains("final_test_acc")) c.runs.push_back(run);
    if (r.contains("step")) {
      c.series[run].push_back({r.value("step", int64_t{0}), num(r, "epoch_progress"), num(r, "loss"), r.value("workers", 0)});
    } else if (r.contains("final_test_acc")) {
      c.finals[run] = r;
    } else if (r.contains("spike")) {
      c.spikes[run].push_back(r);
    } else if (r.contains("epoch")) {
      c.epochs[run].push_back(r);
    }
  }
  for (auto& [run, s] : c.series) s = cv::normalize(s);
  return c;
}

// The run whose name starts with "<key>_".
std::string run_named(const Conv& c, const std::string& key) {
  for (const auto& r : c.runs) {
    if (r.rfind(key + "_", 0) == 0) return r;
  }
  return "";
}

void convergence_recipe(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  if (c.config.is_null()) return no_rows(md, "convergence");
  const Json& k = c.config;
  md << "This data set's recipe: " << k.value("epochs", 0) << " epochs, the first " << k.value("train_records", 0)
     << " Fashion-MNIST training images and " << k.value("test_records", 0) << " test images, local batch "
     << k.value("batch", 0) << ", LR " << cell(k["lr"]) << " per " << k.value("base_size", 0)
     << " worker(s) scaled linearly, run (a) on " << k.value("fixed_workers", 0) << " workers, runs (b)-(d) from "
     << k.value("start_workers", 0) << " worker(s) with resizes at `" << k.value("resize_at", "")
     << "` (epoch progress:workers), spike window W = " << k.value("window", 0) << ", seed " << k.value("seed", 0)
     << ", tolerance " << cell(k["tolerance_pts"]) << " points, runs `" << k.value("runs", "") << "`.\n";
}

void convergence_epochs(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  if (c.epochs.empty()) return no_rows(md, "convergence");
  std::vector<std::string> head{"epoch"};
  std::set<int> epochs;
  for (const auto& run : c.runs) {
    head.push_back(run + " test acc %");
    head.push_back(run + " train loss");
    for (const Json& r : c.epochs[run]) epochs.insert(r.value("epoch", 0));
  }
  std::vector<std::vector<std::string>> body;
  for (int e : epochs) {
    std::vector<std::string> line{std::to_string(e)};
    for (const auto& run : c.runs) {
      auto m = matching(c.epochs[run], "epoch", e);
      line.push_back(m.empty() || num(m[0], "test_acc", -1) < 0 ? "" : fixed(100 * num(m[0], "test_acc"), 2));
      line.push_back(m.empty() ? "" : fixed(num(m[0], "train_loss"), 4));
    }
    body.push_back(line);
  }
  table(md, head, body);
}

void convergence_finals(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  if (c.finals.empty()) return no_rows(md, "convergence");
  size_t resizes = 0;
  for (const auto& [run, s] : c.spikes) resizes = std::max(resizes, s.size());
  std::vector<std::string> head{"run", "final test acc %", "vs a (points)"};
  std::vector<std::string> labels(resizes);
  for (const auto& [run, s] : c.spikes) {
    for (size_t i = 0; i < s.size(); ++i)
      labels[i] = "resize " + std::to_string(s[i].value("from_workers", 0)) + " -> " +
                  std::to_string(s[i].value("to_workers", 0)) + " spike (before -> after)";
  }
  head.insert(head.end(), labels.begin(), labels.end());
  std::vector<std::vector<std::string>> body;
  for (const auto& run : c.runs) {
    if (!c.finals.count(run)) continue;
    const Json& f = c.finals[run];
    std::vector<std::string> line{run, fixed(100 * num(f, "final_test_acc"), 2),
                                  f.contains("delta_vs_fixed_pts") ? signed_fixed(num(f, "delta_vs_fixed_pts"), 2) : ""};
    for (size_t i = 0; i < resizes; ++i) {
      if (i < c.spikes[run].size()) {
        const Json& k = c.spikes[run][i];
        line.push_back(signed_fixed(num(k, "spike"), 4) + " (" + fixed(num(k, "loss_before"), 4) + " -> " +
                       fixed(num(k, "loss_after"), 4) + ")");
      } else {
        line.push_back("-");
      }
    }
    body.push_back(line);
  }
  table(md, head, body);
}

std::string summary_cell(const cv::Summary& s) {
  if (s.n == 0) return "no common steps";
  return signed_fixed(s.mean, 3) + " (sd " + fixed(s.sd, 3) + ", " + std::to_string(s.below) + "/" +
         std::to_string(s.n) + " below 0)";
}

void convergence_paired(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  std::string b = run_named(c, "b"), cc = run_named(c, "c"), dd = run_named(c, "d");
  if (c.series.empty() || cc.empty() || !c.spikes.count(cc)) return no_rows(md, "convergence");
  const int w = c.config.value("window", 20);
  std::vector<std::vector<std::string>> body;
  for (const Json& k : c.spikes[cc]) {
    // The first step at the new size: from the series of run c.
    int64_t step = 0;
    for (const auto& e : cv::detect_resizes(c.series[cc])) {
      if (e.from_workers == k.value("from_workers", 0) && e.to_workers == k.value("to_workers", 0) &&
          std::fabs(e.epoch_progress - num(k, "epoch_progress")) < 1e-9)
        step = e.step;
    }
    std::string label = std::to_string(k.value("from_workers", 0)) + " -> " + std::to_string(k.value("to_workers", 0)) +
                        " (step " + std::to_string(step) + ")";
    auto diff = [&](const std::string& x, const std::string& y) {
      if (x.empty() || y.empty() || !c.series.count(x) || !c.series.count(y)) return std::string("not in this data set");
      return summary_cell(cv::paired_difference(c.series[x], c.series[y], step, w));
    };
    body.push_back({label, diff(cc, dd), diff(b, dd), diff(cc, b)});
  }
  // Where each run's new sizes start: the bench asks for a resize when the progress crosses the
  // point, so runs can switch a few steps apart (and then train different records for those steps).
  std::set<std::vector<int64_t>> distinct;
  md << "First step at each new size:";
  for (const auto& run : {b, cc, dd}) {
    if (run.empty() || !c.series.count(run)) continue;
    std::vector<int64_t> steps;
    for (const auto& e : cv::detect_resizes(c.series[run])) steps.push_back(e.step);
    distinct.insert(steps);
    std::string list;
    for (int64_t st : steps) list += (list.empty() ? "" : ", ") + std::to_string(st);
    md << " " << run << " " << (list.empty() ? "none" : list) << (run == dd || (dd.empty() && run == cc) ? "." : ";");
  }
  md << (distinct.size() > 1
             ? " The runs did not switch at the same steps: from the earliest switch on, a step number no longer "
               "means the same records in every run (a run that switched earlier has trained more), so the paired "
               "numbers below compare neighbouring batches, not the same ones.\n"
             : " The runs switched at the same steps: the paired numbers compare the same records.\n");
  md << "\nMean per-step training-loss difference over the W = " << w
     << " steps from (c)'s first step at each new size (the same step numbers in every run), with its standard "
        "deviation and how many steps were below zero:\n";
  table(md, {"resize", "c - d", "b - d", "c - b"}, body);
}

cv::Summary noise_of(const Conv& c, const std::string& fixed_run) {
  const int epochs = c.config.value("epochs", 0);
  return cv::spike_noise(c.series.at(fixed_run), c.config.value("window", 20), 0.3, epochs / 2.0);
}

void convergence_noise(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  std::string a = run_named(c, "a");
  if (a.empty() || !c.series.count(a)) return no_rows(md, "convergence");
  cv::Summary n = noise_of(c, a);
  const int epochs = c.config.value("epochs", 0);
  md << "Noise floor: the spike statistic at every step of `" << a << "` (no resize) between 0.3 and "
     << fixed(epochs / 2.0, 1) << " epochs, W = " << c.config.value("window", 20) << ": " << n.n << " steps, mean "
     << signed_fixed(n.mean, 4) << ", standard deviation **" << fixed(n.sd, 4) << "**.\n";
  std::vector<std::vector<std::string>> body;
  for (const auto& run : c.runs) {
    for (const Json& k : c.spikes[run]) {
      double s = num(k, "spike");
      body.push_back({run, std::to_string(k.value("from_workers", 0)) + " -> " + std::to_string(k.value("to_workers", 0)),
                      signed_fixed(s, 4), n.sd > 0 ? fixed(std::fabs(s) / n.sd, 1) : "n/a",
                      n.sd > 0 && std::fabs(s) > 2 * n.sd ? "yes" : "no"});
    }
  }
  table(md, {"run", "resize", "spike", "|spike| / noise sd", "outside 2 sd"}, body);
}

void convergence_verdict(std::ostream& md, const DataSet& d, const Plots&) {
  Conv c = conv_of(d);
  if (c.finals.empty()) return no_rows(md, "convergence");
  const double tol = c.config.value("tolerance_pts", 0.3);
  std::string b = run_named(c, "b"), cc = run_named(c, "c"), dd = run_named(c, "d");
  md << "- **Target 1** (|final accuracy - (a)'s| <= " << fixed(tol, 2) << " points):";
  std::string sep = " ";
  for (const auto& run : {b, cc, dd}) {
    if (run.empty() || !c.finals.count(run) || !c.finals[run].contains("delta_vs_fixed_pts")) continue;
    double delta = num(c.finals[run], "delta_vs_fixed_pts");
    md << sep << run << " " << signed_fixed(delta, 2) << " (" << (std::fabs(delta) <= tol ? "met" : "not met") << ")";
    sep = "; ";
  }
  md << ".\n";
  auto compare = [&](const std::string& base, const char* what) {
    if (base.empty() || cc.empty() || !c.spikes.count(base) || !c.spikes.count(cc)) return;
    md << "- **Target 2 against " << what << "** (c's spike below " << base << "'s):";
    int met = 0, n = 0;
    for (size_t i = 0; i < std::min(c.spikes[base].size(), c.spikes[cc].size()); ++i) {
      double sb = num(c.spikes[base][i], "spike"), sc = num(c.spikes[cc][i], "spike");
      md << " resize " << i + 1 << ": c " << signed_fixed(sc, 4) << " vs " << signed_fixed(sb, 4) << " ("
         << (sc < sb ? "met" : "not met") << "),";
      met += sc < sb;
      ++n;
    }
    md << " so " << met << " of " << n << " met.\n";
  };
  compare(b, "(b), LR scaling on EDL's v-form SGD");
  compare(dd, "(d), LR scaling as u-form SGD applies it");
  if (!cc.empty() && !dd.empty() && c.series.count(cc) && c.series.count(dd) && c.spikes.count(cc)) {
    const int w = c.config.value("window", 20);
    md << "- **Paired, c - d** (standard error = sd / sqrt(n); \"stands out\" = |mean| > 2 standard errors):";
    const auto events = cv::detect_resizes(c.series[cc]);
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      cv::Summary s = cv::paired_difference(c.series[cc], c.series[dd], e.step, w);
      double se = s.n > 1 ? s.sd / std::sqrt(static_cast<double>(s.n)) : std::nan("");
      md << (i ? "; after " : " after ") << e.from_workers << " -> " << e.to_workers << ": "
         << signed_fixed(s.mean, 3) << " +- " << fixed(se, 3) << " ("
         << (!std::isnan(se) && std::fabs(s.mean) > 2 * se ? "stands out" : "within noise") << ")";
    }
    md << ".\n";
  }
}

const std::map<std::string, Block>& blocks() {
  static const std::map<std::string, Block> b = {
      {"cluster_costs", cluster_costs},         {"cluster_results", cluster_results},
      {"cluster_verdict", cluster_verdict},     {"netns_links", netns_links},
      {"scaling_results", scaling_results},     {"scaling_verdict", scaling_verdict},
      {"convergence_recipe", convergence_recipe}, {"convergence_epochs", convergence_epochs},
      {"convergence_finals", convergence_finals}, {"convergence_paired", convergence_paired},
      {"convergence_noise", convergence_noise}, {"convergence_verdict", convergence_verdict},
  };
  return b;
}

}  // namespace

void write_experiments(std::ostream& md, const std::string& tmpl, const DataSet& d, const Plots& plots) {
  const std::string open = "<!-- generated:", close = " -->";
  std::istringstream in(tmpl);
  md << "<!-- Generated by experiments/benchmarks_doc from docs/experiments.md.in and docs/data/: edit those. -->\n";
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.rfind(open, 0) != 0 || line.size() < open.size() + close.size() ||
        line.compare(line.size() - close.size(), close.size(), close) != 0) {
      md << line << "\n";
      continue;
    }
    const std::string name = line.substr(open.size(), line.size() - open.size() - close.size());
    if (name.rfind("provenance:", 0) == 0) {
      md << d.provenance(name.substr(11)) << "\n";
    } else if (name.rfind("figure:", 0) == 0) {
      std::string fig = name.substr(7);
      if (std::find(plots.names().begin(), plots.names().end(), fig) == plots.names().end()) {
        md << "_(figure `" << fig << "`: not in this data set)_\n";
      } else {
        std::string l = plots.link(fig, plots.caption(fig));
        md << l.substr(1, l.size() - 2);  // without the surrounding blank lines
      }
    } else if (blocks().count(name)) {
      std::ostringstream b;
      blocks().at(name)(b, d, plots);
      std::string s = b.str();
      while (!s.empty() && s.front() == '\n') s.erase(0, 1);  // the template places the blank lines
      while (s.size() > 1 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') s.pop_back();
      md << s;
      if (!s.empty() && s.back() != '\n') md << "\n";
    } else {
      throw std::runtime_error("experiments template line " + std::to_string(n) + ": unknown block '" + name + "'");
    }
  }
}

}  // namespace edl::docs
