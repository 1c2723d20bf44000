// optimizer_bench's ranks (see optimizer_rank.h): one rank's steps and the threads driver.
#include "optimizer_rank.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/bench_util.h"
#include "common/step_barrier.h"
#include "edl/optim.h"
#include "edl/store.h"

namespace edl::bench {

const char* mode_name(OptMode m) {
  switch (m) {
    case OptMode::kComputeOnly: return "compute_only";
    case OptMode::kNoOverlap: return "no_overlap";
    case OptMode::kOverlap: return "overlap";
  }
  return "?";
}

RankResult run_rank(const OptBenchConfig& cfg, OptMode mode, const RankEnv& env, int rank, const Workload& w) {
  DistributedOptimizerOptions o;
  o.optimizer.momentum = 0.9;
  o.scaling.base_lr = 1e-6;
  o.scaling.lr_scaling = optim::LrScaling::kNone;
  o.bucket_cap_bytes = cfg.bucket_bytes;
  o.overlap = mode == OptMode::kOverlap;
  o.fp16_compression = cfg.fp16;
  if (mode == OptMode::kComputeOnly) {
    o.local = true;
  } else if (!env.global_world) {
    o.comm = env.comm;
  }
  DistributedOptimizer opt(o);
  std::vector<std::vector<float>> params;
  std::vector<std::vector<size_t>> layer_params(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    for (size_t count : w.layers[l].counts) {
      params.emplace_back(count, 0.01f);
      layer_params[l].push_back(opt.add_parameter("p" + std::to_string(params.size()), params.back().data(), nullptr,
                                                  count));
    }
  }
  RankResult res;
  res.buckets = opt.num_buckets();
  Compute compute;
  const int world = mode == OptMode::kComputeOnly ? 1 : cfg.ranks;
  // Sum of (r + 1) over the ranks; fp16 compression averages instead of summing.
  const float factor = cfg.fp16 && world > 1 ? (world + 1) / 2.0f : world * (world + 1) / 2.0f;
  for (int s = 0; s < cfg.warmup + cfg.steps; ++s) {
    // The communicating modes are kept in lockstep by their allreduces; compute_only ranks start
    // every step together so that the per-step maximum over ranks compares like with like.
    if (mode == OptMode::kComputeOnly && env.lockstep) env.lockstep();
    double t0 = now_s();
    for (size_t l = w.layers.size(); l-- > 0;) {  // backward: last layer first
      compute.run(w.reps[l]);
      for (size_t k = layer_params[l].size(); k-- > 0;) {
        size_t p = layer_params[l][k];
        float* g = opt.grad_slot(p);
        const size_t n = params[p].size();
        const float scale = static_cast<float>(rank + 1);
        for (size_t i = 0; i < n; ++i) g[i] = scale * grad_value(i);
        opt.grad_ready(p);
      }
    }
    const double backward_ms = (now_s() - t0) * 1e3;
    opt.step();
    double ms = (now_s() - t0) * 1e3;
    for (size_t p = 0; p < params.size(); p += 7) {
      const float* g = opt.grad_slot(p);
      for (size_t i = 0; i < params[p].size(); i += 61) {
        float expect = grad_value(i) * (mode == OptMode::kComputeOnly ? static_cast<float>(rank + 1) : factor);
        if (std::fabs(g[i] - expect) > 1e-3f * std::fabs(expect) + 1e-4f) ++res.wrong;
      }
    }
    if (s >= cfg.warmup) {
      res.step_ms.push_back(ms);
      res.backward_ms.push_back(backward_ms);
      const auto& st = opt.last_step_stats();
      res.overlap.push_back(st.overlap_fraction());
      res.comm_ms.push_back(st.comm_s * 1e3);
    }
  }
  return res;
}

ModeResult merge(const std::vector<RankResult>& ranks) {
  ModeResult res;
  // A step ends when the slowest rank ends it: take the per-step maximum over ranks.
  res.steps_ms.assign(ranks[0].step_ms.size(), 0.0);
  for (const auto& r : ranks) {
    for (size_t s = 0; s < res.steps_ms.size(); ++s) res.steps_ms[s] = std::max(res.steps_ms[s], r.step_ms.at(s));
    res.overlap.insert(res.overlap.end(), r.overlap.begin(), r.overlap.end());
    res.comm_ms.insert(res.comm_ms.end(), r.comm_ms.begin(), r.comm_ms.end());
    res.backward_ms.insert(res.backward_ms.end(), r.backward_ms.begin(), r.backward_ms.end());
    res.wrong += r.wrong;
  }
  res.buckets = ranks[0].buckets;
  return res;
}

std::vector<ModeResult> run_threads(const OptBenchConfig& cfg, const Workload& w, const std::vector<OptMode>& order,
                                    const std::string& tag) {
  const int n = cfg.ranks;  // compute_only runs as many ranks too: same CPU load, no communication
  auto store = make_memory_store();  // in-process: needs no socket, so it works across namespaces
  std::vector<ModeResult> results;
  for (size_t k = 0; k < order.size(); ++k) {
    const OptMode mode = order[k];
    const std::string prefix = "optimizer_bench/" + tag + "/" + std::to_string(k) + "/";
    std::vector<RankResult> ranks(n);
    std::vector<std::exception_ptr> errors(n);
    StepBarrier barrier(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          RankEnv env;
          if (mode != OptMode::kComputeOnly) {
            CommunicatorOptions co;
            if (cfg.cluster) {
              // This thread (and the optimizer's communication thread it starts) moves into the
              // rank's namespace; its sockets then cross the emulated link.
              NetnsCluster::enter(cfg.cluster->ns(r));
              co.bind_address = cfg.cluster->address(r);
            }
            env.comm = Communicator::create(store, prefix, r, n, co);
          }
          env.lockstep = [&barrier] { barrier.arrive_and_wait(); };
          ranks[r] = run_rank(cfg, mode, env, r, w);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    results.push_back(merge(ranks));
  }
  return results;
}

}  // namespace edl::bench
