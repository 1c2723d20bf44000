// The process-wide runtime state (collective/runtime_state.h); edl::init() is in src/runtime/.
#include "collective/runtime_state.h"

#include <unistd.h>

#include <utility>

#include "collective/device.h"
#include "collective/engine.h"
#include "collective/socket.h"
#include "collective/tcp_communicator.h"
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
  if (prev && prev->engine) prev->engine->stop();
}

std::shared_ptr<Generation> Runtime::make_generation(uint64_t id, const std::string& prefix, int rank, int size,
                                                     int local_rank, int local_size,
                                                     std::chrono::milliseconds connect_timeout,
                                                     std::shared_ptr<const std::atomic<bool>> cancel,
                                                     const std::vector<std::string>& addresses) {
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
  co.secret = config_.secret;
  co.cancel = std::move(cancel);
  co.transport = collective::transport_from_name(config_.transport);
  co.hierarchical = collective::hierarchical_from_name(config_.hierarchical);
  co.mesh = collective::mesh_from_name(config_.mesh);
  co.host_id = config_.hostname;
  // Every rank counts the same ranks on its host (the elastic decision's hosts, or edl-run's
  // EDL_LOCAL_SIZE): the sparse mesh then skips its transport exchange.
  co.one_host_known = size > 1 && local_size == size;
  uint64_t mesh_calls = 0;
  if (!addresses.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mesh_fd_ < 0) throw InvalidArgument("make_generation: mesh addresses given, but no mesh listener is open");
    co.addresses = addresses;
    co.listen_fd = mesh_fd_;
    mesh_calls = mesh_calls_;
  }
  std::shared_ptr<Store> store = store_ ? store_ : make_memory_store();
  g->comm = Communicator::create(store, prefix, rank, size, co);
  if (!addresses.empty()) {  // built: the listener is needed again only by the next arrival
    std::lock_guard<std::mutex> lock(mu_);
    if (mesh_calls_ == mesh_calls && mesh_fd_ == co.listen_fd) {
      close(mesh_fd_);
      mesh_fd_ = -1;
      mesh_address_.clear();
    }
  }
  if (auto plugin = collective::device_plugin()) {
    collective::DeviceGenerationContext dc;
    dc.id = id;
    dc.rank = rank;
    dc.size = size;
    dc.local_rank = local_rank;
    dc.local_size = local_size;
    dc.store = store;
    dc.prefix = prefix;
    dc.timeout = co.timeout;
    dc.connect_timeout = co.connect_timeout;
    dc.cancel = co.cancel;
    dc.host = g->comm;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gen_) dc.previous = gen_->device;
    }
    dc.gpu_transport = config_.gpu_transport;
    dc.nccl_shrink = config_.nccl_shrink;
    dc.fusion_threshold = config_.fusion_threshold;
    dc.test_kill_at = config_.test_kill_at;
    g->device = plugin->make(dc);
  }
  collective::EngineOptions eo;
  eo.fusion_threshold_bytes = config_.fusion_threshold;
  eo.cycle_time = std::chrono::microseconds(static_cast<int64_t>(config_.cycle_time_ms * 1000.0));
  eo.tick = config_.engine_tick;
  eo.request_timeout = std::chrono::milliseconds(config_.timeout_ms);  // Handle::wait() gets the collective deadline
  g->engine = std::make_shared<collective::Engine>(g->comm, eo, g->device);
  return g;
}

bool Runtime::start(const Config& config, std::shared_ptr<Store> store) {
  std::lock_guard<std::mutex> lock(mu_);
  if (initialized_) return false;
  config_ = config;
  store_ = std::move(store);
  return true;
}

std::shared_ptr<Store> Runtime::ensure_store() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_) store_ = make_memory_store();
  return store_;
}

void Runtime::mark_initialized() {
  std::lock_guard<std::mutex> lock(mu_);
  initialized_ = true;
}

bool Runtime::finish() {
  std::shared_ptr<Generation> gen;
  int mesh_fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!initialized_) return false;
    initialized_ = false;
    gen = std::move(gen_);
    store_.reset();
    mesh_fd = std::exchange(mesh_fd_, -1);
    mesh_address_.clear();
  }
  if (gen && gen->engine) gen->engine->stop();
  if (mesh_fd >= 0) close(mesh_fd);
  return true;
}

std::string Runtime::mesh_address() {
  std::lock_guard<std::mutex> lock(mu_);
  ++mesh_calls_;
  if (mesh_fd_ < 0) {
    int port = 0;
    mesh_fd_ = collective::listen_any_port(config_.bind_address, &port, mesh_port_ > 0 ? mesh_port_ : -1);
    mesh_port_ = port;
    mesh_address_ = config_.bind_address + ":" + std::to_string(port);
  }
  return mesh_address_;
}

}  // namespace edl::detail
