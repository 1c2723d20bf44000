// optimizer_bench: does DistributedOptimizer hide gradient allreduce behind the backward pass?
//
//   optimizer_bench [--ranks 2] [--rounds 8] [--steps 5] [--warmup 2] [--backward-ms 180]
//                   [--bucket-kb 256] [--link loopback,1gbit,100mbit] [--fp16] [--processes] [--json PATH]
//
// Workload (optimizer_workload.h): ResNet20's 59 parameter tensors (269,722 float32) and a backward
// pass that produces their gradients layer by layer, last layer first, with busy GEMM compute between
// them; each layer's share of --backward-ms follows its multiply-adds, calibrated once before the
// ranks start. The default 180 ms is ResNet20's own backward at batch 64 on one core of this machine
// (models/resnet20, 1 thread, thread CPU time: fastest 176-183 ms, median ~200 ms at load ~4), taken
// the same way as the calibration (fastest run = undisturbed core).
//
// Ranks (optimizer_rank.h): threads of this process, each with its own Communicator bootstrapped
// through an in-process store (default), or forked processes in an edl::init() world (--processes).
// --link runs every mode over each listed link: "loopback", or an emulated cluster link of
// testing/netns.h ("1gbit", "10gbit", "100mbit", "+<ms>ms" latency): each rank in its own network
// namespace, joined by a tc-shaped bridge (root only; without root or iproute2 the emulated links
// are skipped with a message and loopback still runs). Links and modes are interleaved round by
// round, in rotating order, so that load changes on a shared machine hit all of them alike.
// Modes:
//   compute_only  the same backward + update with no communication (local optimizer);
//   no_overlap    buckets are launched by step(), after backward;
//   overlap       buckets are launched as soon as backward completes them.
// Rows (--json, every row with "link"): {"ranks","mode","step_ms","link"} per mode (median over the
// timed steps of all rounds, a step lasting until its slowest rank ends it) and
// {"ranks","overlap_fraction","link"}: the share of the allreduce time hidden behind backward = (part
// of each bucket's launch-to-completion interval before the last grad_ready() of the step) / (sum of
// those intervals), from OptimizerStepStats, median over ranks and steps of the overlap mode.
// The table's "x_no_ovl" column is step_ms / no_overlap step_ms; on the compute_only row it is the
// lower bound perfect overlap could reach. The per-link verdict lines give the exposed share
// (overlap - compute_only) / (no_overlap - compute_only): 0 = perfect overlap. "bwd_ms" is the
// backward pass alone (median over ranks and steps): how much communication slows compute.
// Correctness ("wrong" column): every rank fills gradient element i with (rank + 1) * f(i); after
// each step the bucket must hold the reduced sum (fp32) or mean (fp16), checked on a sample.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "testing/netns.h"
#include "optimizer_rank.h"
#include "optimizer_workload.h"

namespace {

using edl::bench::fmt;
using edl::bench::Json;
using edl::bench::OptMode;

constexpr OptMode kModes[3] = {OptMode::kComputeOnly, OptMode::kNoOverlap, OptMode::kOverlap};

// Everything measured on one link, over all rounds.
struct LinkRun {
  std::unique_ptr<edl::testing::NetnsCluster> cluster;  // null on loopback
  std::string label;                                 // what was emulated ("1gbit" when netem is missing)
  std::vector<double> step[3], comm[3], backward[3], hidden;
  size_t buckets = 0;
  long wrong[3] = {0, 0, 0};
  std::string error;  // set when a round failed; the link's remaining rounds are skipped
};

struct Flags {
  edl::bench::OptBenchConfig cfg;
  double backward_ms = 180;
  int rounds = 8;
  bool processes = false;
  std::vector<std::string> links;
  std::string json_path;
};

Flags parse(int argc, char** argv) {
  cxxopts::Options options("optimizer_bench", "overlap of gradient allreduce with backward (ResNet20-like model)");
  options.add_options()
      ("ranks", "ranks (threads, each with its own communicator)", cxxopts::value<int>()->default_value("2"))
      ("steps", "timed steps per mode and round", cxxopts::value<int>()->default_value("5"))
      ("warmup", "untimed steps per mode and round", cxxopts::value<int>()->default_value("2"))
      ("backward-ms", "single-core compute of one backward pass (default: ResNet20, batch 64)",
       cxxopts::value<double>()->default_value("180"))
      ("bucket-kb", "bucket capacity in KiB", cxxopts::value<int>()->default_value("256"))
      ("rounds", "interleave the links and modes this many times", cxxopts::value<int>()->default_value("8"))
      ("link", "links: loopback and/or emulated <N>gbit|<N>mbit[+<D>ms] (root only)",
       cxxopts::value<std::string>()->default_value("loopback,1gbit,100mbit"))
      ("fp16", "fp16 compression on the wire")
      ("processes", "ranks as forked processes in an edl::init() world (the collective engine path)")
      ("json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "help");
  auto args = edl::bench::parse_flags(options, argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    std::exit(0);
  }
  Flags f;
  f.cfg.ranks = args["ranks"].as<int>();
  f.cfg.steps = args["steps"].as<int>();
  f.cfg.warmup = args["warmup"].as<int>();
  f.backward_ms = args["backward-ms"].as<double>();
  const int bucket_kb = args["bucket-kb"].as<int>();
  f.cfg.fp16 = args.count("fp16") > 0;
  f.processes = args.count("processes") > 0;
  f.rounds = args["rounds"].as<int>();
  f.links = edl::bench::split(args["link"].as<std::string>());
  f.json_path = args["json"].as<std::string>();
  if (f.cfg.ranks < 2 || f.cfg.ranks > 200) throw std::invalid_argument("--ranks must be 2..200");
  if (f.cfg.steps < 1 || f.cfg.warmup < 0 || f.rounds < 1)
    throw std::invalid_argument("need --steps >= 1, --warmup >= 0, --rounds >= 1");
  if (!(f.backward_ms > 0)) throw std::invalid_argument("--backward-ms must be > 0");
  if (bucket_kb <= 0) throw std::invalid_argument("--bucket-kb must be > 0");
  if (f.links.empty()) throw std::invalid_argument("--link needs at least one link");
  f.cfg.bucket_bytes = static_cast<size_t>(bucket_kb) << 10;
  return f;
}

// Builds the links to run: loopback always; emulated ones when this process may create namespaces.
std::vector<std::unique_ptr<LinkRun>> make_links(const Flags& f) {
  std::vector<edl::testing::LinkSpec> specs;
  for (const auto& text : f.links) {
    specs.push_back(edl::testing::parse_link(text));  // throws naming the text
    for (size_t i = 0; i + 1 < specs.size(); ++i)
      if (specs[i].name == text) throw std::invalid_argument("--link lists '" + text + "' twice");
  }
  std::string why;
  for (const auto& s : specs) {
    if (s.name != "loopback" && why.empty()) why = edl::testing::NetnsCluster::unsupported_reason();
  }
  if (why.empty()) edl::testing::NetnsCluster::remove_stale();
  std::vector<std::unique_ptr<LinkRun>> runs;
  for (const auto& s : specs) {
    if (s.name != "loopback" && !why.empty()) {
      std::printf("note: link %s skipped: emulated link %s\n", s.name.c_str(), why.c_str());
      continue;
    }
    auto run = std::make_unique<LinkRun>();
    run->label = s.name;
    if (s.name != "loopback") {
      try {
        run->cluster = std::make_unique<edl::testing::NetnsCluster>(f.cfg.ranks, s);
        run->label = run->cluster->effective_label();
      } catch (const std::exception& e) {
        std::printf("note: link %s skipped: %s\n", s.name.c_str(), e.what());
        continue;
      }
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

// One round on one link: the three modes in the round's rotation.
void run_round(const Flags& f, const edl::bench::Workload& w, LinkRun& link, int round) {
  std::vector<OptMode> order;
  for (int j = 0; j < 3; ++j) order.push_back(kModes[(round + j) % 3]);
  edl::bench::OptBenchConfig cfg = f.cfg;
  cfg.cluster = link.cluster.get();
  std::vector<edl::bench::ModeResult> results =
      f.processes ? edl::bench::run_processes(cfg, w, order)
                  : edl::bench::run_threads(cfg, w, order, link.label + "/" + std::to_string(round));
  for (size_t k = 0; k < order.size(); ++k) {
    const int m = static_cast<int>(order[k]);
    const auto& r = results.at(k);
    link.step[m].insert(link.step[m].end(), r.steps_ms.begin(), r.steps_ms.end());
    link.comm[m].insert(link.comm[m].end(), r.comm_ms.begin(), r.comm_ms.end());
    link.backward[m].insert(link.backward[m].end(), r.backward_ms.begin(), r.backward_ms.end());
    if (order[k] == OptMode::kOverlap) link.hidden.insert(link.hidden.end(), r.overlap.begin(), r.overlap.end());
    link.wrong[m] += r.wrong;
    if (order[k] != OptMode::kComputeOnly) link.buckets = r.buckets;
  }
}

// Table rows, JSON rows and the verdict line of one link; returns false when it has no result.
bool report(const Flags& f, const LinkRun& link, const edl::bench::Table& table, edl::bench::JsonRows& json,
            std::vector<std::string>* verdicts) {
  if (!link.error.empty()) {
    verdicts->push_back(link.label + ": failed: " + link.error);
    return false;
  }
  double med[3];
  for (int m = 0; m < 3; ++m) med[m] = edl::bench::median(link.step[m]);
  const double hidden = edl::bench::median(link.hidden);
  for (int m = 0; m < 3; ++m) {
    table.row({link.label, edl::bench::mode_name(kModes[m]), fmt(med[m]), fmt(med[m] / med[1]),
               fmt(edl::bench::median(link.backward[m])), fmt(edl::bench::median(link.comm[m])),
               std::to_string(m == 0 ? 0 : link.buckets),
               m == 2 ? fmt(hidden) : "-", std::to_string(link.wrong[m])});
    json.write(Json{{"ranks", f.cfg.ranks}, {"mode", edl::bench::mode_name(kModes[m])}, {"step_ms", med[m]},
                    {"link", link.label}});
  }
  json.write(Json{{"ranks", f.cfg.ranks}, {"overlap_fraction", hidden}, {"link", link.label}});
  // Against the perfect-overlap bound: the share of the communication time overlap still exposes,
  // (overlap - compute_only) / (no_overlap - compute_only): 0 = hidden completely, 1 = not at all.
  const double exposed_no = med[1] - med[0], exposed_ov = med[2] - med[0];
  char line[640];
  if (exposed_no > 0) {
    std::snprintf(line, sizeof line,
                  "%s: exposed share (overlap - compute_only) / (no_overlap - compute_only) = %.2f (%.1f of %.1f ms "
                  "of communication not hidden; perfect overlap = 0); overlap_fraction = %.2f",
                  link.label.c_str(), exposed_ov / exposed_no, exposed_ov, exposed_no, hidden);
  } else {
    std::snprintf(line, sizeof line,
                  "%s: no_overlap is not slower than compute_only (%.1f ms): no communication to hide on this "
                  "link in this run; overlap_fraction = %.2f",
                  link.label.c_str(), exposed_no, hidden);
  }
  verdicts->push_back(line);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::vector<std::unique_ptr<LinkRun>> links;
  try {
    f = parse(argc, argv);
    links = make_links(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optimizer_bench: %s\n", e.what());
    return 2;
  }
  if (links.empty()) {
    std::fprintf(stderr, "optimizer_bench: none of the links in --link can run here (loopback always can)\n");
    return 2;
  }
  edl::bench::Workload w;
  w.layers = edl::bench::resnet20_layers();
  size_t total_params = 0, tensors = 0;
  for (const auto& l : w.layers) {
    for (size_t c : l.counts) total_params += c;
    tensors += l.counts.size();
  }
  const double gemm_ms = edl::bench::calibrate_gemm_ms();
  w.reps = edl::bench::backward_reps(w.layers, f.backward_ms, gemm_ms);
  std::printf("optimizer_bench: %zu parameters in %zu tensors, %d ranks (%s), backward %.0f ms (1 core, %.2f us "
              "per GEMM), bucket %zu KiB%s\n",
              total_params, tensors, f.cfg.ranks, f.processes ? "processes" : "threads", f.backward_ms, gemm_ms * 1e3,
              f.cfg.bucket_bytes >> 10, f.cfg.fp16 ? ", fp16" : "");

  for (int round = 0; round < f.rounds; ++round) {
    for (size_t i = 0; i < links.size(); ++i) {
      LinkRun& link = *links[(round + i) % links.size()];  // rotate the links too
      if (!link.error.empty()) continue;
      try {
        run_round(f, w, link, round);
      } catch (const std::exception& e) {
        link.error = e.what();
        std::fprintf(stderr, "optimizer_bench: link %s, round %d: %s\n", link.label.c_str(), round, e.what());
      }
    }
  }

  edl::bench::JsonRows json(f.json_path);
  edl::bench::Table table({"link", "mode", "step_ms", "x_no_ovl", "bwd_ms", "comm_ms", "buckets", "hidden", "wrong"}, 13);
  table.header();
  std::vector<std::string> verdicts;
  bool all_ok = true;
  long wrong = 0;
  for (const auto& link : links) {
    all_ok = report(f, *link, table, json, &verdicts) && all_ok;
    wrong += link->wrong[0] + link->wrong[1] + link->wrong[2];
  }
  for (const auto& v : verdicts) std::printf("%s\n", v.c_str());
  if (wrong > 0) std::printf("FAILED: %ld sampled gradient elements held the wrong reduction\n", wrong);
  return wrong == 0 && all_ok ? 0 : 1;
}
