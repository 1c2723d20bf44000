// The sync of a new generation under stop-free joins (docs/elastic.md, "Stop-free joins"), and the
// State internals it and the catch-up use (defined in state.cc).
//
// sync_state_stopfree: members allgather (committed step, fresh, state server address), rank 0 also
// the *skeleton* of its commit when it is not fresh (snapshot_skeleton: everything but the tensors'
// bytes). When some members are fresh (newcomers that never synced), every other member holds the
// same committed step S and no fresh member is ahead of S, the skeleton of the lowest-ranked
// non-fresh member's commit of S is the job's (rank 0's, from the allgather, in a join: survivors keep
// their ranks; else that member broadcasts it); each fresh member adopts it
// (scalars, blobs, components, epoch, step) and catches up on the tensors in the background, from
// the non-fresh members' state servers; nobody else moves. Otherwise it is State::sync (sync_state).
// Thread-safety: the training thread.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/state.h"
#include "elastic/group.h"
#include "elastic/snapshot.h"
#include "elastic/state_fetch.h"

namespace edl::elastic {

struct JoinPlan {
  bool fresh_start = false;          // no member had synced before (sync_state's result: check the lineage)
  bool catch_up = false;             // this member adopted a skeleton and must fetch the tensors
  int64_t step = -1;                 // the step of the commit the skeleton is of
  SnapshotIdentity identity;         // that commit's job id and lineage
  std::vector<FetchSource> sources;  // the members serving it (every non-fresh member), rank order
};

// `address`: this member's StateServer ("" when it has none: then it is never a source).
EDL_API JoinPlan sync_state_stopfree(State& s, Group& g, const std::string& address);

// --- State internals (state.cc) ------------------------------------------------------------------
// Whether the State was never synced (a newcomer's initial state or loaded checkpoint).
bool state_fresh(State& s);
// The last commit's bytes (shared, never modified: a state server sends from it).
EDL_API std::shared_ptr<const std::string> state_commit(State& s);
// The registered tensors' memory, in registration order (the tensor space of state_wire.h).
std::vector<iovec> state_tensor_space(State& s);
// Adopts a skeleton (snapshot.h): every item but the tensors, epoch and step. The last commit, the
// identity and the fresh flag stay as they were, so restore() still returns to the newcomer's own
// state until the catch-up completed.
void state_adopt_skeleton(State& s, const std::string& skeleton, const std::string& origin, SnapshotIdentity* got);
// The catch-up completed: the State now holds the job's state; it takes `id` and is no longer fresh.
void state_caught_up(State& s, const SnapshotIdentity& id);

}  // namespace edl::elastic
