// Thread-rank harness for elastic scenarios: each "worker" is a thread with its own Worker over a
// shared memory store and LocalComm groups; a toy model trains under edl::elastic semantics.
//
// The toy model has two tensors:
//   p: updated with a max-allreduce of gradients that are identical on every rank, so its value
//      after `total` steps is known exactly (reference()) whatever the membership history;
//   q: initialised differently on every worker and updated with an average of rank-dependent
//      gradients: only sync keeps it identical across workers.
// and a scalar `hist` = a hash of the sequence of steps applied in the committed history: a step
// lost or applied twice changes it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edl/error.h"
#include "edl/state.h"
#include "edl/store.h"
#include "elastic/worker.h"
#include "local_comm.h"

namespace edl::elastic::testing {

using namespace std::chrono_literals;

struct Killed {};  // thrown by fault hooks: the thread "dies"

constexpr size_t kParams = 257;

inline float grad_of(int64_t step, size_t i) { return static_cast<float>(std::sin(0.37 * step + 0.11 * i)) * 0.01f; }
inline uint64_t hist_next(uint64_t h, int64_t step) { return h * 1000003u + static_cast<uint64_t>(step); }

inline std::vector<float> reference_p(int64_t total) {
  std::vector<float> p(kParams, 0.0f);
  for (int64_t s = 0; s < total; ++s)
    for (size_t i = 0; i < kParams; ++i) p[i] -= 0.5f * grad_of(s, i);
  return p;
}
inline int64_t reference_hist(int64_t total) {
  uint64_t h = 0;
  for (int64_t s = 1; s <= total; ++s) h = hist_next(h, s);
  return static_cast<int64_t>(h);
}

struct Outcome {
  std::vector<float> p, q;
  int64_t step = -1;
  int64_t hist = 0;
  bool finished = false;  // run() returned
  RunOutcome run_outcome = RunOutcome::kFinished;  // what it returned
  bool killed = false;
  bool job_error = false;
  std::string error;
  int resets = 0;
  int last_size = 0;
  std::vector<GenerationInfo> generations;  // every on_generation of this worker, in order
};

struct Cluster {
  std::shared_ptr<Store> store = make_memory_store();
  WorkerOptions base;
  int64_t total = 40;
  std::chrono::milliseconds step_time{3};
  std::chrono::milliseconds comm_timeout{5000};  // LocalComm collective deadline
  // Called on each worker's thread before notify_batch_end of each step (worker index, worker, step).
  std::function<void(int, Worker&, int64_t)> on_step;
  // Optional per-worker fault hook for protocol points.
  std::function<void(int, Worker&, const std::string&)> on_point;

  std::mutex mu;
  std::vector<std::unique_ptr<Worker>> workers;  // index = worker number
  std::vector<Outcome> outcomes;
  std::vector<std::thread> threads;

  explicit Cluster(const std::string& job, int min_np = 1, int max_np = 0) {
    auto& m = base.membership;
    m.job_id = job;
    m.min_np = min_np;
    m.max_np = max_np;
    m.heartbeat = 100ms;  // short enough for quick tests, long enough not to evict a thread that
    m.lease = 1000ms;     // a loaded 2-core machine leaves unscheduled for a few hundred ms
    m.rendezvous_timeout = 1500ms;
    m.rendezvous_grace = 1000ms;
    m.start_window = 150ms;
  }
  ~Cluster() { join_all(); }

  Worker& worker(int i) {
    std::lock_guard<std::mutex> l(mu);
    return *workers.at(i);
  }

  // Starts worker number i (0, 1, 2, ... in order) on its own thread.
  int start() {
    std::lock_guard<std::mutex> l(mu);
    int i = static_cast<int>(workers.size());
    WorkerOptions o = base;
    o.membership.worker_id = "w" + std::to_string(i);
    o.membership.fault = [this, i](const std::string& point) {
      if (on_point) on_point(i, worker(i), point);
    };
    workers.push_back(std::make_unique<Worker>(store, o, local_group_factory(comm_timeout, 3000ms)));
    outcomes.emplace_back();
    Worker* w = workers.back().get();
    threads.emplace_back([this, i, w] { body(i, *w); });
    return i;
  }

  void join_all() {
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }

  void body(int i, Worker& w) {
    std::vector<float> p(kParams, 0.0f), q(kParams), grad(kParams);
    for (size_t k = 0; k < kParams; ++k) q[k] = static_cast<float>(i * 1000 + k);  // differs per worker
    int64_t hist = 0;
    State st;
    st.register_tensor("p", p.data(), p.size(), DataType::kFloat32);
    st.register_tensor("q", q.data(), q.size(), DataType::kFloat32);
    st.register_scalar("hist", &hist);
    Outcome out;
    st.on_generation([&out](const GenerationInfo& g) { out.generations.push_back(g); });
    try {
      out.run_outcome = w.run(st, [&] {
        while (st.step < total) {
          auto g = w.group();
          for (size_t k = 0; k < kParams; ++k) grad[k] = grad_of(st.step, k);
          g->allreduce(grad.data(), kParams, DataType::kFloat32, ReduceOp::kMax);
          for (size_t k = 0; k < kParams; ++k) p[k] -= 0.5f * grad[k];
          for (size_t k = 0; k < kParams; ++k) grad[k] = grad_of(st.step, k) * static_cast<float>(g->rank() + 1);
          g->allreduce(grad.data(), kParams, DataType::kFloat32, ReduceOp::kAverage);
          for (size_t k = 0; k < kParams; ++k) q[k] -= 0.5f * grad[k];
          hist = static_cast<int64_t>(hist_next(static_cast<uint64_t>(hist), st.step + 1));
          if (step_time.count()) std::this_thread::sleep_for(step_time);
          if (on_step) on_step(i, w, st.step);
          w.notify_batch_end();
        }
      });
      out.finished = true;
    } catch (const Killed&) {
      out.killed = true;
    } catch (const JobError& e) {
      out.job_error = true;
      out.error = e.what();
    } catch (const std::exception& e) {
      out.error = e.what();
      if (w.view().id && std::string(e.what()).find("simulated crash") != std::string::npos) out.killed = true;
    }
    out.p = p;
    out.q = q;
    out.step = st.step;
    out.hist = hist;
    out.resets = w.resets();
    out.last_size = w.view().size;
    std::lock_guard<std::mutex> l(mu);
    outcomes[i] = std::move(out);
  }

  // Every worker that finished holds the reference p, the same q bits, the full history.
  void check_finishers(int expected_finishers, std::vector<int> leavers = {}) {
    join_all();
    int n = 0;
    const Outcome* first = nullptr;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const auto& o = outcomes[i];
      // A worker whose run() returned kLeft is not a finisher (a leaver, or one that was never admitted
      // before the job finished, e.g. killed before the first decision).
      if (!o.finished || o.run_outcome != RunOutcome::kFinished ||
          std::find(leavers.begin(), leavers.end(), static_cast<int>(i)) != leavers.end())
        continue;
      ++n;
      INFO("error: " << o.error);
      CHECK(o.step == total);
      CHECK(o.hist == reference_hist(total));
      CHECK(std::memcmp(o.p.data(), reference_p(total).data(), kParams * sizeof(float)) == 0);
      if (!first) first = &o;
      CHECK(std::memcmp(o.q.data(), first->q.data(), kParams * sizeof(float)) == 0);
    }
    for (size_t i = 0; i < outcomes.size(); ++i)
      if (!outcomes[i].finished)
        UNSCOPED_INFO("worker " << i << " did not finish: step " << outcomes[i].step << " killed "
                                << outcomes[i].killed << " error: " << outcomes[i].error);
    CHECK(n == expected_finishers);
  }
};

}  // namespace edl::elastic::testing
