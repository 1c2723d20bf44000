// The time stamp of EDL's log lines: UTC, ISO 8601 with microseconds ("2026-11-25T10:00:00.123456Z"),
// so that the logs of several hosts and edl-run's events line up. The library's lines read
// `[edl W 2026-11-25T10:00:00.123456Z pid 7574] message` (logging.h), edl-run's
// `edl-run: 2026-11-25T10:00:00.123456Z t=0.950 event=...` (docs/launcher.md).
// Thread-safety: a pure function (gmtime_r).
#pragma once

#include <chrono>
#include <string>

namespace edl::log {

// `t` as UTC ISO 8601 with microseconds and a Z.
std::string utc_time(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

}  // namespace edl::log
