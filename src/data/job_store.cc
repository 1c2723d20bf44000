// ShardGenerator's convenience constructor: the job's store from the process Runtime (edl::init()).
#include "collective/runtime_state.h"
#include "edl/data/shards.h"
#include "edl/error.h"

namespace edl::data {

namespace {
std::shared_ptr<Store> job_store() {
  auto& rt = detail::Runtime::instance();
  if (!rt.initialized() && Config::from_env().launched)  // each worker would get a private dispatcher
    throw InvalidArgument("ShardGenerator: construct it after edl::init() (this process belongs to a job: EDL_STORE is set)");
  std::shared_ptr<Store> store = rt.initialized() ? rt.store() : nullptr;
  if (!store) return make_memory_store();  // a world of one process
  return make_prefix_store(store, rt.config().job_id + "/data/");
}
}  // namespace

ShardGenerator::ShardGenerator(ShardOptions options) : ShardGenerator(job_store(), [&] {
  auto& rt = detail::Runtime::instance();
  if (options.worker_id.empty() && rt.initialized()) options.worker_id = rt.config().worker_id;
  return std::move(options);
}()) {}

}  // namespace edl::data
