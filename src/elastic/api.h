// Wiring of the process-wide elastic worker into the Runtime (called by src/runtime/runtime.cc).
// Thread-safety: start/stop from edl::init/shutdown only.
#pragma once

#include <memory>

#include "common/config.h"
#include "edl/store.h"
#include "elastic/worker.h"

namespace edl::elastic {

WorkerOptions worker_options_from(const Config& config);
// Creates the process's Worker, installs the SIGTERM handler (graceful leave) and joins the job:
// returns once this process is a member of a generation (its Runtime generation installed).
void start_elastic(const Config& config, std::shared_ptr<Store> store);
// Leaves: stops the lease thread and removes the lease. Idempotent.
void stop_elastic();

}  // namespace edl::elastic
