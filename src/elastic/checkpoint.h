// Checkpoint files: a State commit persisted to a directory so a whole-job restart resumes.
//
// File <dir>/state.edlckpt = "EDLCKPT1" | payload length u64 | crc32 u32 | payload (a snapshot).
// Writes are atomic: a temp file in the same directory, fsync, rename over the old file, fsync of the
// directory. A missing file means "no checkpoint"; a truncated or corrupt one is a DataError naming
// the file (never loaded silently).
// Thread-safety: functions; concurrent writers to one directory must be avoided by the caller
// (only rank 0 of a generation persists).
#pragma once

#include <optional>
#include <string>

#include "edl/export.h"

namespace edl::elastic {

void write_checkpoint(const std::string& dir, const std::string& payload);
// The payload of <dir>/state.edlckpt, or nullopt when there is none; *path receives the file name.
std::optional<std::string> read_checkpoint(const std::string& dir, std::string* path);
EDL_API std::string checkpoint_path(const std::string& dir);

}  // namespace edl::elastic
