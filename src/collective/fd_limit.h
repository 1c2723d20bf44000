// The process's descriptor limit (RLIMIT_NOFILE) for the mesh sockets (docs/collectives.md,
// "Sparse mesh"): a worker raises its soft limit to the hard limit, where the OS allows, and a
// communicator that cannot open the sockets it needs fails at once with InvalidArgument naming the
// limit and the numbers (never a hang, never a half-built mesh that times out). The worker's
// initialisation builds its first communicator, so a worker raises its limit at init.
//
// Thread-safety: any thread.
#pragma once

#include <string>

#include "edl/export.h"

namespace edl::collective {

// Raises RLIMIT_NOFILE's soft limit to its hard limit where it is lower (every communicator of
// more than one rank calls it before it opens its sockets). Returns the soft limit in force (-1:
// unlimited).
EDL_API long raise_descriptor_limit();
// Throws InvalidArgument when fewer than `needed` more descriptors can be opened under the soft
// limit (after raise_descriptor_limit()); `what` says what needs them ("the mesh of rank 3 of 64").
EDL_API void ensure_descriptors(int needed, const std::string& what);
// The InvalidArgument of an EMFILE / ENFILE seen while opening a socket for `what`.
[[noreturn]] EDL_API void throw_descriptor_limit(const std::string& what, int err);

}  // namespace edl::collective
