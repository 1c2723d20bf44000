// The Horovod-style collective API on the current world (see edl.h for init()).
//
// Every collective exists in a blocking form and an asynchronous form returning a Handle.
// Asynchronous allreduces go to the background engine, which fuses small tensors into a fusion
// buffer; requests are matched across ranks BY NAME, so all ranks must use the same names for the
// same tensors (the order of requests may differ between ranks). An empty name means "the n-th
// unnamed request of this kind", which only matches when every rank issues them in the same order.
//
// Buffers passed to an asynchronous call must stay valid and untouched until the handle completes.
// Errors (CommError subclasses, MismatchError, ...) are thrown by the blocking call or by
// Handle::wait(). After a CommError the current communicator is poisoned; elastic jobs recover via
// edl::elastic::run, others should exit.
//
// Thread-safety: the free functions may be called from any thread; a Handle may be polled/waited
// from any thread, and wait() may be called more than once. wait() may run the engine's pending
// collectives on the calling thread (when the engine's own thread is idle).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/types.h"

namespace edl {

namespace detail {
struct HandleState;
struct HandleAccess;  // collective/handle.h: the state behind a Handle, for edl::cuda
}

// Completion handle of an asynchronous collective.
class EDL_API Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}
  bool valid() const { return state_ != nullptr; }
  // True once the operation finished (successfully or not). Never blocks.
  bool poll() const;
  // Blocks until finished; rethrows the operation's error, if any. Waiting tells the background
  // engine that no more requests are coming for now: a still-queued request is negotiated at once
  // instead of after the fusion window (enqueue a whole burst before waiting on any of it).
  void wait() const;

 private:
  friend struct detail::HandleAccess;
  std::shared_ptr<detail::HandleState> state_;
};

// In-place allreduce of count elements of dtype. Default op: average (as Horovod).
EDL_API void allreduce(void* data, size_t count, DataType dtype, ReduceOp op = ReduceOp::kAverage,
                       const std::string& name = "");
EDL_API Handle allreduce_async(void* data, size_t count, DataType dtype, ReduceOp op = ReduceOp::kAverage,
                               const std::string& name = "");

// In-place broadcast from root.
EDL_API void broadcast(void* data, size_t count, DataType dtype, int root, const std::string& name = "");
EDL_API Handle broadcast_async(void* data, size_t count, DataType dtype, int root, const std::string& name = "");

// Gathers count elements from every rank (counts may differ) into out, concatenated in rank order.
// counts (optional) receives each rank's element count.
EDL_API void allgather(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                       std::vector<size_t>* counts = nullptr, const std::string& name = "");
EDL_API Handle allgather_async(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                               std::vector<size_t>* counts = nullptr, const std::string& name = "");

EDL_API void barrier();
EDL_API Handle barrier_async();

// Typed conveniences.
template <typename T>
void allreduce(T* data, size_t count, ReduceOp op = ReduceOp::kAverage, const std::string& name = "") {
  allreduce(static_cast<void*>(data), count, DataTypeOf<T>::value, op, name);
}
template <typename T>
Handle allreduce_async(T* data, size_t count, ReduceOp op = ReduceOp::kAverage, const std::string& name = "") {
  return allreduce_async(static_cast<void*>(data), count, DataTypeOf<T>::value, op, name);
}
template <typename T>
void broadcast(T* data, size_t count, int root, const std::string& name = "") {
  broadcast(static_cast<void*>(data), count, DataTypeOf<T>::value, root, name);
}

}  // namespace edl
