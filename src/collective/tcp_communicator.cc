// TcpCommunicator: construction (the mesh bootstrap is in mesh_bootstrap.cc), error state (abort / poison) and the spin-then-poll waiter.
#include "collective/tcp_communicator.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/fd_limit.h"
#include "collective/hierarchy.h"
#include "collective/shm_transport.h"
#include "collective/tcp_internal.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"

namespace edl {

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, const std::string& prefix, int rank,
                                                   int size, const CommunicatorOptions& options) {
  return collective::TcpCommunicator::connect(std::move(store), prefix, rank, size, options);
}

}  // namespace edl

namespace edl::collective {

TcpCommunicator::TcpCommunicator(int rank, int size, const CommunicatorOptions& options)
    : rank_(rank),
      size_(size),
      options_(options),
      topo_(MeshTopology::full(rank, size)),
      send_fd_(size, -1),
      recv_fd_(size, -1),
      peer_addr_(size) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw CommError("eventfd(): " + errno_text(errno));
}

TcpCommunicator::~TcpCommunicator() {
  hier_.reset();
  shm_.reset();
  for (int fd : send_fd_)
    if (fd >= 0) close(fd);
  for (int fd : recv_fd_)
    if (fd >= 0) close(fd);
  if (event_fd_ >= 0) close(event_fd_);
}

std::shared_ptr<TcpCommunicator> TcpCommunicator::connect(std::shared_ptr<Store> store, const std::string& prefix,
                                                          int rank, int size, const CommunicatorOptions& options) {
  if (size < 1) throw InvalidArgument("communicator size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    throw InvalidArgument("communicator rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
  if (options.timeout.count() <= 0) throw InvalidArgument("communicator timeout must be positive");
  if (!options.addresses.empty() && static_cast<int>(options.addresses.size()) != size)
    throw InvalidArgument("communicator of " + std::to_string(size) + " ranks given " +
                          std::to_string(options.addresses.size()) + " addresses (want one per rank, or none)");
  if (!options.addresses.empty() && options.listen_fd < 0)
    throw InvalidArgument("communicator given its ranks' addresses but no listen_fd (the listener at its own address)");
  auto c = std::make_shared<TcpCommunicator>(rank, size, options);
  if (size > 1) {
    if (!store) throw InvalidArgument("Communicator::create needs a store for size > 1");
    const bool full = full_mesh(size, options);
    if (!full && options.transport == Transport::kShm)
      throw CommError("communicator setup on rank " + std::to_string(rank) +
                      ": EDL_TRANSPORT=shm needs the full mesh, but EDL_MESH=sparse was asked for");
    c->topo_ = full ? MeshTopology::full(rank, size) : MeshTopology::sparse(rank, size);
    // Two sockets per linked peer, the listener and the abort eventfd, plus what a hierarchical
    // child or the shared-memory setup may hold for a moment.
    ensure_descriptors(2 * static_cast<int>(c->topo_.peers().size()) + 8,
                       "the " + std::string(full ? "full" : "sparse") + " mesh of rank " + std::to_string(rank) +
                           " of " + std::to_string(size));
    c->build_mesh(*store, prefix);
    if (full) {
      c->one_host_ = is_loopback_address(options.bind_address);
      for (int p = 0; p < size; ++p)
        if (p != rank) c->one_host_ = c->one_host_ && is_loopback_address(c->peer_addr_[p]);
      if (options.transport != Transport::kTcp) c->setup_transport(store, prefix);
    } else {
      timeline::Span span(timeline::Lane::kCollectives, "transport setup");
      c->sparse_setup(store, prefix);
    }
  }
  return c;
}

bool TcpCommunicator::full_mesh(int size, const CommunicatorOptions& o) {
  switch (o.mesh) {
    case Mesh::kFull: return true;
    case Mesh::kSparse: return false;
    case Mesh::kAuto: break;
  }
  return size <= kFullMeshRanks || o.transport == Transport::kShm ||
         (o.transport == Transport::kAuto && size <= kShmFullMeshRanks);
}

int TcpCommunicator::socket_count() const {
  int n = 0;
  for (const auto* fds : {&send_fd_, &recv_fd_})
    for (int fd : *fds) n += fd >= 0 ? 1 : 0;
  if (hier_) n += hier_->socket_count();
  return n;
}

void TcpCommunicator::shutdown_sockets() {
  for (int fd : send_fd_)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  for (int fd : recv_fd_)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  if (hier_) hier_->shutdown();
}

void TcpCommunicator::set_tuning(const AlgorithmTuning& t) {
  tuning_ = t;
  if (hier_) hier_->set_tuning(t);
}

void TcpCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true);
  }
  uint64_t one = 1;
  ssize_t ignored = write(event_fd_, &one, sizeof(one));
  (void)ignored;
  if (hier_) hier_->abort(reason);
  shutdown_sockets();  // peers blocked on us see EOF (PeerLostError) instead of waiting for their deadline
}

bool TcpCommunicator::aborted() const { return aborted_.load() || poisoned_.load(); }

CommStats TcpCommunicator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void TcpCommunicator::throw_aborted() const {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reason = abort_reason_;
  }
  throw AbortedError("communicator aborted: " + reason);
}

void TcpCommunicator::check_usable() const {
  if (aborted_.load()) throw_aborted();
  if (poisoned_.load()) {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e = first_error_;
    }
    std::rethrow_exception(e);
  }
}

void TcpCommunicator::fail(std::exception_ptr e) {
  if (aborted_.load()) throw_aborted();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_error_) first_error_ = e;
    poisoned_.store(true);
  }
  shutdown_sockets();
  std::rethrow_exception(e);
}

void TcpCommunicator::io_error(int peer, int err, bool sending, const char* what) const {
  if (aborted_.load()) throw_aborted();
  if (err == -1)
    throw PeerLostError(std::string(what) + " on rank " + std::to_string(rank_) + ": connection from rank " +
                        std::to_string(peer) + " closed (the peer died, or aborted after its own error)");
  throw PeerLostError(std::string(what) + " on rank " + std::to_string(rank_) + ": " +
                      (sending ? "sending to" : "receiving from") + " rank " + std::to_string(peer) +
                      " failed: " + errno_text(err));
}

bool TcpCommunicator::wait_incoming(int extra_fd, Clock::time_point until) {
  if (shm_) return shm_->wait_incoming(extra_fd, until);
  std::vector<pollfd> fds;
  fds.reserve(topo_.peers().size() + 2);
  for (int p : topo_.peers())
    if (recv_fd_[p] >= 0) fds.push_back(pollfd{recv_fd_[p], POLLIN, 0});
  const size_t peers = fds.size();
  fds.push_back(pollfd{event_fd_, POLLIN, 0});
  if (extra_fd >= 0) fds.push_back(pollfd{extra_fd, POLLIN, 0});
  for (;;) {
    if (aborted()) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    // ppoll: microsecond timeouts (the engine's 50 us burst window), at most 1 s per call.
    const long long left_ns =
        std::min<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count(), 1000000000LL);
    const timespec ts{static_cast<time_t>(left_ns / 1000000000LL), static_cast<long>(left_ns % 1000000000LL)};
    int rc = ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (rc < 0 && errno != EINTR) return true;  // let the next collective report the failure
    if (rc <= 0) continue;
    for (size_t i = 0; i <= peers; ++i)
      if (fds[i].revents) return true;  // data, EOF or error from a peer; or abort()
    if (extra_fd >= 0 && fds.back().revents) {
      uint64_t v;
      ssize_t ignored = read(extra_fd, &v, sizeof(v));
      (void)ignored;
      return false;
    }
  }
}

// ---- Waiter ----------------------------------------------------------------------------------

TcpCommunicator::Waiter::Waiter(const TcpCommunicator& c, Clock::time_point dl, const char* w)
    : comm(c), deadline(dl), what(w), last_progress(Clock::now()) {}

void TcpCommunicator::Waiter::progressed() { last_progress = Clock::now(); }

void TcpCommunicator::Waiter::idle() {
  if (comm.aborted_.load(std::memory_order_relaxed)) comm.throw_aborted();
  // The elastic runtime sets `cancel` when a member dies while the generation is being built: the
  // sparse mesh's setup allgather gives up as the mesh build does.
  if (comm.options_.cancel && comm.options_.cancel->load(std::memory_order_relaxed))
    throw AbortedError(std::string(what) + " on rank " + std::to_string(comm.rank_) +
                       ": cancelled while the communicator was being built (a member of generation " +
                       std::to_string(comm.options_.generation) + " failed)");
  auto now = Clock::now();
  if (now >= deadline) {
    std::string peers_s;
    for (int p : peers) peers_s += (peers_s.empty() ? "" : ", ") + std::to_string(p);
    throw TimeoutError(std::string(what) + " on rank " + std::to_string(comm.rank_) + " timed out after " +
                       std::to_string(comm.options_.timeout.count()) + " ms (EDL_TIMEOUT_MS) waiting for rank(s) " +
                       (peers_s.empty() ? "?" : peers_s));
  }
  if (now - last_progress < comm.tuning_.spin && now >= comm.spin_off_until_) {
    // Spin, but let a peer process that shares this core run (ranks may outnumber cores). When the
    // yield itself takes long, other processes compete for the CPU: then spinning only delays us
    // (a task that sleeps in poll() is woken with priority, a spinning one is not), so block at once
    // for the next 200 ms.
    sched_yield();
    auto after = Clock::now();
    if (after - now > std::chrono::microseconds(30)) comm.spin_off_until_ = after + std::chrono::milliseconds(200);
    return;
  }
  fds.push_back(pollfd{comm.event_fd_, POLLIN, 0});
  auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
  int ms = static_cast<int>(std::min<long long>((left_us + 999) / 1000, 200));
  poll(fds.data(), fds.size(), ms);
  fds.pop_back();
}

}  // namespace edl::collective
