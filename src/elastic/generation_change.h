// What a new generation means for this worker and why the membership changed (GenerationInfo's
// role, previous_generation and reason; include/edl/state.h, docs/elastic.md "Generation facts").
//
// The role follows from this worker's own history: the generation it was last a member of.
// The reason is read from the store's record of the round that formed generation G (keys.h):
// g<G-1>/members against g<G>/members, g<G-1>/left/<w> (graceful leaves), g<G>/dropped/<w> (members
// of G-1 left out, and why) and g<G-1>/abort. Those keys outlive the round (rank 0 of G deletes
// only generations below G-2), so every member of G computes the same reason.
//
// Thread-safety: pure functions; change_reason() makes a few store reads (Store is thread-safe).
#pragma once

#include <cstdint>

#include "edl/export.h"
#include "edl/state.h"
#include "edl/store.h"
#include "elastic/keys.h"
#include "elastic/membership.h"

namespace edl::elastic {

// The role of a worker whose last generation before `generation` was `previous` (0 = none).
EDL_API GenerationRole role_of(uint64_t previous, uint64_t generation);

// Why generation v.id differs from v.id - 1 (see ChangeReason). `after_failure`: this worker came
// through a failure of its own generation (the reason is then at least a failure when the store
// shows no other change).
EDL_API ChangeReason change_reason(Store& store, const Keys& keys, const GenerationView& v, bool after_failure);

}  // namespace edl::elastic
