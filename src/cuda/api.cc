// The public device API (include/edl/cuda.h): requests go to the current generation's engine with
// what CudaBackend::capture() recorded on the caller's stream; a world of one skips the engine.
#include <memory>

#include "collective/engine.h"
#include "collective/handle.h"
#include "collective/kind.h"
#include "collective/runtime_state.h"
#include "cuda/cuda_backend.h"
#include "cuda/nccl_comm.h"
#include "edl/cuda.h"
#include "edl/error.h"

namespace edl::cuda {
namespace {

using collective::kDeviceAllgather;
using collective::kDeviceAllreduce;
using collective::kDeviceAllreduceBf16;
using collective::kDeviceAllreduceFp16;
using collective::kDeviceBroadcast;

struct Current {
  std::shared_ptr<detail::Generation> gen;  // kept for the call
  CudaBackend* backend;
};

Current current(const char* call) {
  auto gen = detail::Runtime::instance().generation();
  auto* b = dynamic_cast<CudaBackend*>(gen->device.get());
  if (!b || !gen->engine)
    throw InvalidArgument(std::string("edl::cuda::") + call +
                          ": the current generation has no GPU side (it was built before libedl_cuda was loaded)");
  return Current{std::move(gen), b};
}

cudaStream_t native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

void check_pointer(const void* p, size_t count, const char* call, const char* what) {
  EDL_CHECK(p != nullptr || count == 0, InvalidArgument,
            std::string("edl::cuda::") + call + ": " + what + " is null but count is " + std::to_string(count));
}

// A handle whose collective needs no exchange (a world of one): complete at once, finished on the
// device when the caller's stream reaches the call.
Handle local_handle(CudaBackend& b, const std::shared_ptr<CudaRequest>& r, const char* what) {
  auto state = std::make_shared<detail::HandleState>();
  state->device = b.local_completion(r, what);
  state->complete();
  return Handle(state);
}

CudaCompletion* completion_of(const Handle& h, const char* call) {
  const auto& s = detail::HandleAccess::state(h);
  EDL_CHECK(s != nullptr, InvalidArgument, std::string("edl::cuda::") + call + ": empty handle");
  s->wait();  // the host part: negotiated and queued (rethrows an error from before that)
  auto* c = dynamic_cast<CudaCompletion*>(s->device.get());
  EDL_CHECK(c != nullptr, InvalidArgument,
            std::string("edl::cuda::") + call + ": the handle is not one of a device collective");
  if (!c->succeeded() && c->query()) c->wait();  // finished: throws when its generation failed first
  return c;
}

}  // namespace

bool available(std::string* why) { return probe_device(why); }

int device() { return chosen_device(); }

std::string generation_mode(std::string* reason) {
  auto gen = detail::Runtime::instance().generation();
  auto* b = dynamic_cast<CudaBackend*>(gen->device.get());
  if (!b) {
    if (reason) *reason = "the generation has no GPU side";
    return "disabled";
  }
  if (reason) *reason = b->disabled_reason();
  return plan_mode_name(b->mode());
}

std::string nccl_version(bool* revoke_and_shrink) {
  const NcclApi& api = nccl_api();
  if (revoke_and_shrink) *revoke_and_shrink = api.can_shrink();
  return api.version.text();
}

namespace {

Handle enqueue_allreduce(const Current& c, void* data, size_t count, DataType dtype, Stream stream, ReduceOp op,
                         const std::string& name, Compression compression, std::shared_ptr<void> hold, bool will_wait) {
  check_pointer(data, count, "allreduce", "data");
  EDL_CHECK(compression == Compression::kNone || dtype == DataType::kFloat32, InvalidArgument,
            std::string("edl::cuda::allreduce: compression needs float32 tensors, got ") + dtype_name(dtype));
  auto r = c.backend->capture(native(stream));
  r->data = data;
  r->count = count;
  r->hold = std::move(hold);
  if (c.gen->size == 1) return local_handle(*c.backend, r, "device allreduce");
  const uint8_t kind = compression == Compression::kFp16   ? kDeviceAllreduceFp16
                       : compression == Compression::kBf16 ? kDeviceAllreduceBf16
                                                           : kDeviceAllreduce;
  return c.gen->engine->device_request(kind, r, count, dtype, op, -1, name, will_wait);
}

}  // namespace

Handle allreduce_async(void* data, size_t count, DataType dtype, Stream stream, ReduceOp op, const std::string& name,
                       Compression compression, std::shared_ptr<void> hold) {
  return enqueue_allreduce(current("allreduce_async"), data, count, dtype, stream, op, name, compression,
                           std::move(hold), false);
}

void allreduce(void* data, size_t count, DataType dtype, Stream stream, ReduceOp op, const std::string& name,
               Compression compression) {
  Current c = current("allreduce");  // keeps the generation for the wait
  enqueue_allreduce(c, data, count, dtype, stream, op, name, compression, nullptr, true).wait();
}

Handle broadcast_async(void* data, size_t count, DataType dtype, int root, Stream stream, const std::string& name,
                       std::shared_ptr<void> hold) {
  check_pointer(data, count, "broadcast_async", "data");
  Current c = current("broadcast_async");
  EDL_CHECK(root >= 0 && root < c.gen->size, InvalidArgument,
            "edl::cuda::broadcast_async: root " + std::to_string(root) + " is outside [0, " +
                std::to_string(c.gen->size) + ")");
  auto r = c.backend->capture(native(stream));
  r->data = data;
  r->count = count;
  r->hold = std::move(hold);
  if (c.gen->size == 1) return local_handle(*c.backend, r, "device broadcast");
  return c.gen->engine->device_request(kDeviceBroadcast, r, count, dtype, ReduceOp::kSum, root, name);
}

void broadcast(void* data, size_t count, DataType dtype, int root, Stream stream, const std::string& name) {
  Current c = current("broadcast");  // keeps the generation for the wait
  broadcast_async(data, count, dtype, root, stream, name).wait();
}

Handle allgather_async(const void* in, size_t count, DataType dtype, void* out, size_t out_capacity, Stream stream,
                       std::vector<size_t>* counts, const std::string& name, std::shared_ptr<void> hold) {
  check_pointer(in, count, "allgather_async", "in");
  check_pointer(out, out_capacity, "allgather_async", "out");
  (void)dtype_size(dtype);
  Current c = current("allgather_async");
  auto r = c.backend->capture(native(stream));
  r->in = in;
  r->count = count;
  r->out = out;
  r->out_capacity = out_capacity;
  r->counts = counts;
  if (c.gen->size == 1) {
    EDL_CHECK(out_capacity >= count, InvalidArgument,
              "device allgather: rank 0's output has room for " + std::to_string(out_capacity) +
                  " elements, the gathered result has " + std::to_string(count));
    if (count > 0)
      check(cudaMemcpyAsync(out, in, count * dtype_size(dtype), cudaMemcpyDeviceToDevice, native(stream)),
            "cudaMemcpyAsync");
    if (counts) *counts = {count};
    r = c.backend->capture(native(stream));  // after the copy
    r->hold = std::move(hold);
    return local_handle(*c.backend, r, "device allgather");
  }
  r->hold = std::move(hold);
  return c.gen->engine->device_request(kDeviceAllgather, r, count, dtype, ReduceOp::kSum, -1, name);
}

void allgather(const void* in, size_t count, DataType dtype, void* out, size_t out_capacity, Stream stream,
               std::vector<size_t>* counts, const std::string& name) {
  Current c = current("allgather");
  allgather_async(in, count, dtype, out, out_capacity, stream, counts, name).wait();
}

void stream_wait(const Handle& h, Stream stream) {
  CudaCompletion* c = completion_of(h, "stream_wait");
  check_arg(cudaStreamWaitEvent(native(stream), c->event(), 0), "cudaStreamWaitEvent");
}

Event completion_event(const Handle& h) { return reinterpret_cast<Event>(completion_of(h, "completion_event")->event()); }

}  // namespace edl::cuda
