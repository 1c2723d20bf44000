// testing/process and testing/deps: exit statuses, logs, environment, working directory, process
// groups, deadlines, and the EDL_REQUIRE_DEPS policy.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "testing/deps.h"
#include "testing/process.h"

namespace fs = std::filesystem;
using edl::testing::Process;
using edl::testing::SpawnOptions;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/edl_testing_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Sets or unsets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  void set(const char* value) {
    if (value) {
      setenv(name_.c_str(), value, 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  std::string name_, old_;
  bool had_ = false;
};

// False once pid is gone or a zombie (its parent died; init may reap it later).
bool running(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("Process: exit status, log, environment and working directory", "[testing][process]") {
  TempDir dir;
  SpawnOptions o;
  o.log = dir.path + "/log";
  o.env = {"EDL_TESTING_PROBE=42", "HOME=/nonexistent-home"};
  o.cwd = dir.path;
  Process p({"sh", "-c", "echo out $EDL_TESTING_PROBE $HOME; echo err >&2; pwd; exit 7"}, o);
  CHECK(p.wait(std::chrono::seconds(30)) == 7);
  const std::string log = slurp(dir.path + "/log");
  CHECK(log.find("out 42 /nonexistent-home") != std::string::npos);
  CHECK(log.find("err") != std::string::npos);
  CHECK(log.find(fs::canonical(dir.path).string()) != std::string::npos);
}

TEST_CASE("Process: separate stdout and stderr files", "[testing][process]") {
  TempDir dir;
  SpawnOptions o;
  o.stdout_path = dir.path + "/out";
  o.stderr_path = dir.path + "/err";
  Process p({"sh", "-c", "echo to-out; echo to-err >&2"}, o);
  REQUIRE(p.wait(std::chrono::seconds(30)) == 0);
  CHECK(slurp(dir.path + "/out") == "to-out\n");
  CHECK(slurp(dir.path + "/err") == "to-err\n");
}

TEST_CASE("Process: a missing program exits 127 naming it", "[testing][process]") {
  TempDir dir;
  SpawnOptions o;
  o.log = dir.path + "/log";
  Process p({"/nonexistent/edl-no-such-program-xyz"}, o);
  CHECK(p.wait(std::chrono::seconds(30)) == 127);
  CHECK(slurp(dir.path + "/log").find("edl-no-such-program-xyz") != std::string::npos);
}

TEST_CASE("Process: wait times out, stop ends the whole process group", "[testing][process]") {
  TempDir dir;
  SpawnOptions o;
  o.log = dir.path + "/log";
  // The child starts a grandchild in its group and records its pid; stop() must end both.
  Process p({"sh", "-c", "sleep 300 & echo $! > " + dir.path + "/grandchild; wait"}, o);
  CHECK(p.wait(std::chrono::milliseconds(100)) == -1);
  CHECK(p.poll() == -1);
  pid_t grandchild = 0;
  for (int i = 0; i < 600 && grandchild <= 0; ++i) {
    std::ifstream(dir.path + "/grandchild") >> grandchild;
    if (grandchild <= 0) usleep(50000);
  }
  REQUIRE(grandchild > 0);
  const int status = p.stop(std::chrono::seconds(5));
  CHECK(status == 128 + SIGTERM);
  // The grandchild got the group's signals too (re-parented, it may stay a zombie for a while).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !running(grandchild);
    if (!gone) usleep(50000);
  }
  CHECK(gone);
}

TEST_CASE("run_command returns status and output, find_program searches PATH", "[testing][process]") {
  auto r = edl::testing::run_command({"sh", "-c", "echo hello; exit 3"});
  CHECK(r.status == 3);
  CHECK(r.output == "hello\n");
  auto missing = edl::testing::run_command({"/nonexistent/edl-no-such-program-xyz"});
  CHECK(missing.status == -1);
  CHECK(missing.output.find("edl-no-such-program-xyz") != std::string::npos);
  CHECK_FALSE(edl::testing::find_program("sh").empty());
  CHECK(edl::testing::find_program("/nonexistent/edl-no-such-program-xyz").empty());
}

TEST_CASE("external programs come from testing/deps_programs.txt: an unlisted one is refused", "[testing][deps]") {
  CHECK(edl::testing::program_package("etcdctl") == "etcd-client");
  CHECK(edl::testing::program_package("/usr/bin/etcd") == "etcd-server");
  CHECK(edl::testing::program_package("promtool") == "prometheus");
  CHECK(edl::testing::program_package("edl-unlisted-tool").empty());  // deps: not a program
  const std::string unlisted = "edl-unlisted-tool";  // built at run time: no program of the tree
  CHECK_THROWS_AS(edl::testing::find_program(unlisted), std::logic_error);
  CHECK_THROWS_AS(edl::testing::run_command({unlisted, "--version"}), std::logic_error);
  CHECK_THROWS_AS(edl::testing::spawn({"/usr/bin/" + unlisted}), std::logic_error);
  try {
    edl::testing::find_program(unlisted);
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("testing/deps_programs.txt") != std::string::npos);
  }
  // Programs of the build tree (any other path) are not external programs.
  CHECK_NOTHROW(edl::testing::find_program("/nonexistent/build/tool"));
}

TEST_CASE("EDL_REQUIRE_DEPS decides whether a missing dependency fails", "[testing][deps]") {
  {
    ScopedEnv e("EDL_REQUIRE_DEPS", nullptr);
    CHECK_FALSE(edl::testing::deps_required());
    CHECK(edl::testing::missing_dep_message("redis-server", "not installed").find("skipped") != std::string::npos);
  }
  {
    ScopedEnv e("EDL_REQUIRE_DEPS", "0");
    CHECK_FALSE(edl::testing::deps_required());
  }
  {
    ScopedEnv e("EDL_REQUIRE_DEPS", "1");
    CHECK(edl::testing::deps_required());
    const std::string m = edl::testing::missing_dep_message("redis-server", "not installed");
    CHECK(m.find("redis-server is missing: not installed") != std::string::npos);
    CHECK(m.find("fails") != std::string::npos);
  }
}

TEST_CASE("Process::forked runs a function in a child and reports its result", "[testing][process]") {
  Process ok = Process::forked([] { return 5; });
  CHECK(ok.wait(std::chrono::seconds(30)) == 5);
  Process thrower = Process::forked([]() -> int { throw std::runtime_error("boom"); });
  CHECK(thrower.wait(std::chrono::seconds(30)) == 3);
  Process sleeper = Process::forked([] {
    sleep(300);
    return 0;
  });
  CHECK(sleeper.poll() == -1);
  CHECK(sleeper.stop(std::chrono::seconds(5)) == 128 + SIGTERM);
}
