#include "common/runtime.h"

#if __has_include("collective/engine.h")
#include "collective/engine.h"
#define EDL_HAVE_ENGINE 1
#else
#define EDL_HAVE_ENGINE 0  // transitional: the collective core is being written
#endif
#include "common/logging.h"
#include "elastic/api.h"
#include "edl/edl.h"
#include "edl/error.h"

namespace edl::detail {

Runtime& Runtime::instance() {
  static Runtime* rt = new Runtime();  // never destroyed: usable from atexit handlers and threads
  return *rt;
}

bool Runtime::initialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return initialized_;
}

std::shared_ptr<Store> Runtime::store() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_;
}

std::shared_ptr<Generation> Runtime::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!gen_) throw InvalidArgument("edl::init() has not been called");
  return gen_;
}

void Runtime::set_generation(std::shared_ptr<Generation> next) {
  std::shared_ptr<Generation> prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prev = std::move(gen_);
    gen_ = std::move(next);
  }
#if EDL_HAVE_ENGINE
  if (prev && prev->engine) prev->engine->stop();
#endif
}

std::shared_ptr<Generation> Runtime::make_generation(uint64_t id, const std::string& prefix, int rank, int size,
                                                     int local_rank, int local_size,
                                                     std::chrono::milliseconds connect_timeout) const {
#if !EDL_HAVE_ENGINE
  throw InternalError("this build has no collective engine yet");
#else
  auto g = std::make_shared<Generation>();
  g->id = id;
  g->rank = rank;
  g->size = size;
  g->local_rank = local_rank;
  g->local_size = local_size;
  CommunicatorOptions co;
  co.timeout = std::chrono::milliseconds(config_.timeout_ms);
  co.connect_timeout = std::chrono::milliseconds(config_.connect_timeout_ms);
  if (connect_timeout.count() > 0 && connect_timeout < co.connect_timeout) co.connect_timeout = connect_timeout;
  co.bind_address = config_.bind_address;
  co.generation = id;
  std::shared_ptr<Store> store = store_ ? store_ : make_memory_store();
  g->comm = Communicator::create(store, prefix, rank, size, co);
  collective::EngineOptions eo;
  eo.fusion_threshold_bytes = config_.fusion_threshold;
  eo.cycle_time = std::chrono::microseconds(static_cast<int64_t>(config_.cycle_time_ms * 1000.0));
  eo.tick = config_.engine_tick;
  g->engine = std::make_shared<collective::Engine>(g->comm, eo);
  return g;
#endif
}

void Runtime::init() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (initialized_) return;
    config_ = Config::from_env();
    log::set_level(config_.log_level);
    if (config_.launched) {
      StoreOptions so;
      so.secret = config_.secret;
      so.connect_timeout = std::chrono::milliseconds(config_.connect_timeout_ms);
      store_ = connect_store(config_.store_url, so);
    }
  }
  if (config_.elastic) {
    // The elastic worker joins the job; its group factory installs each generation (set_generation).
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!store_) store_ = make_memory_store();  // elastic without a launcher: a job of this process
      store = store_;
    }
    elastic::start_elastic(config_, store);
  } else {
    auto gen = make_generation(0, config_.job_id + "/static/", config_.rank, config_.size, config_.local_rank,
                               config_.local_size);
    set_generation(std::move(gen));
  }
  std::lock_guard<std::mutex> lock(mu_);
  initialized_ = true;
}

void Runtime::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!initialized_) return;
  }
  if (config_.elastic) elastic::stop_elastic();  // leaves the job: the lease goes away
  std::shared_ptr<Generation> gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!initialized_) return;
    initialized_ = false;
    gen = std::move(gen_);
    store_.reset();
  }
#if EDL_HAVE_ENGINE
  if (gen && gen->engine) gen->engine->stop();
#endif
}

}  // namespace edl::detail

namespace edl {

void init() { detail::Runtime::instance().init(); }
void shutdown() { detail::Runtime::instance().shutdown(); }
bool initialized() { return detail::Runtime::instance().initialized(); }
int rank() { return detail::Runtime::instance().generation()->rank; }
int size() { return detail::Runtime::instance().generation()->size; }
int local_rank() { return detail::Runtime::instance().generation()->local_rank; }
int local_size() { return detail::Runtime::instance().generation()->local_size; }

}  // namespace edl
