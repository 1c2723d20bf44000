// HandleState: the shared completion record behind edl::Handle (include/edl/collectives.h).
// The engine thread completes it once (with or without an error); any thread may poll or wait.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

namespace edl::detail {

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
  bool finished() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (!done && on_wait) {
      lock.unlock();
      on_wait();  // the waiter enqueues nothing more for now: the engine need not wait for a burst
      lock.lock();
    }
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::function<void()> on_wait;  // set once before the handle is shared; called by wait() when not done
};

}  // namespace edl::detail
