#include "elastic/snapshot.h"

#include <cstring>

#include "edl/error.h"

namespace edl::elastic {
namespace {

constexpr char kMagic[8] = {'E', 'D', 'L', 'S', 'N', 'A', 'P', '2'};

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(b, sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& s, const std::string& origin) : s_(s), origin_(origin) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string bytes(size_t n, const char* what) {
    need(n, what);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  const char* ptr() const { return s_.data() + pos_; }
  void skip(size_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(size_t n, const char* what) {
    if (s_.size() - pos_ < n)
      throw DataError(origin_ + ": truncated state snapshot (" + what + " at byte " + std::to_string(pos_) + ")");
  }
  const std::string& s_;
  const std::string& origin_;
  size_t pos_ = 0;
};

// Magic, identity, epoch and step.
SnapshotIdentity read_head(Reader& r, const std::string& origin, int64_t* epoch, int64_t* step) {
  std::string magic = r.bytes(sizeof(kMagic), "magic");
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0)
    throw DataError(origin + ": not an EDL state snapshot of this version (bad magic)");
  SnapshotIdentity id;
  id.job = r.bytes(r.get<uint32_t>("job id length"), "job id");
  id.lineage = r.bytes(r.get<uint32_t>("lineage length"), "lineage");
  *epoch = r.get<int64_t>("epoch");
  *step = r.get<int64_t>("step");
  return id;
}

}  // namespace

SnapshotIdentity snapshot_identity(const std::string& bytes, const std::string& origin, int64_t* step) {
  Reader r(bytes, origin);
  int64_t epoch = 0;
  return read_head(r, origin, &epoch, step);
}

std::string restamp_snapshot(const std::string& bytes, const SnapshotIdentity& id, const std::string& origin) {
  Reader r(bytes, origin);
  int64_t epoch = 0, step = 0;
  read_head(r, origin, &epoch, &step);
  size_t rest = static_cast<size_t>(r.ptr() - bytes.data()) - 16;  // epoch and step start here
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, static_cast<uint32_t>(id.job.size()));
  out.append(id.job);
  put<uint32_t>(out, static_cast<uint32_t>(id.lineage.size()));
  out.append(id.lineage);
  out.append(bytes, rest, std::string::npos);
  return out;
}

std::string encode_snapshot(const std::vector<SnapshotItem>& items, int64_t epoch, int64_t step,
                            const SnapshotIdentity& id) {
  size_t total = 40 + id.job.size() + id.lineage.size();
  for (const auto& it : items) total += 13 + it.name.size() + it.bytes;
  std::string out;
  out.reserve(total);
  out.append(kMagic, sizeof(kMagic));
  put<uint32_t>(out, static_cast<uint32_t>(id.job.size()));
  out.append(id.job);
  put<uint32_t>(out, static_cast<uint32_t>(id.lineage.size()));
  out.append(id.lineage);
  put<int64_t>(out, epoch);
  put<int64_t>(out, step);
  put<uint32_t>(out, static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    put<uint32_t>(out, static_cast<uint32_t>(it.name.size()));
    out.append(it.name);
    put<uint8_t>(out, it.kind);
    if (it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar) {
      put<uint64_t>(out, it.bytes);
      out.append(static_cast<const char*>(it.data), it.bytes);
    } else {
      std::string payload = it.kind == SnapshotItem::kBlob ? it.save() : it.component->save();
      put<uint64_t>(out, payload.size());
      out.append(payload);
    }
  }
  return out;
}

void decode_snapshot(const std::string& bytes, const std::vector<SnapshotItem>& items, int64_t* epoch,
                     int64_t* step, const std::string& origin, const SnapshotIdentity& expect,
                     SnapshotIdentity* got) {
  // Pass 1: validate everything; pass 2: write. A bad snapshot never half-loads.
  struct Span {
    const char* p;
    size_t n;
  };
  std::vector<Span> spans(items.size());
  Reader r(bytes, origin);
  int64_t e = 0, s = 0;
  SnapshotIdentity id = read_head(r, origin, &e, &s);
  if (!expect.job.empty() && id.job != expect.job)
    throw DataError(origin + ": belongs to job '" + id.job + "', not to this job '" + expect.job + "' (EDL_JOB_ID)");
  if (!expect.lineage.empty() && id.lineage != expect.lineage)
    throw DataError(origin + ": belongs to lineage '" + id.lineage + "' of job '" + id.job +
                    "', but the job's current lineage is '" + expect.lineage +
                    "' (an older history: the job was restarted from scratch since)");
  uint32_t n = r.get<uint32_t>("item count");
  if (n != items.size())
    throw DataError(origin + ": state snapshot has " + std::to_string(n) + " items but " +
                    std::to_string(items.size()) + " are registered");
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    uint32_t name_len = r.get<uint32_t>("item name length");
    std::string name = r.bytes(name_len, "item name");
    if (name != it.name)
      throw DataError(origin + ": state item " + std::to_string(i) + " is '" + name + "' but '" + it.name +
                      "' is registered there");
    uint8_t kind = r.get<uint8_t>("item kind");
    if (kind != it.kind) throw DataError(origin + ": state item '" + name + "' has a different kind");
    uint64_t len = r.get<uint64_t>("item length");
    if ((it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar) && len != it.bytes)
      throw DataError(origin + ": state item '" + name + "' holds " + std::to_string(len) + " bytes but " +
                      std::to_string(it.bytes) + " are registered");
    spans[i] = Span{r.ptr(), static_cast<size_t>(len)};
    r.skip(static_cast<size_t>(len), "item payload");
  }
  if (!r.done()) throw DataError(origin + ": trailing bytes after the state snapshot");
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (it.kind == SnapshotItem::kTensor || it.kind == SnapshotItem::kScalar) {
      if (spans[i].n) std::memcpy(it.data, spans[i].p, spans[i].n);
    } else if (it.kind == SnapshotItem::kBlob) {
      it.load(std::string(spans[i].p, spans[i].n));
    } else {
      it.component->load(std::string(spans[i].p, spans[i].n));
    }
  }
  *epoch = e;
  *step = s;
  if (got) *got = std::move(id);
}

}  // namespace edl::elastic
