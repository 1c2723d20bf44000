// libFuzzer target for the state snapshot decoder (src/elastic/snapshot.cc) and, with the first
// input byte odd, the checkpoint file loader in front of it (src/elastic/checkpoint.cc).
//
// The registration is fixed: a 16-byte tensor "w", an 8-byte scalar "step" and a blob "rng".
// Findings: a crash or sanitizer report, a rejection that is not a DataError, registered memory
// written by a snapshot that was then rejected, or an accepted snapshot that does not re-encode to
// the same bytes. Checkpoint mode writes <tmp>/state.edlckpt with a header built from the input
// (correct or deliberately damaged length / checksum) and loads it with read_checkpoint.
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "edl/error.h"
#include "elastic/checkpoint.h"
#include "elastic/snapshot.h"

using namespace edl::elastic;

namespace {

struct Registration {
  uint8_t w[16];
  int64_t step;
  std::string rng;
  std::vector<SnapshotItem> items;
  Registration() {
    std::memset(w, 0xAB, sizeof(w));
    step = -5;
    rng = "untouched";
    SnapshotItem t;
    t.name = "w";
    t.kind = SnapshotItem::kTensor;
    t.data = w;
    t.bytes = sizeof(w);
    SnapshotItem s;
    s.name = "step";
    s.kind = SnapshotItem::kScalar;
    s.data = &step;
    s.bytes = sizeof(step);
    SnapshotItem b;
    b.name = "rng";
    b.kind = SnapshotItem::kBlob;
    b.save = [this] { return rng; };
    b.load = [this](const std::string& v) { rng = v; };
    items = {t, s, b};
  }
  bool untouched() const {
    for (uint8_t x : w)
      if (x != 0xAB) return false;
    return step == -5 && rng == "untouched";
  }
};

void decode_and_check(const std::string& bytes) {
  Registration reg;
  int64_t epoch = 0, step = 0;
  SnapshotIdentity id;
  try {
    decode_snapshot(bytes, reg.items, &epoch, &step, "fuzz", {}, &id);
  } catch (const edl::DataError&) {
    if (!reg.untouched()) std::abort();  // a rejected snapshot must not half-load
    return;
  }
  if (encode_snapshot(reg.items, epoch, step, id) != bytes) std::abort();
}

const std::string& temp_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/edl_ckpt_fuzz_XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) std::abort();
    return std::string(d);
  }();
  return dir;
}

void checkpoint_mode(uint8_t flags, const std::string& payload) {
  std::string file = "EDLCKPT2";
  const int64_t step = 7;
  uint64_t len = payload.size();
  uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()),
                                             static_cast<uInt>(payload.size())));
  if (flags & 2) len += 1 + (flags >> 4);  // wrong length
  if (flags & 4) crc ^= 1;                 // wrong checksum
  if (flags & 8) file[3] = 'X';            // wrong magic
  file.append(reinterpret_cast<const char*>(&step), 8);
  file.append(reinterpret_cast<const char*>(&len), 8);
  file.append(reinterpret_cast<const char*>(&crc), 4);
  file += payload;
  { std::ofstream(checkpoint_path(temp_dir()), std::ios::binary | std::ios::trunc) << file; }
  std::optional<std::string> got;
  try {
    got = read_checkpoint(temp_dir(), nullptr);
  } catch (const edl::DataError&) {
    if (!(flags & 14)) std::abort();  // an intact file must load
    return;
  }
  if ((flags & 14) || !got || *got != payload) std::abort();  // damage must be detected
  decode_and_check(*got);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) checkpoint_mode(data[0], rest);
  else decode_and_check(rest);
  return 0;
}
