// Host discovery for edl-run's elastic mode: runs --host-discovery-script and parses "host:slots"
// lines (blank lines and '#' comments ignored; "host" alone means 1 slot).
// Thread-safety: pure functions (run_discovery forks a child and waits for it; edl-run calls it
// from a helper thread).
#pragma once

#include <atomic>
#include <map>
#include <string>

namespace edl::launcher {

struct DiscoveryResult {
  bool ok = false;
  std::string error;                 // why the run failed (non-zero exit, timeout, bad line)
  std::map<std::string, int> hosts;  // host -> slots
};

// Parses the script's output; a malformed line makes the whole result not ok (naming the line).
DiscoveryResult parse_discovery(const std::string& output);

// Runs the script (through /bin/sh -c) with a deadline; kills it on timeout, or within ~100 ms of
// *cancel becoming true (then the result is not ok: "cancelled").
DiscoveryResult run_discovery(const std::string& script, int timeout_ms,
                              const std::atomic<bool>* cancel = nullptr);

// Slots of this host: entries named `hostname`, "localhost" or "127.0.0.1".
int local_slots(const DiscoveryResult& d, const std::string& hostname);

}  // namespace edl::launcher
