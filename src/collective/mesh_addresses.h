// MeshAddresses: reads the listening addresses the peers of a mesh publish in the store
// (`<prefix>addr/<rank>`) on a thread of its own, for the mesh builder (mesh_bootstrap.cc;
// docs/collectives.md, "Mesh bootstrap").
//
// The builder's poll loop serves the listener and advances every handshake; a store wait on that
// loop (up to 20 ms while a peer's address is missing) delayed every handshake message this rank
// owed its peers by as much, once per message, on every rank at once. The reader waits instead: one
// Store::get_many of every address still missing (one round trip on the tcp:// store), and when
// none of them was there a wait of at most 20 ms for the first missing one; the addresses found are
// handed over through take() and an eventfd that the builder polls beside its sockets. The reader
// stops when every address was found, at the deadline, on a store error (rethrown by take()), or
// when destroyed (the destructor joins: at most one wait slice).
//
// Thread-safety: take() and fd() from the builder's thread only; the reader thread is internal.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edl/store.h"

namespace edl::collective {

class MeshAddresses {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kWaitSlice{20};  // a store wait while none is published

  // keys[i]: the store key of peers[i]'s address.
  MeshAddresses(Store& store, std::vector<int> peers, std::vector<std::string> keys, Clock::time_point deadline);
  ~MeshAddresses();
  MeshAddresses(const MeshAddresses&) = delete;
  MeshAddresses& operator=(const MeshAddresses&) = delete;

  // Readable (POLLIN) when take() has addresses or an error to hand over.
  int fd() const { return event_fd_; }
  // The (peer, address) pairs found since the last call; rethrows the reader's store error.
  std::vector<std::pair<int, std::string>> take();
  // get_many calls made so far (the timeline's store_reads).
  int64_t reads() const { return reads_.load(); }

 private:
  void run();
  void hand_over(std::vector<std::pair<int, std::string>> found);

  Store& store_;
  std::vector<int> peers_;
  std::vector<std::string> keys_;
  const Clock::time_point deadline_;
  int event_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> reads_{0};
  std::mutex mu_;
  std::vector<std::pair<int, std::string>> found_;  // guarded by mu_
  std::exception_ptr error_;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace edl::collective
