// Blocked time: how long the calling thread has waited in Handle::wait() for collectives to finish
// (every blocking collective of the public API waits on a handle too). The elastic runtime reads it
// at batch boundaries to split a step into its compute part and the time spent waiting for peers
// (straggler detection, docs/observability.md). Only waits on unfinished handles count.
// Thread-safety: a thread-local counter; each thread sees its own total.
#pragma once

#include <cstdint>

namespace edl::collective {

// Nanoseconds the calling thread has spent blocked in Handle::wait() since it started.
uint64_t thread_blocked_ns();

}  // namespace edl::collective
