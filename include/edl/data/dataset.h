// edl::data::Dataset — a labelled image dataset with random access by record index.
//
// Readers load the whole dataset into memory when opened (Fashion-MNIST: 47 MB, CIFAR-10: 150 MB),
// validating every header, length and label; after that, access never fails and never does I/O.
// Formats (docs/data.md):
//   IDX        MNIST / Fashion-MNIST image + label files, plain or gzip-compressed.
//   CIFAR-10   binary batches: per record 1 label byte + 3072 pixel bytes (3x32x32, CHW), plain or gzip.
//   synthetic  deterministic from a seed and learnable (class prototypes + per-record noise).
// Errors: a missing, truncated or corrupt file, a wrong magic number, an images/labels count mismatch,
// a label out of range or an empty dataset throw edl::DataError naming the file and the problem;
// bad options throw edl::InvalidArgument.
//
// Thread-safety: a Dataset is immutable once opened; any thread may read it concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"

namespace edl::data {

// Layout of one record's pixels: channels x height x width, uint8, CHW order.
struct Shape {
  int channels = 1;
  int height = 1;
  int width = 1;
  size_t pixels() const { return static_cast<size_t>(channels) * height * width; }
};

class EDL_API Dataset {
 public:
  virtual ~Dataset();
  // Number of records (never 0: an empty dataset is a DataError when opening it).
  virtual size_t size() const = 0;
  virtual Shape shape() const = 0;
  virtual int num_classes() const = 0;
  // Human-readable name used in messages and bench rows, e.g. "fashion-mnist/train".
  virtual const std::string& name() const = 0;
  // Record `index`: shape().pixels() bytes, valid while the dataset lives. Out of range: InvalidArgument.
  virtual const uint8_t* pixels(size_t index) const = 0;
  // Label of record `index`, in [0, num_classes()). Out of range: InvalidArgument.
  virtual int32_t label(size_t index) const = 0;
};

// IDX image file (magic 0x00000803, N x rows x cols) + IDX label file (magic 0x00000801, N), each plain
// or gzip-compressed. Labels must lie in [0, num_classes).
EDL_API std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path,
                                          int num_classes = 10, const std::string& name = "idx");

// Fashion-MNIST (or MNIST) from a directory holding {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz,
// e.g. /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
EDL_API std::shared_ptr<Dataset> open_fashion_mnist(const std::string& dir, bool train);
// Default location of Debian's dataset-fashion-mnist package.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// CIFAR-10 binary batches (data_batch_1.bin ... or test_batch.bin), concatenated in the given order.
EDL_API std::shared_ptr<Dataset> open_cifar10(const std::vector<std::string>& files);

struct SyntheticOptions {
  size_t records = 1024;   // number of records (> 0)
  Shape shape{1, 28, 28};  // any positive shape
  int num_classes = 10;    // >= 2
  uint64_t seed = 0;       // same seed -> same bytes
  float noise = 0.35f;     // share of per-record noise mixed into the class prototype, in [0, 1]
};
// A deterministic dataset: class c has a random prototype image; record i has label hash(seed, i) mod
// classes and pixels = (1 - noise) * prototype + noise * random. A linear model learns it.
EDL_API std::shared_ptr<Dataset> make_synthetic(const SyntheticOptions& options);

}  // namespace edl::data
