// CPU binding of edl-run's workers (`--bind-to`), like Open MPI's --bind-to core.
//
// Each local worker slot gets its own contiguous share of the CPUs edl-run may use: with S slots
// and C allowed CPUs, slot s is bound to CPUs [s*k, (s+1)*k) of that list, k = C / S. Why: a
// collective's threads sleep and wake many times per step (the engine's rounds, the transport's
// waits), and the kernel places a woken thread next to the thread that woke it, so two workers'
// communication threads end up stacked on one CPU while another idles until load balancing moves
// them (milliseconds). Bound workers keep to their own CPUs (docs/launcher.md has the measurements).
//
// Modes: "none" (the default, as torchrun: the kernel places threads), "core" (bind; an error when
// there are more slots than CPUs), "auto" (bind when the slots fit the CPUs, else leave it to the
// kernel). Not the default: a worker that runs more threads than its share of CPUs would be
// confined to that share, and over emulated links (network namespaces on one machine, where the
// kernel's packet processing runs on the workers' CPUs) binding measured slower.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace edl::launcher {

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// The CPUs for local slot `slot` of `slots` under `mode`, chosen from `cpus`; empty = do not bind.
// slots <= 0 means "no fixed number of slots" (elastic without --max-np): never bind. Throws
// InvalidArgument for "core" when slots > cpus.size() and for an unknown mode.
std::vector<int> cpus_for_slot(const std::string& mode, int slot, int slots, const std::vector<int>& cpus);

// "0-3" / "0,2" style list for logs.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace edl::launcher
