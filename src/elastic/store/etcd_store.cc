#include "elastic/store/etcd_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common/logging.h"
#include "edl/error.h"
#include "elastic/store/etcd_watch_cache.h"

namespace edl::store {
namespace {

using std::chrono::milliseconds;

// Keys under this prefix belong to the backend (request markers); keys() never lists them.
constexpr const char* kReserved = "__edl_etcd/";

struct Kv {
  std::optional<std::string> value;  // nullopt: absent
  int64_t mod_revision = 0;
  int64_t create_revision = 0;
  int64_t version = 0;
};

Kv parse_kv(const Json& k) {
  Kv kv;
  kv.value = unb64(k.value("value", std::string()));
  kv.mod_revision = etcd_int(k, "mod_revision");
  kv.create_revision = etcd_int(k, "create_revision");
  kv.version = etcd_int(k, "version");
  return kv;
}

// The first key of a range answer (empty values are omitted from the JSON).
Kv first_kv(const Json& range) {
  if (!range.contains("kvs") || range["kvs"].empty()) return Kv{};
  return parse_kv(range["kvs"][0]);
}

Json put_op(const std::string& key, const std::string& value, int64_t lease = 0) {
  Json put = {{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return Json{{"request_put", put}};
}

Json delete_op(const std::string& key) { return Json{{"request_delete_range", {{"key", b64(key)}}}}; }

// A decimal integer as add() reads it; `what` names the key in the error.
int64_t parse_counter(const std::optional<std::string>& value, const std::string& key) {
  int64_t v = 0;
  if (!value) return v;
  const std::string& s = *value;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    throw InvalidArgument("store add: value of key '" + key + "' is not an integer");
  return v;
}

int64_t add_checked(int64_t v, int64_t delta, const std::string& key) {
  int64_t next = 0;
  if (__builtin_add_overflow(v, delta, &next)) throw InvalidArgument("store add: key '" + key + "' would overflow int64");
  return next;
}

Json range_op(const std::string& key, bool count_only = false) {
  Json r = {{"key", b64(key)}};
  if (count_only) r["count_only"] = true;
  return Json{{"request_range", r}};
}

Json compare(const std::string& key, const char* target, const Json& operand, const char* result = "EQUAL") {
  const std::string t = target;
  std::string field = t == "VALUE" ? "value" : t == "MOD" ? "mod_revision" : t == "CREATE" ? "create_revision" : "version";
  return Json{{"key", b64(key)}, {"target", target}, {"result", result}, {field, operand}};
}

// The first key after every key that starts with prefix ("\0" = no end: the prefix is empty or all 0xff).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::string(1, '\0');
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

class EtcdStore final : public Store {
 public:
  EtcdStore(const std::string& url, std::vector<EtcdEndpoint> endpoints, const std::string& user,
            const StoreOptions& o)
      : client_(url, std::move(endpoints), o.connect_timeout, o.request_timeout, o.reconnect_timeout, user, o.secret),
        id_(random_id()) {
    if (user.empty() && !o.secret.empty()) {
      EDL_LOG(2) << "store " << url << ": no etcd user in the URL, so the job secret is not used "
                 << "(etcd://USER@HOST:PORT authenticates as USER with the job secret as password)";
    }
  }

  // Every write other than add() ends the key's ticket epoch (add(), below) in the same txn.
  void set(const std::string& key, const std::string& value) override {
    client_.call_ok("/v3/kv/txn", Json{{"success", {put_op(key, value), delete_op(ticket_key(key))}}},
                    "put of key '" + key + "'");
    wrote(key);
  }

  std::optional<std::string> get(const std::string& key) override { return watches_.read(key).first; }

  // One read-only txn of ranges per kMaxTxnOps keys (a decider reading every arrival, a rank reading
  // its peers' addresses): a round trip for the lot instead of one per key.
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys) override {
    if (keys.size() == 1) return {get(keys[0])};
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); i += kMaxTxnOps) {
      Json ops = Json::array();
      for (size_t j = i; j < std::min(keys.size(), i + kMaxTxnOps); ++j) ops.push_back(range_op(keys[j]));
      Json r = client_.call_ok("/v3/kv/txn", Json{{"success", ops}}, "read of " + std::to_string(keys.size()) + " keys");
      const int64_t revision = etcd_int(r.value("header", Json::object()), "revision");
      for (const auto& resp : r["responses"]) {
        out.push_back(first_kv(resp["response_range"]).value);
        if (out.size() <= keys.size()) watches_.observed(keys[out.size() - 1], out.back(), revision);
      }
    }
    EDL_CHECK(out.size() == keys.size(), StoreError,
              "store " + client_.url() + ": etcd answered a read of " + std::to_string(keys.size()) + " keys with " +
                  std::to_string(out.size()) + " values");
    return out;
  }

  // From the watch streams of EtcdWatchCache::peek (opened on a key's first read here, kept while it
  // is read at least every EtcdWatchCache::kIdlePeek): a worker reading its watched peers' leases
  // every heartbeat costs etcd no request once the streams are open (a watch and a read per key, and
  // again every kRenew). Keys without a stream in sync are read (one get_many).
  std::vector<std::optional<std::string>> get_many_watched(const std::vector<std::string>& keys) override {
    std::vector<std::optional<std::string>> out(keys.size());
    std::vector<std::string> unread;
    std::vector<size_t> at;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (auto v = watches_.peek(keys[i])) {
        out[i] = std::move(*v);
      } else {
        unread.push_back(keys[i]);
        at.push_back(i);
      }
    }
    if (!unread.empty()) {
      auto read = get_many(unread);
      for (size_t j = 0; j < at.size(); ++j) out[at[j]] = std::move(read[j]);
    }
    return out;
  }

  bool del(const std::string& key) override {
    // A retried delete whose first answer was lost reports false: the key did not exist any more.
    Json r = client_.call_ok("/v3/kv/txn", Json{{"success", {delete_op(key), delete_op(ticket_key(key))}}},
                             "delete of key '" + key + "'");
    wrote(key);
    return etcd_int(r["responses"][0]["response_delete_range"], "deleted") > 0;
  }

  std::vector<std::string> keys(const std::string& prefix) override {
    Json req = {{"key", b64(prefix.empty() ? std::string(1, '\0') : prefix)},
                {"range_end", b64(prefix_end(prefix))},
                {"keys_only", true}};
    Json r = client_.call_ok("/v3/kv/range", req, "listing of prefix '" + prefix + "'");
    std::vector<std::string> out;
    if (r.contains("kvs"))
      for (const auto& kv : r["kvs"]) {
        std::string k = unb64(kv.value("key", std::string()));
        if (k.rfind(kReserved, 0) != 0) out.push_back(std::move(k));
      }
    std::sort(out.begin(), out.end());  // etcd already returns key order; keep the contract explicit
    return out;
  }

  // add(key, 1) draws a ticket instead of racing a compare-and-swap: n concurrent adds to one
  // counter (a rendezvous of n workers) cost O(n) txns, not the O(n^2) of n CAS loops where one wins
  // per raft round. Each key counted this way has a hidden ticket key T (ticket_key) whose version
  // counts the adds of the current epoch and whose value is the epoch's base (the counter's value at
  // version 1). An add bumps T (a put that keeps T's value: no compare on the counter, so it never
  // loses a race) and gets value = base + previous version; then it publishes: the counter key is
  // written base + v - 1 only while T's version is still v (so writes only ever move it forward),
  // by whichever adder finds T unchanged, and P (publish_key: the highest version published in the
  // epoch) says whose tickets are visible. An add returns once its ticket is visible. Any other write
  // to the key (set, del, compare_set, set_lease, an add of delta != 1) deletes T in the same txn,
  // ending the epoch; a ticket that it ended before its publication is added again.
  int64_t add(const std::string& key, int64_t delta) override {
    std::optional<int64_t> v;
    if (delta != 1) v = *add_cas(key, delta);  // never nullopt for delta != 1
    while (!v) v = add_ticket(key);
    wrote(key);
    return *v;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    const std::string marker = new_marker();
    Json cmp = expected ? compare(key, "VALUE", b64(*expected)) : compare(key, "VERSION", "0");
    Json r = exactly_once_txn(marker, "compare_set of key '" + key + "'", [&](int64_t lease) {
      return Json{{"compare", {cmp, compare(marker, "VERSION", "0")}},
                  {"success", {put_op(key, desired), put_op(marker, "1", lease), delete_op(ticket_key(key))}},
                  {"failure", {range_op(key), range_op(marker)}}};
    });
    wrote(key);
    bool ok = r.value("succeeded", false) || first_kv(r["responses"][1]["response_range"]).value.has_value();
    if (current) *current = ok ? std::optional<std::string>(desired) : first_kv(r["responses"][0]["response_range"]).value;
    return ok;
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return true;
    auto deadline = Clock::now() + timeout;
    // One key (the common case: a peer's address, waited for in short slices by the mesh bootstrap):
    // the key's shared watch stream (wait_change from "absent"), so that slice after slice costs etcd
    // no new stream and no read while the key is still missing (a key not watched yet is read first:
    // one that exists needs no stream).
    if (keys.size() == 1) {
      if (!watches_.watching(keys[0]) && get(keys[0])) return true;
      return watches_.wait_change(keys[0], std::nullopt, deadline).has_value();
    }
    // Several keys: all seen at one revision, else a watch stream of its own on the first missing one.
    Json snapshot = {{"success", Json::array()}};
    for (const auto& k : keys) snapshot["success"].push_back(range_op(k, true));
    for (;;) {
      // One txn = one revision for all keys; then wait for the first missing one to exist.
      Json r = client_.call_ok("/v3/kv/txn", snapshot, "wait for keys");
      const std::string* missing = nullptr;
      for (size_t i = 0; i < keys.size() && !missing; ++i)
        if (etcd_int(r["responses"][i]["response_range"], "count") == 0) missing = &keys[i];
      if (!missing) return true;
      if (Clock::now() >= deadline) return false;
      const std::string& k = *missing;
      bool appeared = client_.watch(
          k, deadline, [&] { return get(k).has_value(); },
          [](const Json& events) {
            for (const auto& ev : events)
              if (ev.value("type", std::string("PUT")) != "DELETE") return true;
            return false;
          });
      if (!appeared) return false;
    }
  }

  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         milliseconds timeout) override {
    return watches_.wait_change(key, known, Clock::now() + timeout);
  }

  void set_lease(const std::string& key, const std::string& value, milliseconds ttl) override {
    EDL_CHECK(ttl.count() > 0, InvalidArgument,
              "store set_lease: ttl of key '" + key + "' must be positive, got " + std::to_string(ttl.count()) + " ms");
    const int64_t ttl_s = (ttl.count() + 999) / 1000;  // etcd leases count whole seconds: round up
    int64_t lease = key_lease(key, ttl_s);
    auto deadline = Clock::now() + client_.retry_window();
    for (int tries = 0;; ++tries) {
      EtcdReply r = client_.call("/v3/kv/txn", Json{{"success", {put_op(key, value, lease), delete_op(ticket_key(key))}}},
                                 deadline);
      if (r.kind == EtcdReply::kOk) return wrote(key);
      if (tries == 0 && r.message().find("lease not found") != std::string::npos) {
        lease = new_key_lease(key, ttl_s);  // expired or revoked since the last keepalive
        continue;
      }
      throw StoreError("store " + client_.url() + ": set_lease of key '" + key + "' failed: " + r.message());
    }
  }

 private:
  // A burst of adds to one counter (a thousand workers arriving at a rendezvous) costs etcd O(n^2)
  // txns — each a raft write, applied or not — if every loser of a race retries at once: the losers
  // spread out over a random delay that doubles with each race lost (up to 2, 4, 8, 16 ms).
  static void after_lost_race(int races) {
    thread_local std::minstd_rand rng(std::random_device{}());
    const int cap = 1 << std::min(races, 4);
    std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(0, cap)(rng)));
  }

  // After a write of key: a value its watch stream reports from before the write is confirmed by a
  // read before wait_change returns it (EtcdWatchCache::wrote).
  void wrote(const std::string& key) { watches_.wrote(key, client_.revision_seen()); }

  // etcd's default limit of operations in one txn (--max-txn-ops).
  static constexpr size_t kMaxTxnOps = 128;

  static std::string ticket_key(const std::string& key) { return std::string(kReserved) + "ctr/" + key; }
  // Per epoch, so that an add whose epoch ended can still tell whether its ticket was published
  // before the end. The epoch's token is chosen by the add that starts the epoch (its request
  // marker's id: unique) and kept in T's value ("<base> <token>"), so that P can be written by the
  // very txn that starts the epoch: every later publication finds P and takes one txn.
  static std::string publish_key(const std::string& token, const std::string& key) {
    return std::string(kReserved) + "pub/" + token + "/" + key;
  }
  static std::string epoch_token(const std::string& marker) { return marker.substr(std::string(kReserved).size() + 4); }
  // T's value: the epoch's base and token.
  static std::pair<int64_t, std::string> parse_ticket(const std::optional<std::string>& value, const std::string& key) {
    const std::string v = value.value_or("");
    const size_t space = v.find(' ');
    EDL_CHECK(space != std::string::npos, StoreError, "etcd store: the ticket key of '" + key + "' holds '" + v + "', not '<base> <token>'");
    return {parse_counter(v.substr(0, space), key), v.substr(space + 1)};
  }

  // An add as one compare-and-swap loop on the counter (deltas other than 1, and the first add of
  // an epoch, which creates T with the new value as its base: nullopt when another add started an
  // epoch first). An add of delta != 1 ends the key's ticket epoch.
  // `known`: the key as just read, if it was.
  std::optional<int64_t> add_cas(const std::string& key, int64_t delta, std::optional<Kv> known = std::nullopt) {
    const std::string marker = new_marker();
    const std::string t = ticket_key(key);
    Kv cur = known ? *known : first_kv(client_.call_ok("/v3/kv/range", range_op(key)["request_range"], "add to key '" + key + "'"));
    for (int races = 0;;) {
      const int64_t next = add_checked(parse_counter(cur.value, key), delta, key);
      Json r = exactly_once_txn(marker, "add to key '" + key + "'", [&](int64_t lease) {
        Json ops = {put_op(key, std::to_string(next)), put_op(marker, std::to_string(next), lease)};
        if (delta == 1) {  // a new epoch, with its version 1 published
          ops.push_back(put_op(t, std::to_string(next) + " " + epoch_token(marker), lease));
          ops.push_back(put_op(publish_key(epoch_token(marker), key), padded(1), lease));
        } else {
          ops.push_back(delete_op(t));
        }
        Json cmp = {compare(key, "MOD", std::to_string(cur.mod_revision)), compare(marker, "VERSION", "0")};
        if (delta == 1) cmp.push_back(compare(t, "CREATE", "0"));  // a new epoch only where none runs
        return Json{{"compare", cmp}, {"success", ops}, {"failure", {range_op(key), range_op(marker), range_op(t, true)}}};
      });
      if (r.value("succeeded", false)) return next;
      Kv mark = first_kv(r["responses"][1]["response_range"]);
      if (mark.value) return std::stoll(*mark.value);  // an earlier attempt whose answer was lost
      if (delta == 1 && etcd_int(r["responses"][2]["response_range"], "count") > 0) return std::nullopt;
      cur = first_kv(r["responses"][0]["response_range"]);  // lost a race: retry on the new value
      after_lost_race(++races);
    }
  }

  // add(key, 1) by ticket (see add()); nullopt when the epoch ended before the ticket was published
  // (the caller adds again).
  std::optional<int64_t> add_ticket(const std::string& key) {
    const std::string marker = new_marker();
    const std::string t = ticket_key(key);
    Json r = exactly_once_txn(marker, "add to key '" + key + "'", [&](int64_t lease) {
      Json bump = {{"key", b64(t)}, {"ignore_value", true}, {"ignore_lease", true}, {"prev_kv", true}};
      // No epoch and no counter yet (the first add of a key): created in the same round trip.
      Json create = {{"compare", {compare(key, "VERSION", "0"), compare(t, "CREATE", "0"), compare(marker, "VERSION", "0")}},
                     {"success", {put_op(key, "1"), put_op(t, "1 " + epoch_token(marker), lease),
                                  put_op(publish_key(epoch_token(marker), key), padded(1), lease), put_op(marker, "1", lease)}},
                     {"failure", {range_op(key)}}};
      return Json{{"compare", {compare(t, "CREATE", "0", "GREATER"), compare(marker, "VERSION", "0")}},
                  {"success", {Json{{"request_put", bump}}, put_op(marker, "T", lease)}},
                  {"failure", {range_op(marker), Json{{"request_txn", create}}}}};
    });
    Kv before;  // T as this ticket found it
    if (r.value("succeeded", false)) {
      const Json& put = r["responses"][0]["response_put"];
      if (put.contains("prev_kv")) before = parse_kv(put["prev_kv"]);
    } else {
      Kv mark = first_kv(r["responses"][0]["response_range"]);
      if (mark.value && *mark.value != "T") return std::stoll(*mark.value);  // an earlier attempt created the counter
      if (!mark.value) {
        const Json& created = r["responses"][1]["response_txn"];
        if (created.value("succeeded", false)) return 1;
        Kv cur = first_kv(created["responses"][0]["response_range"]);
        if (!cur.value) return std::nullopt;  // another add started the epoch meanwhile: draw a ticket
        return add_cas(key, 1, cur);          // a counter without an epoch: start one (nullopt: lost to another)
      }
      before = ticket_before(t, mark.mod_revision, key);  // an earlier attempt drew the ticket
    }
    EDL_CHECK(before.value && before.version > 0, StoreError,
              "store " + client_.url() + ": add to key '" + key + "': its ticket key vanished inside the txn");
    const auto [base, token] = parse_ticket(before.value, key);
    const int64_t mine = before.version + 1;  // T's version after our bump
    const int64_t value = add_checked(base, before.version, key);
    return publish(key, before.create_revision, token, base, mine) ? std::optional<int64_t>(value) : std::nullopt;
  }

  // T before the bump an earlier attempt made at `revision` (its answer was lost): read from history.
  Kv ticket_before(const std::string& t, int64_t revision, const std::string& key) {
    Json req = range_op(t)["request_range"];
    req["revision"] = std::to_string(revision);
    Kv after = first_kv(client_.call_ok("/v3/kv/range", req, "add to key '" + key + "' (recovering its ticket)"));
    after.version -= 1;
    return after;
  }

  // P's values are zero-padded to 20 digits, so that etcd's byte-wise VALUE compare orders them as numbers.
  static std::string padded(int64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%020lld", static_cast<long long>(v));
    return buf;
  }

  // Makes ticket `mine` of the epoch (T's create revision `epoch`, its `token`) visible; false when the
  // epoch ended before anyone published it. One txn, whatever the other adders do: "P below `mine`"
  // writes the counter and P for `mine` (both only move forward: every ticket up to `mine` was drawn),
  // "P at or above" means already visible. P is written when the epoch starts; should it be gone
  // (its lease expired while T's had not), the counter is written only while T is still at the
  // version written (a ticket drawn long ago must not move back a counter that the lost P had moved
  // past), retried with T's newest version.
  bool publish(const std::string& key, int64_t epoch, const std::string& token, int64_t base, int64_t mine) {
    const std::string t = ticket_key(key), p = publish_key(token, key);
    int64_t version = mine;
    for (;;) {
      // Idempotent (a deterministic value under a compare): retried blindly across lost answers.
      Json put_version = {put_op(key, std::to_string(base + version - 1)), put_op(p, padded(version), marker_lease())};
      Json first = {{"compare", {compare(p, "VERSION", "0"), compare(t, "VERSION", std::to_string(version))}},
                    {"success", put_version},
                    {"failure", {range_op(t), range_op(p)}}};
      Json forward = {{"compare", {compare(p, "VALUE", b64(padded(version)), "LESS")}},
                      {"success", put_version},
                      {"failure", {Json{{"request_txn", first}}}}};
      Json txn = {{"compare", {compare(t, "CREATE", std::to_string(epoch))}},
                  {"success", {Json{{"request_txn", forward}}}},
                  {"failure", {range_op(t), range_op(p)}}};
      EtcdReply reply = client_.call("/v3/kv/txn", txn, Clock::now() + client_.retry_window());
      if (reply.kind == EtcdReply::kEtcdError && reply.message().find("lease not found") != std::string::npos) {
        std::lock_guard<std::mutex> lock(marker_mu_);
        marker_lease_ = 0;  // revoked or expired early: grant another (the txn was not applied)
        continue;
      }
      if (reply.kind != EtcdReply::kOk)
        throw StoreError("store " + client_.url() + ": add to key '" + key + "' failed: " + reply.message());
      const Json* r = &reply.body;
      const bool running = r->value("succeeded", false);
      if (running) {
        r = &(*r)["responses"][0]["response_txn"];  // forward
        if (r->value("succeeded", false)) return true;
        r = &(*r)["responses"][0]["response_txn"];  // first
        if (r->value("succeeded", false)) return true;
      }
      Kv now = first_kv((*r)["responses"][0]["response_range"]);
      Kv published = first_kv((*r)["responses"][1]["response_range"]);
      if (published.value && std::stoll(*published.value) >= mine) return true;
      if (!running) return false;
      EDL_CHECK(now.value && now.version >= version, StoreError,
                "store " + client_.url() + ": add to key '" + key + "': its ticket key moved back inside its epoch");
      version = now.version;
    }
  }

  struct KeyLease {
    int64_t id = 0;
    int64_t ttl_s = 0;             // as asked (rounded up); the lease is granted granted_s(ttl_s)
    Clock::time_point renewed;     // when the last grant or keepalive was sent
  };
  // A key lease of 3 s or more (a worker's lease: EDL_LEASE_MS) is kept alive when
  // keepalive_s (half the TTL, at least kKeepaliveS) has passed since its last keepalive, and granted
  // so that every set_lease leaves the key TTL + max(TTL, kBackstopSlackS) - half the TTL to live
  // (11 s for 3 s): granted_s = that + keepalive_s. A shorter lease is granted twice the TTL and kept
  // alive every half TTL (at least a second). A worker's keepalives held up for 11 s (a busy machine,
  // an etcd election, an etcd leader starved of CPU) thus still find its key; with twice the TTL
  // (4 s of slack) the keys of healthy workers expired at 256 workers on a saturated etcd — several
  // times per scale_bench run, each an aborted generation. A keepalive costs etcd nearly what a put
  // does (~0.4 ms of the members' CPU through the JSON gateway against ~0.6 ms on this machine):
  // every 2 s it was an eighth of the requests of a 256-worker recovery; every 5 s, with the same
  // 11 s of life after each refresh, the key of a dead worker that nobody removed lives 3 s longer.
  // The workers judge each other by probes and by their beats within the lease (docs/elastic.md,
  // "Failure detection"): the key's own expiry is only a backstop, and a key that expired under a
  // live worker is what must not happen.
  static constexpr int64_t kBackstopSlackS = 10;
  static constexpr int64_t kKeepaliveS = 5;
  static int64_t half(int64_t ttl_s) { return std::max<int64_t>(1, (ttl_s + 1) / 2); }
  static int64_t keepalive_s(int64_t ttl_s) { return ttl_s >= 3 ? std::max(half(ttl_s), kKeepaliveS) : half(ttl_s); }
  static int64_t granted_s(int64_t ttl_s) {
    return ttl_s >= 3 ? ttl_s + std::max(ttl_s, kBackstopSlackS) - half(ttl_s) + keepalive_s(ttl_s) : 2 * ttl_s;
  }

  std::string new_marker() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::string(kReserved) + "req/" + id_ + "/" + std::to_string(++seq_);
  }

  int64_t grant(int64_t ttl_s, const std::string& what) {
    Json r = client_.call_ok("/v3/lease/grant", Json{{"TTL", std::to_string(ttl_s)}}, "grant of a " + what);
    int64_t granted = etcd_int(r, "TTL");
    if (granted > ttl_s) {
      EDL_LOG(3) << "store " << client_.url() << ": etcd raised the " << what << " from " << ttl_s << " s to its minimum "
                 << granted << " s";
    }
    return etcd_int(r, "ID");
  }

  // The lease of a set_lease key, refreshed (keepalive, at most once per keepalive_s) or granted anew
  // when absent, expired or of another TTL.
  int64_t key_lease(const std::string& key, int64_t ttl_s) {
    KeyLease kl;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = key_leases_.find(key);
      if (it != key_leases_.end()) kl = it->second;
    }
    if (kl.id != 0 && kl.ttl_s == ttl_s) {
      const auto sent = Clock::now();
      if (sent - kl.renewed < std::chrono::seconds(keepalive_s(ttl_s))) return kl.id;  // still at least ttl_s to live
      Json r = client_.call_ok("/v3/lease/keepalive", Json{{"ID", std::to_string(kl.id)}}, "keepalive of key '" + key + "'");
      if (r.contains("result") && etcd_int(r["result"], "TTL") > 0) {  // TTL 0: the lease expired
        std::lock_guard<std::mutex> lock(mu_);
        key_leases_[key].renewed = sent;
        return kl.id;
      }
    }
    return new_key_lease(key, ttl_s);
  }

  int64_t new_key_lease(const std::string& key, int64_t ttl_s) {
    const auto sent = Clock::now();
    KeyLease kl{grant(granted_s(ttl_s), "lease of key '" + key + "'"), ttl_s, sent};
    std::lock_guard<std::mutex> lock(mu_);
    key_leases_[key] = kl;
    return kl.id;
  }

  // The lease the request markers hang on: granted for a while, replaced once a third of it has passed,
  // so that a marker outlives every retry of its request (retry_window) by far. Five minutes: a grant is
  // a raft write, and with a shorter life (it was a minute and a half) every worker of a large job
  // granted a new one every 30 s, mostly in the middle of a rendezvous.
  int64_t marker_lease() {
    std::lock_guard<std::mutex> lock(marker_mu_);
    if (marker_lease_ != 0 && Clock::now() < marker_renew_) return marker_lease_;
    int64_t ttl_s = std::max<int64_t>(300, 3 * (client_.retry_window().count() + 999) / 1000);
    marker_lease_ = grant(ttl_s, "request-marker lease");
    marker_renew_ = Clock::now() + std::chrono::seconds(ttl_s / 3);
    return marker_lease_;
  }

  // Runs a txn that writes `marker` on success, retrying lost answers for the retry window: every
  // attempt requires the marker to be absent, so at most one attempt is ever applied and a retry's
  // failure branch (which reads the marker back) tells whether an earlier one was.
  Json exactly_once_txn(const std::string& marker, const std::string& what, const std::function<Json(int64_t)>& make) {
    auto deadline = Clock::now() + client_.retry_window();
    for (int failures = 1;; ++failures) {
      EtcdReply r = client_.try_call("/v3/kv/txn", make(marker_lease()), deadline);
      if (r.kind == EtcdReply::kOk) return std::move(r.body);
      if (r.kind == EtcdReply::kEtcdError) {
        if (r.message().find("lease not found") == std::string::npos)
          throw StoreError("store " + client_.url() + ": " + what + " failed: " + r.message());
        if (Clock::now() >= deadline)
          throw StoreError("store " + client_.url() + ": " + what + " failed: " + r.message());
        std::lock_guard<std::mutex> lock(marker_mu_);
        marker_lease_ = 0;  // revoked or expired early: grant another (the txn was not applied)
        continue;
      }
      EDL_LOG(2) << "store " << client_.url() << ": " << what << ": " << r.why << "; retrying (exactly once by marker)";
      client_.backoff(failures, deadline, r.why);
    }
  }

  EtcdClient client_;
  EtcdWatchCache watches_{&client_};  // wait_change's streams (destroyed before client_)
  const std::string id_;  // this client's part of the marker keys
  std::mutex mu_;
  uint64_t seq_ = 0;
  std::map<std::string, KeyLease> key_leases_;
  std::mutex marker_mu_;
  int64_t marker_lease_ = 0;
  Clock::time_point marker_renew_;
};

}  // namespace

std::shared_ptr<Store> connect_etcd_store(const std::string& url, std::vector<EtcdEndpoint> endpoints,
                                          const std::string& user, const StoreOptions& options) {
  EDL_CHECK(user.empty() || !options.secret.empty(), InvalidArgument,
            "store URL '" + url + "' names etcd user '" + user +
                "' but no job secret (EDL_JOB_SECRET / --secret) was given as its password");
  return std::make_shared<EtcdStore>(url, std::move(endpoints), user, options);
}

}  // namespace edl::store
