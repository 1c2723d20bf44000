#include "elastic/snapshot.h"

#include <cstring>

#include "common/codec.h"
#include "edl/error.h"

namespace edl::elastic {
namespace {

constexpr char kMagic[8] = {'E', 'D', 'L', 'S', 'N', 'A', 'P', '2'};

using Reader = codec::Reader;
using Writer = codec::Writer<std::string>;

Reader reader_of(const std::string& bytes, const std::string& origin) {
  return Reader(bytes, "state snapshot '" + origin + "'");
}

void write_identity(Writer& w, const SnapshotIdentity& id) {
  w.raw(kMagic, sizeof(kMagic));
  w.str(id.job, "job id");
  w.str(id.lineage, "lineage");
}

// Magic, identity, epoch and step.
SnapshotIdentity read_head(Reader& r, const std::string& origin, int64_t* epoch, int64_t* step) {
  if (r.raw(sizeof(kMagic), "magic") != std::string_view(kMagic, sizeof(kMagic)))
    throw DataError(origin + ": not an EDL state snapshot of this version (bad magic)");
  SnapshotIdentity id;
  id.job = std::string(r.str("job id"));
  id.lineage = std::string(r.str("lineage"));
  *epoch = r.i64("epoch");
  *step = r.i64("step");
  return id;
}

}  // namespace

SnapshotIdentity snapshot_identity(const std::string& bytes, const std::string& origin, int64_t* step) {
  Reader r = reader_of(bytes, origin);
  int64_t epoch = 0;
  return read_head(r, origin, &epoch, step);
}

std::string restamp_snapshot(const std::string& bytes, const SnapshotIdentity& id, const std::string& origin) {
  Reader r = reader_of(bytes, origin);
  int64_t epoch = 0, step = 0;
  read_head(r, origin, &epoch, &step);
  const size_t rest = r.offset() - 16;  // epoch and step start here
  std::string out;
  Writer w(out);
  write_identity(w, id);
  out.append(bytes, rest, std::string::npos);
  return out;
}

std::string encode_snapshot(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step,
                            const SnapshotIdentity& id) {
  std::string out;
  encode_snapshot_into(items, epoch, step, id, &out);
  return out;
}

void encode_snapshot_into(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step,
                          const SnapshotIdentity& id, std::string* buffer) {
  size_t total = 40 + id.job.size() + id.lineage.size();
  for (const auto& it : items) total += 13 + it.name.size() + it.bytes;
  std::string& out = *buffer;
  out.clear();  // keeps the capacity: a recycled buffer's pages are written, not faulted in again
  if (out.capacity() < total) out.reserve(total);  // (a smaller reserve may shrink, in C++17)
  Writer w(out);
  write_identity(w, id);
  w.i64(epoch);
  w.i64(step);
  w.u32(static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    w.str(it.name, "item name");
    w.u8(it.kind);
    if (it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar) {
      w.blob(std::string_view(static_cast<const char*>(it.data), it.bytes));
    } else if (it.staged()) {
      it.capture();  // the copy stays where the data lives; snapshot_fill_staged makes it bytes
      w.blob(std::string_view());
    } else {
      w.blob(it.kind == SnapshotItem::kBlob ? it.save() : it.component->save());
    }
  }
}

std::string snapshot_fill_staged(const std::string& bytes, const std::vector<SnapshotItem>& items,
                                 const std::string& origin) {
  const std::vector<PayloadSpan> spans = snapshot_payloads(bytes, origin);
  EDL_ASSERT(spans.size() == items.size());
  std::string out;
  size_t at = 0;  // copy everything but the staged payloads (empty, after their u64 length)
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].staged()) continue;
    const std::string payload = items[i].captured();
    out.append(bytes, at, spans[i].offset - 8 - at);
    Writer w(out);
    w.blob(payload);
    at = spans[i].offset + spans[i].size;
  }
  out.append(bytes, at, std::string::npos);
  return out;
}

namespace {

// Decodes `bytes` into the registered items. Pass 1 validates everything, pass 2 writes: a bad
// snapshot never half-loads. A skeleton (snapshot_skeleton) carries each tensor's size instead of
// its bytes: the size is checked and the tensor's memory is left alone.
void decode_items(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch, int64_t* step,
                  const std::string& origin, const SnapshotIdentity& expect, SnapshotIdentity* got, bool skeleton) {
  std::vector<std::string_view> spans(items.size());
  Reader r = reader_of(bytes, origin);
  int64_t e = 0, s = 0;
  SnapshotIdentity id = read_head(r, origin, &e, &s);
  if (!expect.job.empty() && id.job != expect.job)
    throw DataError(origin + ": belongs to job '" + id.job + "', not to this job '" + expect.job +
                    "' (EDL_JOB_ID); to resume that job, run it with --job-id " + id.job);
  if (!expect.lineage.empty() && id.lineage != expect.lineage)
    throw DataError(origin + ": belongs to lineage '" + id.lineage + "' of job '" + id.job +
                    "', but the job's current lineage is '" + expect.lineage +
                    "' (an older history: the job was restarted from scratch since)");
  uint32_t n = r.u32("item count");
  if (n != items.size())
    throw DataError(origin + ": state snapshot has " + std::to_string(n) + " items but " +
                    std::to_string(items.size()) + " are registered");
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    std::string name(r.str("item name"));
    if (name != it.name)
      throw DataError(origin + ": state item " + std::to_string(i) + " is '" + name + "' but '" + it.name +
                      "' is registered there");
    uint8_t kind = r.u8("item kind");
    if (kind != it.kind) throw DataError(origin + ": state item '" + name + "' has a different kind");
    const bool fixed = it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar;
    spans[i] = r.blob("item payload");
    size_t held = spans[i].size();
    if (skeleton && it.kind == SnapshotItem::kTensor) {
      if (held != 8) throw DataError(origin + ": state item '" + name + "' is not a tensor size of a skeleton");
      held = static_cast<size_t>(codec::load_le<uint64_t>(spans[i].data()));
    }
    if (fixed && held != it.bytes)
      throw DataError(origin + ": state item '" + name + "' holds " + std::to_string(held) + " bytes but " +
                      std::to_string(it.bytes) + " are registered");
  }
  r.finish();
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (it.kind == SnapshotItem::kTensor && skeleton) continue;
    if (it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar) {
      if (!spans[i].empty()) std::memcpy(it.data, spans[i].data(), spans[i].size());
    } else if (it.kind == SnapshotItem::kBlob) {
      it.load(std::string(spans[i]));
    } else {
      it.component->load(std::string(spans[i]));
    }
  }
  *epoch = e;
  *step = s;
  if (got) *got = std::move(id);
}

}  // namespace

void decode_snapshot(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch,
                     int64_t* step, const std::string& origin, const SnapshotIdentity& expect,
                     SnapshotIdentity* got) {
  decode_items(bytes, items, epoch, step, origin, expect, got, /*skeleton=*/false);
}

std::vector<PayloadSpan> snapshot_payloads(const std::string& bytes, const std::string& origin) {
  Reader r = reader_of(bytes, origin);
  int64_t epoch = 0, step = 0;
  read_head(r, origin, &epoch, &step);
  const uint32_t n = r.count("item count", 13);
  std::vector<PayloadSpan> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    r.str("item name");
    const uint8_t kind = r.u8("item kind");
    if (kind > SnapshotItem::kComponent) r.fail("item " + std::to_string(i) + " has an unknown kind " + std::to_string(kind));
    std::string_view payload = r.blob("item payload");
    out.push_back(PayloadSpan{static_cast<SnapshotItem::Kind>(kind), static_cast<size_t>(payload.data() - bytes.data()),
                              payload.size()});
  }
  r.finish();
  return out;
}

std::string snapshot_skeleton(const std::string& bytes, const std::string& origin) {
  const std::vector<PayloadSpan> spans = snapshot_payloads(bytes, origin);
  std::string out;
  size_t at = 0;  // copy everything but the tensor payloads, whose u64 length becomes 8 + the size
  for (const auto& s : spans) {
    if (s.kind != SnapshotItem::kTensor) continue;
    out.append(bytes, at, s.offset - 8 - at);
    codec::Writer<std::string> w(out);
    w.u64(8);
    w.u64(s.size);
    at = s.offset + s.size;
  }
  out.append(bytes, at, std::string::npos);
  return out;
}

void decode_skeleton(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch, int64_t* step,
                     const std::string& origin, const SnapshotIdentity& expect, SnapshotIdentity* got) {
  decode_items(bytes, items, epoch, step, origin, expect, got, /*skeleton=*/true);
}

}  // namespace edl::elastic
