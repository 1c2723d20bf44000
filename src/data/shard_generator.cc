// The elastic shard dispatcher (protocol: docs/data.md, "Shard dispatcher").
//
// Store keys, under "<options.name>/":
//   g<G>/s<C>/e<E>/<k>   the claim of shard k of epoch E in the claim namespace that generation G opened
//                        at step C: "<t0> <offset> <batch> <worker>" — written once, by compare_set from
//                        absent, never modified (so every worker may cache it forever).
// The committed snapshot (save/load) is the table of shard offsets at a step; a namespace starts from
// the committed table, so claims made after the commit simply vanish with their namespace on rollback.
#include <algorithm>
#include <deque>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <sstream>

#include "common/logging.h"
#include "data/random.h"
#include "edl/data/shards.h"
#include "edl/elastic.h"
#include "edl/error.h"

namespace edl::data {
namespace {

struct Claim {
  int64_t t0 = 0;       // first step of the claim
  uint64_t offset = 0;  // shard offset at t0
  uint64_t batch = 0;   // records per step
  std::string worker;
};

std::string encode_claim(const Claim& c) {
  return std::to_string(c.t0) + " " + std::to_string(c.offset) + " " + std::to_string(c.batch) + " " + c.worker;
}

Claim decode_claim(const std::string& key, const std::string& v) {
  Claim c;
  std::istringstream in(v);
  in >> c.t0 >> c.offset >> c.batch;
  if (!in || c.batch == 0 || c.t0 < 0)
    throw DataError("shard dispatcher: corrupt claim at store key '" + key + "': '" + v + "'");
  std::getline(in >> std::ws, c.worker);
  return c;
}

const char* kSnapshotMagic = "edl-shards/1";
constexpr size_t kCommittedCap = 4096;  // committed batches kept for take_committed()

}  // namespace

struct ShardGenerator::Impl {
  std::shared_ptr<Store> store;
  ShardOptions o;
  uint64_t shards = 0;

  // The last committed table (save or load): what a new namespace starts from.
  struct Table {
    int64_t epoch = 0;
    int64_t step = 0;
    std::vector<uint64_t> offsets;
  } committed;

  // Live state of this worker.
  uint64_t generation = 0;
  std::string worker;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t ns_step = 0;                      // step at which the claim namespace was opened
  std::vector<uint64_t> base;               // shard offsets at ns_step (this epoch)
  std::vector<uint64_t> order;              // shard order of this epoch
  size_t cursor = 0;                        // order[0..cursor) are all claimed or exhausted
  std::vector<std::optional<Claim>> claims; // cache of this namespace's claims (immutable)
  size_t known = 0;                         // shards with a cached claim or exhausted at base
  int64_t held = -1;                        // shard this worker consumes, if any
  std::vector<uint64_t> held_records;
  bool ended = false;
  std::deque<StepRecords> drawn;            // this worker's batches not yet known to be committed
  std::deque<StepRecords> done;             // committed, not yet taken by take_committed()
  size_t done_dropped = 0;                  // committed batches dropped from `done` (over the cap)

  // Batches drawn at steps < t are committed (a commit at step t, or a snapshot of step t adopted).
  void settle(int64_t t) {
    while (!drawn.empty() && drawn.front().step < t) {
      if (done.size() == kCommittedCap) {
        done.pop_front();
        ++done_dropped;
      }
      done.push_back(std::move(drawn.front()));
      drawn.pop_front();
    }
    drawn.clear();  // the rest was rolled back: those steps will be drawn again
  }

  uint64_t shard_size(uint64_t k) const {
    uint64_t begin = k * o.records_per_shard;
    return std::min(o.records, begin + o.records_per_shard) - begin;
  }

  std::string ns_prefix() const {
    return o.name + "/g" + std::to_string(generation) + "/s" + std::to_string(ns_step) + "/e" + std::to_string(epoch) + "/";
  }

  uint64_t offset_at(uint64_t k, int64_t t) const {
    if (!claims[k]) return base[k];
    const Claim& c = *claims[k];
    uint64_t steps = t > c.t0 ? static_cast<uint64_t>(t - c.t0) : 0;
    return std::min(shard_size(k), c.offset + steps * c.batch);
  }

  std::vector<uint64_t> records_of(int64_t e, uint64_t k) const {
    uint64_t begin = k * o.records_per_shard, n = shard_size(k);
    std::vector<uint64_t> r;
    if (o.shuffle_records) {
      r = detail::permutation(n, detail::mix(o.seed, static_cast<uint64_t>(e), 0x7265636f7264ull + k));
      for (auto& x : r) x += begin;
    } else {
      r.resize(n);
      for (uint64_t i = 0; i < n; ++i) r[i] = begin + i;
    }
    return r;
  }

  std::vector<uint64_t> order_of(int64_t e) const {
    return detail::permutation(shards, detail::mix(o.seed, static_cast<uint64_t>(e), 0x6f72646572ull));
  }

  // Opens the claim namespace of (generation, ns_step = step, epoch) with the given base offsets.
  void open_namespace(std::vector<uint64_t> offsets) {
    ns_step = step;
    base = std::move(offsets);
    order = order_of(epoch);
    cursor = 0;
    claims.assign(shards, std::nullopt);
    known = 0;
    for (uint64_t k = 0; k < shards; ++k) known += base[k] >= shard_size(k);
    held = -1;
    held_records.clear();
  }

  void reset_to_committed() {
    epoch = committed.epoch;
    step = committed.step;
    ended = false;
    open_namespace(committed.offsets);
  }

  void remember(uint64_t k, Claim c) {
    if (!claims[k] && base[k] < shard_size(k)) ++known;
    claims[k] = std::move(c);
  }

  // Claims the next free shard in this epoch's order for step t; false when none is free.
  bool try_claim(int64_t t) {
    while (cursor < order.size()) {
      uint64_t k = order[cursor];
      if (base[k] >= shard_size(k) || claims[k]) {
        ++cursor;
        continue;
      }
      Claim mine{t, base[k], o.batch_size, worker};
      std::string key = ns_prefix() + std::to_string(k);
      std::optional<std::string> current;
      bool won = store->compare_set(key, std::nullopt, encode_claim(mine), &current);
      ++cursor;
      if (won) {
        remember(k, mine);
        held = static_cast<int64_t>(k);
        held_records = records_of(epoch, k);
        return true;
      }
      EDL_CHECK(current.has_value(), StoreError,
                "shard dispatcher: compare_set on '" + key + "' failed but the key is absent");
      Claim theirs = decode_claim(key, *current);
      if (theirs.worker == worker && theirs.t0 == t && theirs.offset == base[k] && theirs.batch == o.batch_size) {
        // Our own claim: an earlier attempt's compare_set was applied but its reply was lost (StoreError).
        remember(k, theirs);
        held = static_cast<int64_t>(k);
        held_records = records_of(epoch, k);
        return true;
      }
      remember(k, std::move(theirs));
    }
    return false;
  }

  // A member catching up after a stop-free join (edl::elastic::catching_up) trains no records: it
  // learns the claims in the epoch's order without claiming, so it sees the epoch end at the same
  // step as the others. Stops at the first free shard (someone will claim it).
  void learn_claims() {
    while (cursor < order.size()) {
      uint64_t k = order[cursor];
      if (base[k] < shard_size(k) && !claims[k]) {
        const std::string key = ns_prefix() + std::to_string(k);
        auto v = store->get(key);
        if (!v) return;
        remember(k, decode_claim(key, *v));
      }
      ++cursor;
    }
  }

  bool all_exhausted(int64_t t) const {
    for (uint64_t k = 0; k < shards; ++k)
      if (offset_at(k, t) < shard_size(k)) return false;
    return true;
  }

  // Learns every claim of the namespace (needed to tabulate offsets at a commit).
  void refresh_claims() {
    if (known == shards) return;
    const std::string prefix = ns_prefix();
    for (const std::string& key : store->keys(prefix)) {
      const std::string tail = key.substr(prefix.size());
      char* end = nullptr;
      unsigned long long k = std::strtoull(tail.c_str(), &end, 10);
      if (tail.empty() || *end != '\0' || k >= shards || claims[k]) continue;
      if (auto v = store->get(key)) remember(k, decode_claim(key, *v));
    }
  }
};

ShardGenerator::ShardGenerator(std::shared_ptr<Store> store, ShardOptions options) : impl_(std::make_unique<Impl>()) {
  EDL_CHECK(store != nullptr, InvalidArgument, "ShardGenerator: store is null");
  EDL_CHECK(options.records > 0, InvalidArgument, "ShardGenerator: empty dataset (records = 0)");
  EDL_CHECK(options.records_per_shard > 0, InvalidArgument, "ShardGenerator: records_per_shard must be > 0, got 0");
  EDL_CHECK(options.batch_size > 0, InvalidArgument, "ShardGenerator: batch_size must be > 0, got 0");
  EDL_CHECK(options.epochs >= 0, InvalidArgument,
            "ShardGenerator: epochs must be >= 0, got " + std::to_string(options.epochs));
  EDL_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos, InvalidArgument,
            "ShardGenerator: name must be non-empty without '/', got '" + options.name + "'");
  auto& s = *impl_;
  s.store = std::move(store);
  s.o = std::move(options);
  s.shards = (s.o.records + s.o.records_per_shard - 1) / s.o.records_per_shard;
  s.worker = s.o.worker_id.empty() ? "rank0" : s.o.worker_id;
  s.committed.offsets.assign(s.shards, 0);
  s.reset_to_committed();
}

ShardGenerator::~ShardGenerator() = default;

StepRecords ShardGenerator::next() {
  auto& s = *impl_;
  StepRecords r;
  r.step = s.step;
  r.epoch = s.epoch;
  if (s.ended) {
    r.end_of_data = true;
    return r;
  }
  const int64_t t = s.step;
  for (;;) {
    if (s.held >= 0) {
      uint64_t k = static_cast<uint64_t>(s.held);
      uint64_t pos = s.offset_at(k, t), size = s.shard_size(k);
      if (pos < size) {
        uint64_t end = std::min(size, pos + s.o.batch_size);
        r.epoch = s.epoch;
        r.shard = s.held;
        r.offset = pos;
        r.records.assign(s.held_records.begin() + pos, s.held_records.begin() + end);
        ++s.step;
        s.drawn.push_back(r);
        return r;
      }
      s.held = -1;
    }
    if (edl::elastic::catching_up()) s.learn_claims();  // no records until it holds the job's state
    else if (s.try_claim(t)) continue;
    if (!s.all_exhausted(t)) {  // others still hold shards of this epoch: wait for them
      r.epoch = s.epoch;
      ++s.step;
      return r;
    }
    if (s.o.epochs > 0 && s.epoch + 1 >= s.o.epochs) {
      s.ended = true;
      r.epoch = s.epoch;
      r.end_of_data = true;
      return r;
    }
    ++s.epoch;
    s.open_namespace(std::vector<uint64_t>(s.shards, 0));
  }
}

std::vector<StepRecords> ShardGenerator::lookahead(size_t steps) const {
  const auto& s = *impl_;
  std::vector<StepRecords> out;
  if (s.held < 0 || s.ended) return out;
  const uint64_t k = static_cast<uint64_t>(s.held), size = s.shard_size(k);
  for (size_t i = 0; i < steps; ++i) {
    const int64_t t = s.step + static_cast<int64_t>(i);
    const uint64_t pos = s.offset_at(k, t);
    if (pos >= size) break;
    StepRecords r;
    r.step = t;
    r.epoch = s.epoch;
    r.shard = s.held;
    r.offset = pos;
    r.records.assign(s.held_records.begin() + pos, s.held_records.begin() + std::min(size, pos + s.o.batch_size));
    out.push_back(std::move(r));
  }
  return out;
}

int64_t ShardGenerator::epoch() const { return impl_->epoch; }
int64_t ShardGenerator::step() const { return impl_->step; }
uint64_t ShardGenerator::batch_size() const { return impl_->o.batch_size; }
int64_t ShardGenerator::committed_step() const { return impl_->committed.step; }

std::vector<StepRecords> ShardGenerator::take_committed(size_t* dropped) {
  auto& s = *impl_;
  std::vector<StepRecords> out(std::make_move_iterator(s.done.begin()), std::make_move_iterator(s.done.end()));
  s.done.clear();
  if (dropped) *dropped = s.done_dropped;
  s.done_dropped = 0;
  return out;
}
uint64_t ShardGenerator::num_shards() const { return impl_->shards; }
std::vector<uint64_t> ShardGenerator::shard_order(int64_t epoch) const { return impl_->order_of(epoch); }
std::vector<uint64_t> ShardGenerator::shard_records(int64_t epoch, uint64_t shard) const {
  EDL_CHECK(shard < impl_->shards, InvalidArgument,
            "ShardGenerator: shard " + std::to_string(shard) + " out of range (" + std::to_string(impl_->shards) + " shards)");
  return impl_->records_of(epoch, shard);
}

std::string ShardGenerator::save() {
  auto& s = *impl_;
  s.refresh_claims();
  Impl::Table t;
  t.epoch = s.epoch;
  t.step = s.step;
  t.offsets.resize(s.shards);
  for (uint64_t k = 0; k < s.shards; ++k) t.offsets[k] = s.offset_at(k, s.step);
  std::string out = std::string(kSnapshotMagic) + " records=" + std::to_string(s.o.records) +
                    " rps=" + std::to_string(s.o.records_per_shard) + " seed=" + std::to_string(s.o.seed) +
                    " shuffle=" + (s.o.shuffle_records ? "1" : "0") + " epoch=" + std::to_string(t.epoch) +
                    " step=" + std::to_string(t.step) + " offsets=";
  bool first = true;
  for (uint64_t k = 0; k < s.shards; ++k) {
    if (t.offsets[k] == 0) continue;
    if (!first) out += ',';
    out += std::to_string(k);
    out += ':';
    out += std::to_string(t.offsets[k]);
    first = false;
  }
  s.committed = std::move(t);
  s.settle(s.step);  // a commit at step t: every batch drawn before it is in the model now
  return out;
}

void ShardGenerator::load(const std::string& snapshot) {
  auto& s = *impl_;
  auto bad = [&](const std::string& why) {
    return DataError("shard dispatcher snapshot '" + snapshot.substr(0, 120) + "': " + why);
  };
  std::istringstream in(snapshot);
  std::string magic;
  in >> magic;
  if (magic != kSnapshotMagic) throw bad("not a shard dispatcher snapshot (expected " + std::string(kSnapshotMagic) + ")");
  unsigned long long records = 0, rps = 0, seed = 0;
  int shuffle = 0;
  long long epoch = 0, step = 0;
  std::string field;
  auto read = [&](const char* fmt, auto* a) {
    in >> field;
    if (std::sscanf(field.c_str(), fmt, a) != 1) throw bad("malformed field '" + field + "'");
  };
  read("records=%llu", &records);
  read("rps=%llu", &rps);
  read("seed=%llu", &seed);
  read("shuffle=%d", &shuffle);
  read("epoch=%lld", &epoch);
  read("step=%lld", &step);
  if (records != s.o.records || rps != s.o.records_per_shard || seed != s.o.seed || (shuffle != 0) != s.o.shuffle_records)
    throw bad("it was written for records=" + std::to_string(records) + " records_per_shard=" + std::to_string(rps) +
              " seed=" + std::to_string(seed) + " shuffle=" + std::to_string(shuffle) + ", this generator has records=" +
              std::to_string(s.o.records) + " records_per_shard=" + std::to_string(s.o.records_per_shard) + " seed=" +
              std::to_string(s.o.seed) + " shuffle=" + std::to_string(s.o.shuffle_records ? 1 : 0));
  if (epoch < 0 || step < 0) throw bad("negative epoch or step");
  in >> field;
  if (field.rfind("offsets=", 0) != 0) throw bad("missing offsets");
  Impl::Table t;
  t.epoch = epoch;
  t.step = step;
  t.offsets.assign(s.shards, 0);
  std::istringstream list(field.substr(8));
  std::string item;
  while (std::getline(list, item, ',')) {
    unsigned long long k = 0, off = 0;
    if (std::sscanf(item.c_str(), "%llu:%llu", &k, &off) != 2 || k >= s.shards || off > s.shard_size(k))
      throw bad("bad shard offset '" + item + "'");
    t.offsets[k] = off;
  }
  s.settle(t.step);  // batches of this worker before the adopted step are committed, later ones void
  s.committed = std::move(t);
  s.reset_to_committed();
}

void ShardGenerator::on_generation(const elastic::GenerationInfo& info) {
  auto& s = *impl_;
  if (s.step != s.committed.step) {
    EDL_LOG(2) << "edl data: generation " << info.generation << " rolls the shard dispatcher back from step " << s.step
               << " to its committed step " << s.committed.step;
  }
  s.generation = info.generation;
  if (s.o.worker_id.empty()) s.worker = "rank" + std::to_string(info.rank);
  if (s.o.batch_for_size) {  // the batch policy: the local batch follows the world size
    const uint64_t b = s.o.batch_for_size(info.size);
    EDL_CHECK(b > 0, InvalidArgument,
              "ShardGenerator: batch_for_size(" + std::to_string(info.size) + ") returned 0 (must be > 0)");
    s.o.batch_size = b;
  }
  s.settle(s.committed.step);  // a new generation restarts from the commit
  s.reset_to_committed();
  if (info.rank != 0) return;
  // Namespaces of earlier generations are dead (nobody of this generation reads them): drop them.
  const std::string prefix = s.o.name + "/g";
  for (const std::string& key : s.store->keys(prefix)) {
    unsigned long long g = std::strtoull(key.c_str() + prefix.size(), nullptr, 10);
    if (g < info.generation) s.store->del(key);
  }
}

}  // namespace edl::data
