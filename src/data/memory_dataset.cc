#include "data/memory_dataset.h"

#include "edl/error.h"

namespace edl::data {

Dataset::~Dataset() = default;

namespace detail {

MemoryDataset::MemoryDataset(std::string name, std::string source, Shape shape, int num_classes,
                             std::vector<uint8_t> pixels, std::vector<int32_t> labels)
    : name_(std::move(name)), shape_(shape), num_classes_(num_classes), pixels_(std::move(pixels)),
      labels_(std::move(labels)) {
  if (labels_.empty()) throw DataError(source + ": empty dataset (0 records)");
  EDL_ASSERT(pixels_.size() == labels_.size() * shape_.pixels());
  for (size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] < 0 || labels_[i] >= num_classes_)
      throw DataError(source + ": label " + std::to_string(labels_[i]) + " of record " + std::to_string(i) +
                      " is out of range [0, " + std::to_string(num_classes_) + ")");
  }
}

void MemoryDataset::check_index(size_t index) const {
  if (index >= labels_.size())
    throw InvalidArgument(name_ + ": record index " + std::to_string(index) + " out of range (dataset has " +
                          std::to_string(labels_.size()) + " records)");
}

const uint8_t* MemoryDataset::pixels(size_t index) const {
  check_index(index);
  return pixels_.data() + index * shape_.pixels();
}

int32_t MemoryDataset::label(size_t index) const {
  check_index(index);
  return labels_[index];
}

}  // namespace detail
}  // namespace edl::data
