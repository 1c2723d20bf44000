// LocalComm: an in-process Communicator for ranks that are threads (tests of the elastic runtime).
//
// All ranks of one generation share a LocalHub found by the store prefix. Collectives are exact and
// deterministic (reductions in rank order, so every rank gets bitwise-identical results). Faults
// behave like the TCP communicator's: abort() by any rank poisons the hub — the aborting rank gets
// AbortedError, the others PeerLostError (as a closed socket) — and a call that waits longer than
// the deadline gets TimeoutError. create() waits for all `size` ranks to attach (connect timeout).
// Thread-safety: as Communicator.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "edl/communicator.h"
#include "edl/error.h"
#include "elastic/group.h"
#include "elastic/membership.h"

namespace edl::elastic::testing {

class LocalHub {
 public:
  explicit LocalHub(int size) : size(size), in(size), bytes(size) {}
  std::mutex mu;
  std::condition_variable cv;
  const int size;
  int attached = 0;
  bool poisoned = false;
  int aborter = -1;
  bool timed_out = false;
  std::string reason;
  int phase = 0;  // 0: gathering inputs, 1: everyone reads
  int arrived = 0;
  int readers = 0;
  std::vector<const uint8_t*> in;
  std::vector<size_t> bytes;

  static std::shared_ptr<LocalHub> get(const std::string& key, int size) {
    static std::mutex rmu;
    static std::map<std::string, std::weak_ptr<LocalHub>> reg;
    std::lock_guard<std::mutex> lock(rmu);
    auto h = reg[key].lock();
    if (!h) {
      h = std::make_shared<LocalHub>(size);
      reg[key] = h;
    }
    return h;
  }
};

class LocalComm final : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;
  using Consume = std::function<void(const std::vector<const uint8_t*>&, const std::vector<size_t>&)>;

  LocalComm(std::shared_ptr<LocalHub> hub, int rank, uint64_t gen, std::chrono::milliseconds timeout,
            std::chrono::milliseconds connect_timeout)
      : hub_(std::move(hub)), rank_(rank), gen_(gen), timeout_(timeout) {
    std::unique_lock<std::mutex> l(hub_->mu);
    hub_->attached++;
    hub_->cv.notify_all();
    auto deadline = Clock::now() + connect_timeout;
    while (hub_->attached < hub_->size && !hub_->poisoned) {
      if (hub_->cv.wait_until(l, deadline) == std::cv_status::timeout && hub_->attached < hub_->size) {
        poison_locked(-1, "connect timed out: " + std::to_string(hub_->attached) + " of " +
                              std::to_string(hub_->size) + " ranks attached");
        hub_->timed_out = true;
      }
    }
    check_locked();
  }

  int rank() const override { return rank_; }
  int size() const override { return hub_->size; }
  uint64_t generation() const override { return gen_; }

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    size_t n = count * dtype_size(dtype);
    std::vector<uint8_t> out(n);
    exchange(data, n, [&](const std::vector<const uint8_t*>& in, const std::vector<size_t>&) {
      switch (dtype) {
        case DataType::kFloat32: reduce<float>(in, out.data(), count, op); break;
        case DataType::kFloat64: reduce<double>(in, out.data(), count, op); break;
        case DataType::kInt32: reduce<int32_t>(in, out.data(), count, op); break;
        case DataType::kInt64: reduce<int64_t>(in, out.data(), count, op); break;
        default: throw InvalidArgument("LocalComm: unsupported dtype");
      }
    });
    if (n) std::memcpy(data, out.data(), n);
  }

  void broadcast(void* data, size_t count, DataType dtype, int root) override {
    size_t n = count * dtype_size(dtype);
    std::vector<uint8_t> out(n);
    exchange(data, n, [&](const std::vector<const uint8_t*>& in, const std::vector<size_t>& b) {
      if (b[root] != n) throw MismatchError("LocalComm: broadcast size mismatch");
      if (n) std::memcpy(out.data(), in[root], n);
    });
    if (n) std::memcpy(data, out.data(), n);
  }

  void allgatherv(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                  std::vector<size_t>* counts_out) override {
    size_t es = dtype_size(dtype);
    exchange(in, count * es, [&](const std::vector<const uint8_t*>& ins, const std::vector<size_t>& b) {
      out.clear();
      if (counts_out) counts_out->clear();
      for (size_t r = 0; r < ins.size(); ++r) {
        out.insert(out.end(), ins[r], ins[r] + b[r]);
        if (counts_out) counts_out->push_back(b[r] / es);
      }
    });
  }

  void barrier() override {
    exchange(nullptr, 0, [](const std::vector<const uint8_t*>&, const std::vector<size_t>&) {});
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> l(hub_->mu);
    poison_locked(rank_, reason);
  }
  bool aborted() const override {
    std::lock_guard<std::mutex> l(hub_->mu);
    return hub_->poisoned;
  }

 private:
  template <typename T>
  static void reduce(const std::vector<const uint8_t*>& in, uint8_t* out, size_t count, ReduceOp op) {
    T* o = reinterpret_cast<T*>(out);
    std::memcpy(o, in[0], count * sizeof(T));
    for (size_t r = 1; r < in.size(); ++r) {
      const T* x = reinterpret_cast<const T*>(in[r]);
      for (size_t i = 0; i < count; ++i) {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAverage: o[i] = o[i] + x[i]; break;
          case ReduceOp::kMin: o[i] = x[i] < o[i] ? x[i] : o[i]; break;
          case ReduceOp::kMax: o[i] = x[i] > o[i] ? x[i] : o[i]; break;
          case ReduceOp::kProduct: o[i] = o[i] * x[i]; break;
        }
      }
    }
    if (op == ReduceOp::kAverage)
      for (size_t i = 0; i < count; ++i) o[i] = static_cast<T>(o[i] / static_cast<T>(in.size()));
  }

  void poison_locked(int by, const std::string& reason) {
    if (hub_->poisoned) return;
    hub_->poisoned = true;
    hub_->aborter = by;
    hub_->reason = reason;
    hub_->cv.notify_all();
  }

  void check_locked() {
    if (!hub_->poisoned) return;
    if (hub_->timed_out) throw TimeoutError("LocalComm: " + hub_->reason);
    if (hub_->aborter == rank_) throw AbortedError("LocalComm aborted: " + hub_->reason);
    throw PeerLostError("LocalComm: peer rank " + std::to_string(hub_->aborter) + " is gone: " + hub_->reason);
  }

  void wait_locked(std::unique_lock<std::mutex>& l, Clock::time_point deadline, const std::function<bool()>& ready) {
    while (!hub_->poisoned && !ready()) {
      if (hub_->cv.wait_until(l, deadline) == std::cv_status::timeout && !ready() && !hub_->poisoned) {
        poison_locked(-1, "collective deadline passed");
        hub_->timed_out = true;
      }
    }
    check_locked();
  }

  void exchange(const void* data, size_t n, const Consume& consume) {
    auto deadline = Clock::now() + timeout_;
    std::unique_lock<std::mutex> l(hub_->mu);
    check_locked();
    wait_locked(l, deadline, [&] { return hub_->phase == 0; });
    hub_->in[rank_] = static_cast<const uint8_t*>(data);
    hub_->bytes[rank_] = n;
    if (++hub_->arrived == hub_->size) {
      hub_->phase = 1;
      hub_->cv.notify_all();
    }
    wait_locked(l, deadline, [&] { return hub_->phase == 1; });
    consume(hub_->in, hub_->bytes);
    if (++hub_->readers == hub_->size) {
      hub_->phase = 0;
      hub_->arrived = 0;
      hub_->readers = 0;
      hub_->cv.notify_all();
    } else {
      // Wait until every rank has read our input before our caller may touch its buffer again.
      wait_locked(l, deadline, [&] { return hub_->phase == 0 || hub_->readers == 0; });
    }
  }

  std::shared_ptr<LocalHub> hub_;
  int rank_;
  uint64_t gen_;
  std::chrono::milliseconds timeout_;
};

// A GroupFactory building LocalComm groups (the hub is keyed by the generation's store prefix).
inline GroupFactory local_group_factory(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000),
                                        std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(1500)) {
  return [=](const GenerationView& v, const std::string& prefix) -> std::shared_ptr<Group> {
    auto hub = LocalHub::get(prefix, v.size);
    auto comm = std::make_shared<LocalComm>(hub, v.rank, v.id, timeout, connect_timeout);
    return std::make_shared<CommGroup>(comm);
  };
}

}  // namespace edl::elastic::testing
