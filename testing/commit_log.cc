// Parsing of multihost_worker's commit log and the control-plane measures (see commit_log.h).
#include "testing/commit_log.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace edl::testing {

CommitLog CommitLog::parse(const std::string& text) {
  CommitLog log;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "commit") {
      Commit c;
      if (ls >> c.worker >> c.host >> c.step >> c.generation >> c.rank >> c.size >> c.crc >> c.mono_ms >> c.wall_ms)
        log.commits.push_back(c);
    } else if (kind == "done") {
      WorkerEnd e;
      double wall = 0;
      if (ls >> e.worker >> e.host >> e.step >> e.crc >> e.mono_ms >> wall) log.ends.push_back(e);
    } else if (kind == "error") {
      WorkerEnd e;
      e.error = true;
      double wall = 0;
      if (ls >> e.worker >> e.host >> e.mono_ms >> wall) {
        std::getline(ls, e.message);
        if (!e.message.empty() && e.message[0] == ' ') e.message.erase(0, 1);
        log.ends.push_back(e);
      }
    }
  }
  return log;
}

CommitLog CommitLog::parse_elastic_worker(const std::string& text) {
  CommitLog log;
  std::istringstream in(text);
  std::string line;
  auto host_of = [](const std::string& worker) { return worker.substr(0, worker.rfind(':')); };
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind, worker;
    if (!(ls >> kind >> worker)) continue;
    if (kind == "step") {
      Commit c;
      c.worker = worker;
      c.host = host_of(worker);
      if (ls >> c.step >> c.generation >> c.rank >> c.size >> c.mono_ms) log.commits.push_back(c);
    } else if (kind == "gen") {
      Generation g;
      g.worker = worker;
      g.host = host_of(worker);
      int failure = 0;
      if (ls >> g.generation >> g.rank >> g.size >> g.previous_size >> failure >> g.mono_ms) {
        g.after_failure = failure != 0;
        log.generations.push_back(g);
      }
    } else if (kind == "done") {
      WorkerEnd e;
      e.worker = worker;
      e.host = host_of(worker);
      if (ls >> e.step >> e.crc >> e.hist) log.ends.push_back(e);
    } else if (kind == "error") {
      WorkerEnd e;
      e.worker = worker;
      e.host = host_of(worker);
      e.error = true;
      std::getline(ls, e.message);
      if (!e.message.empty() && e.message[0] == ' ') e.message.erase(0, 1);
      log.ends.push_back(e);
    } else if (kind == "audit") {
      Audit a;
      a.worker = worker;
      if (ls >> a.once >> a.records) log.audits.push_back(a);
    }
  }
  return log;
}

int64_t reference_hist(int64_t steps) {
  uint64_t h = 0;
  for (int64_t s = 1; s <= steps; ++s) h = h * 1000003u + static_cast<uint64_t>(s);
  return static_cast<int64_t>(h);
}

std::string exactly_once(const CommitLog& log, const std::vector<std::string>& finishers, uint64_t records) {
  std::map<std::string, const WorkerEnd*> done;
  for (const WorkerEnd& e : log.ends)
    if (!e.error) done[e.worker] = &e;
  std::string problems;
  auto fail = [&](const std::string& what) { problems += (problems.empty() ? "" : "; ") + what; };
  const WorkerEnd* first = nullptr;
  for (const std::string& w : finishers) {
    auto it = done.find(w);
    if (it == done.end()) {
      fail(w + " logged no done line");
      continue;
    }
    const WorkerEnd& e = *it->second;
    if (first && (e.step != first->step || e.crc != first->crc))
      fail(w + " ended at step " + std::to_string(e.step) + " crc " + std::to_string(e.crc) + ", " + first->worker +
           " at step " + std::to_string(first->step) + " crc " + std::to_string(first->crc));
    if (!first) first = &e;
  }
  for (const auto& [w, e] : done)
    if (e->hist != reference_hist(e->step))
      fail(w + "'s step history at step " + std::to_string(e->step) + " is not every step once");
  if (records > 0) {
    for (const std::string& w : finishers) {
      const Audit* a = nullptr;
      for (const Audit& x : log.audits)
        if (x.worker == w) a = &x;
      if (!a) fail(w + " logged no audit");
      else if (a->records != records || a->once != records)
        fail(w + " trained " + std::to_string(a->once) + " of " + std::to_string(records) + " records exactly once");
    }
  }
  return problems;
}

double pause_ms(const CommitLog& log, double fault_ms, double end_ms) {
  double before = -std::numeric_limits<double>::infinity();
  std::vector<double> after;
  for (const Commit& c : log.commits) {
    if (c.mono_ms <= fault_ms) before = std::max(before, c.mono_ms);
    else if (c.mono_ms <= end_ms) after.push_back(c.mono_ms);
  }
  if (std::isinf(before) || after.empty()) return -1;
  std::sort(after.begin(), after.end());
  double gap = 0, prev = before;
  for (double t : after) {
    gap = std::max(gap, t - prev);
    prev = t;
  }
  return gap;
}

int lost_steps(const CommitLog& log) {
  std::map<int64_t, std::set<uint64_t>> gens_of_step;
  for (const Commit& c : log.commits) gens_of_step[c.step].insert(c.generation);
  int lost = 0;
  for (const auto& [step, gens] : gens_of_step)
    if (gens.size() > 1) ++lost;
  return lost;
}

int split_brain_steps(const CommitLog& log) {
  // First commit time of every generation.
  std::map<uint64_t, double> first;
  for (const Commit& c : log.commits) {
    auto it = first.find(c.generation);
    if (it == first.end() || c.mono_ms < it->second) first[c.generation] = c.mono_ms;
  }
  std::set<std::pair<uint64_t, int64_t>> bad;
  for (const Commit& c : log.commits) {
    for (auto it = first.upper_bound(c.generation); it != first.end(); ++it) {
      if (it->second < c.mono_ms) {  // a later generation trained before this commit
        bad.insert({c.generation, c.step});
        break;
      }
    }
  }
  std::map<std::pair<uint64_t, int64_t>, uint32_t> crc_of;
  for (const Commit& c : log.commits) {
    auto key = std::make_pair(c.generation, c.step);
    auto [it, fresh] = crc_of.emplace(key, c.crc);
    if (!fresh && it->second != c.crc) bad.insert(key);
  }
  return static_cast<int>(bad.size());
}

int64_t last_step_of_host(const CommitLog& log, const std::string& host, double after_ms) {
  int64_t best = -1;
  for (const Commit& c : log.commits)
    if (c.host == host && c.mono_ms > after_ms) best = std::max(best, c.step);
  return best;
}

int commits_after(const CommitLog& log, double after_ms, const std::string& except_host) {
  int n = 0;
  for (const Commit& c : log.commits)
    if (c.mono_ms > after_ms && (except_host.empty() || c.host != except_host)) ++n;
  return n;
}

const WorkerEnd* first_error_of_host(const CommitLog& log, const std::string& host, double after_ms) {
  const WorkerEnd* best = nullptr;
  for (const WorkerEnd& e : log.ends)
    if (e.error && e.host == host && e.mono_ms > after_ms && (!best || e.mono_ms < best->mono_ms)) best = &e;
  return best;
}

}  // namespace edl::testing
