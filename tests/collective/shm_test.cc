// Shared-memory transport specifics (the generic collective, fault and engine tests also run over
// it: test_collective_shm compiles them with EDL_TEST_TRANSPORT=kShm). Here: the transport choice
// (auto / tcp / shm, host ids), every op over the staged rounds with the default and tiny windows
// and odd counts at 1-4 ranks (int32 / float64 exactly, then every dtype incl. 16-bit and uint8),
// and process ranks: the segment is a memfd (never a name in /dev/shm), and kill -9 of one rank,
// then of all, leaves nothing behind.
#include <dirent.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <set>

#include "harness.h"
#include "reference.h"

using namespace edl;
using edl::collective::Clock;
using edl::collective::TcpCommunicator;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// Lines of /proc/<pid>/maps naming our segment.
int segment_mappings(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  int n = 0;
  while (std::getline(f, line))
    if (line.find("memfd:edl-shm") != std::string::npos) ++n;
  return n;
}

CommunicatorOptions with(Transport t, const std::string& host = "") {
  CommunicatorOptions o = test::fast_options();
  o.transport = t;
  o.host_id = host;
  return o;
}

// Runs n thread ranks with per-rank options; returns each rank's transport name or error text.
std::vector<std::string> transports(int n, const std::function<CommunicatorOptions(int)>& opts) {
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix("shm-choice");
  std::vector<std::string> got(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = TcpCommunicator::connect(store, prefix, r, n, opts(r));
        float x = static_cast<float>(r + 1);
        comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
        got[r] = std::string(comm->transport_name()) + (x == n * (n + 1) / 2 ? "" : " wrong sum");
      } catch (const CommError& e) {
        got[r] = std::string("CommError: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return got;
}

template <typename T>
T value(int rank, size_t i) {
  return static_cast<T>(static_cast<int>((i * 5 + rank * 3) % 9) - 4);
}

// Sum / average / min / max / product of int-valued inputs, checked exactly for int32 and float64
// (the other dtypes run through the same code with another element size: checked by comm_test).
template <typename T>
void check_ops(TcpCommunicator& comm, size_t count, DataType dt) {
  const int n = comm.size(), r = comm.rank();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<T> buf(count + 3, T(77));
    for (size_t i = 0; i < count; ++i) buf[i] = value<T>(r, i);
    comm.allreduce(buf.data(), count, dt, op);
    for (size_t i = 0; i < count; ++i) {
      double acc = static_cast<double>(value<T>(0, i));
      for (int q = 1; q < n; ++q) {
        const double v = static_cast<double>(value<T>(q, i));
        if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
        if (op == ReduceOp::kMin) acc = std::min(acc, v);
        if (op == ReduceOp::kMax) acc = std::max(acc, v);
        if (op == ReduceOp::kProduct) acc *= v;
      }
      if (op == ReduceOp::kAverage) acc = std::is_integral<T>::value ? std::trunc(acc / n) : acc / n;
      if (static_cast<double>(buf[i]) != static_cast<T>(acc))
        TFAIL("count " << count << " " << op_name(op) << " element " << i << ": " << buf[i] << " != " << acc);
    }
    for (size_t i = count; i < buf.size(); ++i)
      if (buf[i] != T(77)) TFAIL("wrote past the buffer");
  }
}

}  // namespace

TEST_CASE("shm: auto uses shared memory on one host and TCP across host ids, shm across hosts fails",
          "[collective][shm]") {
  CHECK(transports(3, [](int) { return with(Transport::kAuto, "h"); }) == std::vector<std::string>(3, "shm"));
  CHECK(transports(2, [](int) { return with(Transport::kShm); }) == std::vector<std::string>(2, "shm"));
  CHECK(transports(3, [](int r) { return with(Transport::kAuto, r == 2 ? "b" : "a"); }) ==
        std::vector<std::string>(3, "tcp"));
  CHECK(transports(2, [](int) { return with(Transport::kTcp); }) == std::vector<std::string>(2, "tcp"));
  auto got = transports(2, [](int r) { return with(Transport::kShm, r == 0 ? "a" : "b"); });
  for (const auto& g : got) {
    INFO(g);
    CHECK(g.find("different hosts") != std::string::npos);
    CHECK(g.find("'b'") != std::string::npos);
  }
}

TEST_CASE("shm: every op over staged rounds, default and tiny windows, odd counts, 1-4 ranks", "[collective][shm]") {
  for (int n = 1; n <= 4; ++n)
    for (size_t chunk : {size_t{4096}, size_t{1} << 20}) {
      test::run_ranks(n, [&](int, TcpCommunicator& comm) {
        collective::AlgorithmTuning t = comm.tuning();
        t.shm_chunk_bytes = chunk;
        t.shm_eager_bytes = 0;  // everything but empty buffers goes through the rounds
        comm.set_tuning(t);
        for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}, size_t{4097}, size_t{300001}}) {
          check_ops<int32_t>(comm, count, DataType::kInt32);
          check_ops<double>(comm, count, DataType::kFloat64);
        }
        // Broadcast and allgatherv through the rounds as well.
        std::vector<int64_t> b(70001);
        for (int root = 0; root < comm.size(); ++root) {
          for (size_t i = 0; i < b.size(); ++i) b[i] = comm.rank() == root ? static_cast<int64_t>(i * 3 + root) : -1;
          comm.broadcast(b.data(), b.size(), DataType::kInt64, root);
          for (size_t i = 0; i < b.size(); ++i)
            if (b[i] != static_cast<int64_t>(i * 3 + root)) TFAIL("broadcast element " << i);
        }
        std::vector<uint8_t> in(static_cast<size_t>(comm.rank()) * 9001 + 1, static_cast<uint8_t>(comm.rank() + 1));
        std::vector<uint8_t> out;
        std::vector<size_t> counts;
        comm.allgatherv(in.data(), in.size(), DataType::kUInt8, out, &counts);
        size_t at = 0;
        for (int q = 0; q < comm.size(); ++q) {
          if (counts[q] != static_cast<size_t>(q) * 9001 + 1) TFAIL("allgather count of rank " << q);
          for (size_t i = 0; i < counts[q]; ++i)
            if (out[at + i] != q + 1) TFAIL("allgather byte " << i << " of rank " << q);
          at += counts[q];
        }
        comm.barrier();
      });
    }
}

TEST_CASE("shm: every dtype x op (16-bit floats and uint8 included) through the staged rounds, odd counts, 1-4 ranks",
          "[collective][shm]") {
  const std::vector<size_t> counts = {1, 3, 7, 1023, 4097, 30011};
  for (int n = 1; n <= 4; ++n) {
    INFO("ranks " << n);
    std::vector<std::vector<std::vector<uint8_t>>> results(n);
    test::run_ranks(n, [&](int rank, TcpCommunicator& comm) {
      collective::AlgorithmTuning t = comm.tuning();
      t.shm_chunk_bytes = 4096;  // many rounds, slices of odd lengths
      t.shm_eager_bytes = 0;     // no payload with the header: every count goes through the rounds
      comm.set_tuning(t);
      test::allreduce_every_op(n, rank, comm, counts, results[rank]);
    });
    for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);  // bitwise identical on every rank
  }
}

TEST_CASE("shm: process ranks map a memfd, never /dev/shm, and kill -9 leaves nothing behind",
          "[collective][shm][fault]") {
  const auto before = dev_shm();
  const std::string dir = test::make_temp_dir();
  const std::string prefix = "shm-kill/";
  const int n = 3;
  auto body = [&](int rank) {
    auto store = std::make_shared<test::FileStore>(dir);
    auto comm = Communicator::create(store, prefix, rank, n, with(Transport::kShm));
    std::vector<float> v(1 << 18, 1.0f);
    for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  };
  auto c1 = std::make_unique<test::Child>([&] { body(1); });
  auto c2 = std::make_unique<test::Child>([&] { body(2); });
  auto store = std::make_shared<test::FileStore>(dir);
  auto comm = Communicator::create(store, prefix, 0, n, with(Transport::kShm));
  REQUIRE(std::string(static_cast<TcpCommunicator&>(*comm).transport_name()) == "shm");
  std::vector<float> v(1 << 18, 1.0f);
  for (int it = 0; it < 5; ++it) {
    comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    for (float x : {v[0], v[v.size() - 1]}) REQUIRE(x == std::pow(3.0f, static_cast<float>(it + 1)));
  }
  CHECK(segment_mappings(getpid()) == 1);
  CHECK(segment_mappings(c1->pid()) == 1);
  CHECK(segment_mappings(c2->pid()) == 1);
  CHECK(dev_shm() == before);  // the segment has no name

  // kill -9 of one rank: the survivors (this process, and rank 2) fail promptly with PeerLostError.
  const auto t0 = Clock::now();
  c1->signal(SIGKILL);
  std::string err;
  try {
    for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  } catch (const PeerLostError& e) {
    err = e.what();
  }
  const double delay = seconds_since(t0);
  INFO(err);
  CHECK(err.find("rank 1") != std::string::npos);
  CHECK(delay < 4.0);  // far below the 5 s deadline: the socket's EOF, not the timeout
  c1->kill_and_reap();
  // Rank 2 exits by itself (its allreduce throws; the child's body returns with code 3).
  int status = 0;
  const auto t1 = Clock::now();
  while (waitpid(c2->pid(), &status, WNOHANG) == 0 && seconds_since(t1) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  comm.reset();
  CHECK(segment_mappings(getpid()) == 0);  // unmapped with the communicator
  c2.reset();
  c1.reset();
  CHECK(dev_shm() == before);
}

TEST_CASE("shm: kill -9 of every rank leaves no segment and no name", "[collective][shm][fault]") {
  const auto before = dev_shm();
  const std::string dir = test::make_temp_dir();
  std::vector<std::unique_ptr<test::Child>> kids;
  for (int r = 0; r < 2; ++r)
    kids.push_back(std::make_unique<test::Child>([&, r] {
      auto store = std::make_shared<test::FileStore>(dir);
      auto comm = Communicator::create(store, "shm-all/", r, 2, with(Transport::kShm));
      std::vector<float> v(1 << 16, 1.0f);
      for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    }));
  const auto t0 = Clock::now();
  while ((segment_mappings(kids[0]->pid()) == 0 || segment_mappings(kids[1]->pid()) == 0) && seconds_since(t0) < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(segment_mappings(kids[0]->pid()) == 1);
  CHECK(segment_mappings(kids[1]->pid()) == 1);
  kids.clear();  // SIGKILL + reap both
  CHECK(dev_shm() == before);
}

TEST_CASE("shm: a rank with transport tcp among auto ranks fails on both sides and names EDL_TRANSPORT",
          "[collective][shm]") {
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix("shm-mixed");
  std::vector<std::string> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = TcpCommunicator::connect(store, prefix, r, 2, with(r == 0 ? Transport::kTcp : Transport::kAuto));
        float x = 1;
        comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
        got[r] = "no error";
      } catch (const CommError& e) {
        got[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  INFO(got[0] << " | " << got[1]);
  CHECK(got[0] != "no error");  // the tcp rank reads the hello as a corrupt header
  CHECK(got[1].find("EDL_TRANSPORT") != std::string::npos);
}

TEST_CASE("shm: an allgather contribution above max_gather_bytes fails on every rank before allocating",
          "[collective][shm]") {
  CommunicatorOptions o = with(Transport::kShm);
  o.max_gather_bytes = 1000;
  std::vector<std::string> msgs(3);
  std::vector<size_t> capacity(3, 1);
  test::run_ranks(
      3,
      [&](int rank, TcpCommunicator& comm) {
        std::vector<uint8_t> in(rank == 1 ? 2000 : 10, 7), out;
        try {
          comm.allgatherv(in.data(), in.size(), DataType::kUInt8, out);
        } catch (const CommError& e) {
          msgs[rank] = e.what();
        }
        capacity[rank] = out.capacity();
        // Poisoned: later calls rethrow at once.
        TREQUIRE_THROWS_AS(comm.barrier(), CommError);
      },
      o);
  for (int r = 0; r < 3; ++r) {
    INFO(msgs[r]);
    CHECK(msgs[r].find("rank 1's allgather header announces 2000 bytes") != std::string::npos);
    CHECK(capacity[r] == 0);
  }
}
