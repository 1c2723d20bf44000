// The default setting: DistributedOptimizer on the process-global world of edl::init(), reducing
// through the generation's collective engine. Two forked worker processes join a job hosted by an
// in-test StoreServer and must end with the parameters of one worker at twice the batch; and, with
// weighted steps (one rank's batch short or empty) and the program's own named collectives issued in
// the same steps as the gradient buckets, with the parameters of one worker on the union of the
// records (issue 22, item 7: docs/torch.md, "Your own collectives in a step").
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "edl/edl.h"
#include "edl/optim.h"
#include "edl/store_server.h"
#include "optim/tiny_mlp.h"
#include "testing/process.h"

using namespace edl;

namespace {

constexpr int kDim = 5, kHidden = 8, kSteps = 5, kLocalBatch = 6, kRanks = 2;

// The weighted variant: records per step of rank 0 and rank 1 (a short batch, an empty one on either
// rank, an empty step everywhere).
constexpr int kMixed[kSteps][kRanks] = {{6, 6}, {6, 2}, {0, 6}, {0, 0}, {5, 6}};

size_t mixed_offset(int step) {
  size_t off = 0;
  for (int s = 0; s < step; ++s) off += static_cast<size_t>(kMixed[s][0] + kMixed[s][1]);
  return off;
}

DistributedOptimizerOptions options() {
  DistributedOptimizerOptions o;
  o.optimizer.momentum = 0.9;
  o.scaling.base_lr = 0.05;
  o.scaling.lr_scaling = optim::LrScaling::kNone;
  o.bucket_cap_bytes = 32 * sizeof(float);  // several buckets
  return o;
}

std::vector<float> flatten(const test::TinyMlp& m) {
  std::vector<float> out(m.w1);
  out.insert(out.end(), m.b1.begin(), m.b1.end());
  out.insert(out.end(), m.w2.begin(), m.w2.end());
  out.insert(out.end(), m.b2.begin(), m.b2.end());
  return out;
}

bool read_all(int fd, void* buf, size_t n, std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, left) <= 0) continue;
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One weighted step of the mixed variant on `rank`, with two collectives of the program's own in it:
// "user.records" (asynchronous, enqueued before backward, waited after step()) and "user.loss"
// (blocking, between backward and step()), while the optimizer's buckets are in flight. False when a
// sum is wrong.
bool mixed_step(int rank, int s, test::TinyMlp& m, DistributedOptimizer& opt, const test::Dataset& data) {
  const int n = kMixed[s][rank];
  int64_t records = n;
  Handle h = edl::allreduce_async(&records, 1, ReduceOp::kSum, "user.records");
  opt.set_step_samples(static_cast<uint64_t>(n));  // every rank, every step, before its backward pass
  m.backward(data, mixed_offset(s) + (rank == 0 ? 0 : kMixed[s][0]), static_cast<size_t>(n),
             [&](size_t i) { opt.grad_ready(i); });  // n = 0: zero gradients, reported all the same
  double loss = 0.5 * n;
  edl::allreduce(&loss, 1, ReduceOp::kSum, "user.loss");
  opt.step();
  h.wait();
  const int total = kMixed[s][0] + kMixed[s][1];
  return records == total && loss == 0.5 * total;
}

// Child body: waits for the store URL, joins as rank r, trains, writes its parameters. Never returns.
[[noreturn]] void worker(int rank, int url_fd, int out_fd, const test::Dataset& data, bool mixed) {
  int code = 1;
  try {
    char url[256] = {0};
    if (!read_all(url_fd, url, sizeof url, std::chrono::steady_clock::now() + std::chrono::seconds(20))) _exit(3);
    setenv("EDL_STORE", url, 1);
    setenv("EDL_RANK", std::to_string(rank).c_str(), 1);
    setenv("EDL_SIZE", std::to_string(kRanks).c_str(), 1);
    setenv("EDL_TIMEOUT_MS", "10000", 1);
    setenv("EDL_CONNECT_TIMEOUT_MS", "10000", 1);
    setenv("EDL_LOG_LEVEL", "0", 1);
    edl::init();
    test::TinyMlp m(kDim, kHidden);
    DistributedOptimizer opt(options());
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    bool sums_ok = true;
    for (int s = 0; s < kSteps; ++s) {
      if (mixed) {
        sums_ok = mixed_step(rank, s, m, opt, data) && sums_ok;
        continue;
      }
      size_t begin = static_cast<size_t>(s) * kRanks * kLocalBatch + static_cast<size_t>(rank) * kLocalBatch;
      m.backward(data, begin, kLocalBatch, [&](size_t i) { opt.grad_ready(i); });
      opt.step();
    }
    std::vector<float> flat = flatten(m);
    if (write(out_fd, flat.data(), flat.size() * sizeof(float)) == static_cast<ssize_t>(flat.size() * sizeof(float)))
      code = sums_ok ? 0 : 4;
    edl::shutdown();
  } catch (const std::exception& e) {
    (void)!write(2, e.what(), std::strlen(e.what()));
    code = 2;
  }
  _exit(code);
}

// One local worker (the reference): step(s, model, optimizer) trains step s; returns the parameters.
std::vector<float> train_reference(const std::function<void(int, test::TinyMlp&, DistributedOptimizer&)>& step) {
  test::TinyMlp ref(kDim, kHidden);
  auto lo = options();
  lo.local = true;
  DistributedOptimizer opt(lo);
  for (auto& p : ref.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
  for (int s = 0; s < kSteps; ++s) step(s, ref, opt);
  return flatten(ref);
}

// Trains 2 forked workers (the variant `mixed` or not) and checks their parameters against `expect`.
void run_job(const test::Dataset& data, const std::vector<float>& expect, bool mixed) {
  // Fork before any thread exists in this process (the store server starts afterwards).
  int url_pipe[kRanks][2], out_pipe[kRanks][2];
  pid_t pids[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(pipe(url_pipe[r]) == 0);
    REQUIRE(pipe(out_pipe[r]) == 0);
    edl::testing::SpawnOptions so;
    so.own_group = false;
    pids[r] = edl::testing::fork_call([&]() -> int { worker(r, url_pipe[r][0], out_pipe[r][1], data, mixed); }, so);
    close(url_pipe[r][0]);
    close(out_pipe[r][1]);
  }
  std::vector<std::vector<float>> got(kRanks, std::vector<float>(expect.size()));
  bool ok[kRanks] = {false, false};
  {
    StoreServer server;
    char url[256] = {0};
    std::strncpy(url, server.url().c_str(), sizeof url - 1);
    for (int r = 0; r < kRanks; ++r) (void)!write(url_pipe[r][1], url, sizeof url);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < kRanks; ++r)
      ok[r] = read_all(out_pipe[r][0], got[r].data(), got[r].size() * sizeof(float), deadline);
  }
  for (int r = 0; r < kRanks; ++r) {
    if (!ok[r]) kill(pids[r], SIGKILL);  // bounded: a stuck worker is killed, never waited for forever
    int status = 0;
    waitpid(pids[r], &status, 0);
    close(url_pipe[r][1]);
    close(out_pipe[r][0]);
    CHECK(ok[r]);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));  // 4: a sum of the user's collectives was wrong
  }
  for (int r = 0; r < kRanks; ++r) {
    if (!ok[r]) continue;
    for (size_t i = 0; i < expect.size(); ++i)
      CHECK(got[r][i] == Catch::Detail::Approx(expect[i]).epsilon(1e-5).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("process-global world: 2 processes through the collective engine == 1 worker at batch 2b") {
  const auto data = test::make_dataset(kRanks * kLocalBatch * kSteps, kDim);
  // Reference: one worker, batch 2b.
  const auto expect = train_reference([&](int s, test::TinyMlp& ref, DistributedOptimizer& opt) {
    ref.backward(data, static_cast<size_t>(s) * kRanks * kLocalBatch, kRanks * kLocalBatch,
                 [&](size_t i) { opt.grad_ready(i); });
    opt.step();
  });
  run_job(data, expect, false);
}

TEST_CASE("process-global world: weighted short and empty steps with the program's own collectives in them") {
  const auto data = test::make_dataset(kRanks * kLocalBatch * kSteps, kDim);
  // Reference: one worker training the union of the two ranks' records of each step (weighted mean).
  const auto expect = train_reference([&](int s, test::TinyMlp& ref, DistributedOptimizer& opt) {
    const int n = kMixed[s][0] + kMixed[s][1];
    opt.set_step_samples(static_cast<uint64_t>(n));
    ref.backward(data, mixed_offset(s), static_cast<size_t>(n), [&](size_t i) { opt.grad_ready(i); });
    opt.step();
  });
  CHECK(expect != flatten(test::TinyMlp(kDim, kHidden)));  // training moved the parameters
  run_job(data, expect, true);
}
