// The sparse mesh with ranks as processes (docs/collectives.md, "Sparse mesh"): a rank killed with
// kill -9 is detected by every survivor, not only by its neighbours — while they allreduce, and while
// their engines sit idle (no call in flight: each survivor's communicator is poisoned without it
// asking); a rank killed during the mesh handshakes of 64 ranks makes every survivor fail with
// PeerLostError (retried by the elastic runtime), never AuthError; sockets per process at 64 ranks;
// a descriptor limit too low for the mesh is an InvalidArgument naming RLIMIT_NOFILE, and a worker
// raises its soft limit to the hard one. Ranks are forked children over a FileStore; each writes its
// outcome to a file; the Child guards kill and reap them on every path.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <sys/resource.h>

#include <cmath>

#include "collective/engine.h"
#include "harness.h"

using namespace edl;
using edl::collective::TcpCommunicator;
using Clock = std::chrono::steady_clock;

namespace {

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

CommunicatorOptions process_options() {
  CommunicatorOptions o;
  o.transport = Transport::kTcp;  // Mesh::kAuto: sparse above 4 ranks
  o.timeout = std::chrono::milliseconds(20000);
  o.connect_timeout = std::chrono::milliseconds(30000);
  return o;
}

// Socket descriptors of this process (/proc/self/fd links "socket:[...]").
int process_sockets() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    char target[64] = {0};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof(target) - 1) > 0 && std::string(target).rfind("socket:", 0) == 0) ++n;
  }
  closedir(d);
  return n;
}


// "PeerLostError", "AuthError: ...", ... for the exception in flight.
std::string outcome() {
  try {
    throw;
  } catch (const PeerLostError&) {
    return "PeerLostError";
  } catch (const AuthError& e) {
    return std::string("AuthError: ") + e.what();
  } catch (const TimeoutError& e) {
    return std::string("TimeoutError: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

// n forked ranks running body(rank); each writes its outcome under "out.<rank>" before it exits.
// The ranks' mesh keys, their marks and outcomes all live in one FileStore directory.
struct ProcessRanks {
  std::string dir = test::make_temp_dir();
  test::FileStore files{dir};
  std::vector<std::unique_ptr<test::Child>> kids;
  void start(int n, const std::function<std::string(int)>& body) {
    for (int r = 0; r < n; ++r)
      kids.push_back(std::make_unique<test::Child>([this, r, body] {
        std::string out;
        try {
          out = body(r);
        } catch (...) {
          out = outcome();
        }
        files.set("out." + std::to_string(r), out);
      }));
  }
  std::string out(int r) { return files.get("out." + std::to_string(r)).value_or(""); }
  bool all_wrote(const std::string& name, int n, int except = -1) {
    for (int r = 0; r < n; ++r)
      if (r != except && !files.get(name + "." + std::to_string(r))) return false;
    return true;
  }
  void wait_all(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    for (auto& k : kids) k->wait(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()));
  }
};

}  // namespace

TEST_CASE("sparse mesh, processes: every survivor detects a kill -9 — those in an allreduce and idle engines alike",
          "[collective][sparse][fault]") {
  const int n = 64, victim = 37;  // 37 = 2*18+1: a rank that folds in (64 is a power of two: none) / odd
  for (bool idle : {false, true}) {
    INFO((idle ? "survivors idle in their engines" : "survivors in an allreduce loop"));
    ProcessRanks ranks;
    const std::string dir = ranks.dir;
    ranks.start(n, [&](int rank) -> std::string {
      auto store = std::make_shared<test::FileStore>(dir);
      auto comm = Communicator::create(store, "kill/", rank, n, process_options());
      auto& tcp = static_cast<TcpCommunicator&>(*comm);
      const std::string counts = std::to_string(tcp.socket_count()) + " " + std::to_string(process_sockets());
      collective::Engine engine(comm, collective::EngineOptions{});
      std::vector<float> v(64, 1.0f);
      for (int i = 0; i < 5; ++i)
        engine.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, "v").wait();
      store->set("ready." + std::to_string(rank), "");
      if (idle) {  // no call in flight: wait until the communicator is poisoned by the death's news
        while (!comm->aborted() && !store->get("give_up")) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const int64_t seen = now_ns();
        std::string how = comm->aborted() ? "poisoned" : "never poisoned";
        try {
          engine.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, "v").wait();
          how += " no error";
        } catch (...) {
          how += " " + outcome();
        }
        return how + " " + std::to_string(seen) + " " + counts;
      }
      try {
        for (;;) engine.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, "v").wait();
      } catch (...) {
        const int64_t seen = now_ns();
        return outcome() + " " + std::to_string(seen) + " " + counts;
      }
    });
    const auto start = Clock::now();
    while (!ranks.all_wrote("ready", n) && Clock::now() - start < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(ranks.all_wrote("ready", n));
    if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every engine asleep
    const int64_t killed = now_ns();
    ranks.kids[victim]->signal(SIGKILL);
    const auto wait_start = Clock::now();
    while (!ranks.all_wrote("out", n, victim) && Clock::now() - wait_start < std::chrono::seconds(15))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ranks.files.set("give_up", "");
    ranks.wait_all(std::chrono::seconds(30));
    const int bound = static_cast<int>(std::floor(2 * std::log2(n) + 4));
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      std::istringstream in(ranks.out(r));
      std::string first, second;
      in >> first;
      if (idle) in >> second;  // "poisoned <outcome>"
      int64_t seen = 0;
      int mesh_sockets = -1, sockets = -1;
      in >> seen >> mesh_sockets >> sockets;
      INFO("rank " << r << ": " << ranks.out(r));
      if (idle) CHECK(first == "poisoned");
      CHECK((idle ? second : first) == "PeerLostError");
      const double delay_s = static_cast<double>(seen - killed) * 1e-9;
      CHECK(delay_s < 5.0);  // far below the 20 s deadline: by EOF and the poisoning cascade, not a timeout
      CHECK(mesh_sockets <= bound);
      CHECK(sockets == mesh_sockets);  // the listener is closed; a FileStore holds no socket
    }
  }
}

TEST_CASE("sparse mesh, processes: a rank killed during the handshakes of 64 ranks is a lost peer, never AuthError",
          "[collective][sparse][fault]") {
  const int n = 64, victim = 21;
  ProcessRanks ranks;
  const std::string dir = ranks.dir;
  ranks.start(n, [&](int rank) -> std::string {
    CommunicatorOptions o = process_options();
    o.secret = "job-secret";  // every handshake proves it
    auto store = std::make_shared<test::FileStore>(dir);
    auto comm = Communicator::create(store, "handshake/", rank, n, o);
    comm->barrier();
    return "no error";
  });
  const auto start = Clock::now();
  while (!ranks.files.get("handshake/addr/" + std::to_string(victim)) && Clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  ranks.kids[victim]->signal(SIGKILL);  // it has published its address and is dialling its peers
  ranks.wait_all(std::chrono::seconds(60));
  int lost = 0;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << ranks.out(r));
    CHECK(ranks.out(r) == "PeerLostError");
    lost += ranks.out(r) == "PeerLostError" ? 1 : 0;
  }
  CHECK(lost == n - 1);
}

TEST_CASE("descriptors: a limit too low for the mesh is an InvalidArgument naming RLIMIT_NOFILE, and workers raise it",
          "[collective][sparse]") {
  ProcessRanks ranks;
  ranks.start(2, [](int which) -> std::string {
    rlimit rl{};
    if (which == 0) {  // soft = hard = 40: a full mesh of 64 ranks needs 2 * 63 + 8
      rl.rlim_cur = rl.rlim_max = 40;
      setrlimit(RLIMIT_NOFILE, &rl);
      CommunicatorOptions o = process_options();
      o.mesh = Mesh::kFull;
      o.connect_timeout = std::chrono::milliseconds(2000);
      try {
        Communicator::create(make_memory_store(), "fd/", 0, 64, o);
        return "no error";
      } catch (const InvalidArgument& e) {
        return std::string("InvalidArgument: ") + e.what();
      }
    }
    rl.rlim_cur = 64;  // a low soft limit under a higher hard one: raised at the first communicator
    rl.rlim_max = 4096;
    setrlimit(RLIMIT_NOFILE, &rl);
    test::run_ranks(2, [](int, TcpCommunicator&) {});
    getrlimit(RLIMIT_NOFILE, &rl);
    return "soft " + std::to_string(rl.rlim_cur);
  });
  ranks.wait_all(std::chrono::seconds(30));
  const std::string low = ranks.out(0);
  INFO(low);
  CHECK(low.rfind("InvalidArgument: ", 0) == 0);
  CHECK(low.find("the full mesh of rank 0 of 64 needs 134 more file descriptors") != std::string::npos);
  CHECK(low.find("RLIMIT_NOFILE soft 40, hard 40") != std::string::npos);
  CHECK(ranks.out(1) == "soft 4096");
}
