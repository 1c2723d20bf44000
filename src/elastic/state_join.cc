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
  std::string skeleton;  // rank 0's, when it is not fresh (the usual source of a join)
};

// Appends `text` as its length, then its bytes packed 8 a word.
void pack(const std::string& text, std::vector<int64_t>* words) {
  const size_t at = words->size();
  words->push_back(static_cast<int64_t>(text.size()));
  words->resize(at + 1 + (text.size() + 7) / 8, 0);
  if (!text.empty()) std::memcpy(&(*words)[at + 1], text.data(), text.size());
}

// The text pack() put at w[*at] (advancing *at past it); false when the words do not hold one.
bool unpack(const std::vector<int64_t>& w, size_t* at, std::string* text) {
  if (*at >= w.size() || w[*at] < 0) return false;
  const size_t len = static_cast<size_t>(w[*at]), words = (len + 7) / 8;
  if (w.size() - *at - 1 < words) return false;
  text->assign(reinterpret_cast<const char*>(w.data() + *at + 1), len);
  *at += 1 + words;
  return true;
}

// Every member's (committed step, fresh, server address), as int64 words: step, fresh, the address
// (pack), and rank 0's skeleton when it is not fresh (pack; nothing else from the others). Rank 0
// is the lowest-ranked member, the source of a join whenever it synced before (survivors keep their
// ranks, newcomers come after them): its skeleton rides on this allgather, and the join needs no
// broadcast of its own.
std::vector<Member> gather(State& s, Group& g, const std::string& address) {
  const bool fresh = state_fresh(s);
  std::vector<int64_t> mine = {s.committed_step(), fresh ? 1 : 0};
  pack(address, &mine);
  if (g.rank() == 0 && !fresh && !address.empty() && s.committed_step() >= 0)
    pack(snapshot_skeleton(*state_commit(s), "the last in-memory commit"), &mine);
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
    size_t next = 2;
    const bool valid = w.size() >= 3 && unpack(w, &next, &m[r].address) &&
                       (next == w.size() || (r == 0 && unpack(w, &next, &m[r].skeleton) && next == w.size()));
    if (!valid)
      throw MismatchError("State::sync: rank " + std::to_string(r) +
                          " does not run stop-free joins while this worker does (EDL_JOIN must be the same on every "
                          "worker)");
    m[r].step = w[0];
    m[r].fresh = w[1] != 0;
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
  std::string skeleton = m[best].skeleton;
  if (best != 0) {  // rank 0 is fresh too (e.g. every member of rank 0.. was lost): the best one broadcasts
    if (g.rank() == best) skeleton = snapshot_skeleton(*state_commit(s), "the last in-memory commit");
    int64_t len = static_cast<int64_t>(skeleton.size());
    g.broadcast(&len, 1, DataType::kInt64, best);
    skeleton.resize(static_cast<size_t>(len));
    g.broadcast(skeleton.data(), skeleton.size(), DataType::kUInt8, best);
  }
  if (!m[g.rank()].fresh) return plan;
  state_adopt_skeleton(s, skeleton, "the skeleton of rank " + std::to_string(best), &plan.identity);
  plan.catch_up = true;
  plan.step = m[best].step;
  for (int r = 0; r < g.size(); ++r)
    if (!m[r].fresh) plan.sources.push_back(FetchSource{r, m[r].address});
  return plan;
}

}  // namespace edl::elastic
