// Staged blobs in an elastic State: items whose commit copy stays where their data lives (device
// memory: edl::torch's CUDA parameters, buffers and optimizer state; docs/torch.md, "CUDA tensors").
// An internal interface of libedl for the libraries above it (edl::torch), not a public header.
//
// commit() calls `capture` (keep a copy; no host bytes are made); the host bytes of that copy are
// asked of `captured` only when the commit leaves the process: a checkpoint file (on the member
// that writes them), sync() (every member, once per sync: the allgather carries the commit's
// size), a stop-free join's state server. restore() calls
// `restore_captured` (the copy back; also after the bytes were made), or `load` when the last
// commit came from elsewhere (sync, load_checkpoint, which call `load`). In the snapshot encoding a
// staged blob is a blob: checkpoint files are the same as with register_blob.
//
// Thread-safety: as State (the training thread); `captured` is asked until the next commit.
#pragma once

#include <functional>
#include <string>

#include "edl/export.h"
#include "edl/state.h"

namespace edl::elastic {

struct StagedBlob {
  std::function<void()> capture;
  std::function<std::string()> captured;
  std::function<void()> restore_captured;
  std::function<void(const std::string&)> load;
};

// InvalidArgument when a function is missing or the name is taken.
EDL_API void register_staged_blob(State& state, const std::string& name, StagedBlob blob);

}  // namespace edl::elastic
