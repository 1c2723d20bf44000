#include "launcher/output.h"

#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/log_time.h"
#include "launcher/launcher.h"

namespace edl::launcher {
namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // our own stdout is gone: drop output rather than die
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

OutputSink::OutputSink(int fd, size_t capacity) : fd_(fd), capacity_(capacity) {
  std::thread([this] { writer_loop(); }).detach();  // the sink is never destroyed
}

void OutputSink::write(std::string line, bool droppable) {
  std::string note;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!droppable || queued_bytes_ + line.size() <= capacity_) {
      queued_bytes_ += line.size();
      queue_.push_back(std::move(line));
      cv_.notify_one();
      return;
    }
    if (dropped_lines_++ == 0)
      note = event_line("warning: output to fd " + std::to_string(fd_) +
                        " is slower than the workers write; dropping worker lines while " +
                        std::to_string(capacity_ >> 20) + " MiB are queued (counted at exit)");
    dropped_bytes_ += line.size();
  }
  // Announce the first drop on stderr (on the stalled sink itself when that is stderr).
  if (!note.empty()) output_sink(fd_ == 1 ? 2 : fd_).write(std::move(note), /*droppable=*/false);
}

void OutputSink::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !queue_.empty(); });
    std::deque<std::string> batch;
    batch.swap(queue_);
    writing_ = true;
    lock.unlock();
    size_t done = 0;
    for (const auto& line : batch) {
      write_all(fd_, line.data(), line.size());
      done += line.size();
    }
    lock.lock();
    queued_bytes_ -= done;
    writing_ = false;
    idle_cv_.notify_all();
  }
}

bool OutputSink::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !writing_; });
}

uint64_t OutputSink::dropped_lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_lines_;
}

uint64_t OutputSink::dropped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_bytes_;
}

std::string event_line(const std::string& text) { return "edl-run: " + log::utc_time() + " " + text + "\n"; }

void log_event(const std::string& text) { output_sink(2).write(event_line(text), /*droppable=*/false); }

OutputSink& output_sink(int fd) {
  static OutputSink* out = new OutputSink(1, 8u << 20);
  static OutputSink* err = new OutputSink(2, 8u << 20);
  return fd == 1 ? *out : *err;
}

void finish_output(std::chrono::milliseconds timeout) {
  for (int fd : {1, 2}) {
    OutputSink& s = output_sink(fd);
    if (s.dropped_lines() > 0)
      log_event("event=output-dropped fd=" + std::to_string(fd) + " lines=" + std::to_string(s.dropped_lines()) +
                " bytes=" + std::to_string(s.dropped_bytes()));
  }
  output_sink(1).flush(timeout);
  output_sink(2).flush(timeout);
}

}  // namespace edl::launcher
