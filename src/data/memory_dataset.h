// MemoryDataset: the in-memory Dataset every reader produces (pixels + labels fully validated).
// Thread-safety: immutable after construction.
#pragma once

#include <string>
#include <vector>

#include "edl/data/dataset.h"

namespace edl::data::detail {

class MemoryDataset final : public Dataset {
 public:
  // Checks sizes and label ranges; `source` names the file(s) in error messages.
  MemoryDataset(std::string name, std::string source, Shape shape, int num_classes, std::vector<uint8_t> pixels,
                std::vector<int32_t> labels);
  size_t size() const override { return labels_.size(); }
  Shape shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  const std::string& name() const override { return name_; }
  const uint8_t* pixels(size_t index) const override;
  int32_t label(size_t index) const override;

 private:
  void check_index(size_t index) const;
  std::string name_;
  Shape shape_;
  int num_classes_;
  std::vector<uint8_t> pixels_;
  std::vector<int32_t> labels_;
};

}  // namespace edl::data::detail
