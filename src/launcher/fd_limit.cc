#include "launcher/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <string>

#include "edl/error.h"

namespace edl::launcher {
namespace {

constexpr size_t kBase = 64;              // the listener, epoll, the store watcher, metrics, logs
constexpr size_t kPerStoreWorker = 2;     // the embedded store: a worker's client and its beat connection
constexpr size_t kPerLocalWorker = 2;     // its stdout and stderr pipes
constexpr rlim_t kCeiling = 1 << 20;      // when the hard limit is unlimited

}  // namespace

size_t descriptors_needed(int local, int job, bool embedded_store) {
  size_t need = kBase + kPerLocalWorker * static_cast<size_t>(std::max(local, 0));
  if (embedded_store) need += kPerStoreWorker * static_cast<size_t>(std::max(job, 0));
  return need;
}

size_t ensure_descriptors(size_t needed, int workers) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return needed;  // unknown: let the job try
  const rlim_t hard = rl.rlim_max == RLIM_INFINITY ? kCeiling : rl.rlim_max;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < hard) {
    rlimit raised = rl;
    raised.rlim_cur = hard;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const size_t soft = rl.rlim_cur == RLIM_INFINITY ? static_cast<size_t>(kCeiling) : static_cast<size_t>(rl.rlim_cur);
  if (soft >= needed) return soft;
  throw JobError("a job of " + std::to_string(workers) + " workers needs about " + std::to_string(needed) +
                 " open files in edl-run (room for 2 embedded-store connections per worker, edl-run 2 output "
                 "pipes per local worker) but RLIMIT_NOFILE allows " + std::to_string(soft) +
                 " (hard limit " + (rl.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_max)) +
                 "): raise the hard limit (ulimit -Hn as root, LimitNOFILE= in a systemd unit, nofile in "
                 "/etc/security/limits.conf) or run fewer workers");
}

}  // namespace edl::launcher
