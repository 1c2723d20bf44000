// TcpCommunicator: mesh bootstrap, error state (abort / poison) and the spin-then-poll waiter.
#include "collective/tcp_communicator.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/tcp_internal.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl {

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, const std::string& prefix, int rank,
                                                   int size, const CommunicatorOptions& options) {
  return collective::TcpCommunicator::connect(std::move(store), prefix, rank, size, options);
}

}  // namespace edl

namespace edl::collective {

namespace {

using std::chrono::milliseconds;

long long ms_left(Clock::time_point deadline) {
  return std::max<long long>(0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
}

// An accepted connection whose Hello is still arriving.
struct Pending {
  int fd;
  Hello hello;
  size_t got = 0;
};

std::string describe(const Hello& h) {
  return "rank " + std::to_string(h.rank) + " of " + std::to_string(h.size) + ", generation " +
         std::to_string(h.generation);
}

}  // namespace

TcpCommunicator::TcpCommunicator(int rank, int size, const CommunicatorOptions& options)
    : rank_(rank), size_(size), options_(options), send_fd_(size, -1), recv_fd_(size, -1) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw CommError("eventfd(): " + errno_text(errno));
}

TcpCommunicator::~TcpCommunicator() {
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
  auto c = std::make_shared<TcpCommunicator>(rank, size, options);
  if (size > 1) {
    if (!store) throw InvalidArgument("Communicator::create needs a store for size > 1");
    c->build_mesh(*store, prefix);
  }
  return c;
}

// Mesh bootstrap: publish our listening address, connect to every peer (our send socket to it),
// accept one connection from every peer (our receive socket from it). Both directions start with a
// Hello; the acceptor answers with its own Hello so the connector knows it reached the right rank.
// Connections that send garbage, a foreign job's or generation's Hello, or nothing at all are
// closed (with a warning) without disturbing the mesh.
void TcpCommunicator::build_mesh(Store& store, const std::string& prefix) {
  const auto deadline = Clock::now() + options_.connect_timeout;
  const uint64_t tag = fnv1a(prefix);
  const Hello mine{kHelloMagic, options_.generation, tag, rank_, size_};
  int port = 0;
  int lfd = listen_any_port(options_.bind_address, &port);
  std::vector<Pending> pending;
  std::vector<size_t> reply_got(size_, 0);
  std::vector<Hello> replies(size_);
  auto cleanup = [&] {
    close(lfd);
    for (auto& p : pending) close(p.fd);
    pending.clear();
  };
  try {
    store.set(prefix + "addr/" + std::to_string(rank_), options_.bind_address + ":" + std::to_string(port));
    // Connect to every peer and send our Hello (32 bytes always fit in an empty socket buffer).
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const std::string key = prefix + "addr/" + std::to_string(p);
      if (!store.wait({key}, milliseconds(ms_left(deadline))))
        throw TimeoutError("communicator setup: rank " + std::to_string(p) + " did not publish its address under '" +
                           key + "' within " + std::to_string(options_.connect_timeout.count()) + " ms");
      std::string addr = store.get(key).value_or("");
      int fd = connect_until(addr, deadline);
      if (fd < 0)
        throw TimeoutError("communicator setup: cannot connect to rank " + std::to_string(p) + " at " + addr +
                           " within " + std::to_string(options_.connect_timeout.count()) + " ms");
      send_fd_[p] = fd;
      if (!write_all(fd, &mine, sizeof(mine), deadline))
        throw PeerLostError("communicator setup: sending the handshake to rank " + std::to_string(p) + " failed");
    }
    // Event loop: accept peers, read their Hellos, answer; read the answers on our connections.
    int accepted = 0, answered = 0;
    while (accepted < size_ - 1 || answered < size_ - 1) {
      if (aborted_.load()) throw_aborted();
      std::vector<pollfd> fds;
      fds.push_back({lfd, POLLIN, 0});
      for (auto& pe : pending) fds.push_back({pe.fd, POLLIN, 0});
      std::vector<int> reply_peer;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || reply_got[p] == sizeof(Hello)) continue;
        fds.push_back({send_fd_[p], POLLIN, 0});
        reply_peer.push_back(p);
      }
      long long left = ms_left(deadline);
      if (left <= 0)
        throw TimeoutError("communicator setup: only " + std::to_string(accepted) + " of " + std::to_string(size_ - 1) +
                           " peers connected and " + std::to_string(answered) + " answered within " +
                           std::to_string(options_.connect_timeout.count()) + " ms");
      poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 100)));
      for (;;) {  // new connections
        int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        pending.push_back(Pending{fd, {}, 0});
      }
      for (size_t i = 0; i < pending.size();) {  // Hellos of accepted connections
        Pending& pe = pending[i];
        ssize_t r = recv(pe.fd, reinterpret_cast<char*>(&pe.hello) + pe.got, sizeof(Hello) - pe.got, MSG_DONTWAIT);
        if (r > 0) pe.got += static_cast<size_t>(r);
        bool drop = (r == 0) || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        if (!drop && pe.got == sizeof(Hello)) {
          const Hello& h = pe.hello;
          std::string why;
          if (h.magic != kHelloMagic) why = "bad magic (not an EDL peer)";
          else if (h.prefix_tag != tag) why = "it belongs to another job or store prefix";
          else if (h.generation != options_.generation)
            why = "generation " + std::to_string(h.generation) + " != ours " + std::to_string(options_.generation);
          else if (h.size != size_) why = "size " + std::to_string(h.size) + " != ours " + std::to_string(size_);
          else if (h.rank < 0 || h.rank >= size_ || h.rank == rank_) why = "invalid rank " + std::to_string(h.rank);
          else if (recv_fd_[h.rank] >= 0) why = "rank " + std::to_string(h.rank) + " is already connected";
          if (why.empty()) {
            if (!write_all(pe.fd, &mine, sizeof(mine), deadline)) {
              drop = true;
            } else {
              recv_fd_[h.rank] = pe.fd;
              ++accepted;
              pending.erase(pending.begin() + static_cast<long>(i));
              continue;
            }
          } else {
            EDL_LOG(1) << "communicator rank " << rank_ << ": rejected a connection (" << describe(h) << "): " << why;
            drop = true;
          }
        }
        if (drop) {
          close(pe.fd);
          pending.erase(pending.begin() + static_cast<long>(i));
          continue;
        }
        ++i;
      }
      for (int p : reply_peer) {  // answers on our own connections
        ssize_t r = recv(send_fd_[p], reinterpret_cast<char*>(&replies[p]) + reply_got[p],
                         sizeof(Hello) - reply_got[p], MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
          throw PeerLostError("communicator setup: rank " + std::to_string(p) +
                              " closed the connection during the handshake");
        if (r > 0) reply_got[p] += static_cast<size_t>(r);
        if (reply_got[p] == sizeof(Hello)) {
          const Hello& h = replies[p];
          if (h.magic != kHelloMagic || h.prefix_tag != tag || h.generation != options_.generation ||
              h.size != size_ || h.rank != p)
            throw PeerLostError("communicator setup: the process at rank " + std::to_string(p) +
                                "'s address answered as " + describe(h) + " (stale address in the store?)");
          ++answered;
        }
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    tune_data_socket(send_fd_[p]);
    tune_data_socket(recv_fd_[p]);
  }
}

void TcpCommunicator::shutdown_sockets() {
  for (int fd : send_fd_)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  for (int fd : recv_fd_)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
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
  std::vector<pollfd> fds;
  fds.reserve(static_cast<size_t>(size_) + 2);
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && recv_fd_[p] >= 0) fds.push_back(pollfd{recv_fd_[p], POLLIN, 0});
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
