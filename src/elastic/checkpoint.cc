#include "elastic/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/codec.h"
#include "common/host_port.h"
#include "edl/error.h"
#include "elastic/snapshot.h"

namespace edl::elastic {
namespace {

constexpr char kMagic[8] = {'E', 'D', 'L', 'C', 'K', 'P', 'T', '2'};
constexpr size_t kHeader = 8 + 8 + 8 + 4;

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
  throw DataError("checkpoint: " + what + " '" + path + "': " + errno_text(errno));
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

// The step in the header of the checkpoint file at `path`, or -1 when there is none / it is unreadable.
static int64_t step_on_disk(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char h[16];
  ssize_t r = ::read(fd, h, sizeof(h));
  ::close(fd);
  if (r != static_cast<ssize_t>(sizeof(h)) || std::memcmp(h, kMagic, sizeof(kMagic)) != 0) return -1;
  return codec::load_le<int64_t>(h + 8);
}

bool write_checkpoint(const std::string& dir, const std::string& payload, int64_t step) {
  static std::atomic<uint64_t> counter{0};
  ::mkdir(dir.c_str(), 0755);  // may already exist
  std::string path = checkpoint_path(dir);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", tmp);
  std::string header;
  codec::Writer<std::string> w(header);
  w.raw(kMagic, sizeof(kMagic));
  w.i64(step);
  w.u64(payload.size());
  w.u32(crc_of(payload));
  try {
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    io_fail("cannot fsync", tmp);
  }
  ::close(fd);
  // Check and rename under the directory's lock: never an older step over a newer one.
  std::string lock_path = path + ".lock";
  int lfd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_fail("cannot open the lock file", lock_path);
  }
  while (::flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  bool newer_in_place = step_on_disk(path) > step;
  int rc = newer_in_place ? 0 : ::rename(tmp.c_str(), path.c_str());
  int e = errno;
  ::close(lfd);  // releases the lock
  if (newer_in_place || rc != 0) ::unlink(tmp.c_str());
  errno = e;
  if (rc != 0) io_fail("cannot rename into", path);
  if (newer_in_place) return false;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
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
    throw DataError("checkpoint file '" + path + "' is not an EDL checkpoint of this version (bad or truncated header)");
  codec::Reader r(data, "checkpoint file '" + path + "'");
  r.raw(sizeof(kMagic), "magic");
  r.i64("step");
  const uint64_t len = r.u64("payload length");
  const uint32_t crc = r.u32("checksum");
  if (r.left() != len)
    throw DataError("checkpoint file '" + path + "' is truncated: header says " + std::to_string(len) +
                    " payload bytes, file has " + std::to_string(r.left()));
  std::string payload(r.raw(r.left(), "payload"));
  if (crc_of(payload) != crc) throw DataError("checkpoint file '" + path + "' is corrupt: checksum mismatch");
  return payload;
}

std::optional<std::string> checkpoint_job_id(const std::string& dir, std::string* path) {
  std::string file;
  auto payload = read_checkpoint(dir, &file);
  if (path) *path = file;
  if (!payload) return std::nullopt;
  int64_t step = 0;
  return snapshot_identity(*payload, "checkpoint file '" + file + "'", &step).job;
}

}  // namespace edl::elastic
