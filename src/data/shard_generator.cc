// The elastic shard dispatcher (protocol: docs/data.md, "Shard dispatcher"): the claim protocol
// (ShardGenerator::Impl, shard_generator_impl.h) and the public methods. The reproducible mode's
// fixed schedule is shard_fixed.cc, straggler rebalancing shard_rebalance.cc.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "common/logging.h"
#include "data/random.h"
#include "data/shard_generator_impl.h"
#include "edl/elastic.h"
#include "edl/error.h"

namespace edl::data {
namespace detail {

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

}  // namespace detail

namespace {
const char* kSnapshotMagic = "edl-shards/1";

// The optional last field of a snapshot, "fixed=<micro-batch>:<micro-batches>:<epoch start>", written
// in the reproducible mode; it must be there exactly when this generator is in that mode, with its
// micro-batches.
template <typename Bad>
void read_fixed(const ShardGenerator::Impl& s, std::istringstream& in, ShardGenerator::Impl::Table* t, const Bad& bad) {
  std::string field;
  unsigned long long m = 0, n = 0;
  long long start = 0;
  const bool has = static_cast<bool>(in >> field);
  if (has && std::sscanf(field.c_str(), "fixed=%llu:%llu:%lld", &m, &n, &start) != 3)
    throw bad("malformed field '" + field + "'");
  if (has != s.o.deterministic)
    throw bad(has ? "written in the reproducible mode (deterministic), this generator is not"
                  : "written without the reproducible mode, this generator is in it (deterministic)");
  if (!has) return;
  if (m != s.o.batch_size || n != s.o.micro_batches || start < 0 || start > t->step)
    throw bad("it was written for " + std::to_string(n) + " micro-batches of " + std::to_string(m) +
              " records, this generator has " + std::to_string(s.o.micro_batches) + " of " +
              std::to_string(s.o.batch_size));
  t->epoch_start = start;
}

}  // namespace

// Batches drawn at steps < t are committed (a commit at step t, or a snapshot of step t adopted).
void ShardGenerator::Impl::settle(int64_t t) {
  while (!drawn.empty() && drawn.front().step < t) {
    if (done.size() == detail::kCommittedCap) {
      done.pop_front();
      ++done_dropped;
    }
    done.push_back(std::move(drawn.front()));
    drawn.pop_front();
  }
  drawn.clear();  // the rest was rolled back: those steps will be drawn again
}

uint64_t ShardGenerator::Impl::shard_size(uint64_t k) const {
  uint64_t begin = k * o.records_per_shard;
  return std::min(o.records, begin + o.records_per_shard) - begin;
}

std::string ShardGenerator::Impl::ns_prefix() const {
  return o.name + "/g" + std::to_string(generation) + "/s" + std::to_string(ns_step) + "/e" + std::to_string(epoch) + "/";
}

uint64_t ShardGenerator::Impl::offset_at(uint64_t k, int64_t t) const {
  if (!claims[k]) return base[k];
  const Claim& c = *claims[k];
  uint64_t steps = t > c.t0 ? static_cast<uint64_t>(t - c.t0) : 0;
  return std::min(shard_size(k), c.offset + steps * c.batch);
}

std::vector<uint64_t> ShardGenerator::Impl::records_of(int64_t e, uint64_t k) const {
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

std::vector<uint64_t> ShardGenerator::Impl::order_of(int64_t e) const {
  return detail::permutation(shards, detail::mix(o.seed, static_cast<uint64_t>(e), 0x6f72646572ull));
}

// Opens the claim namespace of (generation, ns_step = step, epoch) with the given base offsets.
void ShardGenerator::Impl::open_namespace(std::vector<uint64_t> offsets) {
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

void ShardGenerator::Impl::reset_to_committed() {
  epoch = committed.epoch;
  step = committed.step;
  epoch_start = committed.epoch_start;
  ended = false;
  open_namespace(committed.offsets);
}

void ShardGenerator::Impl::remember(uint64_t k, Claim c) {
  if (!claims[k] && base[k] < shard_size(k)) ++known;
  claims[k] = std::move(c);
}

// Claims the next free shard in this epoch's order for step t; false when none is free.
bool ShardGenerator::Impl::try_claim(int64_t t) {
  while (cursor < order.size()) {
    uint64_t k = order[cursor];
    if (base[k] >= shard_size(k) || claims[k]) {
      ++cursor;
      continue;
    }
    Claim mine{t, base[k], batch(), worker};
    std::string key = ns_prefix() + std::to_string(k);
    std::optional<std::string> current;
    bool won = store->compare_set(key, std::nullopt, detail::encode_claim(mine), &current);
    ++cursor;
    if (won) {
      remember(k, mine);
      held = static_cast<int64_t>(k);
      held_records = records_of(epoch, k);
      return true;
    }
    EDL_CHECK(current.has_value(), StoreError,
              "shard dispatcher: compare_set on '" + key + "' failed but the key is absent");
    Claim theirs = detail::decode_claim(key, *current);
    if (theirs.worker == worker && theirs.t0 == t && theirs.offset == base[k] && theirs.batch == mine.batch) {
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
void ShardGenerator::Impl::learn_claims() {
  while (cursor < order.size()) {
    uint64_t k = order[cursor];
    if (base[k] < shard_size(k) && !claims[k]) {
      const std::string key = ns_prefix() + std::to_string(k);
      auto v = store->get(key);
      if (!v) return;
      remember(k, detail::decode_claim(key, *v));
    }
    ++cursor;
  }
}

bool ShardGenerator::Impl::all_exhausted(int64_t t) const {
  for (uint64_t k = 0; k < shards; ++k)
    if (offset_at(k, t) < shard_size(k)) return false;
  return true;
}

// Learns every claim of the namespace (needed to tabulate offsets at a commit).
void ShardGenerator::Impl::refresh_claims() {
  if (known == shards) return;
  const std::string prefix = ns_prefix();
  for (const std::string& key : store->keys(prefix)) {
    const std::string tail = key.substr(prefix.size());
    char* end = nullptr;
    unsigned long long k = std::strtoull(tail.c_str(), &end, 10);
    if (tail.empty() || *end != '\0' || k >= shards || claims[k]) continue;
    if (auto v = store->get(key)) remember(k, detail::decode_claim(key, *v));
  }
}

StepRecords ShardGenerator::Impl::claim_next() {
  StepRecords r;
  r.step = step;
  r.epoch = epoch;
  const int64_t t = step;
  if (o.rebalance) rebalance_before(t);
  for (;;) {
    if (held >= 0) {
      uint64_t k = static_cast<uint64_t>(held);
      uint64_t pos = offset_at(k, t), size = shard_size(k);
      if (pos < size) {
        uint64_t end = std::min(size, pos + claims[k]->batch);
        r.epoch = epoch;
        r.shard = held;
        r.offset = pos;
        r.records.assign(held_records.begin() + pos, held_records.begin() + end);
        ++step;
        drawn.push_back(r);
        return r;
      }
      held = -1;
    }
    if (edl::elastic::catching_up()) learn_claims();  // no records until it holds the job's state
    else if (try_claim(t)) continue;
    if (!all_exhausted(t)) {  // others still hold shards of this epoch: wait for them
      r.epoch = epoch;
      ++step;
      return r;
    }
    if (o.epochs > 0 && epoch + 1 >= o.epochs) {
      ended = true;
      r.epoch = epoch;
      r.end_of_data = true;
      return r;
    }
    ++epoch;
    open_namespace(std::vector<uint64_t>(shards, 0));
  }
}

std::vector<StepRecords> ShardGenerator::Impl::claim_lookahead(size_t steps) const {
  std::vector<StepRecords> out;
  if (held < 0 || ended) return out;
  const uint64_t k = static_cast<uint64_t>(held), size = shard_size(k);
  for (size_t i = 0; i < steps; ++i) {
    const int64_t t = step + static_cast<int64_t>(i);
    const uint64_t pos = offset_at(k, t);
    if (pos >= size) break;
    StepRecords r;
    r.step = t;
    r.epoch = epoch;
    r.shard = held;
    r.offset = pos;
    r.records.assign(held_records.begin() + pos, held_records.begin() + std::min(size, pos + claims[k]->batch));
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t ShardGenerator::Impl::batch() const {
  if (o.rebalance && rank < static_cast<int>(rebalancer.split().size())) return rebalancer.split()[rank];
  return o.batch_size;
}

ShardGenerator::ShardGenerator(std::shared_ptr<Store> store, ShardOptions options) : impl_(std::make_unique<Impl>()) {
  EDL_CHECK(store != nullptr, InvalidArgument, "ShardGenerator: store is null");
  EDL_CHECK(options.records > 0, InvalidArgument, "ShardGenerator: empty dataset (records = 0)");
  EDL_CHECK(options.records_per_shard > 0, InvalidArgument, "ShardGenerator: records_per_shard must be > 0, got 0");
  EDL_CHECK(options.batch_size > 0, InvalidArgument, "ShardGenerator: batch_size must be > 0, got 0");
  EDL_CHECK(options.epochs >= 0, InvalidArgument,
            "ShardGenerator: epochs must be >= 0, got " + std::to_string(options.epochs));
  EDL_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos, InvalidArgument,
            "ShardGenerator: name must be non-empty without '/', got '" + options.name + "'");
  EDL_CHECK(!options.deterministic || options.micro_batches > 0, InvalidArgument,
            "ShardGenerator: the reproducible mode (deterministic, EDL_DETERMINISTIC=1) needs micro_batches > 0 "
            "(micro-batches of batch_size records per step), got 0");
  EDL_CHECK(!options.deterministic || !options.batch_for_size, InvalidArgument,
            "ShardGenerator: batch_for_size does not apply in the reproducible mode (the global batch is "
            "micro_batches x batch_size at every world size)");
  auto& s = *impl_;
  s.store = std::move(store);
  s.o = std::move(options);
  s.shards = (s.o.records + s.o.records_per_shard - 1) / s.o.records_per_shard;
  s.worker = s.o.worker_id.empty() ? "rank0" : s.o.worker_id;
  s.committed.offsets.assign(s.shards, 0);
  s.reset_to_committed();
  s.rebalance_reset();
}

ShardGenerator::~ShardGenerator() = default;

StepRecords ShardGenerator::next() {
  auto& s = *impl_;
  StepRecords r;
  if (s.ended) {  // options.epochs are done: the same answer on every member, every time
    r.step = s.step;
    r.epoch = s.epoch;
    r.end_of_data = true;
    return r;
  }
  r = s.o.deterministic ? s.fixed_next() : s.claim_next();
  if (s.o.rebalance && s.note_step_records) s.note_step_records(r.records.size());
  return r;
}

std::vector<StepRecords> ShardGenerator::lookahead(size_t steps) const {
  if (impl_->o.deterministic) return impl_->fixed_lookahead(steps);
  return impl_->claim_lookahead(steps);
}

int64_t ShardGenerator::epoch() const { return impl_->epoch; }
int64_t ShardGenerator::step() const { return impl_->step; }
uint64_t ShardGenerator::batch_size() const { return impl_->o.deterministic ? impl_->o.batch_size : impl_->batch(); }
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

std::vector<uint64_t> ShardGenerator::rebalanced_batches() const {
  if (!impl_->o.rebalance) return {};
  return impl_->rebalancer.split();
}

void ShardGenerator::observe_step(const std::vector<double>& compute_s, const std::vector<uint64_t>& records) {
  impl_->pending_times.emplace_back(compute_s, records);
}

std::string ShardGenerator::save() {
  auto& s = *impl_;
  if (!s.o.deterministic) s.refresh_claims();  // the fixed schedule claims nothing
  Impl::Table t;
  t.epoch = s.epoch;
  t.step = s.step;
  t.epoch_start = s.epoch_start;
  t.offsets.resize(s.shards);
  for (uint64_t k = 0; k < s.shards; ++k) t.offsets[k] = s.o.deterministic ? 0 : s.offset_at(k, s.step);
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
  if (s.o.deterministic)  // the fixed schedule: micro-batch size, micro-batches per step, first step of the epoch
    out += " fixed=" + std::to_string(s.o.batch_size) + ":" + std::to_string(s.o.micro_batches) + ":" +
           std::to_string(t.epoch_start);
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
  read_fixed(s, in, &t, bad);
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
  s.rank = info.rank;
  s.size = info.size;
  if (s.o.worker_id.empty()) s.worker = "rank" + std::to_string(info.rank);
  if (s.o.batch_for_size) {  // the batch policy: the local batch follows the world size
    const uint64_t b = s.o.batch_for_size(info.size);
    EDL_CHECK(b > 0, InvalidArgument,
              "ShardGenerator: batch_for_size(" + std::to_string(info.size) + ") returned 0 (must be > 0)");
    s.o.batch_size = b;
  }
  s.settle(s.committed.step);  // a new generation restarts from the commit
  s.reset_to_committed();
  s.rebalance_reset();
  if (info.rank != 0) return;
  // Namespaces of earlier generations are dead (nobody of this generation reads them): drop them.
  const std::string prefix = s.o.name + "/g";
  for (const std::string& key : s.store->keys(prefix)) {
    unsigned long long g = std::strtoull(key.c_str() + prefix.size(), nullptr, 10);
    if (g < info.generation) s.store->del(key);
  }
}

}  // namespace edl::data
