// StateServer: the survivor's side of a stop-free join (docs/elastic.md, "Stop-free joins"). Every
// worker of a job with EDL_JOIN=stopfree runs one: a listening socket on EDL_BIND_ADDR and one
// thread per connected newcomer, which answers requests for byte ranges of the tensors of this
// worker's commit of a given step (protocol: state_wire.h).
//
// It serves straight from the commit's bytes — the immutable buffer State::commit() made, held by a
// shared_ptr while a reply is sent — so serving copies nothing and never touches the registered
// memory the training thread is updating: a newcomer always reads one consistent committed snapshot,
// and the training thread never waits for the server. A request for step s waits (at most the I/O
// timeout) until the worker passed the boundary of s; it gets kNotCommitted when the worker did not
// commit there or has moved past it.
//
// Thread-safety: boundary(), set_generation() from the training thread; everything else from any
// thread. The destructor closes every connection and joins the server's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include "edl/export.h"

namespace edl::elastic {

struct StateServerOptions {
  std::string bind_address = "127.0.0.1";        // EDL_BIND_ADDR: where newcomers connect
  std::string job;                               // EDL_JOB_ID: part of the handshake's identity
  std::string secret;                            // EDL_JOB_SECRET: proved by both ends of a connection
  std::chrono::milliseconds io_timeout{30000};   // EDL_TIMEOUT_MS: a reply that cannot be sent within it ends the connection
};

class EDL_API StateServer {
 public:
  // Listens on bind_address (a port the kernel picks). Throws CommError when it cannot.
  explicit StateServer(StateServerOptions o);
  ~StateServer();
  StateServer(const StateServer&) = delete;
  StateServer& operator=(const StateServer&) = delete;

  // "host:port" newcomers dial.
  const std::string& address() const { return address_; }
  // This worker is rank `rank` of `size` in `generation` now: connections of earlier generations
  // are closed, handshakes of other generations refused.
  void set_generation(uint64_t generation, int rank, int size);
  // The training thread passed the batch boundary of `step`; `commit` is its commit of that step,
  // or null when it did not commit there.
  void boundary(int64_t step, std::shared_ptr<const std::string> commit);
  // The worker's commit changed outside a boundary (a sync adopted another member's snapshot).
  void publish(int64_t step, std::shared_ptr<const std::string> commit);
  // Whether a newcomer is connected (the worker then commits at every boundary).
  bool has_clients() const;
  // Blocks until no newcomer is connected, at most `max` (a worker about to exit lets a newcomer
  // that is still catching up fetch the last commit first).
  void drain(std::chrono::milliseconds max);
  // Connections served at once (newcomers and handshakes in progress); more are closed at once.
  static constexpr size_t kMaxConnections = 64;
  // Tensor bytes sent so far (tests, bench).
  uint64_t served_bytes() const { return served_.load(); }

 private:
  struct Conn {
    int fd = -1;
    std::atomic<bool> close{false};
    std::atomic<bool> done{false};
    std::thread thread;
  };
  void accept_loop();
  void serve(Conn& c);
  bool answer(Conn& c, const std::string& request);
  std::shared_ptr<const std::string> await_commit(Conn& c, int64_t step);
  void replace_commit(int64_t step, std::shared_ptr<const std::string> commit);  // under mu_
  void reap(bool all);

  StateServerOptions o_;
  int listen_fd_ = -1;
  std::string address_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int rank_ = 0, size_ = 0;
  int64_t boundary_step_ = -1;
  int64_t commit_step_ = -1;
  std::shared_ptr<const std::string> commit_;
  std::shared_ptr<const std::string> space_of_;  // the commit whose tensor space is cached (commit_ or null)
  std::vector<iovec> space_;
  int clients_ = 0;
  std::list<std::unique_ptr<Conn>> conns_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> served_{0};
  std::thread acceptor_;
};

}  // namespace edl::elastic
