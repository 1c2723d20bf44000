// A simulated elastic job over ShardGenerator, ranks as objects (optionally drawing from threads),
// one shared Store: the harness of the shard tests (tests/data) and of bench/shard_audit's in-process mode.
//
// It follows the protocol of edl::elastic::run + State exactly as docs/elastic.md describes it:
//   - each step every member calls next(), then the "allreduce" adds every member's records to the
//     replicated model (a per-record counter per epoch), then members commit every commit_every steps
//     (commit = ShardGenerator::save() + a copy of the model);
//   - kill: the victim dies either before the step's allreduce (the step fails everywhere) or after it
//     (the step counted, possibly committed by only a random subset of the survivors); survivors then
//     restore their own last commit, re-rendezvous, sync to the member with the highest committed
//     step (ShardGenerator::load of its snapshot) and get on_generation;
//   - graceful leave / join: at a batch boundary everyone commits, the membership changes, a joiner
//     syncs from the others, everyone gets on_generation (no rollback).
// The final committed model says how many times each record of each epoch contributed.
// Modes: `deterministic` runs the generators' fixed schedule (every member the same micro-batch size);
// `rebalance` gives every member a compute speed (per-record seconds drawn from [1, 3) ms) and feeds
// each step's (compute, records) of all members to every member (observe_step), as the elastic
// runtime's batch-boundary agreement does.
// Thread-safety: a Simulation is driven by one thread (draws may fan out to worker threads).
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "edl/data/shards.h"
#include "edl/store.h"

namespace edl::testing {

struct SimOptions {
  uint64_t records = 1000;
  uint64_t records_per_shard = 37;
  int epochs = 3;
  int initial_workers = 4;
  int max_workers = 8;
  int events = 12;            // random kills + joins + graceful leaves over the run
  int commit_every = 3;       // steps between commits
  uint64_t min_batch = 3, max_batch = 9;  // each worker's batch size is drawn from this range
  uint64_t seed = 1;
  bool threads = false;       // members call next() concurrently from threads
  bool deterministic = false; // ShardOptions::deterministic (batch min_batch, micro_batches below)
  uint64_t micro_batches = 5;
  bool rebalance = false;     // ShardOptions::rebalance, fed with simulated compute times
  std::shared_ptr<Store> store;  // default: a fresh memory store
};

struct EpochAudit {
  int64_t epoch = 0;
  uint64_t records = 0, trained_once = 0, trained_twice = 0, never = 0;
  int events = 0;
};

struct SimResult {
  std::vector<EpochAudit> epochs;
  int kills = 0, joins = 0, leaves = 0, partial_commits = 0;
  int64_t steps = 0;
  std::string error;  // a broken invariant (empty when fine)
};

class Simulation {
 public:
  explicit Simulation(SimOptions o) : o_(std::move(o)), rng_(o_.seed) {
    if (!o_.store) o_.store = make_memory_store();
  }

  SimResult run() {
    SimResult res;
    for (int i = 0; i < o_.initial_workers; ++i) members_.push_back(make_worker());
    for (auto& w : members_) commit(*w);  // the initial commit of every fresh member (equal states)
    new_generation(false);
    // Events are spread over the epochs: at most ceil(events / epochs) per epoch, separated by a
    // random share of an epoch's steps (computed with the current membership).
    const double avg_batch = (o_.min_batch + o_.max_batch) / 2.0;
    const int64_t expected = static_cast<int64_t>(o_.records * o_.epochs / (o_.initial_workers * avg_batch)) + 1;
    const int per_epoch = (o_.events + o_.epochs - 1) / o_.epochs;
    int events_done = 0;
    int64_t next_event_tick = 0;
    std::vector<int> events_in_epoch(o_.epochs + 1, 0);
    const int64_t max_steps = expected * 20 + 1000;
    int64_t tick = 0;  // steps executed, including rolled back ones
    for (;; ++tick) {
      if (tick > max_steps) return fail(res, "no end of data after " + std::to_string(max_steps) + " steps");
      std::vector<data::StepRecords> draws = draw();
      bool end = draws[0].end_of_data;
      for (auto& d : draws) {
        if (d.end_of_data != end) return fail(res, "members disagree about the end of data");
        if (d.epoch != draws[0].epoch || d.step != draws[0].step)
          return fail(res, "members disagree about (epoch, step): (" + std::to_string(d.epoch) + ", " +
                               std::to_string(d.step) + ") vs (" + std::to_string(draws[0].epoch) + ", " +
                               std::to_string(draws[0].step) + ")");
      }
      if (end) break;
      const int64_t step = draws[0].step;
      const int64_t epoch = draws[0].epoch;
      const int64_t epoch_steps =
          static_cast<int64_t>(o_.records / (members_.size() * avg_batch)) + 1;
      bool event = events_done < o_.events && epoch < o_.epochs && events_in_epoch[epoch] < per_epoch &&
                   tick >= next_event_tick;
      if (!event) {
        allreduce(draws);
        if ((step + 1) % o_.commit_every == 0)
          for (auto& w : members_) commit(*w);
        continue;
      }
      ++events_done;
      ++events_in_epoch[std::min<int64_t>(epoch, o_.epochs)];
      next_event_tick = tick + 1 + static_cast<int64_t>(rng_() % (epoch_steps / (per_epoch + 1) + 1));
      int kind = static_cast<int>(rng_() % 3);
      if (kind == 1 && static_cast<int>(members_.size()) >= o_.max_workers) kind = 0;
      if ((kind == 0 || kind == 2) && members_.size() <= 1) kind = 1;
      if (kind == 0) {
        ++res.kills;
        kill(draws, step, &res);
      } else {
        allreduce(draws);  // the step completes; the change takes effect at this batch boundary
        for (auto& w : members_) commit(*w);
        if (kind == 1) {
          ++res.joins;
          members_.push_back(make_worker());
        } else {
          ++res.leaves;
          members_.erase(members_.begin() + rng_() % members_.size());
        }
        new_generation(false);
      }
    }
    for (auto& w : members_) commit(*w);
    res.steps = members_[0]->committed_step;
    for (auto& w : members_)
      if (w->committed_model != members_[0]->committed_model) return fail(res, "members' committed models differ");
    const auto& model = members_[0]->committed_model;
    for (int e = 0; e < o_.epochs; ++e) {
      EpochAudit a;
      a.epoch = e;
      a.records = o_.records;
      a.events = events_in_epoch[e];
      for (uint64_t r = 0; r < o_.records; ++r) {
        int c = model[e * o_.records + r];
        a.trained_once += c == 1;
        a.trained_twice += c >= 2;
        a.never += c == 0;
      }
      res.epochs.push_back(a);
    }
    return res;
  }

 private:
  struct Worker {
    std::unique_ptr<data::ShardGenerator> gen;
    double per_record_s = 0.001;  // rebalance: this member's simulated compute time per record
    std::vector<int> model;  // replicated: counts[epoch * records + record]
    std::vector<int> committed_model;
    std::string committed_gen;
    int64_t committed_step = -1;
    bool fresh = true;
  };

  std::unique_ptr<Worker> make_worker() {
    auto w = std::make_unique<Worker>();
    data::ShardOptions so;
    so.records = o_.records;
    so.records_per_shard = o_.records_per_shard;
    so.batch_size = o_.min_batch + rng_() % (o_.max_batch - o_.min_batch + 1);
    if (o_.deterministic) so.batch_size = o_.min_batch;
    if (o_.rebalance) so.batch_size = o_.min_batch;  // the generation's global batch stays size x min_batch
    so.deterministic = o_.deterministic;
    so.micro_batches = o_.micro_batches;
    so.rebalance = o_.rebalance;
    w->per_record_s = 0.001 * (1.0 + static_cast<double>(rng_() % 200) / 100.0);
    so.seed = o_.seed * 7919;
    so.epochs = o_.epochs;
    so.worker_id = "w" + std::to_string(next_worker_++);
    w->gen = std::make_unique<data::ShardGenerator>(o_.store, so);
    w->model.assign(o_.records * (o_.epochs + 1), 0);
    return w;
  }

  std::vector<data::StepRecords> draw() {
    std::vector<data::StepRecords> out(members_.size());
    if (!o_.threads) {
      std::vector<size_t> order(members_.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng_);
      for (size_t i : order) out[i] = members_[i]->gen->next();
      return out;
    }
    std::vector<std::thread> ts;
    std::vector<std::exception_ptr> errs(members_.size());
    for (size_t i = 0; i < members_.size(); ++i)
      ts.emplace_back([&, i] {
        try {
          out[i] = members_[i]->gen->next();
        } catch (...) {
          errs[i] = std::current_exception();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errs)
      if (e) std::rethrow_exception(e);
    return out;
  }

  void allreduce(const std::vector<data::StepRecords>& draws) {
    std::vector<int> delta(o_.records * (o_.epochs + 1), 0);
    for (auto& d : draws)
      for (uint64_t r : d.records) ++delta[d.epoch * o_.records + r];
    for (auto& w : members_)
      for (size_t i = 0; i < delta.size(); ++i) w->model[i] += delta[i];
    if (!o_.rebalance) return;
    std::vector<double> compute(draws.size());
    std::vector<uint64_t> records(draws.size());
    for (size_t i = 0; i < draws.size(); ++i) {
      records[i] = draws[i].records.size();
      compute[i] = static_cast<double>(records[i]) * members_[i]->per_record_s;
    }
    for (auto& w : members_) w->gen->observe_step(compute, records);
  }

  void commit(Worker& w) {
    w.committed_gen = w.gen->save();
    w.committed_model = w.model;
    w.committed_step = w.gen->step();
  }

  void restore(Worker& w) {
    w.gen->load(w.committed_gen);
    w.model = w.committed_model;
  }

  void kill(const std::vector<data::StepRecords>& draws, int64_t step, SimResult* res) {
    size_t victim = rng_() % members_.size();
    bool after_allreduce = rng_() % 2 == 0;
    if (after_allreduce) {
      allreduce(draws);  // the victim's batch made it into the step
      if ((step + 1) % o_.commit_every == 0) {
        // The failure reaches the survivors while they commit: a random subset commits this step.
        bool partial = false;
        for (size_t i = 0; i < members_.size(); ++i) {
          if (i == victim) continue;
          if (rng_() % 2) commit(*members_[i]);
          else partial = true;
        }
        res->partial_commits += partial;
      }
    }
    members_.erase(members_.begin() + victim);
    for (auto& w : members_) restore(*w);
    new_generation(true);
  }

  // Rendezvous done: sync from the member with the highest committed step (a synced member beats a
  // fresh one), then on_generation — State::sync + state_notify_generation.
  void new_generation(bool after_failure) {
    ++generation_;
    size_t best = 0;
    bool all_same = true, any_fresh = false;
    for (size_t i = 0; i < members_.size(); ++i) {
      auto& w = *members_[i];
      auto& b = *members_[best];
      if (w.committed_step > b.committed_step || (w.committed_step == b.committed_step && b.fresh && !w.fresh)) best = i;
      all_same = all_same && w.committed_step == members_[0]->committed_step;
      any_fresh = any_fresh || w.fresh;
    }
    if (!(all_same && !any_fresh)) {
      for (size_t i = 0; i < members_.size(); ++i) {
        auto& w = *members_[i];
        if (i != best) {
          w.committed_gen = members_[best]->committed_gen;
          w.committed_model = members_[best]->committed_model;
          w.committed_step = members_[best]->committed_step;
        }
        restore(w);
      }
    }
    for (size_t i = 0; i < members_.size(); ++i) {
      members_[i]->fresh = false;
      elastic::GenerationInfo info;
      info.generation = generation_;
      info.rank = static_cast<int>(i);
      info.size = static_cast<int>(members_.size());
      info.after_failure = after_failure;
      members_[i]->gen->on_generation(info);
    }
  }

  SimResult fail(SimResult& r, const std::string& why) {
    r.error = why;
    return r;
  }

  SimOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<Worker>> members_;
  uint64_t generation_ = 0;
  int next_worker_ = 0;
};

}  // namespace edl::testing
