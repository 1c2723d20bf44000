// Engine: the background thread that runs a generation's asynchronous collectives (Horovod-style).
//
// Callers enqueue named requests and get an edl::Handle. In a round, every rank takes part in one
// negotiation: an allgather of the requests each rank has ready (a bitset over the response cache
// for names negotiated before, full descriptors for new names). Rounds are event-driven: a rank
// starts one when it has new requests (after their burst) or a thread waits, and joins one when a
// peer's first bytes arrive; no round runs while no rank has work (EngineOptions::tick restores a
// round every cycle_time). The round runs on the engine thread, or on a thread waiting on a handle
// while the engine thread is idle. A request runs once every rank has it; the order is rank 0's
// message order, so all ranks run the same collectives in the same order whatever order their
// requests arrived in.
// Ready allreduces with the same kind, dtype and op are fused into one collective of up to
// fusion_threshold_bytes; the fused allreduce reads and writes the user tensors directly (no pack
// or unpack copies) — see docs/collectives.md.
//
// Requests on device memory (libedl_cuda, docs/gpu.md) are negotiated like the others (device kinds,
// collective/kind.h) and run by the generation's DeviceBackend; their handles finish when the
// device work does (HandleState::device).
//
// Errors: a descriptor mismatch (same name, different count/dtype/op/root) fails that request on
// every rank with MismatchError; a CommError fails every pending and later request with that error
// (the communicator is poisoned; the generation is over). stop() fails pending handles with
// AbortedError; it is idempotent and the destructor calls it.
//
// Thread-safety: enqueue methods, stop() and stats() may be called from any thread; one thread at
// a time holds the round role (the round state below is touched only by it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collective/device.h"
#include "collective/handle.h"
#include "collective/kind.h"
#include "edl/collectives.h"
#include "edl/communicator.h"

namespace edl::collective {

class TcpCommunicator;

struct EngineOptions {
  // Largest fused allreduce, in bytes. Default 64 MiB (as Horovod); EDL_FUSION_THRESHOLD. 0 = no fusion.
  size_t fusion_threshold_bytes = 64u << 20;
  // Negotiation period. Default 1 ms; EDL_CYCLE_TIME_MS. New requests start the next round early:
  // once no further request has arrived for 50 us (a burst of enqueues is complete), at most
  // cycle_time after the first of them. A rank whose requests only wait for other ranks enters the
  // next round at once and waits inside it (docs/collectives.md, "Negotiation").
  std::chrono::microseconds cycle_time{1000};
  // Between rounds the engine sleeps until this rank has new requests or a peer starts a round
  // (its first bytes arrive): no round runs while no rank has work, so an idle or computing
  // worker is not woken every cycle. true = Horovod's behaviour instead: a round every cycle_time
  // on every rank, idle or not (EDL_ENGINE_TICK=1; kept for comparison). Communicators other than
  // TcpCommunicator always tick.
  bool tick = false;
  // Event-driven engine: the longest time pending requests go without a round (which also runs
  // the stall warnings). Default 1 s.
  std::chrono::milliseconds idle_round{1000};
  // The deadline of a request that other ranks never submit (a stuck or diverged rank): once a
  // request has waited this long while some rank still lacks it, the generation's communicator is
  // aborted and every pending handle — Handle::wait() included — fails with TimeoutError naming
  // how many ranks lacked it. Checked at every negotiation round (at least every idle_round).
  // Default 0 = none; the runtime passes EDL_TIMEOUT_MS, the collective deadline.
  std::chrono::milliseconds request_timeout{0};
};

struct EngineStats {
  uint64_t cycles = 0;             // negotiations run
  uint64_t cached_cycles = 0;      // negotiations in which this rank sent no name (all cache hits)
  uint64_t collectives = 0;        // collectives run for requests (fused groups count once)
  uint64_t fused_collectives = 0;  // allreduces that carried more than one tensor
  uint64_t fused_tensors = 0;      // tensors that travelled in those
  uint64_t completed = 0;          // requests completed (successfully or not)
  uint64_t helped_rounds = 0;      // rounds run by a thread waiting on a handle (not the engine thread)
  double negotiation_us = 0;       // time spent in negotiation rounds
  double execution_us = 0;         // time spent running the collectives
  uint64_t allreduce_bytes = 0;    // payload bytes of the allreduces run (this rank's buffers)
  double allreduce_us = 0;         // time spent running them (worker metrics, docs/observability.md)
};

// Nanoseconds that threads of this process spent blocked in Handle::wait() (the "not computing"
// part of a step in the worker metrics). Process-wide, monotonic; safe from any thread.
uint64_t handle_wait_ns_total();
void add_handle_wait_ns(uint64_t ns);

class EDL_API Engine {
 public:
  // device: the generation's device backend (null: device requests fail with InvalidArgument).
  Engine(std::shared_ptr<Communicator> comm, EngineOptions options, std::shared_ptr<DeviceBackend> device = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Buffers must stay valid and untouched until the handle completes. An empty name gets the auto
  // name "<kind>.<n>" (n counts this rank's unnamed requests of that kind). Throws InvalidArgument
  // for bad arguments or a name that is already pending.
  // will_wait: the caller waits on the handle at once (a blocking call): the engine thread is not
  // woken for it; the waiting thread starts the round (Handle::wait()).
  Handle allreduce(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& name,
                   bool will_wait = false);
  Handle broadcast(void* data, size_t count, DataType dtype, int root, const std::string& name,
                   bool will_wait = false);
  Handle allgather(const void* in, size_t count, DataType dtype, std::vector<uint8_t>* out,
                   std::vector<size_t>* counts, const std::string& name, bool will_wait = false);
  Handle barrier(const std::string& name, bool will_wait = false);
  // A request on device memory: kind is a device kind (collective/kind.h); `request` is what the
  // device plugin captured; count is this rank's element count (matched across ranks except for
  // allgather); root only for broadcast (engine_device.cc).
  Handle device_request(uint8_t kind, std::shared_ptr<DeviceRequest> request, size_t count, DataType dtype,
                        ReduceOp op, int root, const std::string& name, bool will_wait = false);

  void stop();
  EngineStats stats() const;
  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

  // Request kinds on the wire (Desc::kind): collective::Kind (collective/kind.h).
  // Wire descriptor of a request (public for the implementation's helpers).
  struct Desc {
    uint8_t kind = 0;
    uint8_t dtype = 0;
    uint8_t op = 0;
    int32_t root = -1;
    uint64_t count = 0;
    bool operator==(const Desc& o) const {
      return kind == o.kind && dtype == o.dtype && op == o.op && root == o.root && count == o.count;
    }
  };

 private:
  struct Request {
    std::string name;
    Desc desc;
    void* data = nullptr;
    const void* in = nullptr;
    std::vector<uint8_t>* out = nullptr;
    std::vector<size_t>* counts = nullptr;
    size_t local_count = 0;  // allgather: this rank's element count
    std::chrono::steady_clock::time_point enqueued;
    bool stall_warned = false;
    std::shared_ptr<detail::HandleState> state;
    std::shared_ptr<DeviceRequest> device;  // device kinds only
  };
  using RequestPtr = std::shared_ptr<Request>;

  Handle enqueue(RequestPtr r, const char* kind, bool will_wait);
  void loop();
  // The round role: one thread at a time waits for and runs rounds (the engine thread, or a thread
  // waiting on a handle while the engine thread is idle: help()). acquire_round() waits until the
  // next round is due and takes the role (false: stopping, broken, or a helper that cannot help).
  bool acquire_round(detail::HandleState* helping, bool holding);
  void run_round(bool helper);  // negotiation + execution; with the role
  void release_round();
  void help(detail::HandleState& s);
  // What a negotiation round saw, for scheduling the next one.
  struct Progress {
    bool i_lack = false;       // another rank listed a request this rank does not have yet
    bool others_lack = false;  // this rank listed a request some other rank does not have yet
  };
  // One negotiation; returns the requests ready on every rank, in the agreed order (requests that
  // mismatch are failed and left out).
  std::vector<RequestPtr> negotiate(Progress* progress);
  void execute(const std::vector<RequestPtr>& ready);
  void run_allreduce_group(const std::vector<RequestPtr>& group);
  void run_single(const RequestPtr& r);
  void run_device(const std::vector<RequestPtr>& group);  // a device kind: to the DeviceBackend
  void abort_device(std::exception_ptr e);                 // the generation broke or stopped
  void complete(const RequestPtr& r, std::exception_ptr e);
  // Timeline (EDL_TIMELINE): per request its negotiation (enqueue .. agreed ready), queue wait
  // (ready .. its collective starts) and the collective (with the fused collective's id), plus the
  // collective on the "collectives" lane. Only while timeline::on().
  void trace_collective(const std::vector<RequestPtr>& group, std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point end);
  void fail_all(std::exception_ptr e);
  // Warns (once per request) about requests pending for more than kStallWarning on this rank while
  // other ranks have not submitted them (Horovod's stall inspector; a likely user error).
  // Past options.request_timeout it aborts the communicator and throws TimeoutError instead.
  void warn_stalled(const std::vector<int>& present_on, int n);

  std::shared_ptr<Communicator> comm_;
  EngineOptions options_;
  std::shared_ptr<DeviceBackend> device_;
  TcpCommunicator* tcp_ = nullptr;  // comm_ when it is one (event-driven rounds)

  // The engine's lock and wake-up, shared with its handles: Handle::wait() rings it and may
  // outlive the engine, so they live in a block of their own.
  struct Doorbell : detail::WaitListener {
    Doorbell();
    ~Doorbell() override;
    std::mutex mu;
    std::condition_variable cv;
    int fd = -1;         // eventfd: wakes an engine that sleeps in TcpCommunicator::wait_incoming()
    bool flush = false;  // a Handle::wait() while requests were queued: start the round now
    Engine* engine = nullptr;  // null once stop() began: handles no longer call into the engine
    int helpers = 0;           // threads inside Engine::help()
    void help(detail::HandleState& s) override;
    void ring();  // wakes the engine thread (cv and fd); any thread
  };
  std::shared_ptr<Doorbell> bell_ = std::make_shared<Doorbell>();
  std::mutex& mu_ = bell_->mu;
  std::condition_variable& cv_ = bell_->cv;
  bool stopping_ = false;
  bool busy_ = false;          // a thread holds the round role
  std::exception_ptr broken_;  // first CommError: every later request fails with it
  std::deque<RequestPtr> incoming_;
  std::chrono::steady_clock::time_point first_incoming_;  // arrival of the oldest request in incoming_
  std::chrono::steady_clock::time_point last_incoming_;   // arrival of the newest request
  std::unordered_set<std::string> in_flight_;  // names pending on this rank
  std::unordered_map<std::string, uint64_t> auto_counter_;
  EngineStats stats_;

  // Round state: touched only by the holder of the round role.
  std::chrono::steady_clock::time_point next_;       // when the next round is due at the latest
  std::vector<RequestPtr> pending_;                  // arrival order
  std::vector<RequestPtr> executing_;                // the cycle's ready list while it runs
  std::vector<std::pair<std::string, Desc>> cache_;  // response cache: id -> (name, descriptor)
  std::unordered_map<std::string, uint32_t> cache_ids_;
  std::vector<uint8_t> fusion_buf_;                  // only for communicators without span support
  std::chrono::steady_clock::time_point ready_at_;   // end of the round's negotiation (timeline)

  std::thread thread_;
};

}  // namespace edl::collective
