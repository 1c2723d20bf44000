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
