// ShardGenerator's convenience constructor: the job's store from the process Runtime (edl::init()).
#include "common/runtime.h"
#include "edl/data/shards.h"

namespace edl::data {

namespace {
std::shared_ptr<Store> job_store() {
  auto& rt = detail::Runtime::instance();
  std::shared_ptr<Store> store = rt.initialized() ? rt.store() : nullptr;
  if (!store) return make_memory_store();
  return make_prefix_store(store, rt.config().job_id + "/data/");
}
}  // namespace

ShardGenerator::ShardGenerator(ShardOptions options) : ShardGenerator(job_store(), [&] {
  auto& rt = detail::Runtime::instance();
  if (options.worker_id.empty() && rt.initialized()) options.worker_id = rt.config().worker_id;
  return std::move(options);
}()) {}

}  // namespace edl::data
