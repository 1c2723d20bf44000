// The descriptor budget of edl-run (docs/launcher.md, "Open files"). The embedded store holds two
// connections per worker of the job (the worker's client and its beat thread's: docs/elastic.md),
// and edl-run holds two output pipes per local worker. ensure_descriptors() raises the soft
// RLIMIT_NOFILE to the hard limit, which the workers inherit; a hard limit below what the job needs
// is a JobError naming RLIMIT_NOFILE before any worker starts — never a store that has to shed
// connections and workers that wait for it until their connect timeout.
//
// Thread-safety: call from edl-run's main thread before it starts workers.
#pragma once

#include <cstddef>

namespace edl::launcher {

// Descriptors edl-run needs for `local` workers on this host out of `job` workers in all, with the
// store embedded (it then serves every worker of the job) or not.
size_t descriptors_needed(int local, int job, bool embedded_store);

// Raises the soft RLIMIT_NOFILE to the hard limit; throws JobError naming RLIMIT_NOFILE, `needed`
// and the limit when the hard limit is below `needed` (`workers`: the job size, for the message).
// Returns the soft limit now in force.
size_t ensure_descriptors(size_t needed, int workers);

}  // namespace edl::launcher
