// The public collective API (include/edl/collectives.h): every call goes through the background
// engine of the current generation; blocking calls are the asynchronous call plus wait() (which
// tells the engine not to wait for more requests: the round starts at once).
// Also the world accessors of collective/world.h.
#include <chrono>

#include "collective/engine.h"
#include "collective/world.h"
#include "collective/runtime_state.h"
#include "collective/wait_time.h"
#include "edl/collectives.h"
#include "edl/error.h"

namespace edl {
namespace {

thread_local uint64_t t_blocked_ns = 0;  // collective/wait_time.h

std::shared_ptr<detail::Generation> current() {
  auto g = detail::Runtime::instance().generation();
  if (!g->engine && g->rank < 0)  // the elastic runtime's mark of a worker that left (edl/elastic.h)
    throw InvalidArgument("edl: this process is no longer a member of the job (it left, or edl::elastic::run "
                          "threw): no collective can run; rank() is -1 and size() 0");
  if (!g->engine) throw InternalError("the current generation has no collective engine");
  return g;
}

}  // namespace

bool Handle::poll() const {
  EDL_CHECK(state_ != nullptr, InvalidArgument, "Handle::poll() on an empty handle");
  return state_->finished() && (!state_->device || state_->device->query());
}

void Handle::wait() const {
  EDL_CHECK(state_ != nullptr, InvalidArgument, "Handle::wait() on an empty handle");
  if (state_->finished() && (!state_->device || state_->device->query())) {
    state_->wait();  // rethrows its error; no time blocked
    if (state_->device) state_->device->wait();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  struct Count {  // also when wait() throws
    std::chrono::steady_clock::time_point t0;
    ~Count() {
      const auto ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      t_blocked_ns += ns;                      // this thread's total (straggler compute time)
      collective::add_handle_wait_ns(ns);      // the process total (job metrics reporter)
    }
  } count{t0};
  state_->wait();
  if (state_->device) state_->device->wait();  // a device request: until the device work finished
}

Handle allreduce_async(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& name) {
  return current()->engine->allreduce(data, count, dtype, op, name);
}

void allreduce(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& name) {
  auto g = current();  // keeps the generation alive until the call returns
  g->engine->allreduce(data, count, dtype, op, name, true).wait();
}

Handle broadcast_async(void* data, size_t count, DataType dtype, int root, const std::string& name) {
  return current()->engine->broadcast(data, count, dtype, root, name);
}

void broadcast(void* data, size_t count, DataType dtype, int root, const std::string& name) {
  auto g = current();
  g->engine->broadcast(data, count, dtype, root, name, true).wait();
}

Handle allgather_async(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                       std::vector<size_t>* counts, const std::string& name) {
  return current()->engine->allgather(in, count, dtype, &out, counts, name);
}

void allgather(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out, std::vector<size_t>* counts,
               const std::string& name) {
  auto g = current();
  g->engine->allgather(in, count, dtype, &out, counts, name, true).wait();
}

Handle barrier_async() { return current()->engine->barrier(""); }

void barrier() {
  auto g = current();
  g->engine->barrier("", true).wait();
}

namespace collective {

uint64_t thread_blocked_ns() { return t_blocked_ns; }

std::shared_ptr<Store> world_store() {
  auto s = detail::Runtime::instance().store();
  return s ? s : make_memory_store();
}

EngineStats world_engine_stats() { return current()->engine->stats(); }

std::shared_ptr<TcpCommunicator> make_world_communicator(const std::string& tag) {
  return make_world_communicator(tag, transport_from_name(detail::Runtime::instance().config().transport));
}

std::shared_ptr<TcpCommunicator> make_world_communicator(const std::string& tag, Transport transport) {
  auto& rt = detail::Runtime::instance();
  auto g = rt.generation();
  const Config& c = rt.config();
  CommunicatorOptions o;
  o.timeout = std::chrono::milliseconds(c.timeout_ms);
  o.connect_timeout = std::chrono::milliseconds(c.connect_timeout_ms);
  o.bind_address = c.bind_address;
  o.generation = g->id;
  o.transport = transport;
  o.hierarchical = hierarchical_from_name(c.hierarchical);
  o.host_id = c.hostname;
  return TcpCommunicator::connect(world_store(), c.job_id + "/" + tag + "/", g->rank, g->size, o);
}

}  // namespace collective
}  // namespace edl
