// Batch assembly (uint8 records -> normalised NCHW float32 + int32 labels) and the prefetch thread.
//
// assemble_batch() converts records with a per-channel lookup table: x = (pixel / 255 - mean[c]) / std[c].
// With augment = true it applies the usual CIFAR augmentation to each record: zero-pad by `crop_padding`
// pixels on every side, crop a random H x W window, flip horizontally with probability 1/2. The random
// choices are a pure function of (seed, salt, record index) — pass the epoch as the salt and a record
// gets the same augmentation on every worker and after a restart, a different one each epoch.
//
// Prefetcher runs assemble_batch on a background thread: submit() queues the record indices of a batch
// (cheap, never blocks), next() returns the batches in submission order and blocks only if the
// background thread is behind. At most `depth` assembled batches are kept (a bounded queue); batch
// buffers are recycled. An error on the background thread is rethrown by next().
//
// Thread-safety: assemble_batch is reentrant. A Prefetcher is used by one thread (its owner); it owns
// its background thread, which the destructor joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "edl/data/dataset.h"
#include "edl/export.h"

namespace edl::data {

struct BatchOptions {
  std::vector<float> mean;  // per channel, on the [0,1] pixel scale; empty = 0 for every channel
  std::vector<float> std;   // per channel, > 0; empty = 1 for every channel
  bool augment = false;     // random crop with padding + horizontal flip
  int crop_padding = 4;     // pixels of zero padding on each side before the crop (>= 0)
  uint64_t seed = 0;        // augmentation seed
};

// Common normalisations (per-channel mean / std on the [0,1] scale).
EDL_API BatchOptions fashion_mnist_normalization();
EDL_API BatchOptions cifar10_normalization(bool augment);

struct Batch {
  size_t size = 0;               // records in this batch
  Shape shape;                   // per-record shape
  std::vector<float> images;     // size * C * H * W, NCHW
  std::vector<int32_t> labels;   // size
  std::vector<uint64_t> indices; // the dataset record of each row
};

// Fills `out` with records `indices[0..n)` of `dataset` (n may be 0). Index out of range or bad options:
// InvalidArgument. `salt` varies the augmentation (e.g. the epoch).
EDL_API void assemble_batch(const Dataset& dataset, const uint64_t* indices, size_t n, const BatchOptions& options,
                            uint64_t salt, Batch* out);

class EDL_API Prefetcher {
 public:
  // depth: assembled batches kept ready (>= 1).
  Prefetcher(std::shared_ptr<const Dataset> dataset, BatchOptions options, size_t depth = 4);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues one batch. Indices are checked here (InvalidArgument), so next() never fails on them.
  void submit(std::vector<uint64_t> indices, uint64_t salt = 0);
  // Queues `indices` cut into batches of batch_size (the last one may be smaller).
  void submit_all(const std::vector<uint64_t>& indices, size_t batch_size, uint64_t salt = 0);
  // Moves the next batch into *out (its previous buffers are recycled). Returns false when nothing is
  // queued or being assembled. Rethrows an error of the background thread.
  bool next(Batch* out);
  // Batches submitted and not yet returned by next().
  size_t pending() const;
  // Drops every queued batch that is not assembled yet (e.g. after a rollback).
  void clear();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl::data
