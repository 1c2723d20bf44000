// Checkpoint files: a State commit persisted to a directory so a whole-job restart resumes.
//
// File <dir>/state.edlckpt = "EDLCKPT2" | step i64 | payload length u64 | crc32 u32 | payload (a
// snapshot, which carries the job id and lineage). Writes are atomic: a temp file in the same
// directory, fsync, rename over the old file, fsync of the directory. The rename happens under an
// exclusive flock of <dir>/state.edlckpt.lock and only when the file in place holds an older (or
// the same) step, so a slow writer never replaces a newer checkpoint with an older one. A missing
// file means "no checkpoint"; a truncated or corrupt one is a DataError naming the file (never
// loaded silently).
// Thread-safety: functions; concurrent writers to one directory are safe (see above).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "edl/export.h"

namespace edl::elastic {

// Writes `payload` (the commit of `step`). Returns false, writing nothing, when the directory
// already holds a checkpoint of a newer step. Throws DataError naming the file on I/O errors.
EDL_API bool write_checkpoint(const std::string& dir, const std::string& payload, int64_t step);
// The payload of <dir>/state.edlckpt, or nullopt when there is none; *path receives the file name.
EDL_API std::optional<std::string> read_checkpoint(const std::string& dir, std::string* path);
EDL_API std::string checkpoint_path(const std::string& dir);
// The job id stamped in <dir>'s checkpoint (the snapshot's identity), nullopt when there is no
// checkpoint; *path receives the file name. DataError naming the file when it is truncated or
// corrupt. edl-run reuses it as the job id when no --job-id is given (docs/launcher.md).
EDL_API std::optional<std::string> checkpoint_job_id(const std::string& dir, std::string* path);

}  // namespace edl::elastic
