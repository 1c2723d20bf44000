// EtcdWatchCache: the etcd store's wait_change() served from long-lived watch streams, one per key
// a Store waits on, shared by every waiter of that key in the process (docs/store.md, "etcd").
//
// The elastic runtime waits on the same few keys over and over in short slices (a worker's watch
// thread waits on its generation's event key once per heartbeat, edl-run on <job>/gen every 500 ms,
// a rendezvous waiter on the round's decision in slices). Opening a watch per wait would cost etcd
// a new HTTP connection, a new watch stream and two reads per slice per worker; here the first wait on
// a key opens a stream (watch, then one read once etcd confirms it) and keeps the key's value up to
// date from its events; later waits cost etcd nothing until the value changes. A waiter never gets
// a value older than one this Store read or wrote itself: a read of the key moves its stream forward
// (observed()), and a value the stream reports as changed is returned as it is when the stream has
// passed this Store's last write of the key (wrote()) — else it is read once more (a linearizable
// range) first. (Every survivor of a failure used to read its generation's event key once more after
// the abort's bump: a request per worker per recovery that proved nothing the stream had not.) A
// stream opened (and read) after the wait began holds the store's value at some moment of the wait,
// which is what a read would prove (a one-shot wait on a new key, such as a round's decision, costs
// a watch and a read, not a third request). A stream moves to the next member when a
// unary call of the client finds its member without a leader or its connection broken
// (EtcdClient::failed; not after a timeout), and is renewed (a new watch and read) every kRenew, which moves it off a member
// that stopped answering without closing the connection; a stream nobody waited on for kIdle is
// closed.
//
// Errors: a stream that cannot reach any member for the client's retry window makes its waiters
// throw StoreError; the next wait opens a new stream.
// Thread-safety: every method may be called concurrently. The destructor ends every stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "elastic/store/etcd_client.h"

namespace edl::store {

class EtcdWatchCache {
 public:
  explicit EtcdWatchCache(EtcdClient* client) : client_(client) {}
  ~EtcdWatchCache();
  EtcdWatchCache(const EtcdWatchCache&) = delete;
  EtcdWatchCache& operator=(const EtcdWatchCache&) = delete;

  // Store::wait_change on `key` until `deadline`.
  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         Clock::time_point deadline);

  // Whether a stream on key is open (a wait on it costs etcd nothing until the key changes).
  bool watching(const std::string& key);

  // The value of key by a linearizable read, and the revision of the store it reflects (an open
  // stream on key takes it too: observed()).
  std::pair<std::optional<std::string>, int64_t> read(const std::string& key);

  // Store::get_many_watched of one key: its value as the key's stream last saw it (no request), or
  // nullopt while no stream on it is in sync (one is opened now: the caller reads the key). A key
  // peeked at keeps its stream for kIdlePeek after the last peek (a worker peeks at its watched peers'
  // leases every heartbeat, and the same peers usually stay watched across a rendezvous).
  std::optional<std::optional<std::string>> peek(const std::string& key);
  // A read of key (get, get_many) returned `value` at store revision `revision`: a stream on key
  // that lags behind it moves forward to it, so that a peek never returns a value older than a read.
  void observed(const std::string& key, const std::optional<std::string>& value, int64_t revision);
  // This Store wrote key (set, add, compare_set, del, set_lease) at store revision `revision` or
  // below: a changed value that a stream reports from an older revision is confirmed by a read.
  void wrote(const std::string& key, int64_t revision);

  static constexpr std::chrono::seconds kRenew{15};
  static constexpr std::chrono::seconds kIdle{2};
  static constexpr std::chrono::seconds kIdlePeek{10};

 private:
  struct Entry {
    bool synced = false;           // value is the key's value since the stream's last read
    Clock::time_point synced_since;  // when that read was sent: value reflects the store no earlier
    std::optional<std::string> value;
    int64_t revision = 0;          // store revision `value` reflects (events at or below it are old)
    int64_t written = 0;           // wrote(): a value of an older revision may predate our write
    std::optional<std::string> error;  // the stream gave up (StoreError text)
    bool done = false;             // the stream thread has ended
    int waiters = 0;
    Clock::time_point last_wait;
    std::chrono::milliseconds idle{kIdle};  // closed after nobody waited (or peeked) this long
    EtcdWatchStop stop;
    std::thread thread;
  };

  std::shared_ptr<Entry> acquire(const std::string& key);
  static bool idle(const Entry& e, Clock::time_point now) { return e.waiters == 0 && now - e.last_wait >= e.idle; }
  void release(const std::shared_ptr<Entry>& e);
  // Newer value of key at `revision` (ignored unless newer than what the entry holds). Caller holds mu_.
  void update(Entry& e, std::optional<std::string> value, int64_t revision);
  void stream(const std::string& key, const std::shared_ptr<Entry>& e);
  void join_retired();

  EtcdClient* const client_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::vector<std::shared_ptr<Entry>> retired_;  // stopped, not yet joined
};

}  // namespace edl::store
