// Snapshot: the byte encoding of a State commit (what commit() keeps in memory, sync() broadcasts
// and checkpoint files hold).
//
//   "EDLSNAP2" | job len u32 | job id | lineage len u32 | lineage | epoch i64 | step i64 |
//   item count u32 | items...
//   item: name length u32 | name | kind u8 | payload length u64 | payload
// Integers are little-endian; the lengths are the common codec's str (u32) and blob (u64)
// (common/codec.h). The job id and lineage (docs/elastic.md, "Lineage") say which job and
// which history the commit belongs to ("" = not yet known). Decoding checks the identity against
// `expect` (empty fields are not checked) and every item against the registration (same names, kinds
// and tensor sizes), and throws DataError naming `origin` and the item on any mismatch or
// truncation (the codec's DecodeError, a DataError naming the field), before any registered memory
// is written.
// Thread-safety: pure functions over the caller's items.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edl/export.h"
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
  // A staged blob (register_staged_blob, elastic/state_staged.h; `load` as a blob's): encode_snapshot calls capture
  // and writes an empty payload, snapshot_fill_staged writes captured()'s bytes there.
  std::function<void()> capture;
  std::function<std::string()> captured;
  std::function<void()> restore_captured;
  bool staged() const { return static_cast<bool>(capture); }
};

struct SnapshotIdentity {
  std::string job;
  std::string lineage;
};

EDL_API std::string encode_snapshot(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step,
                            const SnapshotIdentity& id = {});
// The same encoding written into *buffer (its contents replaced, its capacity kept: a commit
// reuses an earlier commit's buffer instead of allocating and faulting in fresh pages).
EDL_API void encode_snapshot_into(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step,
                                  const SnapshotIdentity& id, std::string* buffer);
// `got` (optional) receives the snapshot's identity.
EDL_API void decode_snapshot(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch,
                     int64_t* step, const std::string& origin, const SnapshotIdentity& expect = {},
                     SnapshotIdentity* got = nullptr);
// A snapshot encoded with staged blobs (their payloads empty) made whole: each staged item's payload
// becomes its captured() bytes. `items` must be the registration it was encoded from.
std::string snapshot_fill_staged(const std::string& bytes, const std::vector<SnapshotItem>& items,
                                 const std::string& origin);
// The same snapshot with another identity (items untouched).
std::string restamp_snapshot(const std::string& bytes, const SnapshotIdentity& id, const std::string& origin);
// The identity and step of a snapshot without decoding its items (DataError when malformed).
SnapshotIdentity snapshot_identity(const std::string& bytes, const std::string& origin, int64_t* step);

// Where each item's payload lies in an encoded snapshot (byte offset, size), in item order; DataError
// when malformed. Items are not checked against a registration.
struct PayloadSpan {
  SnapshotItem::Kind kind = SnapshotItem::kTensor;
  size_t offset = 0;
  size_t size = 0;
};
EDL_API std::vector<PayloadSpan> snapshot_payloads(const std::string& bytes, const std::string& origin);

// The skeleton of a snapshot: the same encoding with each tensor payload replaced by its size (u64),
// what a stop-free newcomer adopts at once; the tensors follow in the background (docs/elastic.md,
// "Stop-free joins").
EDL_API std::string snapshot_skeleton(const std::string& bytes, const std::string& origin);
// Decodes a skeleton like decode_snapshot, checking each tensor's size against the registration
// and leaving the tensors' memory alone.
EDL_API void decode_skeleton(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch,
                     int64_t* step, const std::string& origin, const SnapshotIdentity& expect = {},
                     SnapshotIdentity* got = nullptr);

}  // namespace edl::elastic
