// Access to the current world for benchmarks and tools that need a communicator of their own next
// to the background engine (which owns the generation's communicator).
// Thread-safety: call after edl::init(); collective over all ranks of the world.
#pragma once

#include <memory>
#include <string>

#include "collective/engine.h"
#include "collective/tcp_communicator.h"
#include "edl/store.h"

namespace edl::collective {

// The runtime's control-plane store (a fresh memory store in a world of one without a launcher).
EDL_API std::shared_ptr<Store> world_store();

// A new communicator over the current world — same rank and size, same CommunicatorOptions from
// the runtime's Config — under the store prefix "<job>/<tag>/". Every rank must call it with the
// same tag; a tag is used once per job.
EDL_API std::shared_ptr<TcpCommunicator> make_world_communicator(const std::string& tag);
// The same with the transport given instead of EDL_TRANSPORT's (benchmarks compare them).
EDL_API std::shared_ptr<TcpCommunicator> make_world_communicator(const std::string& tag, Transport transport);

// Counters of the current generation's background engine.
EDL_API EngineStats world_engine_stats();

}  // namespace edl::collective
