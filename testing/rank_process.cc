#include "testing/rank_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace edl::testing {

Process fork_rank(int rank, const std::string& log, const std::string& tag, const std::vector<std::string>& env,
                  const std::function<int()>& fn) {
  SpawnOptions o;
  o.own_group = false;  // signals reach this rank alone
  return Process::forked(
      [rank, log, tag, env, fn] {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          ::dup2(fd, 1);
          ::dup2(fd, 2);
        }
        const std::string host_id = tag + "-" + std::to_string(getppid()) + "-" + std::to_string(rank);
        setenv("NCCL_HOSTID", host_id.c_str(), 1);
        if (!getenv("NCCL_SOCKET_IFNAME")) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
        for (const auto& kv : env) putenv(strdup(kv.c_str()));
        try {
          return fn();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d failed: %s\n", rank, e.what());
          return 1;
        }
      },
      o);
}

}  // namespace edl::testing
