#include "elastic/store/redis_store.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "edl/error.h"
#include "elastic/store/store_backoff.h"

namespace edl::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kKeyspacePrefix = "__keyspace@0__:";

// Exactly-once across reconnects (docs/store.md, "Reconnect"): add() and compare_set() carry a
// request key KEYS[2] = "__edl_req:<client id>:<sequence>". The script that applies the operation
// also records its outcome under that key (PX = the replay window) in the same atomic step; a
// re-sent copy finds the record and returns it without applying anything again.

// compare_set. ARGV: has_expected ('1'/'0'), expected, desired, replay window ms.
// Returns {1} (also on replay of an applied success) or {0[, current]}.
constexpr const char* kCasScript = R"(
if redis.call('EXISTS', KEYS[2]) == 1 then return {1} end
local cur = redis.call('GET', KEYS[1])
local match
if ARGV[1] == '1' then match = (cur == ARGV[2]) else match = (cur == false) end
if match then
  redis.call('SET', KEYS[1], ARGV[3])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
  return {1}
end
if cur == false then return {0} end
return {0, cur}
)";

// add(): INCRBY and drop any lease, like the other backends (the key becomes a plain counter).
// ARGV: delta, replay window ms. Returns the new value (the recorded one on replay).
constexpr const char* kAddScript = R"(
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PERSIST', KEYS[1])
redis.call('SET', KEYS[2], v, 'PX', ARGV[2])
return v
)";

constexpr const char* kRequestKeyPrefix = "__edl_req:";

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  return tv;
}

std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Connection state (docs/store.md, "Reconnect"): a command that fails on the connection (I/O error,
// or LOADING while a restarted server reads its append-only file) drops the context, redials with
// backoff (store_backoff.h) and runs again, until reconnect_timeout after the first failure; then
// the store is broken for good and every call throws StoreError naming the URL. The subscriber
// does the same on its own connection and, once subscribed again, wakes every waiter to re-check
// (events during the gap are lost, the re-check is not).
class RedisStore final : public Store {
 public:
  RedisStore(const std::string& host, int port, const StoreOptions& o)
      : host_(host), port_(port), addr_("redis://" + host + ":" + std::to_string(port)), opts_(o),
        client_id_(std::to_string(std::random_device{}()) + "." + std::to_string(std::random_device{}())) {
    cmd_ = open(o.connect_timeout);
    try {
      ensure_notifications(cmd_);
      sub_ = subscribe(o.connect_timeout);
    } catch (...) {
      redisFree(cmd_);
      throw;
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
      redisFree(sub_);
      redisFree(cmd_);
      throw StoreError("store " + addr_ + ": eventfd: " + std::strerror(errno));
    }
    subscriber_ = std::thread([this] { subscribe_loop(); });
  }

  ~RedisStore() override {
    {
      std::lock_guard<std::mutex> lock(ev_mu_);
      closing_ = true;
      if (sub_) ::shutdown(sub_->fd, SHUT_RDWR);
      wake();
      ev_cv_.notify_all();
    }
    subscriber_.join();
    if (sub_) redisFree(sub_);
    if (cmd_) redisFree(cmd_);
    ::close(wake_fd_);
  }

  void set(const std::string& key, const std::string& value) override { command({"SET", key, value}); }

  std::optional<std::string> get(const std::string& key) override {
    Reply r = command({"GET", key});
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    return std::string(r->str, r->len);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Reply r = command({"EVAL", kAddScript, "2", key, request_key(), std::to_string(delta), replay_window()}, "add", key);
    return r->integer;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    Reply r = command({"EVAL", kCasScript, "2", key, request_key(), expected ? "1" : "0", expected.value_or(""), desired,
                       replay_window()});
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) throw StoreError(addr_ + ": unexpected reply to compare_set");
    bool ok = r->element[0]->integer == 1;
    if (current) {
      if (ok)
        *current = desired;
      else if (r->elements >= 2)
        *current = std::string(r->element[1]->str, r->element[1]->len);
      else
        *current = std::nullopt;
    }
    return ok;
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return true;
    Watch w(this, keys);
    auto deadline = Clock::now() + timeout;
    for (;;) {
      w.arm(deadline);
      std::vector<std::string> argv{"EXISTS"};
      argv.insert(argv.end(), keys.begin(), keys.end());
      if (command(argv)->integer == static_cast<long long>(keys.size())) return true;
      if (!w.sleep_until(deadline)) return false;
    }
  }

  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         milliseconds timeout) override {
    Watch w(this, {key});
    auto deadline = Clock::now() + timeout;
    for (;;) {
      w.arm(deadline);
      auto cur = get(key);
      if (cur != known) return cur;
      if (!w.sleep_until(deadline)) return cur;
    }
  }

  bool del(const std::string& key) override { return command({"DEL", key})->integer > 0; }

  std::vector<std::string> keys(const std::string& prefix) override {
    std::vector<std::string> out;
    std::string cursor = "0";
    std::string match = glob_escape(prefix) + "*";
    do {
      Reply r = command({"SCAN", cursor, "MATCH", match, "COUNT", "1000"});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw StoreError(addr_ + ": unexpected reply to SCAN");
      cursor.assign(r->element[0]->str, r->element[0]->len);
      redisReply* list = r->element[1];
      for (size_t i = 0; i < list->elements; ++i) {
        std::string k(list->element[i]->str, list->element[i]->len);
        if (k.rfind(kRequestKeyPrefix, 0) != 0) out.push_back(std::move(k));  // replay records are internal
      }
    } while (cursor != "0");
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());  // SCAN may repeat keys
    return out;
  }

  void set_lease(const std::string& key, const std::string& value, milliseconds ttl) override {
    EDL_CHECK(ttl.count() > 0, InvalidArgument,
              "store set_lease: ttl of key '" + key + "' must be positive, got " + std::to_string(ttl.count()) + " ms");
    command({"SET", key, value, "PX", std::to_string(ttl.count())});
  }

 private:
  // A registration for keyspace events on some keys; arm() before each check, then sleep_until().
  // The keys are subscribed one by one (SUBSCRIBE __keyspace@0__:<key>), not by a pattern: with a
  // pattern every write of the job (every worker's beat) went to every client, n^2 messages, and a
  // job of 256 workers on Redis took 49 s to start.
  class Watch {
   public:
    Watch(RedisStore* s, const std::vector<std::string>& keys) : s_(s), keys_(keys) {
      std::lock_guard<std::mutex> lock(s_->ev_mu_);
      for (const auto& k : keys_) {
        s_->watchers_.emplace(k, this);
        ++s_->subs_[k].refs;
      }
      s_->wake();
    }
    ~Watch() {
      std::lock_guard<std::mutex> lock(s_->ev_mu_);
      for (const auto& k : keys_) {
        auto range = s_->watchers_.equal_range(k);
        for (auto it = range.first; it != range.second; ++it) {
          if (it->second == this) {
            s_->watchers_.erase(it);
            break;
          }
        }
        --s_->subs_[k].refs;
      }
      s_->wake();
    }
    // Before each check: waits (until `deadline`) for the server to confirm every key's subscription,
    // so that no change after the check goes unseen.
    void arm(Clock::time_point deadline) {
      std::unique_lock<std::mutex> lock(s_->ev_mu_);
      s_->ev_cv_.wait_until(lock, deadline, [&] { return s_->sub_dead_ || s_->all_active(keys_); });
      if (s_->sub_dead_) throw StoreError(s_->sub_reason_);
      dirty_ = false;
    }
    // Sleeps until a watched key changed (true) or the deadline passed (false).
    bool sleep_until(Clock::time_point deadline) {
      std::unique_lock<std::mutex> lock(s_->ev_mu_);
      bool woke = s_->ev_cv_.wait_until(lock, deadline, [&] { return dirty_ || s_->sub_dead_; });
      if (s_->sub_dead_) throw StoreError(s_->sub_reason_);
      return woke;
    }
    bool dirty_ = false;

   private:
    RedisStore* s_;
    std::vector<std::string> keys_;
  };

  // A key's subscription on the subscriber connection (ev_mu_): wanted while refs > 0; the
  // subscriber thread alone moves `state`, as the server's confirmations arrive (in order).
  enum class SubState { kNone, kSubscribing, kActive, kUnsubscribing };
  struct KeySub {
    int refs = 0;
    SubState state = SubState::kNone;
  };
  bool all_active(const std::vector<std::string>& keys) const {  // ev_mu_ held
    for (const auto& k : keys) {
      auto it = subs_.find(k);
      if (it == subs_.end() || it->second.state != SubState::kActive) return false;
    }
    return true;
  }
  void wake() {  // ev_mu_ held or not
    const uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
  }

  std::string request_key() { return kRequestKeyPrefix + client_id_ + ":" + std::to_string(next_request_++); }
  // How long a replay record lives: longer than any client keeps re-sending (reconnect window plus
  // one request), at least a minute.
  std::string replay_window() const {
    auto ms = std::max<int64_t>(60000, 2 * (opts_.reconnect_timeout + opts_.request_timeout).count());
    return std::to_string(ms);
  }

  // Connects and authenticates one context; throws StoreError / AuthError naming the URL.
  redisContext* open(milliseconds connect_timeout) {
    redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(connect_timeout));
    if (!c || c->err) {
      std::string why = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      throw StoreError("store " + addr_ + ": cannot connect: " + why);
    }
    redisSetTimeout(c, to_timeval(opts_.request_timeout));
    if (!opts_.secret.empty()) {
      try {
        authenticate(c);
      } catch (...) {
        redisFree(c);
        throw;
      }
    }
    return c;
  }

  void authenticate(redisContext* c) {
    Reply r(static_cast<redisReply*>(redisCommand(c, "AUTH %b", opts_.secret.data(), opts_.secret.size())));
    if (!r) throw StoreError("store " + addr_ + ": connection lost during AUTH: " + error_text(c, nullptr));
    if (r->type != REDIS_REPLY_ERROR) return;
    std::string msg(r->str, r->len);
    if (msg.find("without any password") != std::string::npos || msg.find("no password is set") != std::string::npos) {
      EDL_LOG(1) << "store " << addr_ << ": a job secret was given but the redis server has no requirepass; "
                 << "connections are not authenticated";
      return;
    }
    if (msg.rfind("LOADING", 0) == 0) throw StoreError("store " + addr_ + ": " + msg);  // retried
    throw AuthError("store " + addr_ + ": authentication rejected (wrong job secret?): " + msg);
  }

  // The subscriber connection: blocking, without a timeout (its thread polls it beside wake_fd_);
  // the keys are subscribed by the thread (reconcile()).
  redisContext* subscribe(milliseconds connect_timeout) {
    redisContext* c = open(connect_timeout);
    redisSetTimeout(c, timeval{0, 0});
    return c;
  }

  static std::string error_text(redisContext* c, redisReply* r) {
    if (r && r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
    if (c && c->err) return c->errstr;
    return "unexpected reply";
  }

  static Reply run(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    return Reply(static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
  }

  // Keyspace notifications are server configuration, not data: a restarted server lost them, so this
  // runs on every (re)connect.
  void ensure_notifications(redisContext* c) {
    Reply r = run(c, {"CONFIG", "GET", "notify-keyspace-events"});
    if (!r) throw StoreError("store " + addr_ + ": connection lost (" + error_text(c, nullptr) + ")");
    if (r->type == REDIS_REPLY_ERROR) {
      std::string msg(r->str, r->len);
      if (msg.rfind("NOAUTH", 0) == 0 || msg.rfind("WRONGPASS", 0) == 0)
        throw AuthError("store " + addr_ + ": the server requires the job secret (redis requirepass): " + msg);
      if (msg.rfind("LOADING", 0) == 0) throw StoreError("store " + addr_ + ": " + msg);  // retried on reconnect
    }
    std::string cur;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) cur.assign(r->element[1]->str, r->element[1]->len);
    auto has = [&](char ch) { return cur.find(ch) != std::string::npos; };
    if (has('K') && (has('A') || (has('g') && has('$') && has('x')))) return;
    Reply set = run(c, {"CONFIG", "SET", "notify-keyspace-events", cur + "KA"});
    if (!set) throw StoreError("store " + addr_ + ": connection lost (" + error_text(c, nullptr) + ")");
    if (set->type == REDIS_REPLY_ERROR)
      throw StoreError("store " + addr_ + ": keyspace notifications are required (notify-keyspace-events KA) and "
                       "enabling them failed: " + error_text(c, set.get()));
  }

  // Runs one command, redialling a lost connection until reconnect_timeout; throws on a dead store
  // (StoreError), NOAUTH/WRONGPASS (AuthError) or a non-integer add (InvalidArgument).
  Reply command(const std::vector<std::string>& args, const char* what = nullptr, const std::string& key = "") {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    if (broken_) throw StoreError(broken_reason_);
    std::optional<Backoff> backoff;
    std::string last;
    for (;;) {
      if (cmd_) {
        Reply r = run(cmd_, args);
        if (r && !(r->type == REDIS_REPLY_ERROR && std::string(r->str, r->len).rfind("LOADING", 0) == 0))
          return check_reply(std::move(r), args, what, key);
        last = r ? std::string(r->str, r->len) : error_text(cmd_, nullptr);
        if (!r) {
          redisFree(cmd_);
          cmd_ = nullptr;
        }
      }
      if (!backoff) {
        if (opts_.reconnect_timeout.count() <= 0) fail("connection lost (" + last + ")");
        EDL_LOG(1) << "store " << addr_ << ": connection lost (" << last << "); retrying for up to "
                   << opts_.reconnect_timeout.count() << " ms (EDL_STORE_TIMEOUT_MS)";
        backoff.emplace(Clock::now() + opts_.reconnect_timeout);
      }
      std::this_thread::sleep_until(backoff->next());
      if (backoff->expired())
        fail("connection lost and not re-established within " + std::to_string(opts_.reconnect_timeout.count()) +
             " ms (EDL_STORE_TIMEOUT_MS); last error: " + last);
      redial(*backoff, &last);
    }
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = true;
    broken_reason_ = "store " + addr_ + ": " + why;
    EDL_LOG(0) << broken_reason_;
    throw StoreError(broken_reason_);
  }

  // One redial of the command connection (cmd_mu_ held).
  void redial(const Backoff& backoff, std::string* last) {
    if (cmd_) return;  // only a LOADING reply: the connection itself is fine
    auto left = std::chrono::duration_cast<milliseconds>(backoff.deadline() - Clock::now());
    try {
      cmd_ = open(std::max(milliseconds(1), std::min(left, opts_.connect_timeout)));
      ensure_notifications(cmd_);
      EDL_LOG(1) << "store " << addr_ << ": reconnected";
    } catch (const AuthError& e) {
      fail(std::string("reconnect refused: ") + e.what());
    } catch (const StoreError& e) {
      *last = e.what();
      if (cmd_) redisFree(cmd_);
      cmd_ = nullptr;
    }
  }

  Reply check_reply(Reply r, const std::vector<std::string>& args, const char* what, const std::string& key) {
    if (r->type != REDIS_REPLY_ERROR) return r;
    std::string msg(r->str, r->len);
    if (msg.rfind("NOAUTH", 0) == 0 || msg.rfind("WRONGPASS", 0) == 0)
      throw AuthError("store " + addr_ + ": the server requires the job secret (redis requirepass): " + msg);
    if (what && std::string(what) == "add" && msg.find("not an integer") != std::string::npos)
      throw InvalidArgument("store add: value of key '" + key + "' is not an integer");
    throw StoreError("store " + addr_ + ": " + args[0] + " failed: " + msg);
  }

  // --- the subscriber thread ---------------------------------------------------------------------
  void subscribe_loop() {
    for (;;) {
      std::string why = read_events();
      if (!resubscribe(why)) return;
    }
  }

  // Sends the SUBSCRIBE / UNSUBSCRIBE that the wanted keys need (ev_mu_ held); forgets keys nobody
  // wants that the server no longer has. False when the connection failed.
  bool reconcile() {
    const size_t plen = std::strlen(kKeyspacePrefix);
    for (auto it = subs_.begin(); it != subs_.end();) {
      KeySub& ks = it->second;
      const char* cmd = nullptr;
      if (ks.refs > 0 && ks.state == SubState::kNone) {
        cmd = "SUBSCRIBE";
        ks.state = SubState::kSubscribing;
      } else if (ks.refs <= 0 && ks.state == SubState::kActive) {
        cmd = "UNSUBSCRIBE";
        ks.state = SubState::kUnsubscribing;
      } else if (ks.refs <= 0 && ks.state == SubState::kNone) {
        it = subs_.erase(it);
        continue;
      }
      if (cmd) {
        std::string channel = std::string(kKeyspacePrefix, plen) + it->first;
        if (redisAppendCommand(sub_, "%s %b", cmd, channel.data(), channel.size()) != REDIS_OK) return false;
      }
      ++it;
    }
    for (int done = 0; !done;)
      if (redisBufferWrite(sub_, &done) != REDIS_OK) return false;
    return true;
  }

  // One message of the subscriber connection (ev_mu_ held): a confirmation moves a key's state, a
  // keyspace event marks its watchers.
  void on_message(redisReply* r) {
    const size_t plen = std::strlen(kKeyspacePrefix);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING) return;
    const std::string kind(r->element[0]->str, r->element[0]->len);
    redisReply* ch = r->element[1];
    if (ch->type != REDIS_REPLY_STRING || ch->len < plen) return;
    const std::string key(ch->str + plen, ch->len - plen);
    if (kind == "subscribe" || kind == "unsubscribe") {
      auto it = subs_.find(key);
      if (it == subs_.end()) return;
      if (kind == "subscribe" && it->second.state == SubState::kSubscribing) it->second.state = SubState::kActive;
      if (kind == "unsubscribe" && it->second.state == SubState::kUnsubscribing) it->second.state = SubState::kNone;
      ev_cv_.notify_all();
      wake();  // a key that went back to kNone may be wanted again
      return;
    }
    if (kind != "message") return;
    auto range = watchers_.equal_range(key);
    if (range.first == range.second) return;
    for (auto it = range.first; it != range.second; ++it) it->second->dirty_ = true;
    ev_cv_.notify_all();
  }

  // Delivers keyspace events until the connection fails; returns why it did.
  std::string read_events() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(ev_mu_);
        if (closing_) return "client closed";
        if (!reconcile()) return sub_->errstr[0] ? sub_->errstr : "connection closed";
      }
      pollfd fds[2] = {{sub_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return std::string("poll: ") + std::strerror(errno);
      if (fds[1].revents & POLLIN) {
        uint64_t n;
        (void)!::read(wake_fd_, &n, sizeof n);
      }
      if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (redisBufferRead(sub_) != REDIS_OK) return sub_->errstr[0] ? sub_->errstr : "connection closed";
      std::lock_guard<std::mutex> lock(ev_mu_);
      for (;;) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(sub_, &raw) != REDIS_OK) return sub_->errstr[0] ? sub_->errstr : "protocol error";
        if (!raw) break;
        Reply r(static_cast<redisReply*>(raw));
        on_message(r.get());
      }
    }
  }

  // Replaces the lost subscriber connection (backoff until reconnect_timeout) and wakes every waiter
  // to re-check. False when closing or given up (then waiters throw StoreError).
  bool resubscribe(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(ev_mu_);
      redisFree(sub_);
      sub_ = nullptr;
      if (closing_ || opts_.reconnect_timeout.count() <= 0)
        return sub_give_up(closing_ ? "client closed" : "notification connection lost (" + why + ")");
    }
    Backoff backoff(Clock::now() + opts_.reconnect_timeout);
    std::string last = why;
    for (;;) {
      redisContext* c = nullptr;
      try {
        auto left = std::chrono::duration_cast<milliseconds>(backoff.deadline() - Clock::now());
        c = subscribe(std::max(milliseconds(1), std::min(left, opts_.connect_timeout)));
      } catch (const StoreError& e) {  // AuthError included: the command path reports it
        last = e.what();
      }
      std::unique_lock<std::mutex> lock(ev_mu_);
      if (c && !closing_) {
        sub_ = c;
        for (auto& kv : subs_) kv.second.state = SubState::kNone;  // the new connection subscribes afresh
        for (auto& kv : watchers_) kv.second->dirty_ = true;  // events of the gap are lost: re-check
        ev_cv_.notify_all();
        return true;
      }
      if (c) redisFree(c);
      if (closing_) return sub_give_up("client closed");
      if (backoff.expired())
        return sub_give_up("notification connection lost (" + why + ") and not re-established within " +
                           std::to_string(opts_.reconnect_timeout.count()) +
                           " ms (EDL_STORE_TIMEOUT_MS); last error: " + last);
      ev_cv_.wait_until(lock, backoff.next(), [&] { return closing_; });
    }
  }

  bool sub_give_up(const std::string& why) {  // ev_mu_ held
    sub_dead_ = true;
    sub_reason_ = "store " + addr_ + ": " + why;
    ev_cv_.notify_all();
    return false;
  }

  const std::string host_;
  const int port_;
  const std::string addr_;
  const StoreOptions opts_;
  const std::string client_id_;
  std::atomic<uint64_t> next_request_{1};
  redisContext* cmd_ = nullptr;
  redisContext* sub_ = nullptr;  // replaced by the subscriber thread under ev_mu_
  std::mutex cmd_mu_;
  bool broken_ = false;
  std::string broken_reason_;

  std::thread subscriber_;
  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  std::unordered_multimap<std::string, Watch*> watchers_;
  std::unordered_map<std::string, KeySub> subs_;
  int wake_fd_ = -1;  // eventfd: wakes the subscriber thread (a watch came or went, closing)
  bool sub_dead_ = false;
  bool closing_ = false;
  std::string sub_reason_;
};

}  // namespace

std::shared_ptr<Store> connect_redis_store(const std::string& host, int port, const StoreOptions& options) {
  return std::make_shared<RedisStore>(host, port, options);
}

}  // namespace edl::store
