// The descriptor limit of the mesh (fd_limit.h).
#include "collective/fd_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <mutex>

#include "common/host_port.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

std::string limits_text() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  auto text = [](rlim_t v) { return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v); };
  return "RLIMIT_NOFILE soft " + text(rl.rlim_cur) + ", hard " + text(rl.rlim_max);
}

int open_descriptors() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 0;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

}  // namespace

long raise_descriptor_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    const rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    const bool raised = setrlimit(RLIMIT_NOFILE, &rl) == 0;
    const int err = errno;
    static std::once_flag logged;
    std::call_once(logged, [&] {
      if (raised) EDL_LOG(3) << "raised RLIMIT_NOFILE's soft limit from " << before << " to " << rl.rlim_max;
      else EDL_LOG(2) << "could not raise RLIMIT_NOFILE's soft limit from " << before << ": " << errno_text(err);
    });
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(rl.rlim_cur);
}

void ensure_descriptors(int needed, const std::string& what) {
  const long soft = raise_descriptor_limit();
  if (soft < 0) return;
  const int open = open_descriptors();
  if (open + needed <= soft) return;
  throw InvalidArgument(what + " needs " + std::to_string(needed) + " more file descriptors, but " +
                        std::to_string(open) + " are open and " + limits_text() +
                        " allows " + std::to_string(soft) + ": raise the limit (ulimit -n, or the hard limit in "
                        "/etc/security/limits.conf or the service's LimitNOFILE)");
}

void throw_descriptor_limit(const std::string& what, int err) {
  throw InvalidArgument(what + ": out of file descriptors (" + errno_text(err) + "; " + std::to_string(open_descriptors()) +
                        " open, " + limits_text() + "): raise the limit (ulimit -n)");
}

}  // namespace edl::collective
