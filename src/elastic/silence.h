// SilenceTracker: judges a member dead by the beats its lease shows to this observer, timed by the
// observer's own monotonic clock — independent of how exactly the store expires leases. (etcd lease
// TTLs are whole seconds, its leader checks expiry every 500 ms, and a new etcd leader restarts every
// lease with its election timeout added: a dead worker's key can outlive its last beat by several
// seconds. docs/elastic.md, "Failure detection".)
//
// The lease thread reads every member's lease value once per check round and hands the values of
// the round to observe() with the time the round ended. A member is silent when
//   1. its value has not changed for `lease` since this observer first saw that value, and
//   2. this observer's own view of the store has been uninterrupted for `recovery`: a round that
//      ends more than `max_gap` after the previous one (the store was slow or away for us — an etcd
//      election, a reconnect —, or this process was stopped or starved) restarts that count. A live
//      member whose heartbeats failed through the same outage thus gets `recovery` after it to get a
//      beat through, instead of being judged by time it could not use.
// A wall-clock stamp is never compared; no value is interpreted beyond "changed or not".
// Thread-safety: none (its owner serializes the calls).
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "edl/export.h"

namespace edl::elastic {

struct SilenceOptions {
  std::chrono::milliseconds lease{3000};     // EDL_LEASE_MS: unchanged this long = silent
  std::chrono::milliseconds max_gap{1000};   // rounds further apart than this = an interruption (2 x heartbeat)
  std::chrono::milliseconds recovery{1000};  // after an interruption, at least this long before judging (max(2 x heartbeat, lease / 3))
};

class EDL_API SilenceTracker {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SilenceTracker(SilenceOptions options) : opt_(options) {}

  // One round: `values` holds the lease value of every member read in it (absent ones left out:
  // a missing lease is the store's verdict, judged by the caller), `end` the time the round ended.
  // Returns the members judged silent, each with how long its value has been unchanged.
  std::vector<std::pair<std::string, std::chrono::milliseconds>> observe(
      const std::map<std::string, std::string>& values, Clock::time_point end);

  // When this observer first saw `value` as the member's lease value (nullopt: it never saw it, or
  // saw another value last): lets a rendezvous decider judge a missing member by what its lease
  // thread already watched instead of starting to watch it only then.
  std::optional<Clock::time_point> first_seen(const std::string& id, const std::string& value) const;

  // The observer's view of the store is interrupted at `at` although its rounds were not late (they
  // were served from watch streams, while its own beats could not get through): the recovery count
  // restarts as after a late round.
  void interrupted(Clock::time_point at) { recovered_ = std::max(recovered_, at); }

  // Forgets every member (a new generation is watched: its members are judged afresh).
  void reset();

 private:
  struct Seen {
    std::string value;
    Clock::time_point since;
  };
  SilenceOptions opt_;
  std::map<std::string, Seen> seen_;
  std::optional<Clock::time_point> last_round_;
  Clock::time_point recovered_{};
};

}  // namespace edl::elastic
