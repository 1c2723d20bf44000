#include "edl/data/loader.h"

#include "edl/error.h"

namespace edl::data {

ShardLoader::ShardLoader(std::shared_ptr<const Dataset> dataset, ShardGenerator& shards, BatchOptions options,
                         size_t depth)
    : dataset_(std::move(dataset)), shards_(shards), depth_(depth) {
  EDL_CHECK(dataset_ != nullptr, InvalidArgument, "ShardLoader: dataset is null");
  EDL_CHECK(depth >= 1, InvalidArgument, "ShardLoader: depth must be >= 1");
  prefetcher_ = std::make_unique<Prefetcher>(dataset_, std::move(options), depth);
}

ShardLoader::~ShardLoader() = default;

StepRecords ShardLoader::next(Batch* batch) {
  EDL_CHECK(batch != nullptr, InvalidArgument, "ShardLoader::next: batch is null");
  StepRecords s = shards_.next();
  if (s.records.empty()) {
    batch->size = 0;
    batch->shape = dataset_->shape();
    batch->images.clear();
    batch->labels.clear();
    batch->indices.clear();
    if (s.end_of_data && !queued_.empty()) {
      dropped_ += queued_.size();
      prefetcher_->clear();
      queued_.clear();
    }
    return s;
  }
  const Key want = key_of(s);
  if (!queued_.empty() && !(queued_.front() == want)) {  // the plan changed (rollback, new generation)
    dropped_ += queued_.size();
    prefetcher_->clear();
    queued_.clear();
  }
  if (queued_.empty()) {
    prefetcher_->submit(s.records, static_cast<uint64_t>(s.epoch));
    queued_.push_back(want);
  }
  queued_.pop_front();
  bool got = prefetcher_->next(batch);
  EDL_ASSERT(got);
  EDL_ASSERT(batch->indices == s.records);
  refill();
  return s;
}

void ShardLoader::refill() {
  std::vector<StepRecords> ahead = shards_.lookahead(depth_);
  for (size_t i = queued_.size(); i < ahead.size(); ++i) {
    prefetcher_->submit(ahead[i].records, static_cast<uint64_t>(ahead[i].epoch));
    queued_.push_back(key_of(ahead[i]));
  }
}

}  // namespace edl::data
