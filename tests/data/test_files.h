// Helpers for the data tests: a temporary directory and writers for small IDX / CIFAR-10 files,
// plain or gzip-compressed with zlib.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace edl::test {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/edl-data-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& in) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline void put_be32(std::vector<uint8_t>* b, uint32_t v) {
  b->push_back(v >> 24);
  b->push_back((v >> 16) & 0xff);
  b->push_back((v >> 8) & 0xff);
  b->push_back(v & 0xff);
}

inline std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> b;
  put_be32(&b, 0x00000803);
  put_be32(&b, n);
  put_be32(&b, rows);
  put_be32(&b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

inline std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(&b, 0x00000801);
  put_be32(&b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// CIFAR-10 record r: label, then 3072 pixels with value (r * 7 + j) mod 256.
inline std::vector<uint8_t> cifar_records(const std::vector<uint8_t>& labels, int first_record = 0) {
  std::vector<uint8_t> b;
  for (size_t r = 0; r < labels.size(); ++r) {
    b.push_back(labels[r]);
    for (int j = 0; j < 3072; ++j) b.push_back(static_cast<uint8_t>(((first_record + r) * 7 + j) % 256));
  }
  return b;
}

}  // namespace edl::test
