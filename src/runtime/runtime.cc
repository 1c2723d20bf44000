// The process-wide runtime: edl::init() / edl::shutdown() and the world accessors of include/edl/edl.h.
//
// This is the top of the library's layering (common <- collective <- elastic <- optim, data <- runtime):
// it reads the configuration, connects the job's store, and then either installs the one static
// generation (EDL_RANK / EDL_SIZE) in the collective layer's Runtime state or starts the elastic
// worker, whose group factory installs a generation after each rendezvous.
//
// Thread-safety: init()/shutdown() are meant to be called once each, from the program's main thread;
// the accessors are safe from any thread after init().
#include <unistd.h>

#include "collective/runtime_state.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "edl/edl.h"
#include "edl/error.h"
#include "elastic/api.h"
#include "elastic/launcher_link.h"
#include "elastic/worker_metrics.h"

namespace edl {
namespace {

// EDL_TIMELINE: the process's timeline file. Chrome pid: the rank in static mode (stable), the OS
// process id in elastic mode (ranks change between generations).
void start_timeline(const Config& config) {
  if (config.timeline_path.empty()) return;
  timeline::Options o;
  o.path = config.timeline_path;
  o.variable = "EDL_TIMELINE";
  o.pid = config.elastic ? getpid() : config.rank;
  o.process_name = "worker " + config.worker_id + (config.elastic ? "" : " rank " + std::to_string(config.rank));
  timeline::start(o);
}

}  // namespace

void init() {
  auto& rt = detail::Runtime::instance();
  if (rt.initialized()) return;
  const Config config = Config::from_env();
  log::set_level(config.log_level);
  start_timeline(config);
  if (!rt.start(config, elastic::connect_job_store(config))) return;
  metrics::WorkerMetrics::instance().start(config);  // reports to edl-run when EDL_METRICS_ADDR is set
  if (config.elastic) {
    // The elastic worker joins the job (a job of this process alone without a launcher); its group
    // factory installs each generation (Runtime::set_generation).
    elastic::start_elastic(config, rt.ensure_store());
  } else {
    // No orphans in static mode either: exit when edl-run dies (EDL_LAUNCHER_FD); SIGTERM keeps its
    // default meaning (the callback declines, so the previous disposition runs).
    elastic::install_launcher_link(config, [] { return false; });
    metrics::WorkerMetrics::instance().set_generation(0, config.rank, config.size);
    rt.set_generation(rt.make_generation(0, config.job_id + "/static/", config.rank, config.size,
                                         config.local_rank, config.local_size));
  }
  rt.mark_initialized();
}

void shutdown() {
  auto& rt = detail::Runtime::instance();
  if (!rt.initialized()) return;
  metrics::WorkerMetrics::instance().stop();  // the last report, while the engine's statistics exist
  if (rt.config().elastic) {
    elastic::stop_elastic();  // leaves the job: the lease goes away
  } else {
    elastic::uninstall_launcher_link();
  }
  rt.finish();                                      // stops the generation's engine
  timeline::stop();                                 // closes the timeline file (EDL_TIMELINE)
}

bool initialized() { return detail::Runtime::instance().initialized(); }
namespace {
// The current generation; a clear error for a stop-free newcomer that has not joined yet.
std::shared_ptr<detail::Generation> joined() {
  auto& rt = detail::Runtime::instance();
  try {
    return rt.generation();
  } catch (const InvalidArgument&) {
    if (!rt.initialized()) throw;
    throw InvalidArgument("edl: this worker has not joined the job yet: with EDL_JOIN=stopfree a worker that "
                          "starts while the job runs joins in edl::elastic::run(), where rank() and size() are known");
  }
}
}  // namespace

int rank() { return joined()->rank; }
int size() { return joined()->size; }
int local_rank() { return joined()->local_rank; }
int local_size() { return joined()->local_size; }

bool deterministic() {
  auto& rt = detail::Runtime::instance();
  return rt.initialized() ? rt.config().deterministic : Config::from_env().deterministic;
}

}  // namespace edl
