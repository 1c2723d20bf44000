// The sync of a generation with stop-free joins (state_join.h).
#include "elastic/state_join.h"

#include <cstring>

#include "edl/error.h"

namespace edl::elastic {
namespace {

struct Member {
  int64_t step = -1;
  bool fresh = false;
  std::string address;
};

// Every member's (committed step, fresh, server address), as int64 words: step, fresh, address
// length, then the address packed 8 bytes a word.
std::vector<Member> gather(State& s, Group& g, const std::string& address) {
  std::vector<int64_t> mine = {s.committed_step(), state_fresh(s) ? 1 : 0, static_cast<int64_t>(address.size())};
  mine.resize(3 + (address.size() + 7) / 8, 0);
  if (!address.empty()) std::memcpy(&mine[3], address.data(), address.size());
  std::vector<uint8_t> all;
  std::vector<size_t> counts;
  g.allgatherv(mine.data(), mine.size(), DataType::kInt64, all, &counts);
  EDL_ASSERT(counts.size() == static_cast<size_t>(g.size()));
  std::vector<Member> m(g.size());
  size_t at = 0;
  for (int r = 0; r < g.size(); ++r) {
    std::vector<int64_t> w(counts[r]);
    EDL_ASSERT(all.size() >= (at + w.size()) * sizeof(int64_t));
    std::memcpy(w.data(), all.data() + at * sizeof(int64_t), w.size() * sizeof(int64_t));
    at += w.size();
    const bool valid = w.size() >= 3 && w[2] >= 0 && w.size() == 3 + (static_cast<size_t>(w[2]) + 7) / 8;
    if (!valid)
      throw MismatchError("State::sync: rank " + std::to_string(r) +
                          " does not run stop-free joins while this worker does (EDL_JOIN must be the same on every "
                          "worker)");
    m[r].step = w[0];
    m[r].fresh = w[1] != 0;
    m[r].address.assign(reinterpret_cast<const char*>(w.data() + 3), static_cast<size_t>(w[2]));
  }
  return m;
}

}  // namespace

JoinPlan sync_state_stopfree(State& s, Group& g, const std::string& address) {
  JoinPlan plan;
  if (g.size() == 1) {
    plan.fresh_start = sync_state(s, g);
    return plan;
  }
  const std::vector<Member> m = gather(s, g, address);
  int best = -1;  // the lowest-ranked member that synced before
  bool any_fresh = false, same = true, servers = true;
  for (int r = 0; r < g.size(); ++r) {
    if (m[r].fresh) {
      any_fresh = true;
      continue;
    }
    if (best < 0) best = r;
    same = same && m[r].step == m[best].step;
    servers = servers && !m[r].address.empty();
  }
  if (!any_fresh && same) return plan;  // every member holds the same commit of the same history
  bool stop_free = any_fresh && best >= 0 && same && servers && m[best].step >= 0;
  for (int r = 0; r < g.size() && stop_free; ++r) stop_free = !m[r].fresh || m[r].step <= m[best].step;
  if (!stop_free) {  // a fresh start, members behind after a failure, a newcomer with a newer checkpoint
    plan.fresh_start = sync_state(s, g);
    return plan;
  }
  std::string skeleton;
  if (g.rank() == best) skeleton = snapshot_skeleton(*state_commit(s), "the last in-memory commit");
  int64_t len = static_cast<int64_t>(skeleton.size());
  g.broadcast(&len, 1, DataType::kInt64, best);
  skeleton.resize(static_cast<size_t>(len));
  g.broadcast(skeleton.data(), skeleton.size(), DataType::kUInt8, best);
  if (!m[g.rank()].fresh) return plan;
  state_adopt_skeleton(s, skeleton, "the skeleton of rank " + std::to_string(best), &plan.identity);
  plan.catch_up = true;
  plan.step = m[best].step;
  for (int r = 0; r < g.size(); ++r)
    if (!m[r].fresh) plan.sources.push_back(FetchSource{r, m[r].address});
  return plan;
}

}  // namespace edl::elastic
