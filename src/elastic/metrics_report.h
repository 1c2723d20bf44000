// WorkerReport: what one worker tells its edl-run about itself — the wire format of the metrics
// channel (docs/observability.md, "Metrics" / "The reporting channel").
//
// The channel: edl-run binds a Unix datagram socket in the abstract namespace and hands its name to
// every worker as EDL_METRICS_ADDR ("@edl-metrics-<pid>-<random>"). A worker's reporter thread
// (src/elastic/worker_metrics.h) sends one WorkerReport datagram every EDL_METRICS_INTERVAL_MS and at
// once when its phase changes, with MSG_DONTWAIT: a full socket drops the report, nothing ever
// blocks, and the training thread only updates counters under a short mutex. Every field is
// cumulative or a current value, so a lost datagram loses nothing but freshness.
//
// Adding a field: append it at the end of WorkerReport (never reorder or resize earlier fields) and
// give it a zero default. `size` carries the sender's sizeof(WorkerReport): decode() zero-fills the
// fields an older sender did not have and ignores trailing ones of a newer sender.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace edl::metrics {

// What a worker is doing now. Order matters: JobMetrics ranks phases by how much they hold the job up.
enum class Phase : uint8_t {
  kStarting = 0,    // init() before the first rendezvous
  kRendezvous = 1,  // first join, or a planned membership change (join / graceful leave)
  kSync = 2,        // state broadcast after a rendezvous
  kTraining = 3,    // inside the user's function, between batch boundaries
  kRecovery = 4,    // after a failure until training resumes (its rendezvous and sync included)
  kDone = 5,        // the training function returned (or the worker left)
};
constexpr int kPhases = 6;
const char* phase_name(Phase p);

constexpr uint32_t kReportMagic = 0x4d4c4445;  // "EDLM"
constexpr int kRecentRecoveries = 8;

// One recovery of this worker: from the failure it saw to training again in generation `generation`.
struct RecoveryRecord {
  uint64_t generation = 0;      // the generation training resumed in
  double seconds = 0;           // failure seen -> training again
  int64_t steps_replayed = 0;   // steps rolled back to the last commit (they run again)
};

struct WorkerReport {
  uint32_t magic = kReportMagic;
  uint32_t size = sizeof(WorkerReport);  // the sender's sizeof(WorkerReport)
  char worker_id[64] = {};               // EDL_WORKER_ID (truncated, NUL-terminated)
  int32_t pid = 0;
  uint8_t phase = 0;                     // Phase
  uint8_t reserved[3] = {};
  uint64_t seq = 0;                      // reports sent by this worker so far
  // Membership.
  uint64_t generation = 0;
  int32_t rank = -1;
  int32_t world_size = 0;
  // Progress (cumulative since the worker started).
  int64_t step = 0;                      // State::step now (goes back when a failure rolls it back)
  uint64_t steps = 0;                    // batch boundaries passed, replays included
  uint64_t samples = 0;                  // samples processed (steps x samples per batch), replays included
  uint64_t samples_committed = 0;        // samples of committed steps that were never rolled back
  uint64_t steps_replayed = 0;           // steps rolled back by failures (run again)
  uint64_t timed_steps = 0;              // steps with a measured duration (batch end to batch end)
  double step_seconds = 0;               // sum of those durations
  double compute_seconds = 0;            // the same minus time blocked waiting for collectives
  // Communication and control plane.
  uint64_t allreduce_bytes = 0;          // payload bytes of allreduces run by this worker's engines
  double allreduce_seconds = 0;          // time those allreduces took on the wire
  uint64_t store_ops = 0;                // non-blocking store requests (get/set/add/cas/del/keys/lease)
  double store_op_seconds = 0;           // their summed latency
  double phase_seconds[kPhases] = {};    // time spent in each Phase
  // Recoveries: the count and the newest kRecentRecoveries (oldest first).
  uint32_t recoveries = 0;
  uint32_t reserved2 = 0;
  RecoveryRecord recent[kRecentRecoveries] = {};
  // New fields go here.
};

// Serializes (the struct is trivially copyable; both ends run the same architecture).
inline std::string encode(const WorkerReport& r) {
  return std::string(reinterpret_cast<const char*>(&r), sizeof(r));
}

// Parses a datagram; false when it is not a report (wrong magic, shorter than the first version).
inline bool decode(const void* data, size_t n, WorkerReport* out) {
  constexpr size_t kFirstVersion = offsetof(WorkerReport, recent) + sizeof(WorkerReport::recent);
  WorkerReport r;
  if (n < kFirstVersion) return false;
  std::memcpy(&r, data, n < sizeof(r) ? n : sizeof(r));
  if (r.magic != kReportMagic || r.size < kFirstVersion) return false;
  if (n < sizeof(r)) std::memset(reinterpret_cast<char*>(&r) + n, 0, sizeof(r) - n);
  r.worker_id[sizeof(r.worker_id) - 1] = '\0';
  if (r.phase >= kPhases) r.phase = static_cast<uint8_t>(Phase::kStarting);
  *out = r;
  return true;
}

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kStarting: return "starting";
    case Phase::kRendezvous: return "rendezvous";
    case Phase::kSync: return "sync";
    case Phase::kTraining: return "training";
    case Phase::kRecovery: return "recovery";
    case Phase::kDone: return "done";
  }
  return "unknown";
}

}  // namespace edl::metrics
