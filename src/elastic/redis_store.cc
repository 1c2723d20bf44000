#include "elastic/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "edl/error.h"

namespace edl::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kKeyspacePrefix = "__keyspace@0__:";

// Atomic compare-and-set. ARGV: has_expected ('1'/'0'), expected, desired. Returns {1} or {0[, current]}.
constexpr const char* kCasScript = R"(
local cur = redis.call('GET', KEYS[1])
local match
if ARGV[1] == '1' then match = (cur == ARGV[2]) else match = (cur == false) end
if match then
  redis.call('SET', KEYS[1], ARGV[3])
  return {1}
end
if cur == false then return {0} end
return {0, cur}
)";

// add(): INCRBY and drop any lease, like the other backends (the key becomes a plain counter).
constexpr const char* kAddScript = R"(
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PERSIST', KEYS[1])
return v
)";

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

class RedisStore final : public Store {
 public:
  RedisStore(const std::string& host, int port, const StoreOptions& o)
      : addr_("redis://" + host + ":" + std::to_string(port)), opts_(o) {
    cmd_ = open(host, port);
    try {
      ensure_notifications();
      sub_ = open(host, port);
      redisSetTimeout(sub_, timeval{0, 0});  // the subscriber blocks until an event or shutdown
      std::string pattern = std::string(kKeyspacePrefix) + "*";
      Reply r(static_cast<redisReply*>(redisCommand(sub_, "PSUBSCRIBE %b", pattern.data(), pattern.size())));
      if (!r || r->type != REDIS_REPLY_ARRAY) throw StoreError(addr_ + ": PSUBSCRIBE failed: " + error_text(sub_, r.get()));
    } catch (...) {
      if (sub_) redisFree(sub_);
      redisFree(cmd_);
      throw;
    }
    subscriber_ = std::thread([this] { subscribe_loop(); });
  }

  ~RedisStore() override {
    {
      std::lock_guard<std::mutex> lock(ev_mu_);
      closing_ = true;
    }
    ::shutdown(sub_->fd, SHUT_RDWR);
    subscriber_.join();
    redisFree(sub_);
    redisFree(cmd_);
  }

  void set(const std::string& key, const std::string& value) override {
    command({"SET", key, value});
  }

  std::optional<std::string> get(const std::string& key) override {
    Reply r = command({"GET", key});
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    return std::string(r->str, r->len);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Reply r = command({"EVAL", kAddScript, "1", key, std::to_string(delta)}, "add", key);
    return r->integer;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    Reply r = command({"EVAL", kCasScript, "1", key, expected ? "1" : "0", expected.value_or(""), desired});
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
      w.arm();
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
      w.arm();
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
      for (size_t i = 0; i < list->elements; ++i) out.emplace_back(list->element[i]->str, list->element[i]->len);
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
  class Watch {
   public:
    Watch(RedisStore* s, const std::vector<std::string>& keys) : s_(s), keys_(keys) {
      std::lock_guard<std::mutex> lock(s_->ev_mu_);
      for (const auto& k : keys_) s_->watchers_.emplace(k, this);
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
      }
    }
    void arm() {
      std::lock_guard<std::mutex> lock(s_->ev_mu_);
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

  redisContext* open(const std::string& host, int port) {
    redisContext* c = redisConnectWithTimeout(host.c_str(), port, to_timeval(opts_.connect_timeout));
    if (!c || c->err) {
      std::string why = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      throw StoreError("store " + addr_ + ": cannot connect: " + why);
    }
    redisSetTimeout(c, to_timeval(opts_.request_timeout));
    if (!opts_.secret.empty()) {
      Reply r(static_cast<redisReply*>(redisCommand(c, "AUTH %b", opts_.secret.data(), opts_.secret.size())));
      if (!r) {
        std::string why = error_text(c, nullptr);
        redisFree(c);
        throw StoreError("store " + addr_ + ": connection lost during AUTH: " + why);
      }
      if (r->type == REDIS_REPLY_ERROR) {
        std::string msg(r->str, r->len);
        if (msg.find("without any password") != std::string::npos ||
            msg.find("no password is set") != std::string::npos) {
          EDL_LOG(1) << "store " << addr_ << ": a job secret was given but the redis server has no requirepass; "
                     << "connections are not authenticated";
        } else {
          redisFree(c);
          throw AuthError("store " + addr_ + ": authentication rejected (wrong job secret?): " + msg);
        }
      }
    }
    return c;
  }

  static std::string error_text(redisContext* c, redisReply* r) {
    if (r && r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
    if (c && c->err) return c->errstr;
    return "unexpected reply";
  }

  void ensure_notifications() {
    Reply r = command({"CONFIG", "GET", "notify-keyspace-events"});
    std::string cur;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) cur.assign(r->element[1]->str, r->element[1]->len);
    auto has = [&](char ch) { return cur.find(ch) != std::string::npos; };
    bool ok = has('K') && (has('A') || (has('g') && has('$') && has('x')));
    if (ok) return;
    try {
      command({"CONFIG", "SET", "notify-keyspace-events", cur + "KA"});
    } catch (const StoreError& e) {
      throw StoreError("store " + addr_ + ": keyspace notifications are required (notify-keyspace-events KA) and "
                       "enabling them failed: " + e.what());
    }
  }

  // Runs one command; throws on connection loss (StoreError), NOAUTH/WRONGPASS (AuthError) or a
  // non-integer add (InvalidArgument).
  Reply command(const std::vector<std::string>& args, const char* what = nullptr, const std::string& key = "") {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    std::lock_guard<std::mutex> lock(cmd_mu_);
    if (broken_) throw StoreError(broken_reason_);
    Reply r(static_cast<redisReply*>(redisCommandArgv(cmd_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) {
      broken_ = true;
      broken_reason_ = "store " + addr_ + ": connection lost (" + error_text(cmd_, nullptr) + ")";
      throw StoreError(broken_reason_);
    }
    if (r->type == REDIS_REPLY_ERROR) {
      std::string msg(r->str, r->len);
      if (msg.rfind("NOAUTH", 0) == 0 || msg.rfind("WRONGPASS", 0) == 0)
        throw AuthError("store " + addr_ + ": the server requires the job secret (redis requirepass): " + msg);
      if (what && std::string(what) == "add" && msg.find("not an integer") != std::string::npos)
        throw InvalidArgument("store add: value of key '" + key + "' is not an integer");
      throw StoreError("store " + addr_ + ": " + args[0] + " failed: " + msg);
    }
    return r;
  }

  void subscribe_loop() {
    const size_t plen = std::strlen(kKeyspacePrefix);
    std::string why;
    for (;;) {
      void* raw = nullptr;
      if (redisGetReply(sub_, &raw) != REDIS_OK || !raw) {
        why = sub_->errstr[0] ? sub_->errstr : "connection closed";
        break;
      }
      Reply r(static_cast<redisReply*>(raw));
      // pmessage: ["pmessage", pattern, channel, event]
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) continue;
      redisReply* ch = r->element[2];
      if (ch->type != REDIS_REPLY_STRING || ch->len < plen) continue;
      std::string key(ch->str + plen, ch->len - plen);
      std::lock_guard<std::mutex> lock(ev_mu_);
      auto range = watchers_.equal_range(key);
      if (range.first == range.second) continue;
      for (auto it = range.first; it != range.second; ++it) it->second->dirty_ = true;
      ev_cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(ev_mu_);
    sub_dead_ = true;
    sub_reason_ = closing_ ? "store " + addr_ + ": client closed"
                           : "store " + addr_ + ": notification connection lost (" + why + ")";
    ev_cv_.notify_all();
  }

  const std::string addr_;
  const StoreOptions opts_;
  redisContext* cmd_ = nullptr;
  redisContext* sub_ = nullptr;
  std::mutex cmd_mu_;
  bool broken_ = false;
  std::string broken_reason_;

  std::thread subscriber_;
  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  std::unordered_multimap<std::string, Watch*> watchers_;
  bool sub_dead_ = false;
  bool closing_ = false;
  std::string sub_reason_;
};

}  // namespace

std::shared_ptr<Store> connect_redis_store(const std::string& host, int port, const StoreOptions& options) {
  return std::make_shared<RedisStore>(host, port, options);
}

}  // namespace edl::store
