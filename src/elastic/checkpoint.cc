#include "elastic/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "edl/error.h"

namespace edl::elastic {
namespace {

constexpr char kMagic[8] = {'E', 'D', 'L', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kHeader = 8 + 8 + 4;

uint32_t crc_of(const std::string& s) {
  uLong c = crc32(0L, Z_NULL, 0);
  size_t off = 0;
  while (off < s.size()) {  // crc32 takes a uInt length
    size_t n = std::min<size_t>(s.size() - off, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(s.data() + off), static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(c);
}

[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  throw DataError("checkpoint: " + what + " '" + path + "': " + std::strerror(errno));
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      errno = e;
      io_fail("cannot write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/state.edlckpt"; }

void write_checkpoint(const std::string& dir, const std::string& payload) {
  ::mkdir(dir.c_str(), 0755);  // may already exist
  std::string path = checkpoint_path(dir);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", tmp);
  std::string header(kMagic, sizeof(kMagic));
  uint64_t len = payload.size();
  uint32_t crc = crc_of(payload);
  header.append(reinterpret_cast<const char*>(&len), 8);
  header.append(reinterpret_cast<const char*>(&crc), 4);
  write_all(fd, header.data(), header.size(), tmp);
  write_all(fd, payload.data(), payload.size(), tmp);
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_fail("cannot fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) io_fail("cannot rename into", path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::optional<std::string> read_checkpoint(const std::string& dir, std::string* path_out) {
  std::string path = checkpoint_path(dir);
  if (path_out) *path_out = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    io_fail("cannot open", path);
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      errno = e;
      io_fail("cannot read", path);
    }
    if (r == 0) break;
    data.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0)
    throw DataError("checkpoint file '" + path + "' is not an EDL checkpoint (bad or truncated header)");
  uint64_t len;
  uint32_t crc;
  std::memcpy(&len, data.data() + 8, 8);
  std::memcpy(&crc, data.data() + 16, 4);
  if (data.size() - kHeader != len)
    throw DataError("checkpoint file '" + path + "' is truncated: header says " + std::to_string(len) +
                    " payload bytes, file has " + std::to_string(data.size() - kHeader));
  std::string payload = data.substr(kHeader);
  if (crc_of(payload) != crc) throw DataError("checkpoint file '" + path + "' is corrupt: checksum mismatch");
  return payload;
}

}  // namespace edl::elastic
