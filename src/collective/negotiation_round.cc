// Engine::reduce_round: one negotiation round on the sparse mesh (negotiation_reduce.h,
// docs/collectives.md "Negotiation at scale"). This rank's message: its cache hits as bits (in
// both `all` and `any`), every other request as a record of one rank (a cached name whose
// descriptor changed also sets its bit: presence counts either way). After the combine every rank
// holds the same ReducedNegotiation and derives the same Verdict:
//   ready, in rank 0's order: (a) cache entries that every rank lists, ascending, unless rank 0 sent
//   the name in full; (b) the records whose lowest rank is 0, by their position in rank 0's message,
//   when every rank lists them;
//   rank 0's descriptor and the lowest rank that differs: from the record (a new name, or a cached
//   one sent in full by every rank), or, for a cached name that rank 0 listed by its bit and others
//   in full, the record's lowest rank (a name is sent in full only with a descriptor that differs
//   from the cache's). The one case the combine cannot settle — rank 0 sent a cached name in full
//   and some ranks listed it by its bit — and exact presence counts (flag kWantCounts: the stall
//   warning or the request deadline is due somewhere) take a second combine of a NegotiationDetail
//   over the keys that need it; it only happens on those error paths.
#include <algorithm>
#include <functional>

#include "collective/negotiation_reduce.h"
#include "collective/tcp_communicator.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr std::chrono::seconds kStallWarning{60};

bool has_bit(const std::vector<uint64_t>& bits, size_t k) { return (bits[k / 64] >> (k % 64)) & 1; }

// The rare second combine over `keys`: how many ranks list each, and the lowest rank that lists
// it by its cache bit (`listed(k)`: 0 not here, 1 in full, 2 by its bit).
NegotiationDetail detail_round(TcpCommunicator& tcp, const std::vector<uint32_t>& keys,
                               const std::function<int(uint32_t)>& listed) {
  NegotiationDetail d;
  if (keys.empty()) return d;
  const int n = tcp.size(), me = tcp.rank();
  d.count.assign(keys.size(), 0);
  d.lowest_bit_rank.assign(keys.size(), NegotiationDetail::kNone);
  for (size_t j = 0; j < keys.size(); ++j) {
    const int how = listed(keys[j]);
    if (how > 0) d.count[j] = 1;
    if (how == 2) d.lowest_bit_rank[j] = me;
  }
  std::vector<uint8_t> dm = encode_detail(d);
  const std::string from = "a partner of rank " + std::to_string(me);
  tcp.reduce_messages(
      dm,
      [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool) {
        NegotiationDetail a = decode_detail(mine.data(), mine.size(), keys.size(), n, "this rank");
        merge_detail(a, decode_detail(theirs.data(), theirs.size(), keys.size(), n, from));
        mine = encode_detail(a);
      },
      dm.size(), "negotiation");
  return decode_detail(dm.data(), dm.size(), keys.size(), n, "the round");
}

}  // namespace

Engine::Verdict Engine::reduce_round(bool idle, const std::vector<uint64_t>& bits,
                                     const std::vector<std::pair<size_t, const Request*>>& fresh) {
  auto& tcp = static_cast<TcpCommunicator&>(*comm_);
  const int n = comm_->size(), me = comm_->rank();
  const size_t C = cache_.size();
  const auto now = std::chrono::steady_clock::now();
  ReducedNegotiation m;
  m.cache_size = static_cast<uint32_t>(C);
  m.all = m.any = bits;
  for (size_t j = 0; j < fresh.size(); ++j) {
    const Request& r = *fresh[j].second;
    ReducedNegotiation::Record rec;
    rec.name = r.name;
    rec.count = 1;
    rec.lo_rank = me;
    rec.lo_pos = static_cast<uint32_t>(j);
    rec.lo_desc = r.desc;
    m.fresh.push_back(std::move(rec));
    auto it = cache_ids_.find(r.name);
    if (it != cache_ids_.end()) m.all[it->second / 64] |= 1ull << (it->second % 64);
  }
  m.any = m.all;
  std::sort(m.fresh.begin(), m.fresh.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const RequestPtr& r : pending_) {
    const auto age = now - r->enqueued;
    if ((!r->stall_warned && age >= kStallWarning) ||
        (options_.request_timeout.count() > 0 && age >= options_.request_timeout))
      m.flags |= ReducedNegotiation::kWantCounts;
  }
  std::vector<uint8_t> msg = encode_reduced(m);
  const uint64_t limit = std::max<uint64_t>(uint64_t{1} << 20, 4 * msg.size());  // per rank: names of one rank
  const std::string from = "a partner of rank " + std::to_string(me);
  run_quietly(*comm_, idle, [&] {
    tcp.reduce_messages(
        msg,
        [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool mine_lower) {
          ReducedNegotiation a = decode_reduced(mine.data(), mine.size(), static_cast<uint32_t>(C), n, "this rank");
          ReducedNegotiation b = decode_reduced(theirs.data(), theirs.size(), static_cast<uint32_t>(C), n, from);
          merge_reduced(a, b, mine_lower);
          mine = encode_reduced(a);
        },
        limit, "negotiation");
  });
  const ReducedNegotiation all = decode_reduced(msg.data(), msg.size(), static_cast<uint32_t>(C), n, "the round");
  if (all.ranks != static_cast<uint32_t>(n))
    throw CommError("collective engine: the negotiation combined " + std::to_string(all.ranks) + " of " +
                    std::to_string(n) + " ranks");

  Verdict v;
  std::vector<const ReducedNegotiation::Record*> record_of_key;  // by key; null: no record
  record_of_key.assign(C, nullptr);
  for (const auto& r : all.fresh) {
    auto it = cache_ids_.find(r.name);
    if (it != cache_ids_.end()) {
      record_of_key[it->second] = &r;
      continue;
    }
    v.fresh_key.emplace(r.name, static_cast<uint32_t>(C + v.fresh_name.size()));
    v.fresh_name.push_back(r.name);
    record_of_key.push_back(&r);
  }
  const size_t total = C + v.fresh_name.size();
  v.present.assign(total, 0);
  for (size_t k = 0; k < total; ++k) {
    if (k < C) v.present[k] = has_bit(all.all, k) ? n : has_bit(all.any, k) ? Verdict::kSome : 0;
    else v.present[k] = static_cast<int>(record_of_key[k]->count);
  }

  // The second combine: keys whose lowest bit-listing rank or whose exact count is needed.
  auto listed_here = [&](uint32_t k) {  // 0: not listed here, 1: in full, 2: by its cache bit
    if (k < C && has_bit(bits, k)) return 2;
    const std::string& name = k < C ? cache_[k].first : v.fresh_name[k - C];
    for (const auto& f : fresh)
      if (f.second->name == name) return 1;
    return 0;
  };
  std::vector<uint32_t> detail_keys;
  for (size_t k = 0; k < total; ++k) {
    const auto* r = record_of_key[k];
    const bool mixed = k < C && r && v.present[k] == n && r->lo_rank == 0 && r->count < static_cast<uint32_t>(n);
    const bool count = (all.flags & ReducedNegotiation::kWantCounts) && v.present[k] == Verdict::kSome;
    if (mixed || count) detail_keys.push_back(static_cast<uint32_t>(k));
  }
  const NegotiationDetail d = detail_round(tcp, detail_keys, listed_here);
  for (size_t j = 0; j < detail_keys.size(); ++j)
    if (v.present[detail_keys[j]] == Verdict::kSome) v.present[detail_keys[j]] = static_cast<int>(d.count[j]);
  auto lowest_bit_rank = [&](uint32_t k) {
    const auto at = std::lower_bound(detail_keys.begin(), detail_keys.end(), k) - detail_keys.begin();
    return d.lowest_bit_rank[static_cast<size_t>(at)];
  };

  // (a) cache entries rank 0 listed by its bit, ascending; (b) rank 0's records, in its order.
  for (size_t k = 0; k < C; ++k) {
    const auto* r = record_of_key[k];
    if (v.present[k] != n || (r && r->lo_rank == 0)) continue;
    Verdict::Ready e{static_cast<uint32_t>(k), cache_[k].second, -1, Desc{}};
    if (r) e.differ_rank = r->lo_rank, e.differ_desc = r->lo_desc;
    v.ready.push_back(e);
  }
  std::vector<std::pair<uint32_t, uint32_t>> zero;  // (position in rank 0's message, key)
  for (size_t k = 0; k < total; ++k)
    if (record_of_key[k] && record_of_key[k]->lo_rank == 0 && v.present[k] == n)
      zero.emplace_back(record_of_key[k]->lo_pos, static_cast<uint32_t>(k));
  std::sort(zero.begin(), zero.end());
  for (const auto& [pos, k] : zero) {
    const auto* r = record_of_key[k];
    Verdict::Ready e{k, r->lo_desc, r->bad_rank, r->bad_desc};
    if (r->count < static_cast<uint32_t>(n)) {  // a cached name: the other ranks listed it by its bit
      const int32_t b = lowest_bit_rank(k);
      if (b != NegotiationDetail::kNone && (e.differ_rank < 0 || b < e.differ_rank))
        e.differ_rank = b, e.differ_desc = cache_[k].second;
    }
    v.ready.push_back(e);
  }
  return v;
}

}  // namespace edl::collective
