// TcpCommunicator::setup_transport: after the mesh is built, the ranks agree over the mesh on the
// transport and attach the shared segment (docs/collectives.md, "Shared-memory transport"):
//   1. every rank sends every peer a transport hello {magic, transport setting, host id};
//   2. all hosts equal: rank 0 creates the segment (memfd, no name in /dev/shm), listens on an
//      abstract Unix socket with a random name, and sends every peer {ok, socket name, nonce};
//      every peer connects, receives the memfd (SCM_RIGHTS; rank 0 checks the peer's uid), maps it
//      and checks magic, size, generation and nonce;
//   3. every rank sends every peer one status byte; the segment is used only if all are 1.
// Every message is read whole before the next step, so the mesh's byte streams stay in sync
// whichever transport results. Hosts differ, or setup fails somewhere: TCP (kAuto) or CommError (kShm).
// Hosts differ under kAuto: every rank derives the same HostLayout from the hellos; when it allows
// the hierarchical allreduce (and EDL_HIERARCHICAL is not 0) the children are built through the
// store (hierarchy.h), EDL_HIERARCHICAL=1 with a layout that does not allow it is a CommError.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "collective/hierarchy.h"
#include "collective/shm_transport.h"
#include "common/crypto.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr uint64_t kOfferMagic = 0x5245464f4d485345ull;  // "ESHMOFER"
struct Offer {
  uint64_t magic;
  uint32_t ok;
  uint32_t pad;
  char name[64];  // abstract socket name (without the leading NUL)
  uint8_t nonce[32];
};

bool read_exact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    poll(&pf, 1, static_cast<int>(std::min<long long>(left, 100)));
  }
  return true;
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

bool send_fd(int sock, int fd) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof(ctl);
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &m, MSG_NOSIGNAL) == 1;
}

int recv_fd(int sock, Clock::time_point deadline) {
  pollfd pf{sock, POLLIN, 0};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) return -1;
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof(ctl);
  if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace

class ShmSetup {
 public:
  explicit ShmSetup(TcpCommunicator& c) : c_(c), deadline_(Clock::now() + c.options_.connect_timeout) {}
  ~ShmSetup() {
    if (listen_fd_ >= 0) close(listen_fd_);
    if (mem_fd_ >= 0) close(mem_fd_);
    if (base_ && !adopted_) munmap(base_, layout_.total);
  }

  // Returns the host layout when the allreduce is to be hierarchical (its problem field empty).
  HostLayout run() {
    const bool same = exchange_hellos();
    const bool forced = c_.options_.transport == Transport::kShm;
    if (!same) {
      if (forced) throw CommError(setup() + ": EDL_TRANSPORT=shm, but the ranks are on different hosts: " + hosts_);
      return HostLayout::decide(host_of_, c_.rank_, c_.options_.hierarchical, setup(), hosts_);
    }
    HostLayout none;
    none.problem = "one host";
    layout_ = ShmLayout::make(c_.size_);
    const bool ok = c_.rank_ == 0 ? offer() : attach();
    std::string failed = agree(ok);
    if (!failed.empty()) {
      if (forced) throw CommError(setup() + ": EDL_TRANSPORT=shm, but rank(s) " + failed + " could not attach the segment" +
                                  (why_.empty() ? "" : " (this rank: " + why_ + ")"));
      EDL_LOG(1) << setup() << ": shared-memory transport unavailable on rank(s) " << failed
                 << (why_.empty() ? "" : " (" + why_ + ")") << "; using TCP";
      return none;
    }
    c_.shm_ = std::make_unique<ShmTransport>(c_, base_, layout_);
    adopted_ = true;
    return none;
  }

 private:
  std::string setup() const { return "communicator setup on rank " + std::to_string(c_.rank_); }

  void send_to(int p, const void* buf, size_t n) {
    if (!write_all(c_.send_fd_[p], buf, n, deadline_))
      throw PeerLostError(setup() + ": sending the transport setup to rank " + std::to_string(p) + " failed");
  }
  void read_from(int p, void* buf, size_t n) {
    if (!read_exact(c_.recv_fd_[p], buf, n, deadline_))
      throw PeerLostError(setup() + ": rank " + std::to_string(p) +
                          " closed the connection or stayed silent during the transport setup" +
                          " (is EDL_TRANSPORT the same on every rank?)" + c_.peer_text(p));
  }

  bool exchange_hellos() {
    const TransportHello mine = TransportHello::of(c_.options_);
    const std::string host = mine.host_id();
    for (int p = 0; p < c_.size_; ++p)
      if (p != c_.rank_) send_to(p, &mine, sizeof(mine));
    bool same = true;
    hosts_ = "rank " + std::to_string(c_.rank_) + " on '" + host + "'";
    host_of_.assign(c_.size_, host);
    for (int p = 0; p < c_.size_; ++p) {
      if (p == c_.rank_) continue;
      TransportHello h{};
      read_from(p, &h, sizeof(h));
      if (!h.valid())
        throw CommError(setup() + ": rank " + std::to_string(p) +
                        " sent no transport hello (EDL_TRANSPORT=tcp on that rank and not on this one?)" +
                        c_.peer_text(p));
      if (h.hierarchical != mine.hierarchical)
        throw CommError(setup() + ": rank " + std::to_string(p) + " has another EDL_HIERARCHICAL setting (" +
                        std::to_string(h.hierarchical) + ", this rank " + std::to_string(mine.hierarchical) +
                        "; 0 auto, 1 off, 2 on)" + c_.peer_text(p));
      host_of_[p] = h.host_id();
      if (host_of_[p] != host) {
        same = false;
        hosts_ += ", rank " + std::to_string(p) + " on '" + host_of_[p] + "'";
      }
    }
    return same;
  }

  // Rank 0: creates the segment and the socket that hands it out; tells every peer where.
  bool offer() {
    Offer o{};
    o.magic = kOfferMagic;
    try {
      mem_fd_ = memfd_create("edl-shm", MFD_CLOEXEC);
      if (mem_fd_ < 0) throw CommError("memfd_create: " + errno_text(errno));
      if (ftruncate(mem_fd_, static_cast<off_t>(layout_.total)) != 0) throw CommError("ftruncate: " + errno_text(errno));
      base_ = mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd_, 0);
      if (base_ == MAP_FAILED) {
        base_ = nullptr;
        throw CommError("mmap: " + errno_text(errno));
      }
      std::string nonce = crypto::random_bytes(32);
      auto* sh = static_cast<ShmSegmentHeader*>(base_);
      sh->generation = c_.options_.generation;
      sh->size = static_cast<uint32_t>(c_.size_);
      sh->version = 1;
      sh->eager_bytes = layout_.eager_bytes;
      sh->slot_bytes = layout_.slot_bytes;
      std::memcpy(sh->nonce, nonce.data(), 32);
      __atomic_store_n(&sh->magic, kShmMagic, __ATOMIC_RELEASE);
      std::memcpy(o.nonce, nonce.data(), 32);
      std::string name = "edl-shm-" + to_hex(crypto::random_bytes(16));
      listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (listen_fd_ < 0) throw CommError("socket(AF_UNIX): " + errno_text(errno));
      socklen_t len;
      sockaddr_un a = abstract_address(name, &len);
      if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listen_fd_, c_.size_) != 0)
        throw CommError("binding the abstract socket: " + errno_text(errno));
      std::memcpy(o.name, name.data(), name.size());
      o.ok = 1;
    } catch (const CommError& e) {
      why_ = e.what();
    }
    for (int p = 1; p < c_.size_; ++p) send_to(p, &o, sizeof(o));
    return o.ok == 1;
  }

  // Rank 0: hands the memfd to every peer that connects (same uid only) while it reads their status
  // bytes (a peer that cannot reach the socket answers 0 at once, so nobody waits for it).
  void serve(std::vector<int>& status) {
    int missing = c_.size_ - 1;
    while (missing > 0) {
      if (Clock::now() >= deadline_)
        throw TimeoutError(setup() + ": the peers did not answer the shared-memory setup within " +
                           std::to_string(c_.options_.connect_timeout.count()) + " ms");
      std::vector<pollfd> fds;
      std::vector<int> peers;
      for (int p = 1; p < c_.size_; ++p)
        if (status[p] < 0) fds.push_back(pollfd{c_.recv_fd_[p], POLLIN, 0}), peers.push_back(p);
      if (listen_fd_ >= 0) fds.push_back(pollfd{listen_fd_, POLLIN, 0});
      poll(fds.data(), fds.size(), 100);
      for (size_t i = 0; i < peers.size(); ++i) {
        if (!fds[i].revents) continue;
        uint8_t b = 0;
        read_from(peers[i], &b, 1);
        status[peers[i]] = b;
        --missing;
      }
      if (listen_fd_ < 0 || !fds.back().revents) continue;
      int s = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (s < 0) continue;
      ucred cred{};
      socklen_t cl = sizeof(cred);
      if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid() || !send_fd(s, mem_fd_)) {
        EDL_LOG(1) << setup() << ": refused a shared-memory attach from pid " << cred.pid << " uid " << cred.uid;
      }
      close(s);
    }
  }

  // Ranks > 0: fetch the memfd from rank 0's socket, map it, check it.
  bool attach() {
    Offer o{};
    read_from(0, &o, sizeof(o));
    if (o.magic != kOfferMagic) throw CommError(setup() + ": rank 0 sent a malformed transport offer" + c_.peer_text(0));
    if (!o.ok) {
      why_ = "rank 0 could not create the segment";
      return false;
    }
    o.name[sizeof(o.name) - 1] = '\0';
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len;
    sockaddr_un a = abstract_address(o.name, &len);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      why_ = "cannot reach rank 0's socket @" + std::string(o.name) + ": " + errno_text(errno) +
             " (another network namespace?)";
      if (s >= 0) close(s);
      return false;
    }
    mem_fd_ = recv_fd(s, deadline_);
    close(s);
    struct stat st{};
    if (mem_fd_ < 0 || fstat(mem_fd_, &st) != 0 || static_cast<size_t>(st.st_size) != layout_.total) {
      why_ = "did not receive the segment from rank 0";
      return false;
    }
    base_ = mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd_, 0);
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      why_ = "mmap: " + errno_text(errno);
      return false;
    }
    const auto* sh = static_cast<const ShmSegmentHeader*>(base_);
    if (__atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != kShmMagic || sh->size != static_cast<uint32_t>(c_.size_) ||
        sh->generation != c_.options_.generation || std::memcmp(sh->nonce, o.nonce, 32) != 0 ||
        sh->eager_bytes != layout_.eager_bytes || sh->slot_bytes != layout_.slot_bytes) {
      why_ = "the segment received does not match rank 0's offer";
      return false;
    }
    return true;
  }

  // Every rank tells every other whether it is attached; "" when all are, else the failed ranks.
  std::string agree(bool ok) {
    const uint8_t mine = ok ? 1 : 0;
    for (int p = 0; p < c_.size_; ++p)
      if (p != c_.rank_) send_to(p, &mine, 1);
    std::vector<int> status(c_.size_, -1);
    status[c_.rank_] = mine;
    if (c_.rank_ == 0) {
      serve(status);
    } else {
      for (int p = 0; p < c_.size_; ++p) {
        if (p == c_.rank_) continue;
        uint8_t b = 0;
        read_from(p, &b, 1);
        status[p] = b;
      }
    }
    std::string failed;
    for (int p = 0; p < c_.size_; ++p)
      if (status[p] != 1) failed += (failed.empty() ? "" : ", ") + std::to_string(p);
    return failed;
  }

  static std::string to_hex(const std::string& b) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (unsigned char c : b) s += d[c >> 4], s += d[c & 15];
    return s;
  }

  TcpCommunicator& c_;
  const Clock::time_point deadline_;
  ShmLayout layout_;
  std::string hosts_;
  std::vector<std::string> host_of_;  // every rank's host id
  std::string why_;
  int listen_fd_ = -1;
  int mem_fd_ = -1;
  void* base_ = nullptr;
  bool adopted_ = false;
};

void TcpCommunicator::setup_transport(const std::shared_ptr<Store>& store, const std::string& prefix) {
  try {
    HostLayout layout = ShmSetup(*this).run();
    if (layout.problem.empty()) {
      hier_ = Hierarchy::build(store, prefix, size_, options_, layout);
      hier_->set_tuning(tuning_);
    }
  } catch (...) {
    hier_.reset();
    for (auto* fds : {&send_fd_, &recv_fd_})
      for (int& fd : *fds)
        if (fd >= 0) close(fd), fd = -1;
    throw;
  }
}

}  // namespace edl::collective
