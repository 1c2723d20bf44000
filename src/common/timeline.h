// Timeline: a Chrome trace-event JSON file of what this process's EDL runtime does — Horovod's
// timeline. Opens in Perfetto (ui.perfetto.dev) and chrome://tracing; see docs/observability.md.
//
// Recorders anywhere in the library (the collective engine, the optimizer, the elastic worker)
// push small fixed-size Events into one process-wide bounded queue; a background writer thread
// formats them as JSON and appends them to the file. When the queue is full an event is dropped
// and counted (never blocks the recording thread); the count goes into the file's metadata.
//
//   Off (the default): recording costs one relaxed atomic load (timeline::on()) and a branch.
//   On: one uncontended mutex and a copy of the event into a preallocated vector.
//
// The file is the JSON array format: "[" then one event per line, each after a ",". stop() (also
// edl::shutdown() and process exit) writes the metadata and closes the array with "]". A process
// that dies keeps every line the writer flushed (at least every Options::flush_period): Perfetto
// and chrome://tracing accept the unterminated array; strict parsers need a "]" appended.
//
// Clocks: ts is microseconds of the steady clock since the timeline module was loaded (about the
// process start), plus the wall clock (Unix microseconds) of that origin, which metadata event
// "edl_timeline" also carries (start_unix_us): monotonic within a process, and the files of
// different workers line up when merged (as well as the hosts' clocks agree).
// Lanes (Chrome "threads"): "elastic", "optimizer", "negotiation", "collectives", then one lane
// per tensor name (events labelled with it), all named by thread_name metadata events.
//
// Thread-safety: every function may be called from any thread. start()/stop() serialise with each
// other and with record(); an event recorded while no timeline runs is ignored. A forked child
// starts without a timeline (the parent's writer stays the parent's); it may start its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "edl/export.h"

namespace edl::timeline {

// The named lanes; kTensor events go to the lane of their label (the tensor name).
enum class Lane : uint8_t { kElastic = 1, kOptimizer = 2, kNegotiation = 3, kCollectives = 4, kTensor = 5 };

struct Arg {
  const char* key = nullptr;  // a string literal (lives for the program)
  int64_t value = 0;
};

// One event: a plain value, copied into the queue. name and arg keys must be string literals.
struct EDL_API Event {
  static constexpr size_t kMaxArgs = 5;
  static constexpr size_t kLabelBytes = 96;  // longer labels (tensor names) are truncated
  int64_t ts_us = 0;
  int64_t dur_us = -1;  // >= 0: a complete event ("X"); -1: an instant event ("i")
  const char* name = "";
  Lane lane = Lane::kTensor;
  uint8_t nargs = 0;
  Arg args[kMaxArgs];
  char label[kLabelBytes] = {0};

  Event() = default;
  Event(Lane l, const char* n) : name(n), lane(l) {}
  Event& arg(const char* key, int64_t value) {
    if (nargs < kMaxArgs) args[nargs++] = Arg{key, value};
    return *this;
  }
  Event& set_label(const std::string& s);
  Event& span(int64_t begin_us, int64_t end_us) {
    ts_us = begin_us;
    dur_us = end_us > begin_us ? end_us - begin_us : 0;
    return *this;
  }
};

struct Options {
  std::string path;                                  // the file (created or truncated)
  std::string variable = "EDL_TIMELINE";             // named in errors about `path`
  size_t capacity = 1u << 16;                        // queued events before drops (~11 MB)
  int64_t pid = 0;                                   // Chrome pid; 0 = this process's id
  std::string process_name;                          // "" = "edl pid <pid>"
  std::chrono::milliseconds flush_period{100};       // longest time an event waits for the writer
};

struct Stats {
  uint64_t recorded = 0;  // accepted into the queue
  uint64_t dropped = 0;   // refused: the queue was full
  uint64_t written = 0;   // written to the file
};

namespace detail {
EDL_API extern std::atomic<bool> g_on;
}

// True while a timeline is being written: guard every recording site with it.
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }

// Starts writing a timeline (stops a running one first). Throws InvalidArgument naming
// options.variable and the path when the file cannot be created.
EDL_API void start(const Options& options);
// Drains the queue, writes the metadata and "]", closes the file. Idempotent.
EDL_API void stop();
// Counters of the running (or last) timeline.
EDL_API Stats stats();

// Queue events (no-op while off). Never blocks on the writer.
EDL_API void record(const Event& e);
EDL_API void record(const Event* events, size_t n);

// Timeline microseconds: steady clock since the origin + the origin's Unix time.
EDL_API int64_t now_us();
EDL_API int64_t to_us(std::chrono::steady_clock::time_point t);
// The steady clock as double seconds since its epoch (the optimizer's clock) -> timeline us.
EDL_API int64_t steady_seconds_to_us(double s);
// A process-wide id for fused collectives (unique within a file).
EDL_API uint64_t next_collective_id();

// Records an instant event ("i") at now when the timeline is on.
inline void instant(Lane lane, const char* name) {
  if (!on()) return;
  Event e(lane, name);
  e.ts_us = now_us();
  record(e);
}

// Records [construction, destruction) as a complete event when the timeline was on at construction.
class Span {
 public:
  Span(Lane lane, const char* name) : on_(on()) {
    if (on_) {
      e_ = Event(lane, name);
      e_.ts_us = now_us();
    }
  }
  ~Span() {
    if (on_) {
      e_.dur_us = now_us() - e_.ts_us;
      record(e_);
    }
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  Span& arg(const char* key, int64_t value) {
    if (on_) e_.arg(key, value);
    return *this;
  }

 private:
  bool on_;
  Event e_;
};

}  // namespace edl::timeline
