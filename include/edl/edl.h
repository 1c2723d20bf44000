// EDL — elastic, fault-tolerant distributed deep-learning training. The umbrella header.
//
//   edl::init();                    // joins the job started by edl-run (a world of 1 without it)
//   edl::allreduce(grad, n, edl::DataType::kFloat32);
//   edl::shutdown();
//
// init()/shutdown() are called once per process from the main thread; rank()/size()/... may be
// called from any thread after init(). In an elastic job rank() and size() change between
// membership generations (read them again after each edl::elastic::run retry / resize); after
// edl::elastic::run returned RunOutcome::kLeft (or threw) this process is no longer a member:
// rank() and local_rank() are -1, size() and local_size() 0 (edl/elastic.h, "After run").
#pragma once

#include "edl/collectives.h"
#include "edl/communicator.h"
#include "edl/config.h"
#include "edl/data.h"
#include "edl/elastic.h"
#include "edl/error.h"
#include "edl/export.h"
#include "edl/optim.h"
#include "edl/state.h"
#include "edl/store.h"
#include "edl/types.h"

namespace edl {

// Joins the world described by the environment edl-run sets (EDL_* variables, docs/api.md).
// Without a launcher: a world of size 1. Throws InvalidArgument for malformed EDL_* values,
// StoreError / AuthError / TimeoutError when the job cannot be joined.
EDL_API void init();
// Leaves the world: drains the background engine and closes connections. Idempotent.
EDL_API void shutdown();
EDL_API bool initialized();

EDL_API int rank();
EDL_API int size();
EDL_API int local_rank();
EDL_API int local_size();

// EDL_DETERMINISTIC=1: the job asks for the reproducible mode (docs/optim.md, "Reproducible mode").
// Programs built for it pass this to DistributedOptimizerOptions::deterministic and
// data::ShardOptions::deterministic. Any time, any thread (before init() it reads the environment).
EDL_API bool deterministic();

}  // namespace edl
