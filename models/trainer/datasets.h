// The trainer's datasets: the training set, the held-out test records and their normalisation, for
// fashion-mnist, cifar10 or the deterministic synthetic set; and the world-wide test accuracy.
//
// Thread-safety: open_datasets() from one thread; evaluate() is collective (every rank calls it at
// the same point of the program, from its training thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <edl/data.h>

#include "models/common/model.h"
#include "trainer.h"

namespace edl::trainer {

struct Datasets {
  std::shared_ptr<data::Dataset> train;
  std::shared_ptr<data::Dataset> test;
  uint64_t train_n = 0;
  uint64_t test_offset = 0;  // test record i is test->pixels(test_offset + i)
  uint64_t test_n = 0;
  data::BatchOptions norm;
};

// Opens --dataset (with --data-path) and applies --train-records / --test-records. Throws
// InvalidArgument / DataError naming the dataset or file.
Datasets open_datasets(const TrainerOptions& o);

// Evaluates the first test_n test records, split across ranks; returns the world's accuracy.
// bn_trained: whether this worker's batch-norm statistics saw a training batch. average_bn: first
// replace every worker's batch-norm statistics by their average over the workers (false in the
// reproducible mode, where they are identical everywhere already).
double evaluate(models::Model& model, const Datasets& d, const std::vector<models::BufferRef>& buffers,
                bool bn_trained, bool average_bn = true);

}  // namespace edl::trainer
