// Wiring of the process-wide elastic worker into the Runtime (called by src/runtime/runtime.cc).
// Thread-safety: start/stop from edl::init/shutdown only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "edl/store.h"
#include "elastic/worker.h"

namespace edl::elastic {

WorkerOptions worker_options_from(const Config& config);
// The job's control-plane store when this process was started by edl-run (EDL_STORE, the job secret,
// EDL_STORE_TIMEOUT_MS), else nullptr. A new connection on every call: the elastic worker opens a
// second one for its beat thread (docs/elastic.md, "Cost as the job grows").
std::shared_ptr<Store> connect_job_store(const Config& config);
// Creates the process's Worker, installs the SIGTERM handler (graceful leave) and joins the job:
// returns once this process is a member of a generation (its Runtime generation installed).
void start_elastic(const Config& config, std::shared_ptr<Store> store);
// Leaves: stops the lease thread and removes the lease. Idempotent.
void stop_elastic();

// Straggler rebalancing (src/data, docs/data.md): the latest step times the batch-boundary agreement
// gathered in `generation` — per rank, compute seconds and records of one step, identical on every
// member at the same boundary; *seq grows with every boundary. False without an elastic worker or
// before the generation's first gathered step.
bool latest_step_times(uint64_t generation, uint64_t* seq, std::vector<double>* compute_s,
                       std::vector<uint64_t>* records);
// The records of this worker's current step, gathered at the next batch boundary (no-op without an
// elastic worker).
void note_step_records(uint64_t records);

}  // namespace edl::elastic
