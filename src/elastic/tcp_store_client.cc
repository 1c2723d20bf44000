#include "elastic/tcp_store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "edl/error.h"
#include "elastic/tcp_store_auth.h"
#include "elastic/tcp_store_frame.h"

namespace edl::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kMaxWaitMs = int64_t(365) * 24 * 3600 * 1000;

int64_t clamp_ms(milliseconds t) {
  int64_t ms = t.count();
  if (ms < 0) return 0;
  return ms > kMaxWaitMs ? kMaxWaitMs : ms;
}

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Connects with a deadline (retrying while the server is not up yet); returns a blocking fd.
int dial(const std::string& host, int port, milliseconds timeout, const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw StoreError("store " + addr + ": cannot resolve host: " + gai_strerror(rc));
  auto deadline = Clock::now() + timeout;
  std::string last = "no address";
  for (;;) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        last = std::strerror(errno);
        continue;
      }
      int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
      int err = r == 0 ? 0 : errno;
      if (r != 0 && err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, std::max(ms_left(deadline), 1)) == 1) {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      if (err == 0) {
        freeaddrinfo(res);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
      }
      last = std::strerror(err);
      ::close(fd);
    }
    if (Clock::now() + milliseconds(50) >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));  // the server may still be starting
  }
  freeaddrinfo(res);
  throw StoreError("store " + addr + ": cannot connect within " + std::to_string(timeout.count()) + " ms: " + last);
}

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, const StoreOptions& o)
      : addr_("tcp://" + host + ":" + std::to_string(port)), opts_(o) {
    fd_ = dial(host, port, o.connect_timeout, addr_);
    try {
      handshake();
    } catch (...) {
      ::close(fd_);
      throw;
    }
    timeval tv{};
    int64_t ms = clamp_ms(o.request_timeout);
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    reader_ = std::thread([this] { read_loop(); });
  }

  ~TcpStore() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    ::shutdown(fd_, SHUT_RDWR);
    if (reader_.joinable()) reader_.join();
    ::close(fd_);
  }

  void set(const std::string& key, const std::string& value) override {
    Message m;
    m.op = Op::kSet;
    m.key = key;
    m.value = value;
    call(std::move(m));
  }

  std::optional<std::string> get(const std::string& key) override {
    Message m;
    m.op = Op::kGet;
    m.key = key;
    return call(std::move(m)).opt;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Message m;
    m.op = Op::kAdd;
    m.key = key;
    m.number = delta;
    return call(std::move(m)).number;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    Message m;
    m.op = Op::kCompareSet;
    m.key = key;
    m.opt = expected;
    m.value = desired;
    Message r = call(std::move(m));
    if (current) *current = r.opt;
    return r.status == Status::kOk;
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    Message m;
    m.op = Op::kWait;
    m.list = keys;
    m.number = clamp_ms(timeout);
    return call(std::move(m), m.number).status == Status::kOk;
  }

  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         milliseconds timeout) override {
    Message m;
    m.op = Op::kWaitChange;
    m.key = key;
    m.opt = known;
    m.number = clamp_ms(timeout);
    return call(std::move(m), m.number).opt;
  }

  bool del(const std::string& key) override {
    Message m;
    m.op = Op::kDel;
    m.key = key;
    return call(std::move(m)).status == Status::kOk;
  }

  std::vector<std::string> keys(const std::string& prefix) override {
    Message m;
    m.op = Op::kKeys;
    m.key = prefix;
    return call(std::move(m)).list;
  }

  void set_lease(const std::string& key, const std::string& value, milliseconds ttl) override {
    EDL_CHECK(ttl.count() > 0, InvalidArgument,
              "store set_lease: ttl of key '" + key + "' must be positive, got " + std::to_string(ttl.count()) + " ms");
    Message m;
    m.op = Op::kSetLease;
    m.key = key;
    m.value = value;
    m.number = clamp_ms(ttl);
    call(std::move(m));
  }

 private:
  struct Slot {
    bool done = false;
    Message reply;
  };

  // Reads one frame during the handshake (before the reader thread exists).
  Message read_handshake_frame(Clock::time_point deadline, const char* expecting) {
    std::string body;
    char buf[4096];
    while (!reader_state_.next(&body)) {
      pollfd p{fd_, POLLIN, 0};
      int pr = poll(&p, 1, ms_left(deadline));
      if (pr <= 0)
        throw StoreError("store " + addr_ + ": no " + expecting + " from the server within " +
                         std::to_string(opts_.connect_timeout.count()) + " ms (is this an EDL store?)");
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0)
        throw StoreError("store " + addr_ + ": connection closed by the server during the handshake (waiting for " +
                         expecting + ")");
      if (!reader_state_.feed(buf, static_cast<size_t>(r)))
        throw StoreError("store " + addr_ + ": not an EDL store (" + reader_state_.error() + ")");
    }
    std::string err;
    auto m = decode_message(body, &err);
    if (!m) throw StoreError("store " + addr_ + ": malformed handshake frame (" + err + ")");
    return *m;
  }

  void handshake() {
    auto deadline = Clock::now() + opts_.connect_timeout;
    Message hello = read_handshake_frame(deadline, "HELLO");
    if (hello.op != Op::kHello || hello.value != kProtocolMagic || !hello.opt || hello.opt->size() != kNonceBytes)
      throw StoreError("store " + addr_ + ": unexpected greeting (protocol mismatch; expected " + kProtocolMagic + ")");
    Message auth;
    auth.op = Op::kAuth;
    auth.value = auth_mac(opts_.secret, *hello.opt);
    send_all(encode_frame(auth));
    Message reply = read_handshake_frame(deadline, "AUTH reply");
    if (reply.op == Op::kAuthFail)
      throw AuthError("store " + addr_ + ": authentication rejected: " + reply.value);
    if (reply.op != Op::kAuthOk) throw StoreError("store " + addr_ + ": unexpected reply to AUTH");
  }

  void send_all(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t w = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        int e = errno;
        throw StoreError("store " + addr_ + ": connection lost while sending (" +
                         (e == EAGAIN ? std::string("send timed out") : std::string(std::strerror(e))) + ")");
      }
    }
  }

  // Sends m and waits for its reply: up to request_timeout, plus wait_ms for server-side waits.
  Message call(Message m, int64_t wait_ms = 0) {
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_) throw StoreError(dead_reason_);
    uint64_t id = next_id_++;
    lock.unlock();
    m.id = id;
    std::string frame = encode_frame(m);
    if (frame.size() - 4 > kDefaultMaxFrameBytes)
      throw InvalidArgument("store " + addr_ + ": " + op_name(m.op) + " of key '" + m.key.substr(0, 200) + "' is " +
                            std::to_string(frame.size() - 4) + " bytes; the frame limit is " +
                            std::to_string(kDefaultMaxFrameBytes) + " bytes");
    lock.lock();
    if (dead_) throw StoreError(dead_reason_);
    pending_[id];
    lock.unlock();
    try {
      std::lock_guard<std::mutex> wl(write_mu_);
      send_all(frame);
    } catch (const StoreError&) {
      lock.lock();
      pending_.erase(id);
      throw;
    }
    lock.lock();
    auto deadline = Clock::now() + milliseconds(wait_ms) + opts_.request_timeout;
    bool ok = cv_.wait_until(lock, deadline, [&] { return pending_[id].done || dead_; });
    Slot slot = std::move(pending_[id]);
    pending_.erase(id);
    if (!slot.done) {
      if (dead_) throw StoreError(dead_reason_);
      (void)ok;
      throw StoreError("store " + addr_ + ": no reply to " + op_name(m.op) + " within " +
                       std::to_string(opts_.request_timeout.count() + wait_ms) + " ms");
    }
    if (slot.reply.status == Status::kInvalidArgument) throw InvalidArgument(slot.reply.value);
    if (slot.reply.status == Status::kError) throw StoreError("store " + addr_ + ": " + slot.reply.value);
    return std::move(slot.reply);
  }

  void read_loop() {
    char buf[65536];
    std::string body, why;
    for (;;) {
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        why = r == 0 ? "the server closed the connection" : std::strerror(errno);
        break;
      }
      if (!reader_state_.feed(buf, static_cast<size_t>(r))) {
        why = "bad frame from the server (" + reader_state_.error() + ")";
        break;
      }
      bool bad = false;
      while (reader_state_.next(&body)) {
        std::string err;
        auto m = decode_message(body, &err);
        if (!m || m->op != Op::kResponse) {
          why = "bad frame from the server (" + (m ? std::string("unexpected op") : err) + ")";
          bad = true;
          break;
        }
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pending_.find(m->id);
        if (it != pending_.end()) {  // else: the caller timed out and left
          it->second.done = true;
          it->second.reply = std::move(*m);
        }
        cv_.notify_all();
      }
      if (bad) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;
    dead_reason_ = closing_ ? "store " + addr_ + ": client closed"
                            : "store " + addr_ + ": connection lost (" + why + ")";
    cv_.notify_all();
  }

  const std::string addr_;
  const StoreOptions opts_;
  int fd_ = -1;
  FrameReader reader_state_;  // handshake, then owned by the reader thread
  std::thread reader_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> pending_;
  uint64_t next_id_ = 1;
  bool dead_ = false;
  bool closing_ = false;
  std::string dead_reason_;
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port, const StoreOptions& options) {
  return std::make_shared<TcpStore>(host, port, options);
}

}  // namespace edl::store
