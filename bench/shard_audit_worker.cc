// shard_audit_worker: the training program that bench/shard_audit runs under `edl-run` (elastic mode).
//
// The "model" is a per-record counter vector (one int32 per record per epoch) registered in the
// elastic State. Each step the worker takes its records from the ShardGenerator (a Stateful component
// of the same State), marks them, the marks are summed by allreduce into the counters, and
// notify_batch_end() commits. So the counters of the final committed state say exactly how many times
// each record contributed to the model that survived every kill, join and leave.
// On finishing, the worker writes the committed counters to <out>/final.<worker-id> and, every few
// steps, "<epoch> <step>" to <out>/progress (for the bench's event log).
#include "common/bench_util.h"
#include "common/record_audit.h"
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "edl/data.h"
#include "edl/edl.h"

int main(int argc, char** argv) {
  cxxopts::Options opts("shard_audit_worker", "elastic exactly-once audit worker (run by shard_audit)");
  opts.add_options()("out", "output directory", cxxopts::value<std::string>());
  edl::bench::add_audit_flags(opts, edl::bench::AuditDefaults{},
                              "do NOT register the dispatcher in the State (shows what the audit catches)");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  const std::string out = args["out"].as<std::string>();
  const uint64_t N = args["records"].as<uint64_t>();
  const int64_t epochs = args["epochs"].as<int64_t>();
  const int step_ms = args["step-ms"].as<int>();
  try {
    edl::init();
    edl::data::ShardGenerator shards(edl::bench::audit_shard_options(args));
    edl::bench::RecordCounts audit(N, epochs);
    std::vector<int32_t>& counts = audit.counts;
    edl::elastic::State state;
    state.register_tensor("counts", counts.data(), counts.size(), edl::DataType::kInt32);
    if (!args.count("negative-control")) state.register_component("shards", &shards);
    bool finished = false;  // false for a worker that left gracefully or was never admitted
    edl::elastic::run(state, [&] {
      for (;;) {
        edl::data::StepRecords s = shards.next();
        if (s.end_of_data) {
          finished = true;
          break;
        }
        audit.mark(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        audit.reduce();
        if (s.step % 5 == 0 && edl::rank() == 0) {
          std::ofstream p(out + "/progress.tmp");
          p << s.epoch << " " << s.step << "\n";
          p.close();
          std::rename((out + "/progress.tmp").c_str(), (out + "/progress").c_str());
        }
        edl::notify_batch_end();
      }
    });
    if (!finished) {
      edl::shutdown();
      return 0;
    }
    state.commit();
    const char* wid = std::getenv("EDL_WORKER_ID");
    std::string name = out + "/final." + (wid ? std::string(wid) : std::to_string(getpid()));
    std::ofstream f(name + ".tmp", std::ios::binary);
    f.write(reinterpret_cast<const char*>(counts.data()), counts.size() * sizeof(int32_t));
    f.close();
    std::rename((name + ".tmp").c_str(), name.c_str());
    edl::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shard_audit_worker: %s\n", e.what());
    return 1;
  }
  return 0;
}
