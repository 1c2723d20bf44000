#include "elastic/store/tcp_store_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/host_port.h"
#include "common/logging.h"
#include "edl/error.h"
#include "elastic/store/store_backoff.h"
#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_dial.h"
#include "elastic/store/tcp_store_frame.h"

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

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

// The client. State machine of the connection (docs/store.md, "Reconnect"):
//   connected (fd_ >= 0) --recv/send error--> down (fd_ = -1, the io thread redials with backoff)
//   down --dial + AUTH ok--> connected: every unanswered request is re-sent with its original id
//   down --reconnect_timeout passes, or the secret is rejected--> dead: every call throws StoreError
// Locks: write_mu_ serialises writes and fd_ changes; mu_ guards everything else. Order: write_mu_
// before mu_.
class TcpStore final : public Store {
 public:
  TcpStore(const std::string& host, int port, const StoreOptions& o) : opts_(o) {
    target_.host = host;
    target_.port = port;
    target_.addr = "tcp://" + host + ":" + std::to_string(port);
    target_.secret = o.secret;
    target_.client_id = hex(random_bytes(8));
    FrameReader reader;
    fd_ = dial_store(target_, o.connect_timeout, /*retry=*/true, &reader);
    set_send_timeout(fd_);
    epoch_ = 1;
    io_ = std::thread([this, r = std::move(reader)]() mutable { io_loop(std::move(r)); });
  }

  ~TcpStore() override {
    {
      std::lock_guard<std::mutex> wl(write_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
      cv_.notify_all();
    }
    if (io_.joinable()) io_.join();
    if (fd_ >= 0) ::close(fd_);
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
    bool ok = r.status == Status::kOk;
    if (current) *current = ok ? std::optional<std::string>(desired) : r.opt;
    return ok;
  }

  // Every request is registered and written (one send) before the first reply is awaited.
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys) override {
    std::vector<std::pair<uint64_t, Op>> ids;
    ids.reserve(keys.size());
    for (const auto& key : keys) {
      Message m;
      m.op = Op::kGet;
      m.key = key;
      ids.emplace_back(submit(std::move(m)), Op::kGet);
    }
    send_requests(ids);
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    std::unique_lock<std::mutex> lock(mu_);
    size_t i = 0;
    try {
      for (; i < ids.size(); ++i) out.push_back(await(lock, ids[i].first, ids[i].second).opt);
    } catch (...) {
      for (size_t j = i + 1; j < ids.size(); ++j) pending_.erase(ids[j].first);  // nobody awaits these
      throw;
    }
    return out;
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    Message m;
    m.op = Op::kWait;
    m.list = keys;
    m.number = clamp_ms(timeout);
    return call(std::move(m)).status == Status::kOk;
  }

  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         milliseconds timeout) override {
    Message m;
    m.op = Op::kWaitChange;
    m.key = key;
    m.opt = known;
    m.number = clamp_ms(timeout);
    return call(std::move(m)).opt;
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
  // A request until its reply arrives. Waits keep the message so that a re-send carries only the
  // time left; other requests keep their encoded frame.
  struct Slot {
    std::shared_ptr<const std::string> frame;
    Message wait_request;            // for WAIT / WAIT_CHANGE
    bool is_wait = false;
    Clock::time_point wait_deadline;  // when the server-side wait ends
    uint64_t sent_epoch = 0;          // connection the frame was last written to (0 = none)
    Clock::time_point sent_at;
    bool done = false;
    Message reply;
  };

  const std::string& addr() const { return target_.addr; }

  void set_send_timeout(int fd) {
    timeval tv{};
    int64_t ms = clamp_ms(opts_.request_timeout);
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }

  // Writes bytes to fd_; false on failure (the connection is then shut down for the io thread to
  // notice and redial). Caller holds write_mu_.
  bool write_all(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t w = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<size_t>(w);
      } else if (!(w < 0 && errno == EINTR)) {
        ::shutdown(fd_, SHUT_RDWR);
        return false;
      }
    }
    return true;
  }

  // Writes request id on the current connection unless it is down or already carried it.
  void send_request(uint64_t id) {
    std::lock_guard<std::mutex> wl(write_mu_);
    std::shared_ptr<const std::string> frame;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(id);
      if (fd_ < 0 || it == pending_.end() || it->second.done || it->second.sent_epoch == epoch_) return;
      frame = stamp(it->second);
    }
    write_all(*frame);
  }

  // Marks slot as sent now on the current connection; a wait is re-encoded with the time it has
  // left. Caller holds mu_.
  std::shared_ptr<const std::string> stamp(Slot& s) {
    auto now = Clock::now();
    if (s.is_wait) {
      auto left = std::chrono::duration_cast<milliseconds>(s.wait_deadline - now).count();
      s.wait_request.number = std::max<int64_t>(left, 0);
      s.frame = std::make_shared<const std::string>(encode_frame(s.wait_request));
    }
    s.sent_epoch = epoch_;
    s.sent_at = now;
    return s.frame;
  }

  // The requests `ids` written in one send on the current connection (those it already carried,
  // or that are done, are skipped).
  void send_requests(const std::vector<std::pair<uint64_t, Op>>& ids) {
    std::lock_guard<std::mutex> wl(write_mu_);
    std::string bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fd_ < 0) return;
      for (const auto& [id, op] : ids) {
        auto it = pending_.find(id);
        if (it == pending_.end() || it->second.done || it->second.sent_epoch == epoch_) continue;
        bytes += *stamp(it->second);
      }
    }
    if (!bytes.empty()) write_all(bytes);
  }

  // Registers m, sends it and waits for its reply: up to request_timeout (plus the wait's own
  // timeout) after it was last sent; while the connection is down, until it is back or dead.
  Message call(Message m) {
    const Op op = m.op;
    const uint64_t id = submit(std::move(m));
    send_request(id);
    std::unique_lock<std::mutex> lock(mu_);
    return await(lock, id, op);
  }

  // Registers m as pending (not sent yet); returns its id.
  uint64_t submit(Message m) {
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_) throw StoreError(dead_reason_);
    uint64_t id = next_id_++;
    lock.unlock();
    m.id = id;
    Slot slot;
    slot.is_wait = m.op == Op::kWait || m.op == Op::kWaitChange;
    slot.wait_deadline = Clock::now() + milliseconds(slot.is_wait ? m.number : 0);
    slot.frame = std::make_shared<const std::string>(encode_frame(m));
    if (slot.frame->size() - 4 > kDefaultMaxFrameBytes)
      throw InvalidArgument("store " + addr() + ": " + op_name(m.op) + " of key '" + m.key.substr(0, 200) + "' is " +
                            std::to_string(slot.frame->size() - 4) + " bytes; the frame limit is " +
                            std::to_string(kDefaultMaxFrameBytes) + " bytes");
    if (slot.is_wait) slot.wait_request = std::move(m);
    lock.lock();
    if (dead_) throw StoreError(dead_reason_);
    pending_.emplace(id, std::move(slot));
    return id;
  }

  Message await(std::unique_lock<std::mutex>& lock, uint64_t id, Op op) {
    for (;;) {
      Slot& s = pending_.at(id);
      if (s.done) break;
      if (dead_) {
        pending_.erase(id);
        throw StoreError(dead_reason_);
      }
      auto deadline = Clock::time_point::max();
      if (fd_ >= 0 && s.sent_epoch == epoch_) {
        deadline = s.sent_at + opts_.request_timeout + (s.is_wait ? milliseconds(s.wait_request.number) : milliseconds(0));
        if (Clock::now() >= deadline) {
          pending_.erase(id);
          throw StoreError("store " + addr() + ": no reply to " + op_name(op) + " within " +
                           std::to_string(std::chrono::duration_cast<milliseconds>(deadline - s.sent_at).count()) +
                           " ms");
        }
      }
      cv_.wait_until(lock, deadline);
    }
    Message reply = std::move(pending_.at(id).reply);
    pending_.erase(id);
    if (reply.status == Status::kInvalidArgument) throw InvalidArgument(reply.value);
    if (reply.status == Status::kError) throw StoreError("store " + addr() + ": " + reply.value);
    return reply;
  }

  // --- the io thread: reads replies; on a lost connection redials and re-sends -------------------
  void io_loop(FrameReader reader) {
    for (;;) {
      std::string why = read_replies(&reader);
      if (!connection_lost(why)) return;
      if (!reconnect(why, &reader)) return;
    }
  }

  // Routes replies until the connection fails; returns why it did.
  std::string read_replies(FrameReader* reader) {
    char buf[65536];
    std::string body;
    for (;;) {
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);  // fd_ changes only on this thread
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return r == 0 ? "the server closed the connection" : errno_text(errno);
      if (!reader->feed(buf, static_cast<size_t>(r))) return "bad frame from the server (" + reader->error() + ")";
      while (reader->next(&body)) {
        std::string err;
        auto m = decode_message(body, &err);
        if (!m || m->op != Op::kResponse)
          return "bad frame from the server (" + (m ? std::string("unexpected op") : err) + ")";
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pending_.find(m->id);
        if (it != pending_.end() && !it->second.done) {  // else: a duplicate, or the caller left
          it->second.done = true;
          it->second.reply = std::move(*m);
        }
        cv_.notify_all();
      }
    }
  }

  // Closes the broken connection. Returns false when the client is closing or does not reconnect
  // (then it is dead).
  bool connection_lost(const std::string& why) {
    std::lock_guard<std::mutex> wl(write_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    ::close(fd_);
    fd_ = -1;
    cv_.notify_all();
    if (closing_) {
      give_up_locked("client closed");
      return false;
    }
    if (opts_.reconnect_timeout.count() <= 0) {
      give_up_locked("connection lost (" + why + ")");
      return false;
    }
    EDL_LOG(1) << "store " << addr() << ": connection lost (" << why << "); reconnecting for up to "
               << opts_.reconnect_timeout.count() << " ms (EDL_STORE_TIMEOUT_MS)";
    return true;
  }

  void give_up_locked(const std::string& why) {
    dead_ = true;
    dead_reason_ = "store " + addr() + ": " + why;
    cv_.notify_all();
  }

  // Redials with bounded exponential backoff (store_backoff.h) until reconnect_timeout; on success
  // re-sends every unanswered request. False = dead.
  bool reconnect(const std::string& why, FrameReader* reader) {
    const auto start = Clock::now();
    Backoff backoff(start + opts_.reconnect_timeout);
    std::string last = why;
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(backoff.deadline() - Clock::now());
      if (left.count() > 0) {
        try {
          *reader = FrameReader();
          int fd = dial_store(target_, std::min(left, opts_.connect_timeout), /*retry=*/false, reader);
          install(fd);
          EDL_LOG(1) << "store " << addr() << ": reconnected after "
                     << std::chrono::duration_cast<milliseconds>(Clock::now() - start).count() << " ms";
          return true;
        } catch (const AuthError& e) {
          return give_up("connection lost (" + why + ") and the reconnect was refused: " + e.what());
        } catch (const StoreError& e) {
          last = e.what();
        }
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (closing_) return give_up_locked("client closed"), false;
      if (backoff.expired()) {
        give_up_locked("connection lost (" + why + ") and not re-established within " +
                       std::to_string(opts_.reconnect_timeout.count()) + " ms (EDL_STORE_TIMEOUT_MS); last error: " +
                       last);
        EDL_LOG(0) << dead_reason_;
        return false;
      }
      cv_.wait_until(lock, backoff.next(), [&] { return closing_; });
    }
  }

  bool give_up(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    give_up_locked(why);
    EDL_LOG(0) << dead_reason_;
    return false;
  }

  // Makes fd the connection and re-sends, in id order, every request not answered yet.
  void install(int fd) {
    std::lock_guard<std::mutex> wl(write_mu_);
    std::vector<std::shared_ptr<const std::string>> frames;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) {
        ::close(fd);
        throw StoreError("store " + addr() + ": client closed");
      }
      set_send_timeout(fd);
      fd_ = fd;
      ++epoch_;
      for (auto& kv : pending_)
        if (!kv.second.done) frames.push_back(stamp(kv.second));
      cv_.notify_all();
    }
    for (const auto& f : frames)
      if (!write_all(*f)) break;  // the reader sees the broken connection and redials again
  }

  StoreOptions opts_;
  DialTarget target_;
  std::thread io_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  int fd_ = -1;
  uint64_t epoch_ = 0;
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
