// The embedded TCP store server (edl::StoreServer): set-up, the epoll loop and the public facade.
// The connection, command and wait parts are in their own files (tcp_store_server_impl.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/host_port.h"
#include "common/logging.h"
#include "edl/error.h"
#include "elastic/store/tcp_store_server_impl.h"

namespace edl {
namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;

// The store holds up to max_connections sockets: raise the soft descriptor limit towards that (never
// above the hard limit) so that a flood of connections meets the server's own cap first.
void raise_fd_limit(size_t max_connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = static_cast<rlim_t>(max_connections) + 256;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace

StoreServer::Impl::Impl(const StoreServerOptions& o) : opts_(o) {
  raise_fd_limit(opts_.max_connections);
  open_listener();
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epfd_ < 0 || wakefd_ < 0) {
    int e = errno;
    close_fds();
    throw StoreError(std::string("store server: epoll/eventfd failed: ") + errno_text(e));
  }
  add_fd(listenfd_, kListenId, EPOLLIN);
  add_fd(wakefd_, kWakeId, EPOLLIN);
  thread_ = std::thread([this] { loop(); });
  pthread_getcpuclockid(thread_.native_handle(), &loop_clock_);
}

std::chrono::nanoseconds StoreServer::Impl::cpu_time() const {
  std::lock_guard<std::mutex> lock(stop_mu_);  // the thread (and its clock) exists until stop() joined it
  if (!thread_.joinable()) return std::chrono::nanoseconds(std::max<int64_t>(0, final_cpu_ns_.load()));
  timespec ts{};
  if (clock_gettime(loop_clock_, &ts) != 0) return std::chrono::nanoseconds(0);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

StoreServer::Impl::~Impl() {
  stop();
  close_fds();
}

void StoreServer::Impl::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  ssize_t r = ::write(wakefd_, &one, sizeof(one));
  (void)r;
  thread_.join();
  // Stop listening too: reconnecting clients get "connection refused" (and a new server may take
  // the port) instead of a connection nobody serves.
  ::close(listenfd_);
  listenfd_ = -1;
}

void StoreServer::Impl::open_listener() {
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
  if (listenfd_ < 0 || bind(listenfd_, res->ai_addr, res->ai_addrlen) != 0 || listen(listenfd_, SOMAXCONN) != 0) {
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

void StoreServer::Impl::close_fds() {
  for (int* fd : {&listenfd_, &epfd_, &wakefd_, &spare_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void StoreServer::Impl::add_fd(int fd, uint64_t id, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
}

void StoreServer::Impl::loop() {
  std::vector<epoll_event> events(1024);
  bool running = true;
  last_drained_ = Clock::now();
  while (running) {
    int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      EDL_LOG(0) << "store server: epoll_wait failed: " << errno_text(errno);
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeId) {
        running = false;
        continue;
      }
      dispatch(events[i].data.u64, events[i].events);
    }
    housekeeping(n < static_cast<int>(events.size()));  // fewer than asked for: every ready connection was read
  }
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) final_cpu_ns_ = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  for (auto& kv : conns_) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, kv.second->fd, nullptr);
    ::close(kv.second->fd);
  }
  conns_.clear();
  unauthenticated_.clear();
  waiters_.clear();
  watch_.clear();
  waiter_deadlines_.clear();
  handshake_deadlines_.clear();
  nconns_ = 0;
}

// One readiness event. An exception (e.g. bad_alloc while serving a huge request) closes the
// connection it came from; the loop goes on.
void StoreServer::Impl::dispatch(uint64_t id, uint32_t events) {
  if (id == kListenId) {
    try {
      accept_all();
    } catch (const std::exception& e) {
      EDL_LOG(0) << "store server: accepting failed: " << e.what();
    }
    return;
  }
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  try {
    if (c.paused && (events & (EPOLLHUP | EPOLLERR))) c.dead = true;
    if (!c.paused && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
    if (!c.dead && (events & EPOLLOUT)) flush(c);
  } catch (const std::exception& e) {
    EDL_LOG(0) << "store server: closing connection from " << c.peer << " after an internal error: " << e.what();
    c.dead = true;
  }
}

// Timers and deferred work after each round of events; errors are logged and the loop goes on.
// Leases expire only after a round that read every ready connection (`drained`), so a refresh that
// has arrived is applied before its lease is judged: a lease expires while the store was served,
// never because the loop was not running (a busy machine) or had a backlog of requests. A loop that
// stays saturated still expires them at most a second late.
void StoreServer::Impl::housekeeping(bool drained) {
  try {
    const auto now = Clock::now();
    if (drained) last_drained_ = now;
    if (drained || now - last_drained_ > std::chrono::seconds(1)) expire_leases(now);
    resume_paused();
    expire_waiters(Clock::now());
    expire_handshakes(Clock::now());
  } catch (const std::exception& e) {
    EDL_LOG(0) << "store server: internal error in housekeeping: " << e.what();
  }
  reap();
}

int StoreServer::Impl::next_timeout_ms() {
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
uint64_t StoreServer::refused_count() const { return impl_->refused_count(); }
uint64_t StoreServer::replay_count() const { return impl_->replay_count(); }
uint64_t StoreServer::request_count() const { return impl_->request_count(); }
std::chrono::nanoseconds StoreServer::cpu_time() const { return impl_->cpu_time(); }

}  // namespace edl
