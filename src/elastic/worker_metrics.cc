#include "elastic/worker_metrics.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collective/engine.h"
#include "collective/runtime_state.h"

namespace edl::metrics {

using Clock = std::chrono::steady_clock;

WorkerMetrics& WorkerMetrics::instance() {
  static WorkerMetrics* m = new WorkerMetrics();  // never destroyed: hooks may run during exit
  return *m;
}

WorkerMetrics::~WorkerMetrics() { stop(); }

void WorkerMetrics::start(const Config& config) {
  if (config.metrics_addr.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  std::strncpy(r_.worker_id, config.worker_id.c_str(), sizeof(r_.worker_id) - 1);
  r_.pid = static_cast<int32_t>(::getpid());
  stop_ = false;
  thread_ = std::thread(&WorkerMetrics::loop, this, config.metrics_addr,
                        std::chrono::milliseconds(config.metrics_interval_ms));
}

void WorkerMetrics::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    account_phase_locked(Clock::now());
    phase_ = Phase::kDone;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkerMetrics::account_phase_locked(Clock::time_point now) {
  r_.phase_seconds[static_cast<int>(phase_)] += std::chrono::duration<double>(now - phase_since_).count();
  phase_since_ = now;
}

void WorkerMetrics::set_phase(Phase p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (p == phase_) return;
    account_phase_locked(Clock::now());
    phase_ = p;
    if (p != Phase::kTraining) last_batch_ = {};  // the next step time starts at the next batch
    send_now_ = true;
  }
  cv_.notify_all();
}

Phase WorkerMetrics::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}

void WorkerMetrics::set_generation(uint64_t generation, int rank, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  r_.generation = generation;
  r_.rank = rank;
  r_.world_size = size;
}

void WorkerMetrics::batch_end(int64_t step) {
  const auto now = Clock::now();
  const uint64_t wait_ns = collective::handle_wait_ns_total();
  std::lock_guard<std::mutex> lock(mu_);
  r_.step = step;
  r_.steps += 1;
  r_.samples += static_cast<uint64_t>(samples_per_batch_);
  samples_progress_ += static_cast<uint64_t>(samples_per_batch_);
  if (last_batch_ != Clock::time_point{}) {
    const double dt = std::chrono::duration<double>(now - last_batch_).count();
    const double waited = static_cast<double>(wait_ns - std::min(wait_ns, wait_ns_at_batch_)) * 1e-9;
    r_.timed_steps += 1;
    r_.step_seconds += dt;
    r_.compute_seconds += std::max(0.0, dt - waited);
  }
  last_batch_ = now;
  wait_ns_at_batch_ = wait_ns;
}

void WorkerMetrics::committed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool first = r_.samples_committed == 0;
    r_.samples_committed = std::max(r_.samples_committed, samples_progress_);
    if (!first || r_.samples_committed == 0) return;
    send_now_ = true;  // edl-run learns at once that this worker made progress (its crash-loop rule)
  }
  cv_.notify_all();
}

void WorkerMetrics::rolled_back(int64_t steps, int64_t step_now) {
  std::lock_guard<std::mutex> lock(mu_);
  r_.step = step_now;
  if (steps <= 0) return;
  r_.steps_replayed += static_cast<uint64_t>(steps);
  samples_progress_ = r_.samples_committed;  // back to the last commit
}

void WorkerMetrics::recovered(uint64_t generation, double seconds, int64_t steps_replayed) {
  std::lock_guard<std::mutex> lock(mu_);
  RecoveryRecord rec{generation, seconds, steps_replayed};
  if (r_.recoveries < static_cast<uint32_t>(kRecentRecoveries)) {
    r_.recent[r_.recoveries] = rec;
  } else {
    std::move(r_.recent + 1, r_.recent + kRecentRecoveries, r_.recent);
    r_.recent[kRecentRecoveries - 1] = rec;
  }
  r_.recoveries += 1;
  send_now_ = true;
}

void WorkerMetrics::store_op(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  r_.store_ops += 1;
  r_.store_op_seconds += seconds;
}

void WorkerMetrics::set_samples_per_batch(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_per_batch_ = n > 0 ? n : 1;  // 0: not known, a batch counts as one sample (the default)
}

// Adds the allreduce statistics of the engines of this process (the current one plus the totals
// of those it replaced). Reporter thread only.
void WorkerMetrics::add_engine_stats(WorkerReport* r) {
  std::shared_ptr<collective::Engine> engine;
  try {
    auto gen = detail::Runtime::instance().generation();
    if (gen) engine = gen->engine;
  } catch (const std::exception&) {
    // before init() or after shutdown(): nothing new
  }
  if (engine) {
    const collective::EngineStats s = engine->stats();
    if (engine.get() != engine_.lock().get() || s.allreduce_bytes < engine_bytes_last_) {
      engine_bytes_base_ += engine_bytes_last_;
      engine_us_base_ += engine_us_last_;
      engine_bytes_last_ = 0;
      engine_us_last_ = 0;
      engine_ = engine;
    }
    engine_bytes_last_ = s.allreduce_bytes;
    engine_us_last_ = s.allreduce_us;
  }
  r->allreduce_bytes = engine_bytes_base_ + engine_bytes_last_;
  r->allreduce_seconds = (engine_us_base_ + engine_us_last_) * 1e-6;
}

WorkerReport WorkerMetrics::snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  account_phase_locked(Clock::now());
  WorkerReport r = r_;
  r.phase = static_cast<uint8_t>(phase_);
  r.seq = ++r_.seq;
  return r;
}

// The report's datagram socket is opened for each report and closed right after it: a worker holds
// no descriptor for its metrics between reports (a large job counts every socket of a worker:
// docs/collectives.md, "Sparse mesh").
void WorkerMetrics::loop(std::string addr, std::chrono::milliseconds interval) {
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  // Abstract namespace: "@name" -> "\0name" (no file to clean up; gone with edl-run's socket).
  const size_t n = std::min(addr.size(), sizeof(to.sun_path));
  std::memcpy(to.sun_path, addr.data(), n);
  to.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, interval, [&] { return stop_ || send_now_; });
    const bool last = stop_;
    send_now_ = false;
    lock.unlock();
    WorkerReport r = snapshot();
    add_engine_stats(&r);
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      const std::string bytes = encode(r);
      // Never blocks: a full socket (edl-run busy or gone) drops this report; the next one carries
      // the same cumulative counters.
      (void)::sendto(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&to), len);
      ::close(fd);
    }
    lock.lock();
    if (last) break;
  }
}

}  // namespace edl::metrics
