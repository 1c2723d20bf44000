// CudaBackend: the device side of one generation (collective/device.h), made by the plugin
// (plugin.cc) after the ranks agreed on a GenerationPlan (generation_plan.h).
//
// It owns the generation's CUDA stream (non-blocking, highest priority), its device fusion buffer
// (max(EDL_FUSION_THRESHOLD, 64 KiB)), the pinned staging buffer of the host-staged path, an event
// pool, the Monitor (failure state + watchdog) and, with NCCL, the NcclComm. run() executes one
// engine group on the stream and returns the completion the group's handles wait on:
//
//   allreduce   ordered after each request's `ready` event (recorded on the caller's stream);
//               a single tensor NCCL reduces in its own type is reduced in place; otherwise the
//               tensors are packed into the fusion buffer (fusion_layout.h: one batched kernel per
//               pass), reduced once per pass and unpacked, the average and the conversion back
//               folded into the unpack kernel. 16-bit tensors travel as float32 over NCCL (the host
//               path's arithmetic); compressed kinds send float32 tensors as float16 / bfloat16.
//   broadcast   in place (ncclBroadcast, or staged).
//   allgather   the counts and the output capacities are allgathered over the host communicator
//               first (a short output fails every rank with InvalidArgument), then ncclAllGather
//               (equal counts) or one NCCL group of broadcasts, or staged.
//   kHost       the same through pinned host memory and the generation's host communicator.
//   kLocal      a world of one: ordering only (and the allgather's copy).
// A CommError out of any step fails the generation (Monitor::fail: revoke / abort of the NCCL
// communicator, the host communicator poisoned) and propagates to the engine.
//
// Thread-safety: run() from one thread at a time (the engine's round holder); capture(),
// local_completion() and the accessors from any thread; abort() from any thread.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "collective/device.h"
#include "cuda/generation_plan.h"
#include "cuda/monitor.h"
#include "cuda/nccl_comm.h"

namespace edl::cuda {

// What libedl_cuda captured for one request on the caller's thread (collective/device.h).
class CudaRequest : public collective::DeviceRequest {
 public:
  ~CudaRequest() override;
  void* data = nullptr;                   // allreduce / broadcast: the tensor, in place
  const void* in = nullptr;               // allgather: this rank's part
  size_t count = 0;                       // elements (allgather: of `in`)
  void* out = nullptr;                    // allgather: the gathered result
  size_t out_capacity = 0;                // allgather: elements of room at `out`
  std::vector<size_t>* counts = nullptr;  // allgather: receives every rank's count (may be null)
  cudaEvent_t ready = nullptr;            // recorded on the caller's stream at enqueue
  std::shared_ptr<void> hold;             // released once the device work finished
  std::shared_ptr<EventPool> pool;
};

class CudaBackend : public collective::DeviceBackend {
 public:
  // plan.mode kDisabled: device = -1 and nothing is allocated; run() and capture() then throw
  // InvalidArgument naming plan.reason.
  CudaBackend(const collective::DeviceGenerationContext& ctx, GenerationPlan plan, int device,
              std::unique_ptr<NcclComm> nccl);
  ~CudaBackend() override;

  std::shared_ptr<detail::DeviceCompletion> run(uint8_t kind, const std::vector<collective::DeviceRequest*>& group,
                                                DataType dtype, ReduceOp op, int root) override;
  void abort(std::exception_ptr error) override;

  // A request ordered after the work queued so far on `stream` (throws InvalidArgument when the GPU
  // path is off in this generation or the stream is not on this generation's device).
  std::shared_ptr<CudaRequest> capture(cudaStream_t stream);
  // The completion of a request that needs no exchange (a world of one): its ready event.
  std::shared_ptr<CudaCompletion> local_completion(const std::shared_ptr<CudaRequest>& r, const std::string& what);
  // A 1-element allreduce, bounded by `deadline`: connects NCCL's peers while the generation is
  // being built (a member that died is found here, not in the first training step).
  void warm_up(Clock::time_point deadline);

  PlanMode mode() const { return plan_.mode; }
  bool uses_nccl() const { return plan_.mode == PlanMode::kShrink || plan_.mode == PlanMode::kInit; }
  const std::string& disabled_reason() const { return plan_.reason; }
  int device() const { return device_; }
  int size() const { return size_; }
  uint64_t generation() const { return generation_; }
  // This generation's communicator as the parent of the next one's shrink (null when none / aborted).
  NcclComm* shrink_parent() const { return nccl_ && !nccl_->aborted() ? nccl_.get() : nullptr; }

 private:
  struct Wire;  // how an allreduce group travels (cuda_backend.cc)
  void reduce_group(const std::vector<CudaRequest*>& rs, uint8_t kind, DataType dt, ReduceOp op, Clock::time_point dl);
  // In-place reduction of `elements` of the fusion buffer (NCCL, staged or nothing).
  void reduce_buffer(size_t elements, DataType wire, ReduceOp op, Clock::time_point dl);
  void broadcast(CudaRequest& r, DataType dt, int root, Clock::time_point dl);
  void allgather(CudaRequest& r, DataType dt, Clock::time_point dl);
  // Host-staged pieces (host_staged.cc).
  void staged_reduce(size_t bytes, size_t elements, DataType wire, ReduceOp op, Clock::time_point dl);
  void staged_broadcast(CudaRequest& r, size_t bytes, int root, Clock::time_point dl);
  void staged_allgather(CudaRequest& r, size_t es, const std::vector<size_t>& counts, Clock::time_point dl);
  // Waits (bounded, abortable) until the stream's queued work has finished.
  void sync_stream(const char* what, Clock::time_point dl);
  std::shared_ptr<CudaCompletion> finish(std::vector<std::shared_ptr<void>> holds, const std::string& what,
                                         Clock::time_point dl);
  void teardown(const std::string& reason);
  std::exception_ptr probe();

  uint64_t generation_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Communicator> host_;
  GenerationPlan plan_;
  int device_;
  std::unique_ptr<NcclComm> nccl_;
  cudaStream_t stream_ = nullptr;
  void* fusion_ = nullptr;        // device
  size_t fusion_bytes_ = 0;
  void* staging_ = nullptr;       // pinned host (kHost)
  std::shared_ptr<EventPool> pool_;
  std::shared_ptr<Monitor> monitor_;
};

}  // namespace edl::cuda
