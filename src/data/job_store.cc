// ShardGenerator's convenience constructor: the job's store from the process Runtime (edl::init()).
#include "collective/runtime_state.h"
#include "data/shard_generator_impl.h"
#include "elastic/api.h"
#include "edl/data/shards.h"
#include "edl/error.h"

namespace edl::data {

namespace {
std::shared_ptr<Store> job_store() {
  auto& rt = ::edl::detail::Runtime::instance();
  if (!rt.initialized() && Config::from_env().launched)  // each worker would get a private dispatcher
    throw InvalidArgument("ShardGenerator: construct it after edl::init() (this process belongs to a job: EDL_STORE is set)");
  std::shared_ptr<Store> store = rt.initialized() ? rt.store() : nullptr;
  if (!store) return make_memory_store();  // a world of one process
  return make_prefix_store(store, rt.config().job_id + "/data/");
}
}  // namespace

// The job's generator also follows the job: EDL_REBALANCE_STRAGGLERS turns rebalancing on, the elastic
// runtime supplies the gathered step times and learns each step's records, and the reproducible mode
// reads the current generation's rank and size (a static world calls no on_generation).
ShardGenerator::ShardGenerator(ShardOptions options) : ShardGenerator(job_store(), [&] {
  auto& rt = ::edl::detail::Runtime::instance();
  if (options.worker_id.empty() && rt.initialized()) options.worker_id = rt.config().worker_id;
  if (rt.initialized() && rt.config().rebalance_stragglers) options.rebalance = true;
  return std::move(options);
}()) {
  if (!::edl::detail::Runtime::instance().initialized()) return;
  impl_->poll_times = elastic::latest_step_times;
  impl_->note_step_records = elastic::note_step_records;
  impl_->world = [] {
    auto gen = ::edl::detail::Runtime::instance().generation();
    return std::make_pair(gen->rank, gen->size);
  };
}

}  // namespace edl::data
