// What a new generation means for this worker and why the membership changed (GenerationInfo's
// role, previous_generation and reason; include/edl/state.h, docs/elastic.md "Generation facts").
//
// The role follows from this worker's own history: the generation it was last a member of.
// The reason and the previous size are decided once, by the decider of G when it publishes G
// (decide_change, called by Membership::publish), from the store's record of the round (keys.h):
// g<G-1>/members against the new member list, g<G-1>/left/<w> (graceful leaves), g<G>/dropped/<w>
// (members of G-1 left out, and why) and g<G-1>/abort. The result travels inside g<G>/members
// (member_list.h, "#change ..."), so every member of G reads the same reason and previous size
// whenever it reads the decision — a store key written later (an abort of G-1 announced by a worker
// that was stopped meanwhile) cannot make members disagree.
//
// Thread-safety: pure functions; decide_change() makes a few store reads (Store is thread-safe).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/state.h"
#include "edl/store.h"
#include "elastic/keys.h"
#include "elastic/member_list.h"

namespace edl::elastic {

// The role of a worker whose last generation before `generation` was `previous` (0 = none).
EDL_API GenerationRole role_of(uint64_t previous, uint64_t generation);

// Why generation `round` with `members` differs from round - 1, and the size of round - 1 (see
// ChangeReason): what the decider publishes with the member list. Round 1, or a round whose
// predecessor has no member list (all members were lost) or a job error: kStart, previous size 0.
EDL_API GenerationChange decide_change(Store& store, const Keys& keys, uint64_t round,
                                       const std::vector<Member>& members);
// The same, with the members of round - 1 and its graceful leaves already read by the caller (the
// decider's fast pass: two store requests fewer).
EDL_API GenerationChange decide_change(Store& store, const Keys& keys, uint64_t round,
                                       const std::vector<Member>& members, const std::vector<Member>* previous,
                                       const std::set<std::string>* left);

}  // namespace edl::elastic
