// docs/benchmarks.md, the chaos_bench sections (bench/chaos_bench.cc, docs/chaos.md): the random
// fault trials (summary against the targets, per fault kind, the failed trials, every trial) and
// the MTBF goodput runs (one section per MTBF value: every pair, the medians against the target).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "doc_chaos.h"

namespace edl::docs {
namespace {

std::string faults_text(const Json& r) {
  std::string s;
  if (r.contains("faults") && r["faults"].is_array())
    for (const auto& f : r["faults"]) s += (s.empty() ? "" : " ") + (f.is_string() ? f.get<std::string>() : f.dump());
  return s;
}

std::string recoveries_text(const Json& r) {
  std::string s;
  if (r.contains("recovery_ms") && r["recovery_ms"].is_array())
    for (const auto& x : r["recovery_ms"]) s += (s.empty() ? "" : ", ") + fixed(x.get<double>(), 0);
  return s;
}

bool is_summary(const Json& r, const std::string& key) {
  return r.contains(key) && r[key].is_string() && r[key].get<std::string>() == "summary";
}

std::string verdict(bool met) { return met ? "met" : "**missed**"; }

}  // namespace

void chaos_section(std::ostream& md, const DataSet& d, const std::string& bench) {
  const Rows& rows = d.of(bench);
  Rows trials;
  const Json* summary = nullptr;
  int det = 0, matched = 0;
  for (const Json& r : rows) {
    if (is_summary(r, "trial")) summary = &r;
    else if (r.contains("trial")) trials.push_back(r);
    if (r.contains("matches_reference")) ++det, matched += r.value("matches_reference", false) ? 1 : 0;
  }
  md << "Targets (issue 13 item 7): every trial ok; p99 of kill -9 to the next trained step <= 1000 ms, "
        "decider death included. A trial is ok when edl-run exits 0 within the trial limit, every final state "
        "is bitwise identical and every record of every epoch was trained exactly once (docs/chaos.md).\n";
  if (det > 0)
    md << "\nReproducible mode (`chaos_bench --deterministic`, docs/optim.md): a trial is ok only if its final state "
          "also equals, bit for bit, that of the same job trained by one worker without edl-run and without faults "
          "(`matches_reference`, issue 26). Trials matching the reference: **"
       << matched << " / " << det << "**.\n";
  if (summary) {
    const Json& s = *summary;
    const double trials_n = num(s, "trials"), ok_n = num(s, "ok"), p99 = num(s, "recovery_p99_ms", NAN);
    const std::vector<std::string> head = {"trials", "ok", "kills", "recovery p50 ms", "recovery p99 ms",
                                           "recovery max ms", "store", "verdict"};
    table(md, head,
          std::vector<std::vector<std::string>>{{cell(s["trials"]), cell(s["ok"]), cell(s.value("kills", Json(0))), fixed(num(s, "recovery_p50_ms", NAN), 0),
            fixed(p99, 0), fixed(num(s, "recovery_max_ms", NAN), 0), s.value("store", ""),
            "all ok: " + verdict(ok_n == trials_n) + "; p99 <= 1000 ms: " + verdict(!(p99 > 1000))}});
    if (s.contains("ok_by_kind") && s["ok_by_kind"].is_object()) {
      std::vector<std::vector<std::string>> body;
      for (const auto& [k, v] : s["ok_by_kind"].items()) body.push_back({k, v.is_string() ? v.get<std::string>() : v.dump()});
      md << "\nTrials ok per fault kind (a trial with several kinds counts for each):\n";
      table(md, {"kind", "ok / trials"}, body);
    }
  }
  std::vector<std::vector<std::string>> failed, all;
  for (const Json& r : trials) {
    std::vector<std::string> line = {cell(r["trial"]), r.value("ok", false) ? "yes" : "NO", fixed(num(r, "wall_s"), 1),
                                     faults_text(r), recoveries_text(r)};
    if (!r.value("ok", false)) failed.push_back({line[0], line[3], r.value("error", "")});
    all.push_back(std::move(line));
  }
  if (!failed.empty()) {
    md << "\nFailed trials:\n";
    table(md, {"trial", "faults", "error"}, failed);
  }
  md << "\nEvery trial (`recovery_ms`: per kill, kill to the next trained step):\n";
  table(md, {"trial", "ok", "wall_s", "faults", "recovery_ms"}, all);
}

void chaos_mtbf_section(std::ostream& md, const DataSet& d, const std::string& bench) {
  const Rows& rows = d.of(bench);
  Rows pairs;
  const Json* summary = nullptr;
  for (const Json& r : rows) {
    if (r.value("mode", "") != "mtbf") continue;
    if (is_summary(r, "pair")) summary = &r;
    else pairs.push_back(r);
  }
  md << "Targets (issue 13 item 7): goodput >= 0.97 at MTBF 10 s and >= 0.98 at MTBF 30 s, 3 workers, median of 3 "
        "paired runs. `goodput` = committed steps per second of the run with a kill -9 of a random worker at "
        "exponential intervals of mean `mtbf_s`, over the same of its failure-free pair; `goodput_records` = "
        "clean span / faulty span (also charges the time with 2 workers while a replacement starts).\n";
  table(md, pairs,
        {"pair", "mtbf_s", "workers", "clean_steps_per_s", "faulty_steps_per_s", "goodput", "goodput_records", "kills",
         "ok", "error"});
  if (!summary) return;
  const Json& s = *summary;
  const double mtbf = num(s, "mtbf_s"), g = num(s, "goodput_median", NAN);
  const double target = mtbf >= 30 ? 0.98 : mtbf >= 10 ? 0.97 : NAN;
  std::vector<double> rec;
  for (const Json& r : pairs)
    if (r.contains("recovery_ms") && r["recovery_ms"].is_array())
      for (const auto& x : r["recovery_ms"]) rec.push_back(x.get<double>());
  std::sort(rec.begin(), rec.end());
  std::string worst = rec.empty() ? "" : fixed(rec.back(), 0);
  const std::vector<std::string> head = {"mtbf_s", "pairs", "goodput median", "goodput_records median", "kills",
                                         "slowest recovery ms", "target", "verdict"};
  table(md, head,
        std::vector<std::vector<std::string>>{{fixed(mtbf, 0), cell(s["pairs"]), fixed(g, 3), fixed(num(s, "goodput_records_median", NAN), 3),
          std::to_string(rec.size()), worst, std::isnan(target) ? "" : ">= " + fixed(target, 2),
          std::isnan(target) ? "" : verdict(g >= target) + (s.value("ok", false) ? "" : "; a run failed")}});
}

}  // namespace edl::docs
