// EtcdClient: the HTTP/JSON side of the etcd store backend — etcd v3's gRPC gateway (`/v3/...`)
// spoken with cpp-httplib, over a list of cluster members with failover (docs/store.md, "etcd").
//
// A unary call goes to the member that answered last; a transport failure (refused, reset, timeout)
// or an etcd answer that says "try again" (gRPC Unavailable / DeadlineExceeded / ResourceExhausted:
// no leader, leader changed, request timed out) moves to the next member, and after every member
// failed once the client sleeps with exponential backoff (50 ms doubling to 1 s). All of this within
// one deadline: the retry window, reconnect_timeout (EDL_STORE_TIMEOUT_MS) from the start of the
// operation (at least one attempt's time). Past it, StoreError names the store
// URL and the last failure. An etcd answer that is an error of another kind (bad request, lease not
// found, ...) is returned to the caller as-is: it is not retried.
//
// try_call() makes one attempt and reports whether the request may have been applied (a lost
// answer): the store builds its exactly-once add/compare_set on it. watch() streams /v3/watch on a
// connection of its own (so blocked waiters never hold up other calls) and moves to another member
// when the stream breaks.
//
// Keys and values travel base64-encoded (proto3 JSON mapping of `bytes`); b64() / unb64() convert.
// Thread-safety: every method may be called concurrently; idle connections are pooled per member.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace edl::store {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

std::string b64(const std::string& raw);
std::string unb64(const std::string& text);  // throws StoreError on malformed input
// An int64 field of an answer (proto3 JSON writes them as strings and omits zeros).
int64_t etcd_int(const Json& j, const char* field);

struct EtcdEndpoint {
  std::string host;
  int port = 0;
};

// The result of one attempt.
struct EtcdReply {
  enum Kind {
    kOk,         // `body` is etcd's answer
    kEtcdError,  // etcd refused the request for good (not retried): `body` is {"error","code",...}
    kLost,       // no usable answer: the request may or may not have been applied; `why` says what failed
  } kind = kLost;
  Json body;
  std::string why;
  // gRPC status code and message of an etcd error ({"error","code","message"}, or nested under
  // "error" in a stream).
  int code() const;
  std::string message() const;
};

// Ends a watch() from another thread at once (shuts its stream's socket down): for a long-lived
// stream whose owner no longer needs it (EtcdWatchCache). The client also uses it to move such a
// stream off a member that a unary call found failing (the stream reopens on the next member).
// Thread-safe.
class EtcdWatchStop {
 public:
  void stop();
  bool stopped() const;

 private:
  friend class EtcdClient;
  mutable std::mutex mu_;
  bool stopped_ = false;
  bool moved_ = false;                 // shut down by failed(member_): reopen elsewhere
  size_t member_ = 0;                  // the member of the open stream
  httplib::Client* stream_ = nullptr;  // the open stream's connection, while there is one
};

class EtcdClient {
 public:
  // url is "etcd://A:P,B:Q" for messages. Throws StoreError when no member answers within connect_timeout.
  // With a user, authenticates (etcd's /v3/auth/authenticate) with `password` and sends the token with
  // every request, authenticating again when etcd says it expired; AuthError when etcd rejects the
  // password, or when etcd requires a user and none is given.
  EtcdClient(std::string url, std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds connect_timeout,
             std::chrono::milliseconds request_timeout, std::chrono::milliseconds reconnect_timeout,
             std::string user = "", std::string password = "");
  ~EtcdClient();

  const std::string& url() const { return url_; }
  // How long one attempt (connect included) may wait for its answer: request_timeout / 4, clamped to 1..2 s.
  std::chrono::milliseconds attempt_limit() const;
  // How long an operation retries lost connections: reconnect_timeout, at least one attempt_limit().
  std::chrono::milliseconds retry_window() const { return std::max(reconnect_timeout_, attempt_limit()); }
  // attempt_limit() times the current patience: doubled (up to kMaxPatience) after a round in which
  // every member let its attempt time out — a cluster that is slow, not gone: its members are
  // still working on the requests, and retrying them sooner only adds to its queue — and halved
  // by every answer.
  std::chrono::milliseconds patient_attempt_limit() const;
  static constexpr int kMaxPatience = 8;

  // One attempt on the current member; on kLost the client has already moved on to the next member.
  // `attempt_limit` caps how long this attempt may wait for the answer.
  EtcdReply try_call(const std::string& path, const Json& body, Clock::time_point deadline);
  // Retries kLost answers (failover + backoff) until `deadline`; returns kOk or kEtcdError replies,
  // throws StoreError past the deadline. Only for requests that may safely be applied twice.
  EtcdReply call(const std::string& path, const Json& body, Clock::time_point deadline);
  // call() that also throws StoreError on an etcd error (`what` names the operation).
  Json call_ok(const std::string& path, const Json& body, const std::string& what);

  // The newest store revision of any answer this client has received (header.revision): every write
  // it made and every value it read is at or below it.
  int64_t revision_seen() const { return revision_seen_.load(); }

  // Sleeps before the next attempt after `failures` consecutive lost answers (no sleep while there are
  // members left to try in this round); throws StoreError if the deadline would pass.
  void backoff(int failures, Clock::time_point deadline, const std::string& last_why);

  // Blocks until the wait on `key` is over: opens a /v3/watch stream on `key` from the current
  // revision and, once etcd confirms the watch exists, calls check() (the caller's read of the state):
  // true ends the wait. Then every watch response's "events" array goes to on_events: true ends the
  // wait. Returns true when check or on_events ended it, false when the deadline passed. No change can
  // slip between check and the stream (the stream exists before the read). A broken stream is
  // reopened — and check() repeated — on the next member; throws StoreError when no member can be
  // reached for retry_window() (or what check() throws).
  // With `stop`: events that do not end the wait keep the same stream (the stream is not renewed to
  // keep the deadline exact: its owner ends it with stop(), and watch() then returns false).
  bool watch(const std::string& key, Clock::time_point deadline, const std::function<bool()>& check,
             const std::function<bool(const Json& events)>& on_events, EtcdWatchStop* stop = nullptr);

 private:
  struct Conn;
  std::unique_ptr<httplib::Client> acquire(size_t member);
  void release(size_t member, std::unique_ptr<httplib::Client> c);
  size_t current() const;
  std::string token() const;
  void authenticate(Clock::time_point deadline);
  // Throws AuthError for etcd's authentication errors (their text is in `message`).
  void check_auth_error(const std::string& message) const;
  // Moves the current member on from `member`; with move_streams, also the long-lived streams open on
  // it (after an answer saying that it has no leader, or a broken connection — not after a timeout,
  // which an overloaded cluster gives on every member: moving hundreds of streams then only adds
  // requests).
  void failed(size_t member, bool move_streams = true);
  // One watch stream on one member; returns 1 (done), 0 (deadline), 2 (events that did not end the
  // wait: reopen to renew the read timeout), -1 (stream lost: *why set).
  int watch_once(size_t member, const std::string& key, Clock::time_point deadline,
                 const std::function<bool()>& check, const std::function<bool(const Json&)>& on_events,
                 EtcdWatchStop* stop, std::string* why);

  const std::string url_;
  const std::vector<EtcdEndpoint> endpoints_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds request_timeout_;
  std::atomic<int> patience_{1};
  std::atomic<int64_t> revision_seen_{0};
  const std::chrono::milliseconds reconnect_timeout_;
  const std::string user_, password_;
  mutable std::mutex mu_;
  std::string token_;  // etcd auth token ("" = none)
  size_t current_ = 0;
  std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_;  // per member
  std::mutex streams_mu_;                // after mu_ and never with an EtcdWatchStop's lock held
  std::vector<EtcdWatchStop*> streams_;  // long-lived watch() streams now open
};

}  // namespace edl::store
