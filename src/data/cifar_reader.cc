// CIFAR-10 binary reader: each record is 1 label byte followed by 3072 pixel bytes (R plane, G plane,
// B plane, each 32x32 row-major), so a file is a whole number of 3073-byte records.
#include <string>
#include <vector>

#include "data/file_bytes.h"
#include "data/memory_dataset.h"
#include "edl/error.h"

namespace edl::data {

std::shared_ptr<Dataset> open_cifar10(const std::vector<std::string>& files) {
  EDL_CHECK(!files.empty(), InvalidArgument, "open_cifar10: no files given");
  constexpr size_t kPixels = 3 * 32 * 32, kRecord = kPixels + 1;
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  std::string source;
  for (const std::string& path : files) {
    std::vector<uint8_t> bytes = detail::read_file_bytes(path);
    if (bytes.empty()) throw DataError(path + ": empty dataset (0 records)");
    if (bytes.size() % kRecord != 0)
      throw DataError(path + ": truncated CIFAR-10 file: " + std::to_string(bytes.size()) +
                      " bytes is not a whole number of 3073-byte records (" + std::to_string(bytes.size() % kRecord) +
                      " bytes left over)");
    size_t n = bytes.size() / kRecord;
    for (size_t r = 0; r < n; ++r) {
      const uint8_t* rec = bytes.data() + r * kRecord;
      if (rec[0] >= 10)
        throw DataError(path + ": label " + std::to_string(rec[0]) + " of record " + std::to_string(r) +
                        " is out of range [0, 10)");
      labels.push_back(rec[0]);
      pixels.insert(pixels.end(), rec + 1, rec + kRecord);
    }
    source += (source.empty() ? "" : " + ") + path;
  }
  return std::make_shared<detail::MemoryDataset>("cifar10", source, Shape{3, 32, 32}, 10, std::move(pixels),
                                                 std::move(labels));
}

}  // namespace edl::data
