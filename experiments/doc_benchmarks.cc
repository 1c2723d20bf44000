// docs/benchmarks.md: one section per bench (see doc_benchmarks.h).
#include "doc_benchmarks.h"
#include "doc_chaos.h"
#include "doc_gpu.h"
#include "doc_scale.h"
#include "doc_modes.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace edl::docs {

namespace fs = std::filesystem;

namespace {

// Reference figures measured elsewhere: the performance anchors handed to the project (not in this
// repository's runs). Quoted with where they come from, never as "this machine".
constexpr const char* kAnchors =
    "the project's performance anchors (a quiet 2-vCPU AMD EPYC Zen 4 guest, Debian 12 packages; measured "
    "before this repository existed, not in this run and not on this machine)";

// Issue 16's targets from the allreduce_bench suite rows (bench/allreduce_launch.h): per repetition
// a ratio, then the median over repetitions and their range. Rows of one repetition and config were
// measured side by side (interleaved iterations in the same processes), so ratios cancel the load.
void allreduce_targets(std::ostream& md, const Rows& rows) {
  // value(impl, ranks, hosts, bytes, repeat, field); NaN when absent.
  auto value = [&](const std::string& impl, int ranks, int hosts, double bytes, int rep, const char* f) {
    for (const Json& r : rows)
      if (r.value("impl", "") == impl && r.value("ranks", 0) == ranks && r.value("hosts", 1) == hosts &&
          num(r, "bytes") == bytes && r.value("repeat", 0) == rep && r.contains(f))
        return num(r, f);
    return std::nan("");
  };
  std::set<int> reps;
  std::set<double> sizes;
  for (const Json& r : rows) {
    reps.insert(r.value("repeat", 0));
    if (r.value("hosts", 1) == 1) sizes.insert(num(r, "bytes"));
  }
  auto summary = [](std::vector<double> v) { return median_range(std::move(v), 2, "runs"); };
  // Median over 1-64 MiB of a field per repetition, as a ratio of two implementations.
  auto busbw_ratio = [&](const std::string& a, const std::string& b, int n) {
    std::vector<double> out;
    for (int k : reps) {
      std::vector<double> va, vb;
      for (double s : sizes)
        if (s >= (1 << 20) && s <= (64 << 20)) va.push_back(value(a, n, 1, s, k, "busbw_gbps")), vb.push_back(value(b, n, 1, s, k, "busbw_gbps"));
      out.push_back(median(va) / median(vb));
    }
    return out;
  };
  std::vector<std::vector<std::string>> body;
  for (int n : {2, 4}) {
    const std::string ns = std::to_string(n);
    body.push_back({"edl_shm / mpi_shm busbw, median over 1-64 MiB", ns, ">= 1.0", summary(busbw_ratio("edl_shm", "mpi_shm", n))});
    std::vector<double> lat;
    for (int k : reps) lat.push_back(value("edl_shm", n, 1, 4096, k, "time_us") / value("mpi_shm", n, 1, 4096, k, "time_us"));
    body.push_back({"edl_shm / mpi_shm time at 4 KiB", ns, "<= 1.5", summary(lat)});
    // edl_tcp vs mpi_tcp at every size: the worst size's median ratio.
    double worst = std::nan(""), worst_size = 0;
    std::vector<double> at_worst;
    for (double s : sizes) {
      std::vector<double> v;
      for (int k : reps) v.push_back(value("edl_tcp", n, 1, s, k, "busbw_gbps") / value("mpi_tcp", n, 1, s, k, "busbw_gbps"));
      std::vector<double> clean;
      for (double x : v)
        if (!std::isnan(x)) clean.push_back(x);
      if (clean.empty()) continue;
      if (std::isnan(worst) || median(clean) < worst) worst = median(clean), worst_size = s, at_worst = clean;
    }
    body.push_back({"edl_tcp / mpi_tcp busbw, the worst size" +
                        (std::isnan(worst) ? std::string() : " (" + std::to_string(static_cast<long long>(worst_size)) + " B)"),
                    ns, ">= 1.0 at every size", summary(at_worst)});
  }
  std::vector<double> hier;
  for (int k : reps) hier.push_back(value("edl_tcp", 4, 2, 16 << 20, k, "time_us") / value("edl_hier", 4, 2, 16 << 20, k, "time_us"));
  body.push_back({"edl_hier speed-up over the flat edl_tcp at 16 MiB, 2 emulated hosts x 2 ranks, 1 Gbit/s", "4", ">= 1.3",
                  summary(hier)});
  md << "\nIssue 16's targets (ratios of rows measured side by side in the same processes; median over "
        "the suite's repetitions, range and number of runs in parentheses):\n\n";
  table(md, {"comparison", "ranks", "target", "measured"}, body);
  md << "\n";
}

void allreduce_section(std::ostream& md, const DataSet& d, Plots& plots) {
  const Rows& rows = d.of("allreduce_bench");
  md << "Reference figures from " << kAnchors << ", n=2: Gloo ring 4 KiB 59 us, 1 MiB busbw 1.6 GB/s, 16 MiB "
     << "1.40, 90 MiB 1.36; gloo::allreduce 90 MiB 2.18 GB/s; Open MPI TCP 90 MiB 1.27 GB/s. "
     << "busbw = algbw * 2(n-1)/n. Rows from `allreduce_bench --suite` (bench/allreduce_launch.h): "
     << "`edl_shm` beside Open MPI's vader BTL (`mpi_shm`) and `edl_tcp` beside its tcp BTL (`mpi_tcp`) in "
     << "the same mpirun processes, then `edl_hier` beside the flat `edl_tcp` on 2 emulated hosts (`hosts` = 2, "
     << "network namespaces, `link`); `repeat` numbers the suite's repetitions.\n";
  if (rows.empty()) return;
  allreduce_targets(md, rows);
  table(md, rows, {"impl", "ranks", "hosts", "link", "repeat", "bytes", "iters", "time_us", "algbw_gbps", "busbw_gbps", "wrong"});
  std::map<std::string, Series> bw;
  for (const Json& r : rows) {
    if (r.contains("bytes") && r.contains("busbw_gbps") && r.value("repeat", 0) == 0) {
      bw[r.value("impl", "?") + " n=" + std::to_string(r.value("ranks", 0)) +
         (r.value("hosts", 1) > 1 ? " hosts=" + std::to_string(r.value("hosts", 1)) : "")]
          .push_back({num(r, "bytes"), num(r, "busbw_gbps")});
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
  md << plots.add("allreduce_busbw",
                  "set logscale x 2\nset xlabel 'bytes'\nset ylabel 'busbw (GB/s)'\nset format x '%.0b%BB'\n" + body + cmd,
                  "allreduce bus bandwidth vs message size (repetition 0)");
}

// The smallest message of an allreduce_bench implementation at n ranks: its per-call latency (us).
double small_latency_us(const DataSet& d, const std::string& impl, int ranks, double* bytes) {
  double best_bytes = 0, us = std::nan("");
  for (const Json& r : d.of("allreduce_bench")) {
    if (r.value("impl", "") != impl || r.value("ranks", 0) != ranks || !r.contains("bytes")) continue;
    if (std::isnan(us) || num(r, "bytes") < best_bytes) {
      best_bytes = num(r, "bytes");
      us = num(r, "time_us");
    }
  }
  if (bytes) *bytes = best_bytes;
  return us;
}

void fusion_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("fusion_bench");
  md << "Target (restated): the engine's per-request overhead, `fused - fused_direct` (the same fused allreduce "
        "through the background engine minus on a communicator of the bench's own), and the unfused per-tensor "
        "cost against Gloo's per-call cost (its smallest-message latency in `allreduce_bench` of this data set). "
        "Reference figures from "
     << kAnchors
     << ": ResNet50 (214 tensors, n=2) per-tensor 79 ms vs naively fused 79 ms; MobileNetV2 (158 tensors) "
        "per-tensor 17.7 ms vs fused 5.5 ms at n=2.\n";
  table(md, rows, {"model", "ranks", "mode", "tensors", "floats", "time_ms", "wrong"});
  std::map<std::pair<std::string, int>, std::map<std::string, double>> by;
  std::map<std::pair<std::string, int>, double> tensors;
  for (const Json& r : rows) {
    auto key = std::make_pair(r.value("model", "?"), r.value("ranks", 0));
    by[key][r.value("mode", "?")] = num(r, "time_ms");
    if (r.value("mode", "") == "fused") tensors[key] = num(r, "tensors");
  }
  std::vector<std::vector<std::string>> body;
  for (auto& [key, m] : by) {
    if (!m.count("fused") || !m.count("fused_direct") || !m.count("unfused") || !tensors[key]) continue;
    const double n = tensors[key];
    double gloo_bytes = 0, edl_bytes = 0;
    double gloo = small_latency_us(d, "gloo_ring", key.second, &gloo_bytes);
    double edl = small_latency_us(d, "edl", key.second, &edl_bytes);
    if (std::isnan(edl)) edl = small_latency_us(d, "edl_shm", key.second, &edl_bytes);  // the suite's one-host rows
    body.push_back({key.first, std::to_string(key.second), fixed(n, 0), fixed(m["fused"] - m["fused_direct"], 2),
                    fixed(1000 * (m["fused"] - m["fused_direct"]) / n, 1), fixed(1000 * m["unfused"] / n, 1),
                    m.count("unfused_direct") ? fixed(1000 * m["unfused_direct"] / n, 1) : "",
                    std::isnan(edl) ? "not in this data set" : fixed(edl, 1) + " (" + fixed(edl_bytes, 0) + " B)",
                    std::isnan(gloo) ? "not in this data set" : fixed(gloo, 1) + " (" + fixed(gloo_bytes, 0) + " B)"});
  }
  if (body.empty()) return;
  md << "\nPer-request overhead and per-tensor cost (derived from the rows above; the last two columns from "
        "`allreduce_bench` rows of this data set):\n";
  table(md, {"model", "ranks", "tensors", "fused - fused_direct (ms)", "per request (us)", "unfused per tensor (us)",
             "unfused_direct per tensor (us)", "EDL allreduce, smallest message (us)", "Gloo ring, smallest message (us)"},
        body);
}

void model_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("model_bench");
  bool torch = !matching(rows, "impl", "libtorch").empty();
  md << "Reference figures: libtorch 1.13.1 with oneDNN from " << kAnchors
     << ", training at batch 64: ResNet20 3x32x32 ~250 img/s (1 thread) / ~530 (2); MobileNetV2-CIFAR ~31 / ~60; "
        "ResNet20 1x28x28 ~390 / ~720. "
     << (torch ? "The `libtorch` rows below are libtorch measured in this run (model_bench built with "
                 "`-DEDL_BENCH_WITH_LIBTORCH=ON`)."
               : "This run has no libtorch rows (model_bench built without `-DEDL_BENCH_WITH_LIBTORCH=ON`).")
     << "\n";
  table(md, rows, {"model", "impl", "mode", "threads", "images_per_s"});
}

void optimizer_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("optimizer_bench");
  md << "Target (restated): against the perfect-overlap bound, per link: exposed share = (overlap - compute_only) "
        "/ (no_overlap - compute_only): 0 = the allreduce is hidden completely behind backward, 1 = nothing is "
        "hidden; a value outside 0..1 (or no_overlap not slower than compute_only) means the machine's noise in this run "
        "was larger than the communication time. `overlap_fraction` is the bench's own measure of the hidden share of "
        "the allreduce time.\n";
  table(md, rows, {"link", "ranks", "mode", "step_ms", "overlap_fraction"});
  std::vector<std::string> links;
  std::map<std::string, std::map<std::string, double>> by;
  for (const Json& r : rows) {
    std::string l = r.value("link", "?");
    if (std::find(links.begin(), links.end(), l) == links.end()) links.push_back(l);
    if (r.contains("mode")) by[l][r.value("mode", "")] = num(r, "step_ms");
    if (r.contains("overlap_fraction")) by[l]["fraction"] = num(r, "overlap_fraction");
  }
  std::vector<std::vector<std::string>> body;
  for (const auto& l : links) {
    auto& m = by[l];
    if (!m.count("compute_only") || !m.count("no_overlap") || !m.count("overlap")) continue;
    double comm = m["no_overlap"] - m["compute_only"];
    body.push_back({l, fixed(m["compute_only"], 1), fixed(m["no_overlap"], 1), fixed(m["overlap"], 1),
                    fixed(comm, 1), fixed(m["overlap"] - m["compute_only"], 1),
                    comm > 0 ? fixed((m["overlap"] - m["compute_only"]) / comm, 2) : "n/a (no_overlap <= compute_only)",
                    m.count("fraction") ? fixed(m["fraction"], 2) : ""});
  }
  table(md, {"link", "compute_only ms", "no_overlap ms", "overlap ms", "no_overlap - compute_only", "overlap - compute_only",
             "exposed share", "overlap_fraction"},
        body);
}

void timeline_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("timeline_bench");
  md << "Target: the timeline (`EDL_TIMELINE`, docs/observability.md) costs a ResNet20 training step at most 2%. "
        "Workload: ResNet20 (batch 32 per rank, one compute thread) on 2 thread-ranks, every gradient an asynchronous "
        "allreduce through the collective engine (per-tensor negotiation and fusion: the heaviest use of the "
        "timeline). On and off alternate in short blocks within one run; `step_ms` is the median of rank 0's timed steps, "
        "`block_min_ms` / `block_max_ms` the spread of the per-block medians, `wrong` counts summed gradients that "
        "were not ranks x their own value.\n";
  table(md, having(rows, "timeline"),
        {"timeline", "ranks", "batch", "step_ms", "p10_ms", "p90_ms", "block_min_ms", "block_max_ms", "blocks",
         "steps", "events_per_step", "dropped", "wrong"});
  for (const Json& r : having(rows, "overhead_pct")) {
    const double pct = num(r, "overhead_pct"), paired = num(r, "paired_overhead_pct", pct);
    const double target = num(r, "target_pct", 2.0);
    md << "\nOverhead: median on / median off - 1 = **" << fixed(pct, 2) << "%**; paired (median over the "
          "repeats of on block / off block of the same repeat - 1) = **"
       << fixed(paired, 2) << "%** (quartiles " << fixed(num(r, "paired_p25_pct"), 2) << "% .. "
       << fixed(num(r, "paired_p75_pct"), 2) << "%) — " << (pct <= target && paired <= target ? "meets" : "misses")
       << " the target of <= " << fixed(target, 0)
       << "%. A negative value means the difference is below the noise of this shared machine.\n";
    if (r.contains("cpu_overhead_pct"))
      md << "\nCPU cost measured directly (not blurred by that noise): recording " << fixed(num(r, "record_ns_per_event"), 0)
         << " ns per event on the recording thread, writing " << fixed(num(r, "writer_ns_per_event"), 0)
         << " ns per event on the writer thread; at " << fixed(num(r, "events_per_step"), 0)
         << " events per step (all ranks) that is **" << fixed(num(r, "cpu_overhead_pct"), 3)
         << "%** of the ranks' CPU time per step.\n";
  }
}

void elastic_section(std::ostream& md, const DataSet& d, Plots& plots) {
  const Rows& rows = d.of("elastic_bench");
  Rows events, rdv;
  for (const Json& r : rows) (r.value("event", "") == "rerendezvous" ? rdv : events).push_back(r);
  md << "Targets: kill 3->2 recovery p50 <= 1000 ms; join <= 2000 ms; re-rendezvous at 16 ranks <= 500 ms. "
        "Published: Horovod elastic re-rendezvous 0.4 s @2, 1.2 s @4, 7.1 s @8, 15.8 s @16 ranks "
        "(horovod #3556); FTlib > 30 s (elasticdl #2192). `lost_steps` = the committed steps the survivors "
        "rolled back (their last commit in the old generation - the step the new one resumed from).\n";
  table(md, events, {"event", "ranks_before", "ranks_after", "recovery_ms", "lost_steps"});
  std::map<std::string, std::vector<double>> per;
  for (const Json& r : events) per[r.value("event", "?")].push_back(num(r, "recovery_ms"));
  std::vector<std::vector<std::string>> body;
  for (auto& [e, v] : per) body.push_back({e, std::to_string(v.size()), fixed(median(v), 1)});
  table(md, {"event", "events", "median recovery_ms"}, body);
  table(md, rdv, {"event", "ranks", "time_ms"});
  Series ours;
  for (const Json& r : rdv) ours.push_back({num(r, "ranks"), num(r, "time_ms")});
  std::sort(ours.begin(), ours.end());
  if (ours.empty()) return;
  md << plots.add("elastic_rerendezvous",
                  "set logscale y\nset xlabel 'ranks'\nset ylabel 'ms'\n" + datablock("edl", ours) +
                      datablock("hvd", {{2, 400}, {4, 1200}, {8, 7100}, {16, 15800}}) +
                      "plot $edl with linespoints title 'EDL re-rendezvous', $hvd with linespoints dt 2 title "
                      "'Horovod (#3556)'",
                  "re-rendezvous time vs ranks");
}

// join_bench: the survivors' extra time around a join, stop vs stop-free (docs/elastic.md,
// "Stop-free joins"), with the share of a step and the target check per row.
void join_section(std::ostream& md, const DataSet& d, Plots&) {
  md << "Target (issue 26): a stop-free join costs the survivors <= 10% of one step, flat in the state size "
        "(the stop path for comparison, same run). `extra_ms`: the slowest survivor's time across the generation "
        "change minus as many of its median steps (`step_ms`: the survivors' median step before the joins, which "
        "includes the commit of the whole state every step), the median over `joins` newcomers joining one after "
        "the other (min / max: the best and the worst join); `catchup_steps` / `catchup_extra_ms`: stop-free only, "
        "the steps until the newcomer held the whole state and the slowest survivor's extra time summed over them "
        "(the servers' sending, beside training); `noise_ms`: the same measure over two-step windows without a "
        "membership change in the same run (median / 90th percentile: what `extra_ms` reads when a join costs "
        "nothing, on a loaded machine); `peak_rss_mb`: the workers' resident memory together at its largest.\n";
  std::vector<std::vector<std::string>> body;
  for (const Json& r : d.of("join_bench")) {
    const double step = num(r, "step_ms"), extra = num(r, "extra_ms");
    const double pct = step > 0 ? 100.0 * extra / step : 0;
    const bool stopfree = r.value("path", "") == "stopfree";
    body.push_back({cell(r["state_bytes"]), r.value("path", "?"), cell(r["survivors"]), cell(r["joins"]),
                    fixed(step, 1), fixed(extra, 1), fixed(num(r, "extra_min_ms"), 1) + " / " + fixed(num(r, "extra_max_ms"), 1),
                    fixed(pct, 1), cell(r["catchup_steps"]), fixed(num(r, "catchup_extra_ms"), 1),
                    r.contains("noise_ms") ? fixed(num(r, "noise_ms"), 1) + " / " + fixed(num(r, "noise_p90_ms"), 1) : "",
                    r.contains("peak_rss_mb") ? fixed(num(r, "peak_rss_mb"), 0) : "",
                    stopfree ? (pct <= 10 ? "meets" : "misses") : ""});
  }
  table(md, {"state_bytes", "path", "survivors", "joins", "step_ms", "extra_ms", "min / max", "extra % of a step",
             "catchup_steps", "catchup_extra_ms", "noise_ms (median / p90)", "peak_rss_mb", "<= 10%"},
        body);
}

void autoscale_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("autoscale_bench");
  Rows sizes, summary;
  for (const Json& r : rows) (r.contains("recommended") ? summary : sizes).push_back(r);
  md << "Target (issue 14): `edl-run --autoscale` (s_{k,d} heuristic, docs/observability.md \"Autoscaling\") "
        "recommends a world size whose images/s is within 5% of the best measured one. `images_per_s`: fixed runs "
        "at each size (median of the rounds); `autoscale_rate`: R_k as edl-run measured it while the autoscale run "
        "was at that size (samples/s; probes are short, so it is noisier).\n";
  table(md, sizes, {"model", "workers", "batch", "images_per_s", "step_ms", "runs", "autoscale_rate"});
  md << "The live run's S is the bench's `--threshold` (default 0.1: the target asks for the best images/s); "
        "`replay_*`: the same schedule at `compare_threshold` (edl-run's default S = 0.7) replayed on the fixed "
        "runs' table, which stops at the efficient size rather than the fastest.\n";
  table(md, summary, {"recommended", "best", "recommended_share_of_best", "ok", "path", "threshold", "interval",
                      "compare_threshold", "replay_path", "replay_share_of_best"});
}

// scripts/metrics-timeline.sh: edl-run's --metrics-file (metrics_timeline.csv next to the rows)
// around a kill and a join, and the job's goodput report (docs/observability.md, "Plots").
void metrics_section(std::ostream& md, const DataSet& d, Plots& plots) {
  Rows events, report;
  for (const Json& r : d.of("metrics_timeline")) (r.value("event", "") == "report" ? report : events).push_back(r);
  table(md, events, {"event", "t_s", "steps", "step_ms"});
  table(md, report,
        {"wall_seconds", "training_seconds", "rendezvous_seconds", "sync_seconds", "recovery_seconds", "failures",
         "joins", "leaves", "steps_replayed", "mean_world_size", "effective_training_time_ratio", "goodput_ratio"});
  std::ifstream csv(d.dir + "/metrics_timeline.csv");
  std::string line;
  if (!std::getline(csv, line)) {
    md << "_No metrics_timeline.csv in this data set._\n";
    return;
  }
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');) header.push_back(c);
  auto col = [&](const std::string& n) { return std::find(header.begin(), header.end(), n) - header.begin(); };
  const size_t t = col("time_s"), rate = col("edl_steps_per_second"), size = col("edl_world_size"),
               total = col("edl_steps_total");
  if (rate >= header.size() || size >= header.size() || total >= header.size())
    throw std::runtime_error("metrics_timeline.csv: columns missing");
  Series steps, interval, world;  // the 3 s window of edl-run; a 1 s window over the rows
  Series totals;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    if (cells.size() < header.size()) continue;
    const double x = std::stod(cells[t]);
    steps.push_back({x, std::stod(cells[rate])});
    world.push_back({x, std::stod(cells[size])});
    totals.push_back({x, std::stod(cells[total])});
  }
  for (size_t i = 0, j = 0; i < totals.size(); ++i) {  // j: the first row at most 1 s before row i
    while (totals[i].first - totals[j + 1].first >= 1.0 - 1e-9) ++j;
    if (i > j) interval.push_back({totals[i].first, (totals[i].second - totals[j].second) / (totals[i].first - totals[j].first)});
  }
  std::string marks;
  for (const Json& e : events)
    if (e.contains("t_s") && e["t_s"].is_number())
      marks += "set arrow from " + fixed(num(e, "t_s"), 3) + ", graph 0 to " + fixed(num(e, "t_s"), 3) +
               ", graph 1 nohead dt 3\nset label '" + e.value("event", "") + "' at " + fixed(num(e, "t_s"), 3) +
               ", graph 0.95 offset 0.5,0\n";
  md << "Job steps per second over the last second (from `edl_steps_total` in the metrics file, a row every "
        "0.25 s; workers report every 50 ms), edl-run's own `edl_steps_per_second` (a 3 s window) and the world "
        "size; dotted lines: the kill and the join on edl-run's clock.\n";
  md << plots.add("metrics_steps",
                  "set xlabel 'seconds since edl-run started'\nset ylabel 'job steps / s'\nset y2label 'world size'\n"
                  "set y2tics 1\nset yrange [0:*]\nset y2range [0:4]\n" +
                      marks + datablock("interval", interval) + datablock("rate", steps) + datablock("size", world) +
                      "plot $interval with lines lw 2 title 'steps/s (1 s)', $rate with lines dt 3 title "
                      "'edl_steps_per_second (3 s)', $size axes x1y2 with steps dt 2 title 'world size'",
                  "steps per second around a kill -9 and a join (edl-run --metrics-file)");
}

void scaling_section(std::ostream& md, const DataSet& d, Plots& plots) {
  const Rows& rows = d.of("scaling_bench");
  md << "Seeds (FTlib benchmark, CPU cluster, 4 CPUs per worker, batch 64): ResNet50 26.7 img/s at 1 worker, "
        "1.57x at 2 (communication 18%), 2.56x at 4, 4.61x at 8; MobileNetV2 353.6 img/s, 1.42x at 2 (24%), "
        "1.92x at 4, 1.83x at 8.\n\n"
        "Target (restated): the speed-up against the machine's ceiling measured in the same run. Rows with link "
        "`independent` are k single-worker processes side by side with no communication at all; `efficiency` = "
        "speed-up / the independent speed-up of the same k: what EDL keeps of what the machine allows.\n";
  table(md, rows, {"model", "workers", "link", "effective_link", "images_per_s", "speedup", "efficiency", "comm_share",
                   "step_ms", "oversubscribed"});
  std::map<std::string, Series> series;
  for (const Json& r : rows) {
    series[r.value("model", "?") + " " + r.value("link", "?")].push_back({num(r, "workers"), num(r, "speedup")});
  }
  if (series.empty()) return;
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
  md << plots.add("scaling_speedup",
                  "set xlabel 'workers'\nset ylabel 'speed-up over 1 worker'\nset xrange [1:8]\nset yrange [0:*]\n" +
                      body + cmd,
                  "speed-up vs workers");
}

void cluster_figures(std::ostream& md, const DataSet& d, Plots& plots, const Rows& util);

void cluster_section(std::ostream& md, const DataSet& d, Plots& plots) {
  const Rows& rows = d.of("cluster_sim");
  md << "Published (seeds 000/001), Experiment 1: gang - job 1 ends 465 s, job 2 starts 518 s (53 s master-pod "
        "launch) and ends 968 s, utilisation 66.6%; elastic - job 2 starts at once on 2 GPUs, grows to 4 when "
        "job 1 ends (474 s), ends 809 s, ~100% utilisation. Experiment 2: the training job's GPUs follow the "
        "serving job's; ~100% utilisation except while reacting. Model, calibration and comparison: "
        "docs/experiments.md.\n";
  Rows jobs = having(rows, "job"), util = having(rows, "utilization"), costs = having(rows, "speedup");
  table(md, jobs, {"experiment", "costs", "policy", "job", "submit_s", "start_s", "end_s", "resizes", "restarts"});
  table(md, util, {"experiment", "costs", "policy", "makespan_s", "utilization", "contended_utilization"});
  Rows flat;
  for (const Json& r : costs) {
    for (int k = 1; k <= 6; ++k) {
      std::string ks = std::to_string(k);
      Json f{{"costs", r.value("costs", "")}, {"k", k}, {"speedup", r["speedup"].value(ks, 0.0)}};
      if (r.contains("pause_shrink_s") && r["pause_shrink_s"].contains(ks)) f["shrink_s"] = r["pause_shrink_s"][ks];
      if (r.contains("pause_grow_s") && r["pause_grow_s"].contains(ks)) f["grow_s"] = r["pause_grow_s"][ks];
      flat.push_back(f);
    }
  }
  if (!flat.empty()) {
    md << "Cost sets (speed-up at k workers, stall when shrinking to / growing to k, seconds):\n";
    table(md, flat, {"costs", "k", "speedup", "shrink_s", "grow_s"});
  }
  cluster_figures(md, d, plots, util);
}

// One figure per (experiment, cost set) from the series files cluster_sim wrote (data set's series/).
void cluster_figures(std::ostream& md, const DataSet& d, Plots& plots, const Rows& util) {
  std::set<std::pair<std::string, std::string>> figs;
  for (const Json& r : util) figs.insert({r.value("experiment", ""), r.value("costs", "")});
  for (const auto& [e, cs] : figs) {
    const std::string stem = "series/exp" + e + "_" + cs + "_";
    fs::path g = fs::path(d.dir) / (stem + "gang.dat"), el = fs::path(d.dir) / (stem + "elastic.dat");
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
      if (r.value("experiment", "") == e && r.value("costs", "") == cs) xmax = std::max(xmax, num(r, "makespan_s"));
    }
    std::ostringstream b;
    if (xmax > 0) b << "set xrange [0:" << fixed(xmax * 1.02, 1) << "]\n";
    b << "set multiplot layout 2,1\nset xlabel 'time (s)'\nset ylabel 'GPUs'\nset yrange [0:" << gpus + 1
      << "]\nset ytics 1\n";
    for (const char* policy : {"gang", "elastic"}) {
      const std::string file = plots.data_rel() + "/" + stem + policy + ".dat";
      b << "set title 'Experiment " << e << ", " << policy << " scheduling (" << cs << " costs)'\nplot ";
      std::vector<std::string> curves;  // busy GPUs first (underneath), then each job and the serving job
      curves.push_back("'" + file + "' using 1:" + std::to_string(names.size() - 1) +
                       " with steps lw 6 lc rgb '#cccccc' title 'busy GPUs (of " + std::to_string(gpus) + ")'");
      for (size_t k = 1; k + 2 < names.size(); ++k) {
        if (names[k] == "serving" && e == "1") continue;  // Experiment 1 has no serving job
        curves.push_back("'" + file + "' using 1:" + std::to_string(k + 1) + " with steps lw 2 title '" + names[k] + "'");
      }
      for (size_t k = 0; k < curves.size(); ++k) b << (k ? ", " : "") << curves[k];
      b << "\n";
    }
    b << "unset multiplot";
    md << plots.add("cluster_exp" + e + "_" + cs, b.str(), "Experiment " + e + " (" + cs + " costs): GPUs over time",
                    900, 640);
  }
}

void convergence_section(std::ostream& md, const DataSet& d, Plots& plots) {
  const Rows& rows = d.of("convergence");
  md << "Targets: (b) and (c) end within the tolerance of (a); (c)'s loss spike after each resize smaller than "
        "(b)'s (spike = mean training loss of the W steps after the worker count changed minus the W steps "
        "before). (d) is LR scaling as u-form SGD (PyTorch's) applies it; docs/experiments.md compares (c) with "
        "(b) and (d), per step and against the noise floor.\n";
  for (const Json& r : having(rows, "config")) {
    md << "\nRecipe: " << r.value("epochs", 0) << " epochs of " << r.value("train_records", 0) << " training records ("
       << r.value("test_records", 0) << " test), batch " << r.value("batch", 0) << " per worker, lr "
       << cell(r["lr"]) << " at " << r.value("base_size", 0) << " worker(s), resizes " << r.value("resize_at", "")
       << " (epoch progress:workers), window W = " << r.value("window", 0) << ", seed " << r.value("seed", 0) << ".\n";
  }
  Rows finals, resizes;
  std::map<std::string, Series> acc, loss;
  for (const Json& r : rows) {
    if (!r.contains("run") || r.contains("step")) continue;  // per-step rows: docs/experiments.md
    const std::string run = r.value("run", "?");
    if (r.contains("final_test_acc")) {
      Json f = r;
      f["final_test_acc_pct"] = 100.0 * num(r, "final_test_acc");
      finals.push_back(f);
    } else if (r.contains("spike") && r.contains("resize")) {
      resizes.push_back(r);
    } else if (r.contains("epoch") && r.contains("test_acc") && r.contains("train_loss")) {
      if (num(r, "test_acc", -1) >= 0) acc[run].push_back({num(r, "epoch"), num(r, "test_acc")});
      loss[run].push_back({num(r, "epoch"), num(r, "train_loss")});
    }
  }
  if (!finals.empty()) {
    md << "\nFinal test accuracy (delta in percentage points against the fixed run):\n";
    table(md, finals, {"run", "final_test_acc_pct", "delta_vs_fixed_pts"});
  }
  if (!resizes.empty()) {
    md << "Loss spikes per resize:\n";
    table(md, resizes, {"run", "resize", "from_workers", "to_workers", "epoch_progress", "loss_before", "loss_after",
                        "spike"});
  }
  auto curves = [&](const std::map<std::string, Series>& series, const std::string& name, const std::string& ylabel,
                    const std::string& caption) {
    if (series.empty()) return;
    std::string body, cmd = "plot ";
    for (auto [k, xy] : series) {
      std::sort(xy.begin(), xy.end());
      body += datablock(ident(name + "_" + k), xy);
      cmd += "$" + ident(name + "_" + k) + " with linespoints title '" + k + "', ";
    }
    cmd.resize(cmd.size() - 2);
    md << plots.add(name, "set xlabel 'epoch'\nset ylabel '" + ylabel + "'\n" + body + cmd, caption);
  };
  curves(acc, "convergence_acc", "test accuracy", "test accuracy per epoch, all runs");
  curves(loss, "convergence_loss", "training loss (epoch mean)", "training loss per epoch, all runs");
}

// A bench without a section of its own: its rows, one table per value of their "bench" field.
void generic_section(std::ostream& md, const Rows& rows) {
  std::vector<std::string> kinds;
  for (const Json& r : rows) {
    std::string k = r.contains("bench") && r["bench"].is_string() ? r["bench"].get<std::string>() : "";
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  for (const auto& k : kinds) {
    Rows part;
    for (const Json& r : rows) {
      std::string rk = r.contains("bench") && r["bench"].is_string() ? r["bench"].get<std::string>() : "";
      if (rk == k) part.push_back(r);
    }
    if (kinds.size() > 1) md << "\n`" << (k.empty() ? "(rows without \"bench\")" : k) << "`:\n";
    table(md, part);
  }
}

struct Section {
  std::string name, title, text;
  void (*render)(std::ostream&, const DataSet&, Plots&) = nullptr;
};

const std::vector<Section>& sections() {
  static const std::vector<Section> s = {
      {"allreduce_bench", "Allreduce (float32 sum, loopback)", "", allreduce_section},
      {"fusion_bench", "Tensor fusion (whole gradient sets)", "", fusion_section},
      {"model_bench", "Reference models (training throughput, batch 64)", "", model_section},
      {"reader_bench", "Data layer", "Target: >= 20,000 images/s on Fashion-MNIST, batch 64, one core.", nullptr},
      {"store_bench", "Store backends (control-plane latency)",
       "Round trip of one operation from one client (`store_rtt`) and a rendezvous-shaped round of N workers "
       "(`store_rendezvous`: the store's share of a rendezvous, not the whole elastic protocol).",
       nullptr},
      {"optimizer_bench", "Distributed optimizer overlap", "", optimizer_section},
      {"timeline_bench", "Timeline overhead (ResNet20 step, timeline on / off)", "", timeline_section},
      {"torch_bench", "edl::torch on the libtorch ResNet20 (docs/torch.md)",
       "Target: `edl` at 1 worker within 3% of `plain`: `overhead_pct` is the median over interleaved step pairs "
       "(the two copies alternate steps in one process) of edl step / the plain step next to it, minus 1; 2 workers "
       "compared with `independent` (two copies side by side, no communication: the ceiling) and `barrier` (two "
       "plain copies meeting in a blocking pipe barrier every step, no EDL: what synchronous training itself costs "
       "on this shared 2-core machine; docs/torch.md); `overlap`: the "
       "share of the allreduce hidden behind backward; `cpu_ms` / `bg_cpu_ms`: CPU time per step of all threads / of "
       "the threads other than the training thread, `preempt`: involuntary context switches of the training thread "
       "per step. `ok`: the ranks (and plain vs edl at 1 worker) end "
       "with identical parameters.",
       nullptr},
      {"elastic_bench", "Elastic recovery and re-rendezvous", "", elastic_section},
      {"scale_bench", "Scale: hundreds of processes (start, kill -9, join)", "", scale_section},
      {"allreduce_sparse", "Allreduce at 2-16 ranks before / after the sparse mesh", "", allreduce_sparse_section},
      {"join_bench", "Stop-free joins (what a join costs the survivors)", "", join_section},
      {"gpu_allreduce_bench", "GPU allreduce, fusion kernels and recovery (one GPU, device tool)", "",
       gpu_allreduce_section},
      {"autoscale_bench", "Autoscaling advice (s_{k,d}, ResNet20)", "", autoscale_section},
      {"metrics_timeline", "Job metrics around a kill and a join",
       "A 2-worker job under `edl-run --metrics-file` (scripts/metrics-timeline.sh, docs/observability.md): "
       "one worker killed with SIGKILL (edl-run replaces it), later a third worker joins.",
       metrics_section},
      {"shard_audit", "Exactly-once shard audit", "Every epoch must have trained_once = records.", nullptr},
      {"chaos_bench", "Chaos trials (random faults under edl-run)", "",
       [](std::ostream& md, const DataSet& d, Plots&) { chaos_section(md, d, "chaos_bench"); }},
      {"chaos_repro", "Chaos trials in the reproducible mode (kills, joins, leaves)", "",
       [](std::ostream& md, const DataSet& d, Plots&) { chaos_section(md, d, "chaos_repro"); }},
      {"chaos_mtbf", "Goodput under failures, MTBF 10 s", "",
       [](std::ostream& md, const DataSet& d, Plots&) { chaos_mtbf_section(md, d, "chaos_mtbf"); }},
      {"chaos_mtbf30", "Goodput under failures, MTBF 30 s", "",
       [](std::ostream& md, const DataSet& d, Plots&) { chaos_mtbf_section(md, d, "chaos_mtbf30"); }},
      {"rebalance_bench", "Straggler rebalancing (one of 3 workers at half speed)", "", rebalance_section},
      {"reproducible_bench", "Reproducible mode: cost next to the normal mode", "", reproducible_section},
      {"netns_check", "Emulated links (netns + tc)",
       "What the emulated links really carry between two namespaces (TCP throughput, round trip).", nullptr},
      {"slurm_bench", "EDL on Slurm (a real Slurm cluster on emulated nodes)",
       "slurmctld and three slurmd (Debian slurm-wlm 22.05), each node a network namespace, the job submitted "
       "with examples/slurm/edl-job.sbatch around an etcd on the controller host, the synthetic worker at "
       "30 ms per step (testing/slurm_scenarios.h, docs/launcher.md \"Slurm\"). `loss_to_step_ms`: a node "
       "is lost (its link cut, then slurmd and every process on it killed) until the other nodes' workers "
       "train their first step in the next generation (detection by the lease, `lease_ms`, then "
       "re-rendezvous); `alloc_to_step_ms`: a second allocation's batch script starts until its worker "
       "trains its first step in the job; `submit_to_step_ms`: the same from its `sbatch` (Slurm's "
       "scheduling too). Median, min and max over `runs` fresh clusters; `ok`: every run passed the "
       "test's checks (exactly-once data, identical parameters, no lost step).",
       nullptr},
      {"scaling_bench", "Scaling (FTlib benchmark reproduction)", "", scaling_section},
      {"cluster_sim", "Cluster scheduling (Experiments 1 and 2)", "", cluster_section},
      {"convergence", "Convergence under a changing worker count (Experiment 3)", "", convergence_section},
  };
  return s;
}

void write_section(std::ostream& md, const DataSet& d, Plots& plots, const Section& s) {
  md << "\n## " << s.title << " (`" << s.name << "`)\n\n" << d.provenance(s.name) << "\n\n";
  if (d.of(s.name).empty()) {
    md << (d.status.count(s.name) ? "_No rows in this data set._\n" : "_No rows: not run in this data set._\n");
    return;
  }
  if (!s.text.empty()) md << s.text << "\n";
  if (s.render) {
    s.render(md, d, plots);
  } else {
    generic_section(md, d.of(s.name));
  }
}

}  // namespace

void write_benchmarks(std::ostream& md, const DataSet& d, Plots& plots) {
  md << "# EDL benchmarks\n\n"
        "Generated by `scripts/run-benchmarks.sh` (experiments/benchmarks_doc.cc) from the JSON rows committed in "
        "`docs/data/` (`<bench>.jsonl`, provenance in `status.tsv`); `scripts/check-docs.sh` checks that this file "
        "still is what they give. Each section names the commit, start time (UTC), wall time, load average and "
        "command of its own run: compare rows of one section, not across sections or data sets. Published numbers "
        "of the seeds and reference figures measured elsewhere are labelled with where they come from.\n\n";
  if (!d.machine.empty()) md << "Machine: " << d.machine << ". It is shared: other jobs ran beside the benches.\n";
  std::set<std::string> known;
  for (const Section& s : sections()) {
    known.insert(s.name);
    write_section(md, d, plots, s);
  }
  std::set<std::string> others;  // benches this file has no section for: rows or a status line
  for (const auto& [name, rows] : d.rows) {
    if (!known.count(name)) others.insert(name);
  }
  for (const auto& [name, st] : d.status) {
    if (!known.count(name)) others.insert(name);
  }
  for (const auto& name : others) write_section(md, d, plots, {name, name, "", nullptr});
}

}  // namespace edl::docs
