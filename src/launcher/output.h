// OutputSink: edl-run's own stdout / stderr behind a bounded queue drained by a writer thread, so
// that a slow consumer of edl-run's output (a full terminal, a stalled pipe) never blocks edl-run's
// loop — and therefore never the workers, whose pipes edl-run keeps reading.
//
// Worker lines are droppable: beyond `capacity` queued bytes they are dropped and counted (the
// first drop is announced once on stderr, the totals at exit). edl-run's own event-log lines are
// never dropped (they are few). Each line is written with one write(2), so lines never interleave.
// Thread-safety: every method from any thread. The two sinks live for the whole process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace edl::launcher {

class OutputSink {
 public:
  OutputSink(int fd, size_t capacity);
  // Queues one line (which must end in '\n').
  void write(std::string line, bool droppable);
  // Waits until everything queued has been written, at most `timeout`; false if not.
  bool flush(std::chrono::milliseconds timeout);
  uint64_t dropped_lines() const;
  uint64_t dropped_bytes() const;

 private:
  void writer_loop();

  const int fd_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  uint64_t dropped_lines_ = 0, dropped_bytes_ = 0;
};

// The sinks of fd 1 and fd 2 (created on first use, 8 MiB of queued worker output each).
OutputSink& output_sink(int fd);

// One line of edl-run's own log: "edl-run: <UTC time, ISO 8601 with microseconds> <text>\n" (the same
// clock and format as the library's log lines, so the logs of several hosts line up).
std::string event_line(const std::string& text);

// Flushes both sinks (at most `timeout` each) after logging how much worker output was dropped.
void finish_output(std::chrono::milliseconds timeout);

}  // namespace edl::launcher
