// Test harness of the collective suite: ranks as threads over one memory store, a file-backed
// store for ranks that are separate processes (fork), and a child-process guard that always kills
// and reaps the child.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective/engine.h"
#include "collective/tcp_communicator.h"
#include "edl/error.h"
#include "edl/store.h"
#include "reference.h"
#include "testing/process.h"

namespace edl::test {

inline std::string unique_prefix(const std::string& what) {
  static std::atomic<int> n{0};
  return what + "/" + std::to_string(getpid()) + "/" + std::to_string(n++) + "/";
}

// The suite test_collective runs the TCP transport; test_collective_shm compiles the same tests with
// EDL_TEST_TRANSPORT=edl::Transport::kShm (and small staging rounds, EDL_TEST_SHM_CHUNK_BYTES).
#ifndef EDL_TEST_TRANSPORT
#define EDL_TEST_TRANSPORT ::edl::Transport::kTcp
#endif
constexpr bool kShmSuite = EDL_TEST_TRANSPORT == ::edl::Transport::kShm;
// test_collective_hier: rank r of run_ranks() gets host id "host<r % EDL_TEST_HOSTS>", so ranks
// spanning several "hosts" take the hierarchical allreduce (over loopback TCP between them).
#ifndef EDL_TEST_HOSTS
#define EDL_TEST_HOSTS 0
#endif

// test_collective_sparse: every communicator on the sparse mesh whatever its size (the collectives of
// large communicators, exercised at 1-4 ranks by the generic tests).
#ifndef EDL_TEST_MESH
#define EDL_TEST_MESH ::edl::Mesh::kAuto
#endif
constexpr bool kSparseSuite = EDL_TEST_MESH == ::edl::Mesh::kSparse;

inline CommunicatorOptions fast_options(int timeout_ms = 5000) {
  CommunicatorOptions o;
  o.transport = EDL_TEST_TRANSPORT;
  o.mesh = EDL_TEST_MESH;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.connect_timeout = std::chrono::milliseconds(10000);
  return o;
}

// Every dtype x op over `counts` on this rank, each result checked against reference.h and that
// nothing past the buffer was written; appends each result's bytes to `out` (compare them across
// ranks: bitwise identical). A count of 0 passes a null buffer.
inline void allreduce_every_op(int n, int rank, Communicator& comm, const std::vector<size_t>& counts,
                               std::vector<std::vector<uint8_t>>& out) {
  constexpr uint8_t kGuard = 0xAB;
  for (size_t count : counts)
    for (DataType dt : kAllTypes)
      for (ReduceOp op : kAllOps) {
        const size_t es = dtype_size(dt);
        std::vector<uint8_t> buf(count * es + 16, kGuard);
        for (size_t i = 0; i < count; ++i) ref_put(buf.data(), i, dt, ref_input(rank, i, dt));
        comm.allreduce(count ? buf.data() : nullptr, count, dt, op);
        for (size_t g = count * es; g < buf.size(); ++g)
          if (buf[g] != kGuard) throw std::runtime_error("allreduce wrote past the buffer");
        for (size_t i = 0; i < count; ++i) {
          const double want = ref_result(n, i, op, dt), got = ref_get(buf.data(), i, dt);
          if (ref_close(got, want, dt)) continue;
          std::ostringstream os;
          os << "n=" << n << " count=" << count << " " << dtype_name(dt) << " " << op_name(op) << " element " << i
             << ": got " << got << " want " << want;
          throw std::runtime_error(os.str());
        }
        buf.resize(count * es);
        out.push_back(std::move(buf));
      }
}

// Checks an allgatherv of float64 in which rank r contributed count_of(r) copies of r + 0.5.
inline void check_gathered(const std::vector<uint8_t>& out, const std::vector<size_t>& counts, int n,
                           const std::function<size_t(int)>& count_of) {
  if (counts.size() != static_cast<size_t>(n)) throw std::runtime_error("allgatherv: wrong number of counts");
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    if (counts[r] != count_of(r)) throw std::runtime_error("allgatherv: wrong count of rank " + std::to_string(r));
    for (size_t i = 0; i < counts[r]; ++i) {
      double x;
      std::memcpy(&x, out.data() + (at + i) * 8, 8);
      if (x != r + 0.5) throw std::runtime_error("allgatherv: wrong value from rank " + std::to_string(r));
    }
    at += counts[r];
  }
  if (out.size() != at * 8) throw std::runtime_error("allgatherv: wrong output size");
}

// Runs fn(rank) on n threads. Rethrows the first exception of any rank after joining all of them.
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs fn(rank, comm) on n threads, rank r's communicator made with options_of(r), over one memory
// store (keys under a fresh prefix starting with `tag`).
inline void run_ranks_with(int n, const std::function<CommunicatorOptions(int)>& options_of,
                           const std::function<void(int, collective::TcpCommunicator&)>& fn,
                           const std::string& tag = "ranks") {
  auto store = make_memory_store();
  const std::string prefix = unique_prefix(tag);
  run_threads(n, [&](int r) {
    auto comm = collective::TcpCommunicator::connect(store, prefix, r, n, options_of(r));
    fn(r, *comm);
  });
}

// Runs fn(rank, comm) on n threads, each with its own communicator over one memory store, with the
// suite's transport, host ids and chunk sizes (test_collective_shm / _hier).
inline void run_ranks(int n, const std::function<void(int, collective::TcpCommunicator&)>& fn,
                      CommunicatorOptions opts = fast_options()) {
  auto options_of = [&](int r) {
    CommunicatorOptions o = opts;
    if (EDL_TEST_HOSTS > 0 && o.host_id.empty()) o.host_id = "host" + std::to_string(r % std::max(1, EDL_TEST_HOSTS));
    return o;
  };
  run_ranks_with(n, options_of, [&](int r, collective::TcpCommunicator& comm) {
    if (n > 1 && opts.transport == Transport::kShm && std::string(comm.transport_name()) != "shm")
      throw std::runtime_error("the communicator does not use shared memory");
#ifdef EDL_TEST_SHM_CHUNK_BYTES
    collective::AlgorithmTuning t = comm.tuning();
    t.shm_chunk_bytes = EDL_TEST_SHM_CHUNK_BYTES;
#ifdef EDL_TEST_HIER_SLICE_BYTES
    t.hier_slice_bytes = EDL_TEST_HIER_SLICE_BYTES;
#endif
    comm.set_tuning(t);
#endif
    fn(r, comm);
  });
}

// How each thread rank's allreduce loop ended when a peer process was killed (kill -9 tests).
struct PeerKill {
  std::vector<std::string> ended;  // "PeerLostError", "no error", "other: <what>", or check()'s message
  std::vector<double> delay_s;     // seconds from the kill to the PeerLostError (-1: none after the kill)
};

// Thread ranks 0..k-1 join with make(r) and allreduce `floats` float32 in a loop; once they did
// `warmup` allreduces in all (or after warmup_s seconds) `kill` is called; returns how each loop
// ended. check(comm), when given, runs first: a non-empty result ends that rank with it.
inline PeerKill allreduce_until_peer_killed(int k, const std::function<std::shared_ptr<Communicator>(int)>& make,
                                            size_t floats, int warmup, double warmup_s,
                                            const std::function<void()>& kill,
                                            const std::function<std::string(Communicator&)>& check = nullptr) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  PeerKill out{std::vector<std::string>(k), std::vector<double>(k, -1)};
  std::atomic<int> iterations{0};
  std::atomic<bool> killed{false};
  Clock::time_point kill_time;
  std::vector<std::thread> ranks;
  for (int r = 0; r < k; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto comm = make(r);
        if (check) {
          out.ended[r] = check(*comm);
          if (!out.ended[r].empty()) return;
        }
        std::vector<float> v(floats, 1.0f);
        for (int it = 0; it < 1000000; ++it) {
          comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
          ++iterations;
        }
        out.ended[r] = "no error";
      } catch (const PeerLostError&) {
        out.ended[r] = "PeerLostError";
        if (killed) out.delay_s[r] = since(kill_time);
      } catch (const std::exception& e) {
        out.ended[r] = std::string("other: ") + e.what();
      }
    });
  const auto start = Clock::now();
  while (iterations < warmup && since(start) < warmup_s) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  kill_time = Clock::now();
  killed = true;
  kill();
  for (auto& t : ranks) t.join();
  return out;
}

// Runs fn(rank, engine) on n threads; each rank's engine wraps its own communicator.
inline void run_engines(int n, collective::EngineOptions eo, const std::function<void(int, collective::Engine&)>& fn) {
  run_ranks(n, [&](int rank, collective::TcpCommunicator& comm) {
    // The engine shares ownership of the communicator with run_ranks' local variable: wrap without
    // deleting (run_ranks owns it and outlives the engine).
    std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
    collective::Engine engine(c, eo);
    fn(rank, engine);
    engine.stop();
  });
}

// A Store over a directory, so forked processes can bootstrap a communicator (set/get/wait only
// are needed by the mesh; the rest is implemented simply, without cross-process atomicity).
class FileStore : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const std::string& value) override {
    std::string tmp = path(key) + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f << value;
    }
    std::rename(tmp.c_str(), path(key).c_str());
  }
  std::optional<std::string> get(const std::string& key) override {
    std::ifstream f(path(key), std::ios::binary);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = std::stoll(get(key).value_or("0")) + delta;
    set(key, std::to_string(v));
    return v;
  }
  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    auto cur = get(key);
    if (cur != expected) {
      if (current) *current = cur;
      return false;
    }
    set(key, desired);
    return true;
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      bool all = true;
      for (auto& k : keys) all = all && get(k).has_value();
      if (all) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto v = get(key);
      if (v != known || std::chrono::steady_clock::now() >= deadline) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  bool del(const std::string& key) override { return std::remove(path(key).c_str()) == 0; }
  std::vector<std::string> keys(const std::string&) override { return {}; }
  void set_lease(const std::string& key, const std::string& value, std::chrono::milliseconds) override {
    set(key, value);
  }

 private:
  std::string path(const std::string& key) const {
    std::string k = key;
    for (char& c : k)
      if (c == '/') c = '_';
    return dir_ + "/" + k;
  }
  std::string dir_;
};

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/edl_coll_XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  return d;
}

// A forked child running fn() (exit 0, or 3 when it throws; testing/process.h); the guard SIGKILLs
// and reaps it on destruction (any path).
class Child {
 public:
  explicit Child(const std::function<void()>& fn)
      : proc_(edl::testing::Process::forked(
            [fn] {
              fn();
              return 0;
            },
            child_options())) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return proc_.pid(); }
  void signal(int sig) {
    if (proc_.poll() < 0) ::kill(proc_.pid(), sig);
  }
  void kill_and_reap() { proc_.stop(std::chrono::milliseconds(0)); }
  // Waits up to `timeout` for the child to end: its exit status, or -1 while it still runs.
  int wait(std::chrono::milliseconds timeout) { return proc_.wait(timeout); }

 private:
  static edl::testing::SpawnOptions child_options() {
    edl::testing::SpawnOptions o;
    o.own_group = false;  // signal() reaches the child alone
    return o;
  }
  edl::testing::Process proc_;
};

}  // namespace edl::test

// Catch2 v2 assertions are not thread-safe: rank threads use these, which throw; run_ranks
// rethrows the first failure on the test thread.
#define TREQUIRE(cond)                                                                                  \
  do {                                                                                                  \
    if (!(cond)) throw std::runtime_error(std::string("TREQUIRE failed: " #cond " at line ") +         \
                                          std::to_string(__LINE__));                                    \
  } while (0)
#define TFAIL(msg)                                                                                      \
  do {                                                                                                  \
    std::ostringstream tfail_os_;                                                                       \
    tfail_os_ << msg;                                                                                   \
    throw std::runtime_error("TFAIL at line " + std::to_string(__LINE__) + ": " + tfail_os_.str());     \
  } while (0)
#define TREQUIRE_THROWS_AS(expr, Type)                                                                  \
  do {                                                                                                  \
    bool tthrew_ = false;                                                                               \
    try {                                                                                               \
      (void)(expr);                                                                                     \
    } catch (const Type&) {                                                                             \
      tthrew_ = true;                                                                                   \
    }                                                                                                   \
    if (!tthrew_) throw std::runtime_error("TREQUIRE_THROWS_AS: " #expr " did not throw " #Type);     \
  } while (0)
