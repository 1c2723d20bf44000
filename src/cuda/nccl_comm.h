// NcclComm: one NCCL communicator of a generation, non-blocking (config.blocking = 0), every wait
// on it bounded (docs/gpu.md, "One NCCL communicator per generation").
//
//   init()    ncclCommInitRankConfig from a unique id, polled with ncclCommGetAsyncError until
//             ready, the deadline or the cancel flag (then ncclCommAbort and TimeoutError /
//             AbortedError).
//   shrink    ncclCommShrink(NCCL_SHRINK_ABORT) of this communicator without `exclude`, in two
//             halves (start_shrink, finish_shrink) so that the ranks can agree that every one of
//             them started it before any waits for it: a rank whose NCCL refuses at once would
//             otherwise leave the others waiting in the shrink's bootstrap until the deadline. Only
//             where the loaded NCCL has it (nccl_api()), and only from a communicator whose state is
//             clean (shrinkable(): NCCL 2.28 refuses to shrink one whose proxy recorded a peer's
//             error, e.g. the socket of a member killed in the middle of a collective).
//   enqueue   allreduce / broadcast / allgather / grouped broadcasts on a stream: each call returns
//             once NCCL has queued the work on the stream (a non-blocking call that answers
//             ncclInProgress is polled until it is queued, bounded by the deadline).
//   revoke()  ncclCommRevoke, polled until quiescent within a bound; false when it did not quiesce
//             (or the NCCL has no Revoke): the caller then aborts.
//   abort()   ncclCommAbort (also from the destructor). After it nothing else is called.
// NCCL calls on one communicator never overlap (a mutex): NCCL forbids calling Abort while another
// thread is inside a call on the same communicator, and ncclCommGetAsyncError completes NCCL's
// background jobs. Errors are thrown as EDL's types (nccl_error) after the mutex is released.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/nccl_version.h"

namespace edl::cuda {

using Clock = std::chrono::steady_clock;

// The loaded NCCL: its version and the calls looked up at run time (null when absent).
struct NcclApi {
  NcclVersion version;
  ncclResult_t (*revoke)(ncclComm_t, int) = nullptr;
  ncclResult_t (*shrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) = nullptr;
  bool can_shrink() const { return revoke != nullptr && shrink != nullptr; }
};
const NcclApi& nccl_api();

// Throws the EDL error for an NCCL result (ncclRemoteError / ncclSystemError: PeerLostError;
// others: CommError), naming `what`, the result and NCCL's last error text.
[[noreturn]] void throw_nccl(ncclResult_t r, const std::string& what, ncclComm_t comm);

// ncclDataType_t of a DataType; ncclRedOp_t of a ReduceOp (kAverage: ncclSum, the division is the
// caller's).
ncclDataType_t nccl_type(int dtype);
ncclRedOp_t nccl_op(int op);

class NcclComm {
 public:
  // Waits until ready, the deadline (TimeoutError) or *cancel (AbortedError).
  static std::unique_ptr<NcclComm> init(const ncclUniqueId& id, int rank, int size, int device,
                                        const std::string& name, Clock::time_point deadline,
                                        const std::atomic<bool>* cancel);
  // True when this communicator can be the parent of a shrink: not aborted, a revoke in progress
  // ended (waited for until `deadline`), and its state (the proxy's included) ncclSuccess; else
  // false with the reason in *why.
  bool shrinkable(Clock::time_point deadline, std::string* why);
  // The first half: calls ncclCommShrink and returns the child, whose handle NCCL publishes from
  // its own thread when the shrink ends. Throws (PeerLostError / CommError / AbortedError) when the
  // call is refused; nothing is then left running.
  std::unique_ptr<NcclComm> start_shrink(const std::vector<int>& exclude, int new_rank, int new_size,
                                         const std::string& name, Clock::time_point deadline,
                                         const std::atomic<bool>* cancel);
  // The second half: waits until the child is ready (deadline: TimeoutError, *cancel:
  // AbortedError, or NCCL's error); on any failure this parent is aborted first (which stops and
  // joins NCCL's shrink job) and the child with it.
  std::unique_ptr<NcclComm> finish_shrink(std::unique_ptr<NcclComm> child, Clock::time_point deadline,
                                          const std::atomic<bool>* cancel);
  // Gives up a started shrink (another rank's start failed): aborts this parent, then the child.
  void cancel_shrink(std::unique_ptr<NcclComm> child);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  bool aborted() const { return aborted_.load(); }
  bool revoked() const { return revoked_.load(); }

  // Enqueue on `stream`, bounded by `deadline` (a queued call that stays in progress past it is a
  // TimeoutError). dtype / op: edl DataType / ReduceOp values.
  void allreduce(const void* send, void* recv, size_t count, int dtype, int op, cudaStream_t stream,
                 Clock::time_point deadline);
  void broadcast(void* buf, size_t bytes, int root, cudaStream_t stream, Clock::time_point deadline);
  void allgather(const void* send, void* recv, size_t bytes_each, cudaStream_t stream, Clock::time_point deadline);
  // Every rank's bytes[r] at out + offsets[r], rank r broadcasting its part (one NCCL group).
  void allgatherv(const void* send, void* out, const std::vector<size_t>& bytes, const std::vector<size_t>& offsets,
                  cudaStream_t stream, Clock::time_point deadline);

  // ncclSuccess, ncclInProgress or the asynchronous error (never throws; ncclSuccess once aborted).
  ncclResult_t async_error();
  // Stops in-flight work; true when quiescent within `bound` (the communicator may then be shrunk).
  bool revoke(std::chrono::milliseconds bound);
  void abort();

 private:
  NcclComm(int rank, int size, int device, std::string name)
      : rank_(rank), size_(size), device_(device), name_(std::move(name)) {}
  ncclComm_t handle() const { return __atomic_load_n(&comm_, __ATOMIC_ACQUIRE); }
  // Polls the communicator until it leaves ncclInProgress; returns that state. Throws TimeoutError
  // past the deadline, AbortedError when *cancel is set (the communicator is left as it is).
  ncclResult_t poll_state(const std::string& what, Clock::time_point deadline, const std::atomic<bool>* cancel);
  // After a call returned r: waits until the communicator leaves ncclInProgress; throws on error.
  void settle(ncclResult_t r, const std::string& what, Clock::time_point deadline);
  // Throws CommError when the communicator was revoked or aborted. Called with mu_ held.
  void check_usable(const char* what) const;

  std::mutex mu_;
  ncclComm_t comm_ = nullptr;  // written by NCCL's own thread during a shrink
  int rank_, size_, device_;
  std::string name_;  // config.commName points here
  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};
};

}  // namespace edl::cuda
