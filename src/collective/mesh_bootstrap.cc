// TcpCommunicator::build_mesh: the mesh bootstrap through the store, with the job-secret handshake
// of mesh_handshake.h on every connection (docs/collectives.md, "Mesh bootstrap").
//
// Every rank publishes its listening address, dials every linked peer (its send socket to that
// peer: every other rank on the full mesh, the MeshTopology's peers on the sparse one) and accepts
// one authenticated connection from every linked peer (its receive socket), in one loop: the
// listener is served while peers' addresses are still awaited. Accepted connections that send
// garbage, a foreign job's or generation's hello, a rank outside this generation or not linked to
// this one, a wrong proof of the secret, or nothing at all are closed (logged) and the rank keeps
// waiting for the genuine peer until connect_timeout. A dialled peer that fails the handshake is
// fatal: the address in the store is not rank p of this generation (PeerLostError), the secrets
// differ (AuthError: a MAC that does not verify, or an explicit Reject of our proof), or the peer
// is gone (PeerLostError: its listener refuses the connection, or it closes a connection without a
// Reject). Since every link is dialled from both ends, every neighbour of a rank that dies during
// the build sees it; completed connections are watched for hang-ups until the mesh is complete.
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <list>
#include <memory>

#include "collective/fd_limit.h"
#include "collective/mesh_addresses.h"
#include "collective/mesh_handshake.h"
#include "collective/tcp_communicator.h"
#include "common/crypto.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"

namespace edl::collective {

namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxPendingAccepts = 256;  // half-open strangers beyond this: the oldest is closed
constexpr size_t kRememberedRejections = 4;  // quoted in the timeout error
constexpr int kAcceptsPerTurn = 64;

long long ms_left(Clock::time_point deadline) {
  return std::max<long long>(0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
}

// recv() of at most n bytes without blocking: >0 bytes, 0 nothing yet, -1 EOF or error.
ssize_t recv_some(int fd, uint8_t* buf, size_t n) {
  ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
  if (r > 0) return r;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  return -1;
}

}  // namespace

class MeshBuilder {
 public:
  MeshBuilder(TcpCommunicator& c, Store& store, const std::string& prefix)
      : c_(c), store_(store), prefix_(prefix), deadline_(Clock::now() + c.options_.connect_timeout) {
    id_.generation = c.options_.generation;
    id_.prefix_tag = fnv1a(prefix);
    id_.size = c.size_;
    id_.secret = c.options_.secret;
    id_.setup = TcpCommunicator::setup_word(c.options_);
    dialled_.resize(static_cast<size_t>(c.size_));
    peers_ = static_cast<int>(c.topo_.peers().size());
  }
  ~MeshBuilder() {
    if (lfd_ >= 0 && own_listener_) close(lfd_);
    for (auto& a : accepted_) close(a.fd);
  }

  void run() {
    timeline::Span span(timeline::Lane::kCollectives, "mesh build");
    const int64_t t0 = timeline::on() ? timeline::now_us() : 0;
    timespec c0{};
    if (t0) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    int64_t all_dialled_us = -1, handshakes_us = -1;
    if (c_.options_.addresses.empty()) {
      listen_and_publish();
      std::vector<int> peers = c_.topo_.peers();
      std::vector<std::string> keys;
      for (int p : peers) keys.push_back(key_of(p));
      addrs_ = std::make_unique<MeshAddresses>(store_, std::move(peers), std::move(keys), deadline_);
    } else {  // the caller's listener, and every address known: dial them all now
      lfd_ = c_.options_.listen_fd;
      own_listener_ = false;
      for (int p : c_.topo_.peers()) dial(p, c_.options_.addresses[static_cast<size_t>(p)]);
      dial_count_ = peers_;
    }
    while (accepted_ok_ < peers_ || dialled_ok_ < peers_) {
      if (c_.aborted_.load()) c_.throw_aborted();
      if (c_.options_.cancel && c_.options_.cancel->load())
        throw AbortedError(setup() + ": cancelled while the mesh was being built (a member of generation " +
                           std::to_string(c_.options_.generation) + " failed)");
      if (ms_left(deadline_) <= 0) timeout();
      const bool dialling = dial_found();
      if (!dialling && all_dialled_us < 0 && t0) all_dialled_us = timeline::now_us() - t0;
      wait_readable(100);
      accept_new();
      step_accepted();
      step_dialled();
    }
    if (!t0) return;
    handshakes_us = timeline::now_us() - t0;
    timespec c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    span.arg("peers", peers_).arg("dialled_us", all_dialled_us).arg("done_us", handshakes_us);
    span.arg("store_reads", addrs_ ? addrs_->reads() : 0).arg("cpu_us", (c1.tv_sec - c0.tv_sec) * 1000000 + (c1.tv_nsec - c0.tv_nsec) / 1000);
  }

 private:
  struct Accepted {
    int fd;
    std::string addr;
    mesh::AcceptSide hs;
  };
  struct Dialled {
    std::string addr;
    std::unique_ptr<mesh::ConnectSide> hs;
  };

  std::string key_of(int p) const { return prefix_ + "addr/" + std::to_string(p); }
  std::string setup() const { return "communicator setup on rank " + std::to_string(c_.rank_); }

  void listen_and_publish() {
    int port = 0;
    lfd_ = listen_any_port(c_.options_.bind_address, &port);
    store_.set(key_of(c_.rank_), c_.options_.bind_address + ":" + std::to_string(port));
  }

  // Dials every linked peer whose address the reader (mesh_addresses.h) found since the last turn:
  // a connect and our hello (96 bytes fit in an empty socket buffer) to each. Returns whether peers
  // remain to be dialled.
  bool dial_found() {
    if (!addrs_) return false;
    for (const auto& [p, addr] : addrs_->take()) {
      dial(p, addr);
      ++dial_count_;
    }
    return dial_count_ < peers_;
  }

  void dial(int p, const std::string& addr) {
    Dialled& d = dialled_[p];
    d.addr = addr;
    c_.peer_addr_[p] = d.addr;
    bool refused = false;
    int fd = connect_until(d.addr, deadline_, &refused);
    if (fd < 0 && refused)  // published, so it listened: its listener is closed now
      throw PeerLostError(setup() + ": rank " + std::to_string(p) + " at " + d.addr +
                          " refused the connection (it died, or gave up building this generation)");
    if (fd < 0)
      throw TimeoutError(setup() + ": cannot connect to rank " + std::to_string(p) + " at " + d.addr + " within " +
                         std::to_string(c_.options_.connect_timeout.count()) + " ms");
    c_.send_fd_[p] = fd;
    d.hs = std::make_unique<mesh::ConnectSide>(id_, c_.rank_, p, crypto::random_bytes(mesh::kNonceBytes));
    const std::string hello = d.hs->hello();
    if (!write_all(fd, hello.data(), hello.size(), deadline_))
      throw PeerLostError(setup() + ": sending the handshake to rank " + std::to_string(p) + " at " + d.addr +
                          " failed");
  }

  // Waits for bytes on the listener and the handshakes in progress. On the sparse mesh it also
  // watches the completed connections: a peer that hangs up before this rank's mesh is complete is
  // lost (PeerLostError). Without one_host_known no peer can even finish its construction before
  // then (the setup's allgather needs every rank); with it a neighbour may finish first, but it
  // keeps its connections until its communicator fails, and then this generation fails anyway. On
  // the full mesh a peer may legitimately be done and gone already; one that died is seen by the
  // next collective instead.
  void wait_readable(int max_ms) {
    std::vector<pollfd> fds;
    std::vector<int> done_peer;  // per entry of fds: the peer of a completed connection, or -1
    auto add = [&](int fd, short events, int peer) {
      fds.push_back({fd, events, 0});
      done_peer.push_back(peer);
    };
    const bool watch = c_.topo_.is_sparse();
    add(lfd_, POLLIN, -1);
    if (addrs_) add(addrs_->fd(), POLLIN, -1);
    for (auto& a : accepted_) add(a.fd, POLLIN, -1);
    for (int p : c_.topo_.peers()) {
      if (dialled_[p].hs && dialled_[p].hs->wanted() > 0) add(c_.send_fd_[p], POLLIN, -1);
      else if (dialled_[p].hs && watch) add(c_.send_fd_[p], POLLRDHUP, p);
      if (c_.recv_fd_[p] >= 0 && watch) add(c_.recv_fd_[p], POLLRDHUP, p);
    }
    poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(ms_left(deadline_), max_ms)));
    for (size_t i = 0; i < fds.size(); ++i)
      if (done_peer[i] >= 0 && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
        throw PeerLostError(setup() + ": rank " + std::to_string(done_peer[i]) + " at " +
                            c_.peer_addr_[done_peer[i]] +
                            " closed its connection before the mesh was complete (it died, or gave up building "
                            "this generation)");
  }

  void accept_new() {
    for (int i = 0; i < kAcceptsPerTurn; ++i) {  // bounded: a flood must not starve the handshakes
      int fd = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) throw_descriptor_limit(setup() + ": accepting a peer", errno);
      if (fd < 0) return;
      if (accepted_.size() >= kMaxPendingAccepts) reject(accepted_.begin(), "too many half-open connections");
      accepted_.push_back(Accepted{fd, peer_address(fd), mesh::AcceptSide(id_, c_.rank_,
                                                                          crypto::random_bytes(mesh::kNonceBytes))});
    }
  }

  void reject(std::list<Accepted>::iterator it, const std::string& why) {
    std::string line = "connection from " + it->addr + " rejected: " + why;
    if (it->hs.stale()) EDL_LOG(3) << setup() << ": " << line << " (a dial of a failed build of an older generation)";
    else EDL_LOG(1) << setup() << ": " << line << " (still waiting for the genuine peers)";
    rejections_.push_back(line);
    if (rejections_.size() > kRememberedRejections) rejections_.pop_front();
    close(it->fd);
    accepted_.erase(it);
  }

  // Advances the handshakes of accepted connections; a completed one becomes recv_fd_[rank].
  void step_accepted() {
    for (auto it = accepted_.begin(); it != accepted_.end();) {
      uint8_t buf[mesh::kHelloBytes];
      ssize_t r = recv_some(it->fd, buf, it->hs.wanted());
      if (r < 0) {
        reject(it++, "it hung up during the handshake");
        continue;
      }
      if (r == 0) {
        ++it;
        continue;
      }
      std::string reply = it->hs.feed(buf, static_cast<size_t>(r));
      if (it->hs.state() == mesh::AcceptSide::State::kRejected) {
        if (!reply.empty()) (void)write_all(it->fd, reply.data(), reply.size(), Clock::now() + milliseconds(100));
        const std::string why = it->hs.reason();
        reject(it++, why);
        continue;
      }
      if (!reply.empty() && !write_all(it->fd, reply.data(), reply.size(), deadline_)) {
        reject(it++, "sending the handshake reply failed");
        continue;
      }
      if (it->hs.state() != mesh::AcceptSide::State::kDone) {
        ++it;
        continue;
      }
      const int p = it->hs.peer_rank();
      if (!c_.topo_.linked(p)) {  // cannot happen with genuine peers of the same mesh kind
        reject(it++, "rank " + std::to_string(p) + " is not linked to this rank in the " +
                         (c_.topo_.is_sparse() ? "sparse" : "full") + " mesh (EDL_MESH differs between the ranks?)");
        continue;
      }
      if (c_.recv_fd_[p] >= 0) {  // cannot happen with genuine peers: each dials once
        reject(it++, "rank " + std::to_string(p) + " is already connected");
        continue;
      }
      if (c_.topo_.is_sparse()) {  // its settings, authenticated: the sparse mesh's transport check
        const std::string why = TcpCommunicator::setup_mismatch(id_.setup, it->hs.peer_setup());
        if (!why.empty()) throw CommError(setup() + ": rank " + std::to_string(p) + " at " + it->addr + " has " + why);
      }
      c_.recv_fd_[p] = it->fd;
      ++accepted_ok_;
      it = accepted_.erase(it);
    }
  }

  // Advances the handshakes on our own connections; any failure is fatal.
  void step_dialled() {
    for (int p : c_.topo_.peers()) {
      Dialled& d = dialled_[p];
      if (!d.hs || d.hs->wanted() == 0) continue;
      uint8_t buf[mesh::kHelloBytes];
      ssize_t r = recv_some(c_.send_fd_[p], buf, d.hs->wanted());
      if (r < 0)  // a rejected proof is answered with a Reject, never with a bare close
        throw PeerLostError(setup() + ": rank " + std::to_string(p) + " at " + d.addr +
                            " closed the connection during the handshake (it died, or gave up building this "
                            "generation)");
      if (r == 0) continue;
      std::string reply = d.hs->feed(buf, static_cast<size_t>(r));
      if (d.hs->state() == mesh::ConnectSide::State::kFailed) {
        const std::string msg = setup() + ": the process at " + d.addr + " (rank " + std::to_string(p) +
                                "'s address) failed the handshake: " + d.hs->reason();
        if (d.hs->auth_failure()) throw AuthError(msg);
        throw PeerLostError(msg);
      }
      if (!reply.empty() && !write_all(c_.send_fd_[p], reply.data(), reply.size(), deadline_))
        throw PeerLostError(setup() + ": sending the handshake to rank " + std::to_string(p) + " at " + d.addr +
                            " failed");
      if (d.hs->state() == mesh::ConnectSide::State::kDone) ++dialled_ok_;
    }
  }

  [[noreturn]] void timeout() {
    const std::vector<int>& peers = c_.topo_.peers();
    for (int p : peers)
      if (!dialled_[p].hs)
        throw TimeoutError(setup() + ": rank " + std::to_string(p) + " did not publish its address under '" +
                           key_of(p) + "' within " + std::to_string(c_.options_.connect_timeout.count()) + " ms");
    std::string missing;
    for (int p : peers)
      if (c_.recv_fd_[p] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    std::string msg = setup() + ": only " + std::to_string(accepted_ok_) + " of " + std::to_string(peers_) +
                      " peers connected (missing rank(s) " + missing + ") and " + std::to_string(dialled_ok_) +
                      " answered within " + std::to_string(c_.options_.connect_timeout.count()) + " ms";
    for (const auto& r : rejections_) msg += "; " + r;
    throw TimeoutError(msg);
  }

  TcpCommunicator& c_;
  Store& store_;
  const std::string prefix_;
  const Clock::time_point deadline_;
  mesh::Identity id_;
  int lfd_ = -1;
  bool own_listener_ = true;  // false: the caller's (CommunicatorOptions::listen_fd), left open
  std::list<Accepted> accepted_;
  std::vector<Dialled> dialled_;
  std::deque<std::string> rejections_;
  int peers_ = 0;  // linked peers: connections to accept and to dial
  int accepted_ok_ = 0;
  int dialled_ok_ = 0;
  int dial_count_ = 0;  // peers dialled (handshake under way or done)
  std::unique_ptr<MeshAddresses> addrs_;  // the peers' addresses, read on a thread of its own
};

void TcpCommunicator::build_mesh(Store& store, const std::string& prefix) {
  try {
    MeshBuilder(*this, store, prefix).run();
  } catch (...) {
    for (auto* fds : {&send_fd_, &recv_fd_})
      for (int& fd : *fds)
        if (fd >= 0) close(fd), fd = -1;
    throw;
  }
  for (int p : topo_.peers()) {
    tune_data_socket(send_fd_[p]);
    tune_data_socket(recv_fd_[p]);
  }
}

}  // namespace edl::collective
