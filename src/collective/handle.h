// HandleState: the shared completion record behind edl::Handle (include/edl/collectives.h).
// The engine thread completes it once (with or without an error); any thread may poll or wait.
// A request on device memory (libedl_cuda, docs/gpu.md) finishes in two steps: the engine completes
// the HandleState once the collective is enqueued on the device, with a DeviceCompletion attached;
// the operation is finished when that completion is (Handle::poll / Handle::wait ask it).
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "edl/collectives.h"

namespace edl::detail {

struct HandleState;

// Called when a thread starts waiting on an unfinished handle, before it blocks: the collective
// engine runs its rounds on the waiting thread when its own thread is idle (no wake-up of another
// thread on the critical path), or else starts its next round at once. Returns when `s` finished
// or the waiter cannot help; the waiter then blocks as usual. Shared by the handles of one engine;
// it may outlive the engine.
struct WaitListener {
  virtual ~WaitListener() = default;
  virtual void help(HandleState& s) = 0;
};

// The device half of a request's completion (implemented by libedl_cuda; no CUDA types here).
// query() never blocks; wait() blocks until the device work finished, bounded by the collective
// deadline, and throws the typed error of a failed collective (PeerLostError, TimeoutError,
// AbortedError). Both may be called from any thread, any number of times.
struct DeviceCompletion {
  virtual ~DeviceCompletion() = default;
  virtual bool query() = 0;  // true once finished, successfully or not
  virtual void wait() = 0;
};

struct HandleState {
  // Marks the operation finished; `error` (may be null) is rethrown by wait(). First call wins.
  void complete(std::exception_ptr error = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      this->error = error;
    }
    cv.notify_all();
  }
  // Host part done (the engine ran or enqueued the collective).
  bool finished() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  // Set once by the engine before complete(); null for host requests.
  std::shared_ptr<DeviceCompletion> device;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (!done && listener) {
      lock.unlock();
      listener->help(*this);  // the waiter enqueues nothing more for now: no burst to wait for
      lock.lock();
    }
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::shared_ptr<WaitListener> listener;  // set once before the handle is shared
};

// The state behind an edl::Handle (libedl_cuda's stream_wait / completion_event read its
// DeviceCompletion).
struct HandleAccess {
  static const std::shared_ptr<HandleState>& state(const Handle& h) { return h.state_; }
};

}  // namespace edl::detail
