// An elastic job on one GPU under edl-run --one-gpu-test (label gpu): 3 workers whose parameters
// live in device memory; one is killed with SIGKILL mid-training, edl-run starts a replacement
// that joins; every worker that finishes holds bitwise the same parameters.
// The programs come from the build (compiled-in paths) or, in a bundle (scripts/gpu-bundle.sh),
// from EDL_TEST_EDL_RUN and EDL_TEST_GPU_WORKER.
#include <catch2/catch.hpp>

#include <set>

#include "gpu_harness.h"

using namespace edl::test::gpu;

namespace {

std::string program(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v && *v ? v : built;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("gpu: an elastic job under edl-run --one-gpu-test survives kill -9 and a join, parameters bitwise equal",
          "[gpu][elastic]") {
  EDL_GPU_TEST_OR_SKIP();
  const std::string dir = edl::test::make_temp_dir();
  const std::string edl_run = program("EDL_TEST_EDL_RUN", EDL_TEST_EDL_RUN_BUILT);
  const std::string worker = program("EDL_TEST_GPU_WORKER", EDL_TEST_GPU_WORKER_BUILT);
  edl::testing::SpawnOptions o;
  o.stdout_path = dir + "/out";
  o.stderr_path = dir + "/err";
  o.env = {"EDL_TIMEOUT_MS=20000", "NCCL_SOCKET_IFNAME=" + std::string(getenv("NCCL_SOCKET_IFNAME") ? getenv("NCCL_SOCKET_IFNAME") : "lo")};
  edl::testing::Process run({edl_run, "--min-np", "2", "--max-np", "3", "-np", "3", "--one-gpu-test", "--pid-file",
                             dir + "/pids", "--grace-period", "5", "--reset-limit", "10", worker, "120", "40"},
                            o);
  auto generations = [&] {
    size_t n = 0, at = 0;
    const std::string err = read_file(dir + "/err");
    while ((at = err.find("event=generation", at)) != std::string::npos) ++n, ++at;
    return n;
  };
  const auto start = Clock::now();
  while (generations() < 1 && Clock::now() - start < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a few steps into the first generation
  pid_t victim = -1;
  for (const auto& line : lines(read_file(dir + "/pids"))) {
    int slot = -1, pid = -1;
    if (std::sscanf(line.c_str(), "%d %d", &slot, &pid) == 2 && slot == 1) victim = pid;
  }
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  const int status = run.wait(std::chrono::seconds(240));
  const std::string out = read_file(dir + "/out"), err = read_file(dir + "/err");
  INFO("edl-run stderr:\n" << err << "\nstdout:\n" << out);
  CHECK(status == 0);
  CHECK(err.find("event=failed slot=1") != std::string::npos);
  CHECK(err.find(":1.1 pid=") != std::string::npos);  // slot 1 restarted: the replacement joined
  std::set<std::string> finals;
  size_t done = 0;
  for (const auto& line : lines(out)) {
    const auto p = line.find("] done ");
    if (p == std::string::npos) continue;
    finals.insert(line.substr(p + 2));
    ++done;
  }
  CHECK(done >= 2);
  CHECK(finals.size() == 1);
  CHECK(out.find("] done 120 ") != std::string::npos);
}
