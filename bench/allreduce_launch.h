// How allreduce_bench starts its ranks besides --local-ranks (collective_common.h):
//   - run_emulated_ranks: N ranks over H emulated hosts (network namespaces joined by a shaped bridge,
//     testing/netns.h): rank r lives on host r / (N/H) (blocks, as edl-run places them), listens on
//     that host's address and has EDL_HOSTNAME=host<h>; the store listens in the switch namespace.
//   - run_suite: every comparison of docs/collectives.md in one invocation, appending to one JSON
//     file: local ranks 2 and 4 (EDL's shared-memory and TCP rows and Gloo's ring; with Open MPI, the
//     same processes under mpirun with the vader and with the tcp byte-transfer layer, giving mpi_shm /
//     mpi_tcp rows beside EDL's), then 2 emulated hosts x 2 ranks on a 1 Gbit/s link (edl_hier vs the
//     flat edl_tcp), when root.
// Thread-safety: main-thread helpers.
#pragma once

#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "edl/store_server.h"
#include "testing/netns.h"
#include "testing/process.h"

namespace edl::bench {

inline std::string self_exe() {
  char buf[PATH_MAX] = {0};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// argv without the flags in `drop` (each with its value).
inline std::vector<std::string> args_without(int argc, char** argv, const std::vector<std::string>& drop) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool skip = false;
    for (const auto& d : drop) {
      if (a == d) {
        skip = true;
        ++i;
      } else if (a.rfind(d + "=", 0) == 0) {
        skip = true;
      }
    }
    if (!skip) out.push_back(a);
  }
  return out;
}

inline int wait_all(const std::vector<pid_t>& pids) {
  int result = 0;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    pid_t p = wait(&status);
    if (p < 0) break;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      for (pid_t q : pids)
        if (q != p) kill(q, SIGTERM);
    }
  }
  return result;
}

inline int run_emulated_ranks(int n, int hosts, const std::string& link, int argc, char** argv) {
  using edl::testing::NetnsCluster;
  const std::string why = NetnsCluster::unsupported_reason();
  if (!why.empty()) {
    std::cout << "allreduce_bench: emulated hosts skipped: " << why << std::endl;
    return 0;
  }
  if (hosts < 1 || n % hosts != 0) {
    std::cerr << "allreduce_bench: --local-ranks " << n << " is not a multiple of --emulated-hosts " << hosts << std::endl;
    return 2;
  }
  NetnsCluster::remove_stale();
  NetnsCluster cluster(hosts, edl::testing::parse_link(link));
  std::unique_ptr<StoreServer> server;
  std::thread t([&] {  // only this thread enters the switch namespace; the listening socket stays there
    NetnsCluster::enter(cluster.switch_ns());
    StoreServerOptions so;
    so.bind_address = NetnsCluster::switch_address();
    server = std::make_unique<StoreServer>(so);
  });
  t.join();
  std::vector<std::string> args = args_without(argc, argv, {"--local-ranks", "--emulated-hosts"});
  args[0] = self_exe();
  args.push_back("--link-label=" + cluster.effective_label());
  std::vector<pid_t> pids;
  const int per_host = n / hosts;
  for (int r = 0; r < n; ++r) {
    const int h = r / per_host;
    std::vector<std::string> argv_r = cluster.exec_prefix(h);
    argv_r.insert(argv_r.end(), args.begin(), args.end());
    edl::testing::SpawnOptions so;
    so.own_group = false;
    so.env = {"EDL_STORE=" + server->url(),          "EDL_RANK=" + std::to_string(r),
              "EDL_SIZE=" + std::to_string(n),        "EDL_LOCAL_RANK=" + std::to_string(r % per_host),
              "EDL_LOCAL_SIZE=" + std::to_string(per_host), "EDL_HOSTNAME=host" + std::to_string(h),
              "EDL_BIND_ADDR=" + cluster.address(h),  "EDL_EMULATED_HOSTS=" + std::to_string(hosts)};
    pids.push_back(edl::testing::spawn(argv_r, so));
  }
  return wait_all(pids);
}

// One configuration of the suite: argv to run (its output is shown as it comes).
inline int run_config(const std::vector<std::string>& argv_c, const std::vector<std::string>& env = {}) {
  std::cout << "== allreduce_bench suite:";
  for (const auto& a : argv_c) std::cout << " " << a;
  std::cout << std::endl;
  edl::testing::SpawnOptions so;
  so.own_group = false;
  so.env = env;
  pid_t pid = edl::testing::spawn(argv_c, so);
  return wait_all({pid});
}

inline bool have_program(const std::string& name) {
  return edl::testing::run_command({"sh", "-c", "command -v " + name + " >/dev/null"}).status == 0;
}

// The suite (see the header comment), `repeats` times over (rows carry "repeat": k, so the doc
// reports medians and spreads). `json` is the --json path; `with_mpi` whether this binary was built
// with -DEDL_BENCH_WITH_MPI=ON; `extra` flags passed to every configuration (sizes, iterations).
inline int run_suite(const std::string& json, bool with_mpi, const std::vector<std::string>& extra, int repeats) {
  const std::string exe = self_exe();
  int failures = 0;
  const bool mpi = with_mpi && have_program("mpirun");
  if (!mpi) std::cout << "allreduce_bench suite: no Open MPI rows (build with -DEDL_BENCH_WITH_MPI=ON, install openmpi-bin)"
                      << std::endl;
  bool sized = false;
  for (const auto& e : extra) sized |= e.rfind("--max-bytes", 0) == 0;
  for (int k = 0; k < repeats; ++k) {
    std::vector<std::string> common = {"--json", json, "--repeat-index=" + std::to_string(k)};
    common.insert(common.end(), extra.begin(), extra.end());
    for (int n : {2, 4}) {
      std::vector<std::string> sizes = common;
      if (!sized) sizes.push_back("--max-bytes=67108864");  // the targets are over 4 KiB - 64 MiB
      if (mpi) {
        // The same processes run EDL's and Open MPI's rows, interleaved per iteration: EDL's
        // shared-memory rows beside Open MPI's vader BTL, EDL's TCP rows beside its tcp BTL.
        for (const char* btl : {"self,vader", "self,tcp"}) {
          const bool tcp = std::string(btl) == "self,tcp";
          // pml ob1: the byte-transfer layer named is what moves the data (not UCX, when installed).
          std::vector<std::string> c = {"mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", std::to_string(n),
                                        "--mca", "pml", "ob1", "--mca", "btl", btl};
          // More ranks than cores: Open MPI then yields while it polls (as EDL does); else it busy-polls.
          if (n > static_cast<int>(std::thread::hardware_concurrency())) c.insert(c.begin() + 1, "--oversubscribe");
          if (tcp) c.insert(c.end(), {"--mca", "btl_tcp_if_include", "lo"});
          c.insert(c.end(), {exe, "--impl", tcp ? "edl_tcp,mpi,gloo_ring" : "edl_shm,mpi"});
          c.insert(c.end(), sizes.begin(), sizes.end());
          failures += run_config(c) != 0;
        }
      } else {
        std::vector<std::string> c = {exe, "--local-ranks", std::to_string(n), "--impl", "edl_shm,edl_tcp,gloo_ring"};
        c.insert(c.end(), sizes.begin(), sizes.end());
        failures += run_config(c) != 0;
      }
    }
    // Two emulated hosts x 2 ranks on a 1 Gbit/s link: hierarchical vs the flat TCP allreduce.
    std::vector<std::string> c = {exe, "--local-ranks", "4", "--emulated-hosts", "2", "--link", "1gbit",
                                  "--impl", "edl_tcp,edl_hier"};
    c.insert(c.end(), common.begin(), common.end());
    if (!sized) c.insert(c.end(), {"--min-bytes=1048576", "--max-bytes=67108864"});  // bandwidth-bound sizes only
    failures += run_config(c) != 0;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace edl::bench
