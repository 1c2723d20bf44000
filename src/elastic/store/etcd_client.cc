#include "elastic/store/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <thread>

#include "common/logging.h"
#include "edl/error.h"

namespace edl::store {
namespace {

using std::chrono::milliseconds;

// gRPC status codes the gateway reports for "no leader / leader changed / timed out / overloaded /
// canceled": the request may or may not have been applied; try again (on another member).
bool retriable_code(int code) { return code == 1 || code == 4 || code == 8 || code == 14; }

// A TCP connect answers within a round trip; a member whose host crashed or is cut off never
// answers: one attempt gives up on it after this and tries the next member (the operation's deadline
// still allows every member many attempts).
constexpr milliseconds kAttemptConnectLimit{500};

milliseconds ms_until(Clock::time_point t) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(t - Clock::now()));
}

// The "last failure: ..." part of a give-up message.
std::string last_failure(const StoreError& e) {
  std::string m = e.what();
  size_t p = m.find("last failure: ");
  return p == std::string::npos ? m : m.substr(p + 14, m.size() - p - 15);
}

}  // namespace

std::string b64(const std::string& raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string unb64(const std::string& text) {
  if (text.size() % 4 != 0) throw StoreError("etcd store: malformed base64 in an answer from etcd");
  std::string out(text.size() / 4 * 3 + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) throw StoreError("etcd store: malformed base64 in an answer from etcd");
  // EVP_DecodeBlock counts the zero bytes that padding stands for.
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = (text.size() >= 2 && text[text.size() - 2] == '=') ? 2 : 1;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

int64_t etcd_int(const Json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;  // proto3 JSON omits zeros
  return it->is_string() ? std::stoll(it->get<std::string>()) : it->get<int64_t>();
}

int EtcdReply::code() const {
  const Json& e = body.contains("error") && body["error"].is_object() ? body["error"] : body;
  auto it = e.find("code");
  return it != e.end() && it->is_number_integer() ? it->get<int>() : 0;
}

std::string EtcdReply::message() const {
  const Json& e = body.contains("error") && body["error"].is_object() ? body["error"] : body;
  for (const char* field : {"message", "error"}) {
    auto it = e.find(field);
    if (it != e.end() && it->is_string() && !it->get<std::string>().empty()) return it->get<std::string>();
  }
  return body.dump();
}

EtcdClient::EtcdClient(std::string url, std::vector<EtcdEndpoint> endpoints, milliseconds connect_timeout,
                       milliseconds request_timeout, milliseconds reconnect_timeout, std::string user,
                       std::string password)
    : url_(std::move(url)),
      endpoints_(std::move(endpoints)),
      connect_timeout_(connect_timeout),
      request_timeout_(request_timeout),
      reconnect_timeout_(reconnect_timeout),
      user_(std::move(user)),
      password_(std::move(password)),
      idle_(endpoints_.size()) {
  // Prove that some member answers (a cheap, non-linearizable read of the cluster status).
  auto deadline = Clock::now() + connect_timeout_;
  EtcdReply r;
  try {
    if (!user_.empty()) authenticate(deadline);
    r = call("/v3/maintenance/status", Json::object(), deadline);
  } catch (const AuthError&) {
    throw;
  } catch (const StoreError& e) {
    throw StoreError("store " + url_ + ": cannot connect: no etcd member answered within connect_timeout " +
                     std::to_string(connect_timeout_.count()) + " ms (last failure: " + last_failure(e) + ")");
  }
  if (r.kind != EtcdReply::kOk)
    throw StoreError("store " + url_ + ": etcd refused the status request: " + r.message());
}

EtcdClient::~EtcdClient() = default;

size_t EtcdClient::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

void EtcdClient::failed(size_t member, bool move_streams) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_[member].clear();  // connections to a failing member are not worth keeping
    if (current_ == member) current_ = (member + 1) % endpoints_.size();
  }
  // A long-lived stream on it (a waiter's shared stream, renewed only every EtcdWatchCache::kRenew)
  // may stay open on a member that lost its leader, without an error to move it on: moved now, as
  // the unary calls are.
  if (!move_streams) return;
  std::lock_guard<std::mutex> lock(streams_mu_);
  for (EtcdWatchStop* s : streams_) {
    std::lock_guard<std::mutex> stream_lock(s->mu_);
    if (s->stream_ && s->member_ == member && !s->moved_) {
      s->moved_ = true;
      s->stream_->stop();
    }
  }
}

std::string EtcdClient::token() const {
  std::lock_guard<std::mutex> lock(mu_);
  return token_;
}

void EtcdClient::authenticate(Clock::time_point deadline) {
  // The old token stays in use by other threads until the new one arrives.
  EtcdReply r = call("/v3/auth/authenticate", Json{{"name", user_}, {"password", password_}}, deadline);
  if (r.kind != EtcdReply::kOk) {
    if (r.message().find("authentication is not enabled") != std::string::npos) {
      EDL_LOG(1) << "store " << url_ << ": user '" << user_ << "' given but the etcd cluster has authentication "
                 << "disabled; requests are not authenticated";
      return;
    }
    check_auth_error(r.message());
    throw AuthError("store " + url_ + ": authentication as etcd user '" + user_ + "' failed: " + r.message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  token_ = r.body.value("token", std::string());
}

void EtcdClient::check_auth_error(const std::string& message) const {
  if (message.find("authentication failed") != std::string::npos)
    throw AuthError("store " + url_ + ": etcd rejected user '" + user_ + "' with the job secret as password (wrong "
                    "job secret?): " + message);
  if (message.find("user name is empty") != std::string::npos)
    throw AuthError("store " + url_ + ": the etcd cluster requires authentication: name a user "
                    "(etcd://USER@HOST:PORT,...) whose password is the job secret (" + message + ")");
}

std::unique_ptr<httplib::Client> EtcdClient::acquire(size_t member) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_[member].empty()) {
      auto c = std::move(idle_[member].back());
      idle_[member].pop_back();
      return c;
    }
  }
  auto c = std::make_unique<httplib::Client>(endpoints_[member].host, endpoints_[member].port);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // headers and body are separate writes: no Nagle delay between them
  return c;
}

void EtcdClient::release(size_t member, std::unique_ptr<httplib::Client> c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_[member].size() < 8) idle_[member].push_back(std::move(c));
}

milliseconds EtcdClient::attempt_limit() const {
  // A healthy member answers in milliseconds, and one without a leader answers once a leader is
  // elected; a member that does not answer at all (its host crashed or is cut off: no RST) must not
  // hold an operation — or a worker's heartbeat — longer than a small part of a lease.
  return std::clamp(request_timeout_ / 4, milliseconds(1000), milliseconds(2000));
}

milliseconds EtcdClient::patient_attempt_limit() const { return attempt_limit() * patience_.load(); }

EtcdReply EtcdClient::try_call(const std::string& path, const Json& body, Clock::time_point deadline) {
  size_t m = current();
  const EtcdEndpoint& ep = endpoints_[m];
  std::string where = ep.host + ":" + std::to_string(ep.port);
  EtcdReply reply;
  // One attempt may not use the whole deadline: a hung member must leave time for the others.
  milliseconds limit = std::min(patient_attempt_limit(), ms_until(deadline));
  auto cli = acquire(m);
  cli->set_connection_timeout(std::min({limit, connect_timeout_, kAttemptConnectLimit}));
  cli->set_read_timeout(limit);
  cli->set_write_timeout(limit);
  std::string tok = path == "/v3/auth/authenticate" ? std::string() : token();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.set_header("Content-Type", "application/json");
  if (!tok.empty()) req.set_header("Authorization", tok);
  req.body = body.dump();
  // The body is collected by a receiver because etcd's error answers end with an HTTP trailer
  // (Grpc-Trailer-Content-Type) that cpp-httplib 0.11 cannot parse: send() then fails with a read
  // error although the status and the whole JSON body have arrived.
  int status = -1;
  std::string text;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    text.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool complete = cli->send(req, res, err);
  Json answer = status > 0 ? Json::parse(text, nullptr, false) : Json();
  bool readable = answer.is_object() && (complete || answer.contains("error"));
  if (!readable) {
    reply.why = where + ": " + (complete ? "HTTP " + std::to_string(status) + " with an unreadable body"
                                         : httplib::to_string(err));
    failed(m, complete || err != httplib::Error::Read);  // a read that timed out moves no stream
    return reply;
  }
  if (complete) release(m, std::move(cli));  // else the connection is in an unknown state: dropped
  for (int p = patience_.load(); p > 1 && !patience_.compare_exchange_weak(p, p / 2);) {
  }
  if (status == 200 && !answer.contains("error")) {
    if (auto h = answer.find("header"); h != answer.end() && h->is_object()) {
      const int64_t revision = etcd_int(*h, "revision");
      for (int64_t seen = revision_seen_.load(); revision > seen && !revision_seen_.compare_exchange_weak(seen, revision);) {
      }
    }
    reply.kind = EtcdReply::kOk;
    reply.body = std::move(answer);
    return reply;
  }
  reply.body = std::move(answer);
  if (retriable_code(reply.code()) || status >= 500) {
    reply.kind = EtcdReply::kLost;
    reply.why = where + ": " + reply.message();
    // Only a member without a leader (cut off from the others) moves the streams: "request timed
    // out" is what every member of an overloaded cluster answers.
    failed(m, reply.message().find("no leader") != std::string::npos);
    return reply;
  }
  if (!user_.empty() && !tok.empty() && reply.message().find("invalid auth token") != std::string::npos) {
    authenticate(deadline);  // the token expired (etcd --auth-token-ttl): not applied, try again
    reply.kind = EtcdReply::kLost;
    reply.why = where + ": " + reply.message();
    return reply;
  }
  check_auth_error(reply.message());
  reply.kind = EtcdReply::kEtcdError;
  return reply;
}

void EtcdClient::backoff(int failures, Clock::time_point deadline, const std::string& last_why) {
  auto give_up = [&] {
    return StoreError("store " + url_ + ": no etcd member answered within " + std::to_string(retry_window().count()) +
                      " ms (EDL_STORE_TIMEOUT_MS; last failure: " + last_why + ")");
  };
  int n = static_cast<int>(endpoints_.size());
  if (failures % n != 0) {  // members left to try in this round
    if (Clock::now() >= deadline) throw give_up();
    return;
  }
  // Every member's attempt timed out: the cluster is overloaded (or cut off — then the deadline
  // ends the retries all the same): wait longer for the next answers instead of sending them again.
  if (last_why.size() >= 6 && last_why.compare(last_why.size() - 6, 6, ": Read") == 0) {
    for (int p = patience_.load(); p < kMaxPatience && !patience_.compare_exchange_weak(p, p * 2);) {
    }
  }
  int round = std::min(failures / n, 6);
  milliseconds delay = std::min(milliseconds(50 << (round - 1)), milliseconds(1000));
  if (Clock::now() + delay >= deadline) throw give_up();
  EDL_LOG(2) << "store " << url_ << ": every member failed (" << last_why << "); retrying in " << delay.count()
             << " ms";
  std::this_thread::sleep_for(delay);
}

EtcdReply EtcdClient::call(const std::string& path, const Json& body, Clock::time_point deadline) {
  for (int failures = 1;; ++failures) {
    EtcdReply r = try_call(path, body, deadline);
    if (r.kind != EtcdReply::kLost) return r;
    backoff(failures, deadline, r.why);
  }
}

Json EtcdClient::call_ok(const std::string& path, const Json& body, const std::string& what) {
  EtcdReply r = call(path, body, Clock::now() + retry_window());
  if (r.kind != EtcdReply::kOk) throw StoreError("store " + url_ + ": " + what + " failed: " + r.message());
  return std::move(r.body);
}

void EtcdWatchStop::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  if (stream_) stream_->stop();  // shuts the socket down: the blocked read of the stream returns
}

bool EtcdWatchStop::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

int EtcdClient::watch_once(size_t member, const std::string& key, Clock::time_point deadline,
                           const std::function<bool()>& check, const std::function<bool(const Json&)>& on_events,
                           EtcdWatchStop* stop, std::string* why) {
  if (Clock::now() >= deadline) return 0;
  const EtcdEndpoint& ep = endpoints_[member];
  httplib::Client cli(ep.host, ep.port);  // a connection of its own: the stream blocks it
  if (stop) {
    {
      std::lock_guard<std::mutex> lock(stop->mu_);
      if (stop->stopped_) return 0;
      stop->stream_ = &cli;
      stop->member_ = member;
      stop->moved_ = false;
    }
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.push_back(stop);
  }
  struct Unregister {
    EtcdClient* client;
    EtcdWatchStop* stop;
    ~Unregister() {
      if (!stop) return;
      {
        std::lock_guard<std::mutex> lock(client->streams_mu_);
        client->streams_.erase(std::find(client->streams_.begin(), client->streams_.end(), stop));
      }
      std::lock_guard<std::mutex> lock(stop->mu_);
      stop->stream_ = nullptr;
    }
  } unregister{this, stop};
  cli.set_tcp_nodelay(true);
  milliseconds limit = ms_until(deadline);
  cli.set_connection_timeout(std::min({limit, connect_timeout_, kAttemptConnectLimit}));
  cli.set_read_timeout(limit);
  cli.set_write_timeout(limit);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.set_header("Content-Type", "application/json");
  std::string tok = token();
  if (!tok.empty()) req.set_header("Authorization", tok);
  // No start revision: a watch from "now" is in sync at once (one from an older revision waits for
  // etcd's 100 ms catch-up loop); the check() after "created" covers everything before it.
  req.body = Json{{"create_request", {{"key", b64(key)}}}}.dump();
  int outcome = 0;
  std::exception_ptr failure;  // from check(): not thrown through httplib
  std::string buf;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      Json msg = Json::parse(buf.substr(0, nl), nullptr, false);
      buf.erase(0, nl + 1);
      if (msg.is_discarded() || !msg.is_object() || msg.contains("error") || !msg.contains("result")) {
        *why = "watch stream: " + (msg.is_object() ? EtcdReply{EtcdReply::kLost, msg, ""}.message() : "bad message");
        outcome = -1;
        return false;
      }
      const Json& r = msg["result"];
      if (r.value("canceled", false)) {  // cancelled by the server: the caller reads again
        outcome = 1;
        return false;
      }
      if (r.value("created", false)) {
        try {
          if (check()) {
            outcome = 1;
            return false;
          }
        } catch (...) {
          failure = std::current_exception();
          return false;
        }
      }
      if (!r.contains("events")) continue;
      if (on_events(r["events"])) {
        outcome = 1;
        return false;
      }
      if (stop) continue;  // a long-lived stream: its owner ends it
      outcome = 2;  // reopen: the read timeout (the deadline) starts again with every read
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = cli.send(req, res, err);
  if (failure) std::rethrow_exception(failure);
  if (stop && stop->stopped()) return 0;
  if (stop) {
    std::lock_guard<std::mutex> lock(stop->mu_);
    if (stop->moved_) return 2;  // its member failed a unary call: reopened on the current one
  }
  if (outcome == 0 && !buf.empty()) {  // an error answer (not newline-terminated) instead of a stream
    Json msg = Json::parse(buf, nullptr, false);
    if (msg.is_object() && msg.contains("error")) {
      *why = "watch: " + EtcdReply{EtcdReply::kLost, msg, ""}.message();
      outcome = -1;
    }
  }
  if (outcome == -1 && !user_.empty() && why->find("invalid auth token") != std::string::npos)
    authenticate(Clock::now() + retry_window());  // expired token: the watch is reopened with a new one
  if (outcome != 0) return outcome;
  if (Clock::now() + milliseconds(2) >= deadline) return 0;
  std::string where = ep.host + ":" + std::to_string(ep.port);
  if (!ok)
    *why = where + ": watch: " + httplib::to_string(err);
  else
    *why = where + ": watch stream ended (HTTP " + std::to_string(res.status) + ")";
  return -1;
}

bool EtcdClient::watch(const std::string& key, Clock::time_point deadline, const std::function<bool()>& check,
                       const std::function<bool(const Json& events)>& on_events, EtcdWatchStop* stop) {
  int failures = 0;
  Clock::time_point give_up;
  for (;;) {
    if (stop && stop->stopped()) return false;
    size_t m = current();
    std::string why;
    int r = watch_once(m, key, deadline, check, on_events, stop, &why);
    if (r == 1) return true;
    if (r == 0) return false;
    if (r == 2) {
      failures = 0;
      continue;
    }
    failed(m);
    if (failures++ == 0) give_up = Clock::now() + retry_window();
    EDL_LOG(2) << "store " << url_ << ": " << why << "; watching '" << key << "' on the next member";
    if (deadline <= give_up) {  // the wait ends before the reconnection budget: never an error
      try {
        backoff(failures, deadline, why);
      } catch (const StoreError&) {
        std::this_thread::sleep_until(deadline);
        return false;
      }
    } else {
      backoff(failures, give_up, why);
    }
  }
}

}  // namespace edl::store
