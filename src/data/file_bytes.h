// Whole-file reading with transparent gzip decompression (zlib), for the dataset readers.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edl::data::detail {

// Returns the (decompressed, if the file is gzip) bytes of `path`. A missing or unreadable file, a
// truncated or corrupt gzip stream: DataError "<path>: <problem>".
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace edl::data::detail
