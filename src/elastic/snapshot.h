// Snapshot: the byte encoding of a State commit (what commit() keeps in memory, sync() broadcasts
// and checkpoint files hold).
//
//   "EDLSNAP1" | epoch i64 | step i64 | item count u32 | items...
//   item: name length u32 | name | kind u8 | payload length u64 | payload
// Integers are little-endian. Decoding checks every item against the registration (same names,
// kinds and tensor sizes) and throws DataError naming `origin` and the item on any mismatch or
// truncation, before any registered memory is written.
// Thread-safety: pure functions over the caller's items.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edl/state.h"

namespace edl::elastic {

struct SnapshotItem {
  enum Kind : uint8_t { kTensor = 0, kScalar = 1, kBlob = 2, kComponent = 3 };
  std::string name;
  Kind kind = kTensor;
  void* data = nullptr;  // tensor / scalar memory (caller-owned)
  size_t bytes = 0;      // tensor / scalar size
  std::function<std::string()> save;                 // blob
  std::function<void(const std::string&)> load;      // blob
  Stateful* component = nullptr;                     // component
};

std::string encode_snapshot(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step);
void decode_snapshot(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch,
                     int64_t* step, const std::string& origin);

}  // namespace edl::elastic
