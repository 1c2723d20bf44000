// Engine: requests on device memory (docs/gpu.md). They are negotiated like host requests; the
// generation's DeviceBackend runs them and returns the completion their handles wait on.
#include <string>

#include "collective/engine.h"
#include "collective/kind.h"
#include "common/timeline.h"
#include "edl/error.h"

namespace edl::collective {

Handle Engine::device_request(uint8_t kind, std::shared_ptr<DeviceRequest> request, size_t count, DataType dtype,
                              ReduceOp op, int root, const std::string& name, bool will_wait) {
  (void)dtype_size(dtype);
  EDL_CHECK(is_device_kind(kind), InvalidArgument, "device_request: kind " + std::to_string(kind) + " is not a device kind");
  EDL_CHECK(request != nullptr, InvalidArgument, "device_request: no device request");
  EDL_CHECK(static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kProduct), InvalidArgument,
            std::string(kind_name(kind)) + ": unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
  auto r = std::make_shared<Request>();
  r->name = name;
  r->device = std::move(request);
  switch (kind) {
    case kDeviceBroadcast:
      EDL_CHECK(root >= 0 && root < comm_->size(), InvalidArgument,
                "device broadcast root " + std::to_string(root) + " is outside [0, " + std::to_string(comm_->size()) + ")");
      r->desc = Desc{kind, static_cast<uint8_t>(dtype), 0, root, count};
      break;
    case kDeviceAllgather:  // counts differ legitimately between ranks: not matched
      r->desc = Desc{kind, static_cast<uint8_t>(dtype), 0, -1, 0};
      r->local_count = count;
      break;
    default:
      r->desc = Desc{kind, static_cast<uint8_t>(dtype), static_cast<uint8_t>(op), -1, count};
  }
  // Auto names are shared with the host kinds ("allreduce.<n>"): unnamed requests match by order.
  const char* auto_kind = kind == kDeviceBroadcast ? "broadcast" : kind == kDeviceAllgather ? "allgather" : "allreduce";
  return enqueue(std::move(r), auto_kind, will_wait);
}

void Engine::run_device(const std::vector<RequestPtr>& group) {
  const uint8_t kind = group[0]->desc.kind;
  const DataType dt = static_cast<DataType>(group[0]->desc.dtype);
  std::vector<DeviceRequest*> requests;
  requests.reserve(group.size());
  size_t bytes = 0;
  for (const RequestPtr& r : group) {
    requests.push_back(r->device.get());
    bytes += (kind == kDeviceAllgather ? r->local_count : r->desc.count) * dtype_size(dt);
  }
  std::exception_ptr err;
  std::shared_ptr<detail::DeviceCompletion> done;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (!device_)
      throw InvalidArgument(std::string(kind_name(kind)) + " '" + group[0]->name +
                            "': this generation has no GPU backend (libedl_cuda is not loaded)");
    done = device_->run(kind, requests, dt, static_cast<ReduceOp>(group[0]->desc.op), group[0]->desc.root);
  } catch (const InvalidArgument&) {
    err = std::current_exception();  // these requests fail; the generation goes on
  }
  const auto end = std::chrono::steady_clock::now();
  if (timeline::on()) trace_collective(group, start, end);  // the enqueue, not the device time
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.collectives;
    if (is_allreduce_kind(kind)) {
      stats_.allreduce_bytes += bytes;
      stats_.allreduce_us += std::chrono::duration<double, std::micro>(end - start).count();
      if (group.size() > 1) {
        ++stats_.fused_collectives;
        stats_.fused_tensors += group.size();
      }
    }
  }
  for (const RequestPtr& r : group) {
    if (!err) r->state->device = done;
    complete(r, err);
  }
}

void Engine::abort_device(std::exception_ptr e) {
  device_->abort(e ? e : std::make_exception_ptr(AbortedError("collective engine stopped")));
}

}  // namespace edl::collective
