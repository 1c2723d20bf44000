// benchmarks_doc: turns the JSON rows of every bench (written by scripts/run-benchmarks.sh into one
// directory as <bench>.jsonl) into docs/benchmarks.md, with the seeds' published numbers beside
// ours, and writes one gnuplot script per figure (the script runs gnuplot on them).
//
//   benchmarks_doc --in OUT --doc docs/benchmarks.md --img-dir docs/img --plot-dir OUT/plots
//
// OUT/status.tsv (from the script): "<bench>\t<ran|skipped|failed>\t<note>\t<command>" per bench.
// Needs nothing but the C++ standard library and nlohmann_json (no python, no jq).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

namespace {

using Json = nlohmann::json;
using Rows = std::vector<Json>;
namespace fs = std::filesystem;

struct Ctx {
  std::string in, img_dir, plot_dir, img_rel;  // img_rel: image path as seen from the doc
  std::ostringstream md;
  std::vector<std::string> plots;  // written .gp files
};

Rows load(const std::string& path) {
  Rows rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      Json j = Json::parse(line);
      if (j.is_object()) rows.push_back(std::move(j));
    } catch (const std::exception&) {
      std::cerr << "benchmarks_doc: " << path << ": skipping a line that is not JSON\n";
    }
  }
  return rows;
}

std::string cell(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::fabs(d) < 1e-9) d = 0;
    char buf[32];
    if (d != 0 && (std::fabs(d) >= 1e6 || std::fabs(d) < 1e-3)) {
      std::snprintf(buf, sizeof buf, "%.3g", d);
    } else {
      std::snprintf(buf, sizeof buf, std::fabs(d) >= 100 ? "%.1f" : "%.3f", d);
    }
    return buf;
  }
  return v.dump();
}

// Markdown table of `rows` with the union of their keys (first-seen order) or `cols` if given.
void table(Ctx& c, const Rows& rows, std::vector<std::string> cols = {}, size_t max_rows = 300) {
  if (cols.empty()) {
    std::set<std::string> seen;
    for (const Json& r : rows) {
      for (auto it = r.begin(); it != r.end(); ++it) {
        if (seen.insert(it.key()).second) cols.push_back(it.key());
      }
    }
  }
  if (rows.empty() || cols.empty()) return;
  c.md << "\n|";
  for (const auto& k : cols) c.md << ' ' << k << " |";
  c.md << "\n|";
  for (size_t i = 0; i < cols.size(); ++i) c.md << "---|";
  c.md << "\n";
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    c.md << "|";
    for (const auto& k : cols) c.md << ' ' << (rows[i].contains(k) ? cell(rows[i][k]) : "") << " |";
    c.md << "\n";
  }
  if (rows.size() > max_rows) c.md << "\n(" << rows.size() - max_rows << " more rows in the JSON file)\n";
  c.md << "\n";
}

Rows where(const Rows& rows, const std::string& key) {
  Rows out;
  for (const Json& r : rows) {
    if (r.contains(key)) out.push_back(r);
  }
  return out;
}

// Writes a gnuplot script producing <img_dir>/<name>.png and links the image from the doc.
void plot(Ctx& c, const std::string& name, const std::string& body, const std::string& caption, int w = 900,
          int h = 480) {
  fs::create_directories(c.plot_dir);
  std::string gp = c.plot_dir + "/" + name + ".gp";
  std::ofstream f(gp);
  f << "set terminal pngcairo size " << w << "," << h << " font 'sans,10' noenhanced\n"
    << "set output '" << fs::absolute(c.img_dir).string() << "/" << name << ".png'\n"
    << "set grid\nset key outside right top\n"
    << body << "\n";
  c.plots.push_back(gp);
  c.md << "\n![" << caption << "](" << c.img_rel << "/" << name << ".png)\n\n";
}

std::string datablock(const std::string& name, const std::vector<std::pair<double, double>>& xy) {
  std::ostringstream s;
  s << "$" << name << " << EOD\n";
  for (const auto& [x, y] : xy) s << x << ' ' << y << "\n";
  s << "EOD\n";
  return s.str();
}

std::string id(std::string s) {
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

// --- per-bench sections ---------------------------------------------------------------------------

void scaling_section(Ctx& c, const Rows& rows) {
  c.md << "Seeds (FTlib benchmark, CPU cluster, 4 CPUs per worker, batch 64): ResNet50 26.7 img/s at 1 worker, "
          "1.57x at 2 (communication 18%), 2.56x at 4, 4.61x at 8; MobileNetV2 353.6 img/s, 1.42x at 2 (24%), "
          "1.92x at 4, 1.83x at 8. Targets (loopback, 1 thread per worker): ResNet20 >= 1.85x and MobileNetV2 "
          ">= 1.8x at 2 workers.\n\n"
          "Rows with link `independent` are the machine's ceiling: k single-worker processes side by side with no "
          "communication at all. `efficiency` = speed-up / the independent speed-up of the same k: what EDL keeps of "
          "what the machine allows.\n";
  table(c, rows, {"model", "workers", "link", "effective_link", "images_per_s", "speedup", "efficiency", "comm_share",
                  "step_ms", "oversubscribed"});
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const Json& r : rows) {
    series[r.value("model", "?") + " " + r.value("link", "?")].push_back(
        {r.value("workers", 0.0), r.value("speedup", 0.0)});
  }
  std::string body, cmd = "plot ";
  int i = 0;
  for (auto& [k, xy] : series) {
    std::sort(xy.begin(), xy.end());
    body += datablock("s" + std::to_string(i), xy);
    cmd += "$s" + std::to_string(i) + " with linespoints title '" + k + "', ";
    ++i;
  }
  body += datablock("r50", {{1, 1}, {2, 1.57}, {4, 2.56}, {8, 4.61}});
  body += datablock("mnv2", {{1, 1}, {2, 1.42}, {4, 1.92}, {8, 1.83}});
  cmd += "$r50 with linespoints dt 2 title 'seed: ResNet50 CPU cluster', $mnv2 with linespoints dt 2 title "
         "'seed: MobileNetV2 CPU cluster', x with lines lc 'gray' title 'linear'";
  plot(c, "scaling_speedup",
       "set xlabel 'workers'\nset ylabel 'speed-up over 1 worker'\nset xrange [1:8]\nset yrange [0:*]\n" + body +
           cmd,
       "speed-up vs workers");
}

void elastic_section(Ctx& c, const Rows& rows) {
  Rows events, rdv;
  for (const Json& r : rows) (r.value("event", "") == "rerendezvous" ? rdv : events).push_back(r);
  c.md << "Targets: kill 3->2 recovery p50 <= 1000 ms; join <= 2000 ms; re-rendezvous at 16 ranks <= 500 ms. "
          "Published: Horovod elastic re-rendezvous 0.4 s @2, 1.2 s @4, 7.1 s @8, 15.8 s @16 ranks "
          "(horovod #3556); FTlib > 30 s (elasticdl #2192).\n";
  table(c, events, {"event", "ranks_before", "ranks_after", "recovery_ms", "lost_steps"});
  table(c, rdv, {"event", "ranks", "time_ms"});
  std::vector<std::pair<double, double>> ours;
  for (const Json& r : rdv) ours.push_back({r.value("ranks", 0.0), r.value("time_ms", 0.0)});
  std::sort(ours.begin(), ours.end());
  if (ours.empty()) return;
  plot(c, "elastic_rerendezvous",
       "set logscale y\nset xlabel 'ranks'\nset ylabel 'ms'\n" + datablock("edl", ours) +
           datablock("hvd", {{2, 400}, {4, 1200}, {8, 7100}, {16, 15800}}) +
           "plot $edl with linespoints title 'EDL re-rendezvous', $hvd with linespoints dt 2 title 'Horovod (#3556)'",
       "re-rendezvous time vs ranks");
}

// chaos_bench rows: the summaries (trials, MTBF), then only the trials / runs that failed.
void chaos_section(Ctx& c, const Rows& rows) {
  Rows summary, failed, pairs;
  for (const Json& r : rows) {
    bool is_summary = (r.contains("trial") && r["trial"] == "summary") || (r.contains("pair") && r["pair"] == "summary");
    if (is_summary) summary.push_back(r);
    else if (r.value("mode", "") == "mtbf") pairs.push_back(r);
    else if (r.contains("ok") && r["ok"] == false) failed.push_back(r);
  }
  c.md << "Targets: 100/100 trials ok; recovery p99 <= 1000 ms; goodput >= 0.97 at MTBF 10 s and >= 0.98 at "
          "MTBF 30 s (3 workers, median of 3 paired runs).\n";
  Rows trials_summary, mtbf_summary;
  for (const Json& r : summary) (r.contains("pair") ? mtbf_summary : trials_summary).push_back(r);
  table(c, trials_summary, {"trials", "ok", "kills", "recovery_p50_ms", "recovery_p99_ms", "recovery_max_ms", "store",
                            "ok_by_kind"});
  table(c, pairs, {"pair", "mtbf_s", "workers", "clean_steps_per_s", "faulty_steps_per_s", "goodput", "goodput_records", "kills", "ok"});
  table(c, mtbf_summary, {"mtbf_s", "workers", "pairs", "goodput_median", "goodput_records_median", "ok"});
  if (!failed.empty()) {
    c.md << "Failed trials:\n";
    table(c, failed, {"trial", "seed", "faults", "wall_s", "exit_status", "error"});
  }
}

void cluster_section(Ctx& c, const Rows& rows) {
  c.md << "Published (seed 000/001), Experiment 1: gang — job 1 ends 465 s, job 2 starts 518 s (53 s master-pod "
          "launch) and ends 968 s, utilisation 66.6%; elastic — job 2 starts at once on 2 GPUs, grows to 4 when "
          "job 1 ends (474 s), ends 809 s, ~100% utilisation. Experiment 2: the training job's GPUs follow the "
          "serving job's; ~100% utilisation except while reacting. Model and calibration: docs/experiments.md.\n";
  Rows jobs = where(rows, "job"), util = where(rows, "utilization"), costs = where(rows, "speedup");
  table(c, jobs, {"experiment", "costs", "policy", "job", "submit_s", "start_s", "end_s", "resizes", "restarts"});
  table(c, util, {"experiment", "costs", "policy", "makespan_s", "utilization", "contended_utilization"});
  c.md << "Cost sets (speed-up at k workers, stall when shrinking to / growing to k, seconds):\n";
  Rows flat;
  for (const Json& r : costs) {
    for (int k = 1; k <= 6; ++k) {
      std::string ks = std::to_string(k);
      Json f{{"costs", r.value("costs", "")}, {"k", k}, {"speedup", r["speedup"].value(ks, 0.0)}};
      if (r["pause_shrink_s"].contains(ks)) f["shrink_s"] = r["pause_shrink_s"][ks];
      if (r["pause_grow_s"].contains(ks)) f["grow_s"] = r["pause_grow_s"][ks];
      flat.push_back(f);
    }
  }
  table(c, flat, {"costs", "k", "speedup", "shrink_s", "grow_s"});
  std::string series = c.in + "/series";
  std::set<std::pair<std::string, std::string>> figs;  // (experiment, costs)
  for (const Json& r : util) figs.insert({r.value("experiment", ""), r.value("costs", "")});
  for (const auto& [e, cs] : figs) {
    std::string g = fs::absolute(series + "/exp" + e + "_" + cs + "_gang.dat").string();
    std::string el = fs::absolute(series + "/exp" + e + "_" + cs + "_elastic.dat").string();
    if (!fs::exists(g) || !fs::exists(el)) continue;
    std::ifstream head(g);
    std::string cols, gpus_line;
    std::getline(head, cols);
    std::getline(head, gpus_line);  // "# gpus N"
    int gpus = 8;
    std::sscanf(gpus_line.c_str(), "# gpus %d", &gpus);
    std::istringstream cs_in(cols.substr(1));
    std::vector<std::string> names;
    for (std::string w; cs_in >> w;) names.push_back(w);
    double xmax = 0;
    for (const Json& r : util) {
      if (r.value("experiment", "") == e && r.value("costs", "") == cs) xmax = std::max(xmax, r.value("makespan_s", 0.0));
    }
    std::ostringstream b;
    if (xmax > 0) b << "set xrange [0:" << xmax * 1.02 << "]\n";
    b << "set multiplot layout 2,1\nset xlabel 'time (s)'\nset ylabel 'GPUs'\nset yrange [0:" << gpus + 1
      << "]\nset ytics 1\n";
    for (const auto& [title, file] : {std::pair<std::string, std::string>{"gang", g}, {"elastic", el}}) {
      b << "set title 'Experiment " << e << ", " << title << " scheduling (" << cs << " costs)'\nplot ";
      // Busy GPUs first (underneath), then each job and the serving job.
      std::vector<std::string> curves;
      curves.push_back("'" + file + "' using 1:" + std::to_string(names.size() - 1) +
                       " with steps lw 6 lc rgb '#cccccc' title 'busy GPUs (of " + std::to_string(gpus) + ")'");
      for (size_t k = 1; k + 2 < names.size(); ++k) {  // job columns, then serving
        if (names[k] == "serving" && e == "1") continue;   // Experiment 1 has no serving job
        curves.push_back("'" + file + "' using 1:" + std::to_string(k + 1) + " with steps lw 2 title '" + names[k] + "'");
      }
      for (size_t k = 0; k < curves.size(); ++k) b << (k ? ", " : "") << curves[k];
      b << "\n";
    }
    b << "unset multiplot";
    plot(c, "cluster_exp" + e + "_" + cs, b.str(), "Experiment " + e + " (" + cs + " costs): GPUs over time", 900,
         640);
  }
}

void allreduce_section(Ctx& c, const Rows& rows) {
  table(c, rows, {"impl", "ranks", "bytes", "count", "iters", "time_us", "algbw_gbps", "busbw_gbps", "wrong"});
  std::map<std::string, std::vector<std::pair<double, double>>> bw;
  for (const Json& r : rows) {
    if (r.contains("bytes") && r.contains("busbw_gbps")) {
      bw[r.value("impl", "?") + " n=" + std::to_string(r.value("ranks", 0))].push_back(
          {r.value("bytes", 0.0), r.value("busbw_gbps", 0.0)});
    }
  }
  if (bw.empty()) return;
  std::string body, cmd = "plot ";
  int i = 0;
  for (auto& [k, xy] : bw) {
    std::sort(xy.begin(), xy.end());
    body += datablock("a" + std::to_string(i), xy);
    cmd += std::string(i ? ", " : "") + "$a" + std::to_string(i) + " with linespoints title '" + k + "'";
    ++i;
  }
  plot(c, "allreduce_busbw",
       "set logscale x 2\nset xlabel 'bytes'\nset ylabel 'busbw (GB/s)'\nset format x '%.0b%BB'\n" + body + cmd,
       "allreduce bus bandwidth vs message size");
}

// Experiment 3 (experiments/convergence_exp.cc): final accuracies, loss spikes per resize, and one plot each
// of the per-epoch test accuracy and training loss with every run's curve. Unknown rows are skipped.
void convergence_section(Ctx& c, const Rows& rows) {
  c.md << "Target: (b) and (c) end within 0.3 points of (a); (c)'s loss spike after each resize smaller than (b)'s "
          "(spike = mean training loss of the W steps after the worker count changed minus the W steps before). "
          "(d), where present, is LR scaling as u-form SGD (PyTorch's) applies it: the whole momentum history at "
          "the new LR at once (eq. 5); docs/experiments.md compares (c) with both (b) and (d).\n";
  Rows finals, resizes;
  std::map<std::string, std::vector<std::pair<double, double>>> acc, loss;
  for (const Json& r : rows) {
    if (!r.contains("run")) continue;
    const std::string run = r.value("run", "?");
    if (r.contains("final_test_acc")) {
      Json f = r;
      f["final_test_acc_pct"] = 100.0 * r.value("final_test_acc", 0.0);
      finals.push_back(f);
    } else if (r.contains("spike") && r.contains("resize")) {
      resizes.push_back(r);
    } else if (r.contains("epoch") && r.contains("test_acc") && r.contains("train_loss")) {
      if (r.value("test_acc", -1.0) >= 0) acc[run].push_back({r.value("epoch", 0.0), r.value("test_acc", 0.0)});
      loss[run].push_back({r.value("epoch", 0.0), r.value("train_loss", 0.0)});
    }
  }
  if (!finals.empty()) {
    c.md << "\nFinal test accuracy (delta in percentage points against the fixed run):\n";
    table(c, finals, {"run", "final_test_acc_pct", "delta_vs_fixed_pts"});
  }
  if (!resizes.empty()) {
    c.md << "Loss spikes per resize:\n";
    table(c, resizes, {"run", "resize", "from_workers", "to_workers", "epoch_progress", "loss_before", "loss_after",
                       "spike"});
  }
  auto curves = [&](const std::map<std::string, std::vector<std::pair<double, double>>>& series, const std::string& name,
                    const std::string& ylabel, const std::string& caption) {
    if (series.empty()) return;
    std::string body, cmd = "plot ";
    for (auto [k, xy] : series) {
      std::sort(xy.begin(), xy.end());
      body += datablock(id(name + "_" + k), xy);
      cmd += "$" + id(name + "_" + k) + " with linespoints title '" + k + "', ";
    }
    cmd.resize(cmd.size() - 2);
    plot(c, name, "set xlabel 'epoch'\nset ylabel '" + ylabel + "'\n" + body + cmd, caption);
  };
  curves(acc, "convergence_acc", "test accuracy", "test accuracy per epoch, all runs");
  curves(loss, "convergence_loss", "training loss (epoch mean)", "training loss per epoch, all runs");
}

void controlplane_section(Ctx& c, const Rows& rows) {
  table(c, rows, {"scenario", "store", "hosts", "pause_ms", "lost_steps", "split_brain_steps", "exit_s", "ok"});
  c.md << "pause_ms and exit_s: medians of the runs (empty: no run had one); lost_steps and split_brain_steps: "
          "the most of any run; ok: every run passed its checks.\n";
}

struct BenchInfo {
  std::string name, title, anchors;
  void (*special)(Ctx&, const Rows&) = nullptr;
};

const std::vector<BenchInfo>& benches() {
  static const std::vector<BenchInfo> b = {
      {"allreduce_bench", "Allreduce (float32 sum, loopback)",
       "Anchors on a machine like this (n=2, quiet): Gloo ring 4 KiB 59 us, 1 MiB busbw 1.6 GB/s, 16 MiB 1.40, "
       "90 MiB 1.36; gloo::allreduce 90 MiB 2.18 GB/s; OpenMPI TCP 90 MiB 1.27 GB/s. busbw = algbw * 2(n-1)/n.",
       allreduce_section},
      {"fusion_bench", "Tensor fusion (whole gradient sets)",
       "Anchors: ResNet50 214 tensors at n=2: per-tensor 79 ms vs fused 79 ms (naive fusion); MobileNetV2 158 "
       "tensors: per-tensor 17.7 ms vs fused 5.5 ms at n=2 (121 vs 15 ms at n=4).",
       nullptr},
      {"model_bench", "Reference models (training throughput, batch 64)",
       "libtorch 1.13.1 on this machine: ResNet20 train 227 img/s (1 thread) / 378 (2); MobileNetV2 28 / 41; "
       "ResNet20 on 28x28x1 399 (1 thread).",
       nullptr},
      {"reader_bench", "Data layer", "Target: >= 20,000 images/s on Fashion-MNIST, batch 64, one core.", nullptr},
      {"optimizer_bench", "Distributed optimizer overlap",
       "Target at 2 ranks: overlap step_ms <= 0.8x no_overlap, overlap_fraction >= 0.6.", nullptr},
      {"elastic_bench", "Elastic recovery and re-rendezvous", "", elastic_section},
      {"shard_audit", "Exactly-once shard audit", "Every epoch must have trained_once = records.", nullptr},
      {"chaos_bench", "Chaos trials (random fault schedules under edl-run)", "", chaos_section},
      {"chaos_mtbf", "Goodput under random kills (chaos_bench --mtbf-s)", "", chaos_section},
      {"controlplane_bench", "Control-plane faults on emulated hosts",
       "Targets (medians of 5 runs): etcd leader kill pause <= 3000 ms with 0 lost steps; host crash pause <= "
       "lease (3000 ms) + 1000 ms; partition: minority exit_s <= 10 s, split_brain_steps 0; Redis restart ok. "
       "Scenarios step by step: docs/multihost.md.",
       controlplane_section},
      {"netns_check", "Emulated links (netns + tc)",
       "What the emulated links really carry between two namespaces (TCP throughput, round trip).", nullptr},
      {"scaling_bench", "Scaling (FTlib benchmark reproduction)", "", scaling_section},
      {"cluster_sim", "Cluster scheduling (Experiments 1 and 2)", "", cluster_section},
      {"convergence", "Convergence under a changing worker count (Experiment 3)", "", convergence_section},
  };
  return b;
}

std::map<std::string, std::vector<std::string>> load_status(const std::string& path) {
  std::map<std::string, std::vector<std::string>> st;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> parts;
    std::stringstream ss(line);
    std::string p;
    while (std::getline(ss, p, '\t')) parts.push_back(p);
    if (parts.size() >= 2) st[parts[0]] = parts;
  }
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("benchmarks_doc", "Write docs/benchmarks.md and gnuplot scripts from bench JSON rows");
  opts.add_options()("in", "directory with <bench>.jsonl and status.tsv", cxxopts::value<std::string>())(
      "doc", "markdown to write", cxxopts::value<std::string>()->default_value("docs/benchmarks.md"))(
      "img-dir", "where the PNGs go", cxxopts::value<std::string>()->default_value("docs/img"))(
      "plot-dir", "where the gnuplot scripts go", cxxopts::value<std::string>()->default_value(""))(
      "header", "text file placed under the title (machine, commit)", cxxopts::value<std::string>()->default_value(""))(
      "h,help", "help");
  try {
    auto a = opts.parse(argc, argv);
    if (a.count("help") || !a.count("in")) {
      std::cout << opts.help() << std::endl;
      return a.count("help") ? 0 : 2;
    }
    Ctx c;
    c.in = a["in"].as<std::string>();
    c.img_dir = a["img-dir"].as<std::string>();
    c.plot_dir = a["plot-dir"].as<std::string>().empty() ? c.in + "/plots" : a["plot-dir"].as<std::string>();
    std::string doc = a["doc"].as<std::string>();
    c.img_rel = fs::relative(fs::absolute(c.img_dir), fs::absolute(doc).parent_path()).string();
    fs::create_directories(c.img_dir);
    auto status = load_status(c.in + "/status.tsv");
    c.md << "# EDL benchmarks\n\nGenerated by `scripts/run-benchmarks.sh` (experiments/benchmarks_doc.cc) from the JSON "
            "rows of every bench; rerun it to refresh. Seeds' published numbers are quoted beside ours.\n\n";
    if (!a["header"].as<std::string>().empty()) {
      std::ifstream h(a["header"].as<std::string>());
      c.md << h.rdbuf() << "\n";
    }
    for (const BenchInfo& b : benches()) {
      c.md << "\n## " << b.title << " (`" << b.name << "`)\n\n";
      auto st = status.find(b.name);
      if (st != status.end() && st->second.size() >= 4) {
        c.md << "Command: `" << st->second[3] << "`";
        if (st->second[1] == "ran") c.md << " (ran " << st->second[2] << ")";
        c.md << "\n\n";
      }
      Rows rows = load(c.in + "/" + b.name + ".jsonl");
      if (rows.empty()) {
        std::string why = st == status.end() ? "not run" : st->second[1] + (st->second.size() > 2 ? ": " + st->second[2] : "");
        c.md << "_No results: " << why << "._\n";
        continue;
      }
      if (st != status.end() && st->second[1] == "failed") c.md << "**The bench failed: " << st->second[2] << ".**\n\n";
      if (!b.anchors.empty()) c.md << b.anchors << "\n";
      if (b.special) {
        b.special(c, rows);
      } else {
        table(c, rows);
      }
    }
    fs::create_directories(fs::absolute(doc).parent_path());
    std::ofstream(doc) << c.md.str();
    fs::create_directories(c.plot_dir);
    std::ofstream plots(c.plot_dir + "/plots.txt");
    for (const auto& p : c.plots) plots << p << "\n";
    std::cout << "wrote " << doc << " and " << c.plots.size() << " gnuplot scripts in " << c.plot_dir << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmarks_doc: %s\n", e.what());
    return 2;
  }
  return 0;
}
