// Fault behaviour: a peer killed (SIGKILL) or stopped (SIGSTOP) mid-allreduce, a silent peer, and
// abort() from another thread give every survivor a typed error within the deadline; afterwards
// the communicator stays poisoned. Ranks that must die are forked processes bootstrapped through a
// FileStore; the Child guard SIGKILLs and reaps them on every path.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace edl;
using edl::collective::TcpCommunicator;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Child body: join as `rank` of `n` and allreduce 1 MiB floats forever (until killed).
void endless_allreduce(const std::string& dir, const std::string& prefix, int rank, int n) {
  auto store = std::make_shared<test::FileStore>(dir);
  auto comm = Communicator::create(store, prefix, rank, n, test::fast_options(20000));
  std::vector<float> v(1 << 18, 1.0f);
  for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
}

}  // namespace

TEST_CASE("peer killed mid-allreduce: PeerLostError on every survivor, promptly", "[collective][fault]") {
  const std::string dir = test::make_temp_dir();
  const std::string prefix = "kill/";
  const int n = 3;
  test::Child child([&] { endless_allreduce(dir, prefix, 2, n); });
  auto store = std::make_shared<test::FileStore>(dir);
  const test::PeerKill got = test::allreduce_until_peer_killed(
      2, [&](int r) { return Communicator::create(store, prefix, r, n, test::fast_options(20000)); }, 1 << 18, 6, 15,
      [&] { child.signal(SIGKILL); });
  child.kill_and_reap();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << got.ended[r]);
    CHECK(got.ended[r] == "PeerLostError");
    CHECK(got.delay_s[r] >= 0);
    CHECK(got.delay_s[r] < 5.0);  // far below the 20 s deadline: detected by EOF, not by the timeout
  }
}

TEST_CASE("peer stopped (SIGSTOP) mid-allreduce: TimeoutError within the deadline", "[collective][fault]") {
  const std::string dir = test::make_temp_dir();
  const std::string prefix = "stop/";
  test::Child child([&] {
    auto store = std::make_shared<test::FileStore>(dir);
    auto comm = Communicator::create(store, prefix, 1, 2, test::fast_options(20000));
    std::vector<float> v(1 << 18, 1.0f);
    for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  });
  auto store = std::make_shared<test::FileStore>(dir);
  auto comm = Communicator::create(store, prefix, 0, 2, test::fast_options(1000));
  std::vector<float> v(1 << 18, 1.0f);
  for (int i = 0; i < 3; ++i) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  child.signal(SIGSTOP);
  auto t0 = Clock::now();
  bool timed_out = false;
  try {
    for (int i = 0; i < 1000; ++i) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  } catch (const TimeoutError& e) {
    timed_out = true;
    INFO(e.what());
  }
  double waited = seconds_since(t0);
  child.kill_and_reap();
  REQUIRE(timed_out);
  CHECK(waited < 3.0);  // deadline 1 s (plus the collectives that completed before the stop)
  // Poisoned for ever: the next call throws the same typed error at once.
  auto t1 = Clock::now();
  REQUIRE_THROWS_AS(comm->allreduce(v.data(), 8, DataType::kFloat32, ReduceOp::kSum), TimeoutError);
  REQUIRE_THROWS_AS(comm->barrier(), TimeoutError);
  CHECK(seconds_since(t1) < 0.5);
  CHECK(comm->aborted());
}

TEST_CASE("a silent peer: TimeoutError naming the rank waited for", "[collective][fault]") {
  std::string msg;
  test::run_ranks(
      2,
      [&](int rank, TcpCommunicator& comm) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(600));  // never calls the collective
          return;
        }
        float x = 1;
        try {
          comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
        } catch (const TimeoutError& e) {
          msg = e.what();
        }
      },
      test::fast_options(300));
  INFO(msg);
  REQUIRE(msg.find("timed out") != std::string::npos);
  REQUIRE(msg.find("rank(s) 1") != std::string::npos);
}

TEST_CASE("abort() from another thread ends a blocked collective with AbortedError", "[collective][fault]") {
  std::vector<std::string> got(2);
  std::vector<double> delay(2, -1);
  test::run_ranks(2, [&](int rank, TcpCommunicator& comm) {
    if (rank == 1) {
      // Wait until rank 0 is blocked in its barrier and has been aborted by a third thread. Rank 0's
      // barrier header already arrived, so this barrier may still complete; the collective after it
      // finds rank 0's sockets shut down.
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      float y = 1;
      auto t0 = Clock::now();
      try {
        comm.barrier();
        comm.allreduce(&y, 1, DataType::kFloat32, ReduceOp::kSum);
        got[1] = "no error";
      } catch (const PeerLostError&) {
        got[1] = "PeerLostError";
        delay[1] = seconds_since(t0);
      }
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.abort("test abort");
    });
    std::vector<float> big(1 << 20, 1.0f);
    auto t0 = Clock::now();
    try {
      comm.barrier();  // rank 1 is sleeping: blocks until the abort
      got[0] = "no error";
    } catch (const AbortedError& e) {
      got[0] = std::string(e.what()).find("test abort") != std::string::npos ? "AbortedError" : e.what();
      delay[0] = seconds_since(t0);
    }
    aborter.join();
    try {
      comm.allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const AbortedError&) {
      got[0] += "+again";
    }
  });
  CHECK(got[0] == "AbortedError+again");
  CHECK(delay[0] >= 0);
  CHECK(delay[0] < 1.0);
  CHECK(got[1] == "PeerLostError");
  CHECK(delay[1] < 1.0);
}
