// IDX (MNIST / Fashion-MNIST) reader. Format: 2 zero bytes, a type byte (0x08 = unsigned byte), the
// number of dimensions, then one big-endian uint32 per dimension, then the data (row-major).
#include <cstdio>
#include <string>
#include <vector>

#include "data/file_bytes.h"
#include "data/memory_dataset.h"
#include "edl/error.h"

namespace edl::data {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Parses an IDX file of unsigned bytes with `ndims` dimensions; returns the dims, leaves the data in
// bytes[offset..).
std::vector<uint32_t> parse_header(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t ndims,
                                   const char* what, size_t* offset) {
  const uint32_t expected_magic = 0x00000800u | ndims;
  if (bytes.size() < 4) throw DataError(path + ": truncated IDX file (" + std::to_string(bytes.size()) + " bytes, no header)");
  uint32_t magic = be32(bytes.data());
  if (magic != expected_magic)
    throw DataError(path + ": wrong magic number " + hex32(magic) + " (expected " + hex32(expected_magic) + " for an IDX " +
                    what + " file)");
  size_t header = 4 + 4 * size_t(ndims);
  if (bytes.size() < header) throw DataError(path + ": truncated IDX header");
  std::vector<uint32_t> dims(ndims);
  size_t expected = 1;
  for (uint32_t d = 0; d < ndims; ++d) {
    dims[d] = be32(bytes.data() + 4 + 4 * d);
    if (d > 0 && dims[d] > 65535)
      throw DataError(path + ": corrupt IDX header: dimension " + std::to_string(d) + " is " + std::to_string(dims[d]));
    if (__builtin_mul_overflow(expected, static_cast<size_t>(dims[d]), &expected))
      throw DataError(path + ": corrupt IDX header: dimensions overflow");
  }
  size_t have = bytes.size() - header;
  if (have < expected)
    throw DataError(path + ": truncated IDX data: header promises " + std::to_string(expected) + " bytes, file has " +
                    std::to_string(have));
  if (have > expected)
    throw DataError(path + ": corrupt IDX file: " + std::to_string(have - expected) + " bytes after the data the header describes");
  *offset = header;
  return dims;
}

}  // namespace

std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path, int num_classes,
                                  const std::string& name) {
  EDL_CHECK(num_classes >= 1 && num_classes <= 256, InvalidArgument,
            "open_idx: num_classes must be in [1, 256], got " + std::to_string(num_classes));
  std::vector<uint8_t> images = detail::read_file_bytes(images_path);
  std::vector<uint8_t> labels = detail::read_file_bytes(labels_path);
  size_t img_off = 0, lab_off = 0;
  std::vector<uint32_t> idims = parse_header(images_path, images, 3, "image (N x rows x cols)", &img_off);
  std::vector<uint32_t> ldims = parse_header(labels_path, labels, 1, "label", &lab_off);
  if (idims[0] != ldims[0])
    throw DataError(images_path + " has " + std::to_string(idims[0]) + " images but " + labels_path + " has " +
                    std::to_string(ldims[0]) + " labels");
  if (idims[0] > 0 && (idims[1] == 0 || idims[2] == 0))
    throw DataError(images_path + ": corrupt IDX header: image size " + std::to_string(idims[1]) + "x" +
                    std::to_string(idims[2]));
  Shape shape{1, static_cast<int>(idims[1]), static_cast<int>(idims[2])};
  std::vector<uint8_t> pixels(images.begin() + img_off, images.end());
  std::vector<int32_t> lab(labels.begin() + lab_off, labels.end());
  return std::make_shared<detail::MemoryDataset>(name, images_path + " + " + labels_path, shape, num_classes,
                                                 std::move(pixels), std::move(lab));
}

std::shared_ptr<Dataset> open_fashion_mnist(const std::string& dir, bool train) {
  std::string split = train ? "train" : "t10k";
  return open_idx(dir + "/" + split + "-images-idx3-ubyte.gz", dir + "/" + split + "-labels-idx1-ubyte.gz", 10,
                  std::string("fashion-mnist/") + (train ? "train" : "test"));
}

}  // namespace edl::data
