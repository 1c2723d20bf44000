// shard_audit: does every record of every epoch contribute exactly once to the model that survives
// random kills, joins and graceful leaves? (issue 4; docs/data.md)
//
// --mode processes (default): starts `edl-run` in elastic mode with shard_audit_worker, then injects
//   --events random events: kill -9 of a worker (edl-run restarts it: it rejoins), a join (one more
//   slot in the host-discovery file) or a graceful leave (one slot fewer: edl-run sends SIGTERM).
//   The workers' model is a per-record counter vector in the elastic State; the final committed
//   counters are written by every worker that finished, and audited here.
// --mode threads: the same audit on the in-process simulation (testing/shard_sim.h: ranks as
//   objects sharing a memory store, kills before/after the step's allreduce with partial commits).
// Rows (per epoch): {"bench":"shard_audit","mode","epoch","records","trained_once","trained_twice",
// "never","events"}; exit code 0 only if every epoch has trained_once = records.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "shard_audit.h"
#include "testing/shard_sim.h"

using namespace edl::bench;

namespace {

Audit run_threads(const cxxopts::ParseResult& a) {
  edl::testing::SimOptions o;
  o.records = a["records"].as<uint64_t>();
  o.records_per_shard = a["records-per-shard"].as<uint64_t>();
  o.epochs = a["epochs"].as<int>();
  o.initial_workers = a["np"].as<int>();
  o.max_workers = a["max-np"].as<int>();
  o.events = a["events"].as<int>();
  o.seed = a["seed"].as<uint64_t>();
  o.threads = true;
  o.min_batch = o.max_batch = a["batch"].as<uint64_t>();
  edl::testing::Simulation sim(o);
  auto r = sim.run();
  Audit res;
  res.epochs = r.epochs;
  res.kills = r.kills;
  res.joins = r.joins;
  res.leaves = r.leaves;
  res.error = r.error;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("shard_audit", "exactly-once records per epoch under random kills, joins and leaves");
  opts.add_options()("mode", "processes (edl-run) | threads (in-process simulation)",
                     cxxopts::value<std::string>()->default_value("processes"))(
      "edl-run", "path of edl-run (default: the build tree's)", cxxopts::value<std::string>()->default_value(""))(
      "worker", "path of shard_audit_worker (default: next to this program)",
      cxxopts::value<std::string>()->default_value(""))("np", "initial workers", cxxopts::value<int>()->default_value("3"))(
      "max-np", "most workers", cxxopts::value<int>()->default_value("5"))(
      "events", "random kills + joins + leaves", cxxopts::value<int>()->default_value("12"))(
      "event-gap-ms", "mean gap between events", cxxopts::value<int>()->default_value("600"))(
      "epochs", "epochs", cxxopts::value<int>()->default_value("3"))(
      "records", "records per epoch", cxxopts::value<uint64_t>()->default_value("4000"))(
      "records-per-shard", "records per shard", cxxopts::value<uint64_t>()->default_value("50"))(
      "batch", "records per worker per step", cxxopts::value<uint64_t>()->default_value("8"))(
      "step-ms", "simulated compute per step (processes)", cxxopts::value<int>()->default_value("15"))(
      "seed", "seed of the events and the shuffle", cxxopts::value<uint64_t>()->default_value("1"))(
      "timeout-s", "give up after this long (processes)", cxxopts::value<int>()->default_value("300"))(
      "store", "processes: external store for edl-run (redis://HOST:PORT); default: edl-run's embedded store",
      cxxopts::value<std::string>()->default_value(""))(
      "job-restarts", "processes: whole-job crashes (kill -9 of edl-run and all workers) in mid-run, each "
                      "followed by a new edl-run resuming from EDL_CHECKPOINT_DIR",
      cxxopts::value<int>()->default_value("1"))(
      "negative-control", "processes: the workers do not register the dispatcher in their State, so a rollback "
                          "does not roll the shard progress back — the audit must then FAIL")(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  const std::string mode = args["mode"].as<std::string>();
  if (mode != "processes" && mode != "threads") {
    std::fprintf(stderr, "shard_audit: --mode must be processes or threads, got '%s'\n", mode.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  Audit res = mode == "threads" ? run_threads(args) : run_processes(args, argv[0]);
  JsonRows json(args["json"].as<std::string>());
  Table table({"epoch", "records", "trained_once", "trained_twice", "never", "events"}, 14);
  std::printf("mode %s: %d kills, %d joins, %d graceful leaves, %d whole-job restarts from a checkpoint\n",
              mode.c_str(), res.kills, res.joins, res.leaves, res.restarts);
  table.header();
  bool ok = res.error.empty() && !res.epochs.empty();
  for (const auto& e : res.epochs) {
    table.row({std::to_string(e.epoch), std::to_string(e.records), std::to_string(e.trained_once),
               std::to_string(e.trained_twice), std::to_string(e.never), std::to_string(e.events)});
    json.write({{"bench", "shard_audit"}, {"mode", mode}, {"epoch", e.epoch}, {"records", e.records},
                {"trained_once", e.trained_once}, {"trained_twice", e.trained_twice}, {"never", e.never},
                {"events", e.events}});
    ok = ok && e.trained_once == e.records && e.trained_twice == 0 && e.never == 0;
  }
  if (!res.error.empty()) std::fprintf(stderr, "shard_audit: %s\n", res.error.c_str());
  const int events = res.kills + res.joins + res.leaves + res.restarts;
  std::printf("%d events (target >= 10)\n", events);
  std::printf("%s\n", ok ? "PASS: every record of every epoch trained exactly once" : "FAIL");
  return ok ? 0 : 1;
}
