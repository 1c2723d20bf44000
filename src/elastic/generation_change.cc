#include "elastic/generation_change.h"

#include <set>
#include <string>

#include "elastic/member_list.h"

namespace edl::elastic {

const char* role_name(GenerationRole role) {
  switch (role) {
    case GenerationRole::kNewcomer: return "newcomer";
    case GenerationRole::kSurvivor: return "survivor";
    case GenerationRole::kReadmitted: return "readmitted";
  }
  return "unknown";
}

const char* reason_name(ChangeReason reason) {
  switch (reason) {
    case ChangeReason::kStart: return "start";
    case ChangeReason::kJoin: return "join";
    case ChangeReason::kLeave: return "leave";
    case ChangeReason::kFailure: return "failure";
    case ChangeReason::kEviction: return "eviction";
  }
  return "unknown";
}

GenerationRole role_of(uint64_t previous, uint64_t generation) {
  if (previous == 0) return GenerationRole::kNewcomer;
  return previous + 1 == generation ? GenerationRole::kSurvivor : GenerationRole::kReadmitted;
}

namespace {

std::set<std::string> ids_under(Store& store, const std::string& prefix) {
  std::set<std::string> ids;
  for (const auto& k : store.keys(prefix)) ids.insert(k.substr(prefix.size()));
  return ids;
}

}  // namespace

GenerationChange decide_change(Store& store, const Keys& keys, uint64_t round, const std::vector<Member>& members) {
  if (round <= 1) return {};
  auto prev_value = store.get(keys.members(round - 1));
  if (!prev_value || parse_job_error(*prev_value)) return {};  // all members were lost: a start
  const std::vector<Member> prev = parse_members(*prev_value);
  const std::set<std::string> left = ids_under(store, keys.left_prefix(round - 1));
  return decide_change(store, keys, round, members, &prev, &left);
}

GenerationChange decide_change(Store& store, const Keys& keys, uint64_t round, const std::vector<Member>& members,
                               const std::vector<Member>* previous, const std::set<std::string>* left_ids) {
  if (round <= 1 || previous->empty()) return {};
  const std::vector<Member>& prev = *previous;
  const std::set<std::string>& left = *left_ids;
  GenerationChange change;
  change.previous_size = static_cast<int>(prev.size());
  std::set<std::string> now;
  for (const auto& m : members) now.insert(m.id);
  const std::string dropped_prefix = keys.dropped(round, "");
  const bool aborted = store.get(keys.abort(round - 1)).has_value();
  bool died = false, evicted = false, leave = false;
  for (const auto& m : prev) {
    if (now.count(m.id)) continue;
    if (left.count(m.id)) {
      leave = true;
      continue;
    }
    // Left out without a graceful leave: "alive but ..." (heartbeating but stuck) is an eviction;
    // a lease gone, a refused probe or a stopped heartbeat is a failure.
    auto why = store.get(dropped_prefix + m.id);
    if (why && why->rfind("alive", 0) == 0) evicted = true;
    else died = true;
  }
  // A member that died explains an abort; so does an eviction (the progress deadline aborts the
  // generation of a stuck member before the round leaves it out).
  if (died) change.reason = ChangeReason::kFailure;
  else if (evicted) change.reason = ChangeReason::kEviction;
  else if (aborted) change.reason = ChangeReason::kFailure;
  else if (leave) change.reason = ChangeReason::kLeave;
  else change.reason = ChangeReason::kJoin;  // newcomers (readmitted members too), or a join whose joiner did not make it
  return change;
}

}  // namespace edl::elastic
