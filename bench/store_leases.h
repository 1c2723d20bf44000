// The steady load of a job's leases on a store (issue 25): N members (elastic::Membership, the
// workers' own code, as threads of this process), each with its own store connection and its beat
// thread's, form one generation and watch it with the default timing (heartbeat 500 ms, lease 3 s)
// — every member beats, reads the leases of the members it watches and waits on the generation's
// event key. What the store serves meanwhile is read from the server side (requests and CPU time).
//
// Thread-safety: call from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "edl/store.h"

namespace edl::bench {

struct LeaseLoad {
  double rendezvous_ms = 0;  // the first rendezvous of the N members (decided and read by all)
  double ops_per_s = 0;      // requests the store served per second in the steady state
  double cpu_pct = 0;        // the store's CPU time over that window (100 = one core)
  int64_t failures = 0;      // members reported dead (none died: each is a false eviction) + wrong views
};

// `counters`: the store's requests served so far and its CPU time in ms (server side).
LeaseLoad lease_load(const std::function<std::shared_ptr<Store>()>& connect, int members, double seconds,
                     const std::function<std::pair<double, double>()>& counters);

}  // namespace edl::bench
