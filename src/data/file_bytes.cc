#include "data/file_bytes.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/host_port.h"
#include "edl/error.h"

namespace edl::data::detail {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

std::vector<uint8_t> read_raw(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw DataError(path + ": cannot open: " + errno_text(errno));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.insert(bytes.end(), buf, buf + n);
  if (std::ferror(f.get())) throw DataError(path + ": read error: " + errno_text(errno));
  return bytes;
}

// Inflates a gzip stream (possibly several concatenated members); rejects truncation and corruption.
std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>& in) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw DataError(path + ": zlib inflateInit failed");
  std::vector<uint8_t> out(in.size() * 2 + 4096);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  size_t produced = 0;
  int rc = Z_OK;
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(out.size() - produced);
    rc = inflate(&zs, Z_NO_FLUSH);
    produced = out.size() - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR) {
      if (zs.avail_out == 0) continue;  // output buffer full: grow and go on
      break;                            // no progress possible: the input ended mid-stream
    }
    std::string why = zs.msg ? zs.msg : ("zlib error " + std::to_string(rc));
    inflateEnd(&zs);
    throw DataError(path + ": corrupt gzip data: " + why);
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END)
    throw DataError(path + ": truncated gzip file (stream ends after " + std::to_string(in.size()) +
                    " compressed bytes without its end marker)");
  out.resize(produced);
  return out;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::vector<uint8_t> raw = read_raw(path);
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) return gunzip(path, raw);
  return raw;
}

}  // namespace edl::data::detail
