// The embedded TCP store server (edl::StoreServer): one epoll event-loop thread owns all state.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/host_port.h"
#include "common/logging.h"
#include "edl/error.h"
#include "edl/store_server.h"
#include "elastic/tcp_store_auth.h"
#include "elastic/tcp_store_frame.h"

namespace edl {
namespace {

using Clock = std::chrono::steady_clock;
using store::Message;
using store::Op;
using store::Status;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr int64_t kMaxTimeoutMs = int64_t(365) * 24 * 3600 * 1000;  // clamp absurd timeouts to a year

bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i = 1;
    if (s.size() == 1) return false;
  }
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    int d = s[i] - '0';
    if (__builtin_mul_overflow(v, 10, &v)) return false;
    if (neg ? __builtin_sub_overflow(v, d, &v) : __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = v;
  return true;
}

Clock::time_point deadline_after(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms > kMaxTimeoutMs) ms = kMaxTimeoutMs;
  return Clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace

class StoreServer::Impl {
 public:
  explicit Impl(const StoreServerOptions& o) : opts_(o) {
    open_listener();
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd_ < 0 || wakefd_ < 0) {
      int e = errno;
      close_fds();
      throw StoreError("store server: epoll/eventfd failed: " + errno_text(e));
    }
    add_fd(listenfd_, kListenId, EPOLLIN);
    add_fd(wakefd_, kWakeId, EPOLLIN);
    thread_ = std::thread([this] { loop(); });
  }

  ~Impl() {
    stop();
    close_fds();
  }

  void stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!thread_.joinable()) return;
    uint64_t one = 1;
    ssize_t r = ::write(wakefd_, &one, sizeof(one));
    (void)r;
    thread_.join();
  }

  int port() const { return port_; }
  const std::string& bind_address() const { return opts_.bind_address; }
  size_t connection_count() const { return nconns_.load(); }
  uint64_t rejected_auth_count() const { return rejected_auth_.load(); }
  uint64_t bad_frame_count() const { return bad_frames_.load(); }
  uint64_t throttle_count() const { return throttled_.load(); }

 private:
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    std::string peer;
    store::FrameReader reader;
    std::string out;
    size_t out_off = 0;
    bool authed = false;
    bool writing = false;          // EPOLLOUT armed
    bool paused = false;           // EPOLLIN disarmed: too many replies queued (back-pressure)
    bool close_after_flush = false;
    bool dead = false;
    std::string nonce;
    std::set<uint64_t> waiters;
    explicit Conn(size_t max_frame) : reader(max_frame) {}
  };
  struct Entry {
    std::string value;
    Clock::time_point expires = Clock::time_point::max();
  };
  struct Waiter {
    uint64_t conn = 0;
    uint64_t req = 0;
    Op op = Op::kWait;
    std::vector<std::string> keys;
    std::optional<std::string> known;
    Clock::time_point deadline;
  };

  // --- setup ---------------------------------------------------------------------------------------
  void open_listener() {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = std::to_string(opts_.port);
    int rc = getaddrinfo(opts_.bind_address.c_str(), port.c_str(), &hints, &res);
    if (rc != 0)
      throw StoreError("store server: cannot resolve bind address '" + opts_.bind_address + "': " + gai_strerror(rc));
    listenfd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listenfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (listenfd_ < 0 || bind(listenfd_, res->ai_addr, res->ai_addrlen) != 0 || listen(listenfd_, 1024) != 0) {
      int e = errno;
      freeaddrinfo(res);
      if (listenfd_ >= 0) ::close(listenfd_);
      listenfd_ = -1;
      throw StoreError("store server: cannot listen on " + opts_.bind_address + ":" + port + ": " + errno_text(e));
    }
    freeaddrinfo(res);
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    getsockname(listenfd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
  }

  void close_fds() {
    for (int* fd : {&listenfd_, &epfd_, &wakefd_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  void add_fd(int fd, uint64_t id, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }

  // --- the loop -----------------------------------------------------------------------------------
  void loop() {
    std::vector<epoll_event> events(256);
    bool running = true;
    while (running) {
      int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), next_timeout_ms());
      if (n < 0 && errno != EINTR) {
        EDL_LOG(0) << "store server: epoll_wait failed: " << errno_text(errno);
        break;
      }
      auto now = Clock::now();
      expire_leases(now);
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          running = false;
        } else if (id == kListenId) {
          accept_all();
        } else {
          auto it = conns_.find(id);
          if (it == conns_.end()) continue;
          Conn& c = *it->second;
          if (c.paused && (events[i].events & (EPOLLHUP | EPOLLERR))) c.dead = true;
          if (!c.paused && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
          if (!c.dead && (events[i].events & EPOLLOUT)) flush(c);
        }
      }
      resume_paused();
      expire_waiters(Clock::now());
      expire_handshakes(Clock::now());
      reap();
    }
    for (auto& kv : conns_) {
      epoll_ctl(epfd_, EPOLL_CTL_DEL, kv.second->fd, nullptr);
      ::close(kv.second->fd);
    }
    conns_.clear();
    waiters_.clear();
    watch_.clear();
    waiter_deadlines_.clear();
    handshake_deadlines_.clear();
    nconns_ = 0;
  }

  int next_timeout_ms() {
    auto next = Clock::time_point::max();
    if (!lease_queue_.empty()) next = lease_queue_.begin()->first;
    if (!waiter_deadlines_.empty()) next = std::min(next, waiter_deadlines_.begin()->first);
    if (!handshake_deadlines_.empty()) next = std::min(next, handshake_deadlines_.begin()->first);
    if (next == Clock::time_point::max()) return -1;
    auto now = Clock::now();
    if (next <= now) return 0;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(next - now).count();
    return static_cast<int>(std::min<int64_t>((us + 999) / 1000, 3600 * 1000));
  }

  void accept_all() {
    for (;;) {
      sockaddr_in sa{};
      socklen_t len = sizeof(sa);
      int fd = accept4(listenfd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          EDL_LOG(1) << "store server: accept failed: " << errno_text(errno);
        }
        return;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>(opts_.max_frame_bytes);
      c->fd = fd;
      c->id = next_conn_id_++;
      char buf[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
      c->peer = std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
      c->nonce = store::random_bytes(store::kNonceBytes);
      add_fd(fd, c->id, EPOLLIN);
      handshake_deadlines_.emplace(Clock::now() + std::chrono::milliseconds(opts_.handshake_timeout_ms), c->id);
      Conn& ref = *c;
      conns_.emplace(c->id, std::move(c));
      nconns_ = conns_.size();
      Message hello;
      hello.op = Op::kHello;
      hello.value = store::kProtocolMagic;
      hello.opt = ref.nonce;
      send(ref, hello);
    }
  }

  void on_readable(Conn& c) {
    char buf[65536];
    for (;;) {
      ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
      if (r > 0) {
        if (!c.reader.feed(buf, static_cast<size_t>(r))) {
          // The frames before the bad header are still served; then the connection goes.
          drain_frames(c);
          bad_frame(c, c.reader.error());
          return;
        }
        drain_frames(c);
        if (c.dead || c.close_after_flush || c.paused) return;
        continue;
      }
      if (r == 0) {
        if (c.reader.pending_bytes() > 0) {
          EDL_LOG(2) << "store server: " << c.peer << " closed mid-frame (" << c.reader.pending_bytes()
                     << " bytes of a truncated frame dropped)";
        }
        c.dead = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
  }

  size_t pending_output(const Conn& c) const { return c.out.size() - c.out_off; }

  void drain_frames(Conn& c) {
    std::string body;
    while (!c.dead && !c.close_after_flush) {
      if (pending_output(c) >= opts_.max_pending_output_bytes) {
        pause(c);  // resumed by flush() once the client has read its replies
        return;
      }
      if (!c.reader.next(&body)) break;
      std::string err;
      auto m = store::decode_message(body, &err);
      if (!m) {
        bad_frame(c, err);
        return;
      }
      if (!c.authed) {
        authenticate(c, *m);
      } else {
        expire_leases(Clock::now());
        handle(c, std::move(*m));
      }
    }
  }

  void bad_frame(Conn& c, const std::string& why) {
    ++bad_frames_;
    EDL_LOG(1) << "store server: closing connection from " << c.peer << ": malformed frame (" << why << ")";
    c.dead = true;
  }

  void authenticate(Conn& c, const Message& m) {
    bool ok = m.op == Op::kAuth && store::constant_time_equal(m.value, store::auth_mac(opts_.secret, c.nonce));
    Message reply;
    if (ok) {
      c.authed = true;
      reply.op = Op::kAuthOk;
      send(c, reply);
      return;
    }
    ++rejected_auth_;
    std::string why = m.op == Op::kAuth ? "wrong or missing job secret (EDL_JOB_SECRET)"
                                        : std::string("first frame was ") + store::op_name(m.op) +
                                              ", not AUTH: the job secret was not proved";
    EDL_LOG(1) << "store server: rejected connection from " << c.peer << ": " << why;
    reply.op = Op::kAuthFail;
    reply.value = why;
    send(c, reply);
    c.close_after_flush = true;
    if (c.out_off == c.out.size()) c.dead = true;
  }

  void pause(Conn& c) {
    if (c.paused) return;
    c.paused = true;
    ++throttled_;
    update_events(c);
    EDL_LOG(2) << "store server: " << c.peer << " is not reading its replies (" << pending_output(c)
               << " bytes queued); its requests wait";
  }

  // Connections whose queue drained below the limit continue with the requests they already sent.
  void resume_paused() {
    for (auto& kv : conns_) {
      Conn& c = *kv.second;
      if (!c.paused || c.dead || pending_output(c) >= opts_.max_pending_output_bytes / 2) continue;
      c.paused = false;
      update_events(c);
      drain_frames(c);
      if (!c.paused && !c.dead) on_readable(c);  // bytes that arrived while paused
    }
  }

  void expire_handshakes(Clock::time_point now) {
    while (!handshake_deadlines_.empty() && handshake_deadlines_.begin()->first <= now) {
      uint64_t id = handshake_deadlines_.begin()->second;
      handshake_deadlines_.erase(handshake_deadlines_.begin());
      auto it = conns_.find(id);
      if (it == conns_.end() || it->second->authed || it->second->dead) continue;
      ++rejected_auth_;
      EDL_LOG(1) << "store server: closing connection from " << it->second->peer << ": no AUTH within "
                 << opts_.handshake_timeout_ms << " ms";
      it->second->dead = true;
    }
  }

  // --- requests -----------------------------------------------------------------------------------
  std::optional<std::string> lookup(const std::string& key) const {
    auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second.value;
  }

  void handle(Conn& c, Message&& m) {
    Message r;
    r.op = Op::kResponse;
    r.id = m.id;
    switch (m.op) {
      case Op::kSet:
        data_[m.key] = Entry{std::move(m.value), Clock::time_point::max()};
        touched(m.key);
        break;
      case Op::kGet:
        r.opt = lookup(m.key);
        break;
      case Op::kAdd: {
        int64_t cur = 0;
        auto it = data_.find(m.key);
        if (it != data_.end() && !parse_int64(it->second.value, &cur)) {
          r.status = Status::kInvalidArgument;
          r.value = "store add: value of key '" + m.key + "' is not an integer";
        } else if (__builtin_add_overflow(cur, m.number, &cur)) {
          r.status = Status::kInvalidArgument;
          r.value = "store add: key '" + m.key + "' would overflow int64";
        } else {
          data_[m.key] = Entry{std::to_string(cur), Clock::time_point::max()};
          r.number = cur;
          touched(m.key);
        }
        break;
      }
      case Op::kCompareSet: {
        auto cur = lookup(m.key);
        if (cur != m.opt) {
          r.status = Status::kFalse;
          r.opt = cur;
        } else {
          r.opt = m.value;
          data_[m.key] = Entry{std::move(m.value), Clock::time_point::max()};
          touched(m.key);
        }
        break;
      }
      case Op::kWait:
      case Op::kWaitChange:
        start_wait(c, std::move(m));
        return;
      case Op::kDel:
        if (data_.erase(m.key) > 0)
          touched(m.key);
        else
          r.status = Status::kFalse;
        break;
      case Op::kKeys:
        for (auto it = data_.lower_bound(m.key);
             it != data_.end() && it->first.compare(0, m.key.size(), m.key) == 0; ++it)
          r.list.push_back(it->first);
        break;
      case Op::kSetLease: {
        if (m.number <= 0) {
          r.status = Status::kInvalidArgument;
          r.value = "store set_lease: ttl of key '" + m.key + "' must be positive, got " + std::to_string(m.number) +
                    " ms";
          break;
        }
        auto exp = deadline_after(m.number);
        data_[m.key] = Entry{std::move(m.value), exp};
        lease_queue_.emplace(exp, m.key);
        touched(m.key);
        break;
      }
      default:
        bad_frame(c, std::string("unexpected op ") + store::op_name(m.op) + " after authentication");
        return;
    }
    send(c, r);
  }

  bool satisfied(const Waiter& w, Message* r) const {
    if (w.op == Op::kWait) {
      for (const auto& k : w.keys)
        if (!data_.count(k)) return false;
      r->status = Status::kOk;
      return true;
    }
    auto cur = lookup(w.keys[0]);
    if (cur == w.known) return false;
    r->opt = std::move(cur);
    return true;
  }

  void start_wait(Conn& c, Message&& m) {
    Waiter w;
    w.conn = c.id;
    w.req = m.id;
    w.op = m.op;
    if (m.op == Op::kWait) {
      w.keys = std::move(m.list);
    } else {
      w.keys = {std::move(m.key)};
      w.known = std::move(m.opt);
    }
    Message r;
    r.op = Op::kResponse;
    r.id = m.id;
    if (satisfied(w, &r)) {
      send(c, r);
      return;
    }
    if (m.number <= 0) {  // zero timeout: answer "not yet" right away
      timeout_reply(w, &r);
      send(c, r);
      return;
    }
    w.deadline = deadline_after(m.number);
    uint64_t wid = next_waiter_id_++;
    for (const auto& k : w.keys) watch_.emplace(k, wid);
    waiter_deadlines_.emplace(w.deadline, wid);
    c.waiters.insert(wid);
    waiters_.emplace(wid, std::move(w));
  }

  void timeout_reply(const Waiter& w, Message* r) const {
    if (w.op == Op::kWait) {
      r->status = Status::kFalse;
    } else {
      r->opt = lookup(w.keys[0]);  // equals `known`
    }
  }

  void remove_waiter(uint64_t wid) {
    auto it = waiters_.find(wid);
    if (it == waiters_.end()) return;
    const Waiter& w = it->second;
    for (const auto& k : w.keys) {
      auto range = watch_.equal_range(k);
      for (auto j = range.first; j != range.second;) {
        if (j->second == wid)
          j = watch_.erase(j);
        else
          ++j;
      }
    }
    auto range = waiter_deadlines_.equal_range(w.deadline);
    for (auto j = range.first; j != range.second; ++j) {
      if (j->second == wid) {
        waiter_deadlines_.erase(j);
        break;
      }
    }
    auto c = conns_.find(w.conn);
    if (c != conns_.end()) c->second->waiters.erase(wid);
    waiters_.erase(it);
  }

  // Wakes every waiter on key whose condition now holds.
  void touched(const std::string& key) {
    auto range = watch_.equal_range(key);
    if (range.first == range.second) return;
    std::vector<uint64_t> ids;
    for (auto j = range.first; j != range.second; ++j) ids.push_back(j->second);
    for (uint64_t wid : ids) {
      auto it = waiters_.find(wid);
      if (it == waiters_.end()) continue;
      Message r;
      r.op = Op::kResponse;
      r.id = it->second.req;
      if (!satisfied(it->second, &r)) continue;
      uint64_t conn = it->second.conn;
      remove_waiter(wid);
      auto c = conns_.find(conn);
      if (c != conns_.end()) send(*c->second, r);
    }
  }

  void expire_waiters(Clock::time_point now) {
    while (!waiter_deadlines_.empty() && waiter_deadlines_.begin()->first <= now) {
      uint64_t wid = waiter_deadlines_.begin()->second;
      auto it = waiters_.find(wid);
      if (it == waiters_.end()) {
        waiter_deadlines_.erase(waiter_deadlines_.begin());
        continue;
      }
      Message r;
      r.op = Op::kResponse;
      r.id = it->second.req;
      timeout_reply(it->second, &r);
      uint64_t conn = it->second.conn;
      remove_waiter(wid);
      auto c = conns_.find(conn);
      if (c != conns_.end()) send(*c->second, r);
    }
  }

  void expire_leases(Clock::time_point now) {
    while (!lease_queue_.empty() && lease_queue_.begin()->first <= now) {
      auto node = lease_queue_.extract(lease_queue_.begin());
      auto it = data_.find(node.mapped());
      if (it != data_.end() && it->second.expires == node.key()) {
        data_.erase(it);
        touched(node.mapped());
      }
    }
  }

  // --- output -------------------------------------------------------------------------------------
  void send(Conn& c, const Message& m) {
    if (c.dead) return;
    c.out += store::encode_frame(m);
    flush(c);
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (w > 0) {
        c.out_off += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_writing(c, true);
        return;
      }
      c.dead = true;
      return;
    }
    c.out.clear();
    c.out_off = 0;
    set_writing(c, false);
    if (c.close_after_flush) c.dead = true;
  }

  void set_writing(Conn& c, bool on) {
    if (c.writing == on) return;
    c.writing = on;
    update_events(c);
  }

  void update_events(Conn& c) {
    epoll_event ev{};
    ev.events = (c.paused ? 0u : uint32_t(EPOLLIN)) | (c.writing ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = *it->second;
      if (!c.dead) {
        ++it;
        continue;
      }
      std::vector<uint64_t> ws(c.waiters.begin(), c.waiters.end());
      for (uint64_t wid : ws) remove_waiter(wid);
      epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
      ::close(c.fd);
      it = conns_.erase(it);
    }
    nconns_ = conns_.size();
  }

  StoreServerOptions opts_;
  int listenfd_ = -1, epfd_ = -1, wakefd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
  std::atomic<size_t> nconns_{0};
  std::atomic<uint64_t> rejected_auth_{0}, bad_frames_{0}, throttled_{0};

  // Loop-thread state.
  uint64_t next_conn_id_ = 2;
  uint64_t next_waiter_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::map<std::string, Entry> data_;
  std::multimap<Clock::time_point, std::string> lease_queue_;
  std::map<uint64_t, Waiter> waiters_;
  std::unordered_multimap<std::string, uint64_t> watch_;
  std::multimap<Clock::time_point, uint64_t> waiter_deadlines_;
  std::multimap<Clock::time_point, uint64_t> handshake_deadlines_;
};

StoreServer::StoreServer(const StoreServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}
StoreServer::~StoreServer() = default;
int StoreServer::port() const { return impl_->port(); }
const std::string& StoreServer::bind_address() const { return impl_->bind_address(); }
std::string StoreServer::url() const {
  std::string host = impl_->bind_address();
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  return "tcp://" + host + ":" + std::to_string(impl_->port());
}
void StoreServer::stop() { impl_->stop(); }
size_t StoreServer::connection_count() const { return impl_->connection_count(); }
uint64_t StoreServer::rejected_auth_count() const { return impl_->rejected_auth_count(); }
uint64_t StoreServer::bad_frame_count() const { return impl_->bad_frame_count(); }
uint64_t StoreServer::throttle_count() const { return impl_->throttle_count(); }

}  // namespace edl
