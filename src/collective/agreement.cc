// Agreement (agreement.h): the associative summary of the collective headers on the sparse mesh.
#include "collective/agreement.h"

#include <cstring>

#include "edl/error.h"

namespace edl::collective {

Agreement agreement_of(const TcpCommunicator::Header& mine) {
  Agreement a{};
  a.lo = mine;
  a.bad.rank = -1;
  a.host_mismatch = mine.reserved == kHostMismatch ? mine.rank : kNoRank;
  return a;
}

bool headers_differ(const TcpCommunicator::Header& a, const TcpCommunicator::Header& b) {
  if (a.seq != b.seq || a.kind != b.kind || a.pad != b.pad || a.reserved != b.reserved) return true;
  if (a.kind == static_cast<uint8_t>(Kind::kBarrier)) return false;
  if (a.dtype != b.dtype) return true;
  if (a.kind != static_cast<uint8_t>(Kind::kAllgather) && a.count != b.count) return true;
  if (a.kind == static_cast<uint8_t>(Kind::kAllreduce) && a.op != b.op) return true;
  return a.kind == static_cast<uint8_t>(Kind::kBroadcast) && a.root != b.root;
}

void merge_agreement(Agreement& mine, const Agreement& theirs, bool mine_lower) {
  const Agreement& lower = mine_lower ? mine : theirs;
  const Agreement& upper = mine_lower ? theirs : mine;
  Agreement out = lower;
  const TcpCommunicator::Header& candidate = headers_differ(lower.lo, upper.lo) ? upper.lo : upper.bad;
  if (candidate.rank >= 0 && (out.bad.rank < 0 || candidate.rank < out.bad.rank)) out.bad = candidate;
  out.host_mismatch = std::min(lower.host_mismatch, upper.host_mismatch);
  mine = out;
}

namespace {

std::string header_fields_problem(const TcpCommunicator::Header& h, int size, const char* which) {
  const std::string w = std::string("its agreement's ") + which + " header ";
  if (h.magic != kHeaderMagic) return w + "is corrupt (the byte streams are out of sync)";
  if (h.rank < 0 || h.rank >= size) return w + "names rank " + std::to_string(h.rank);
  if (h.kind < static_cast<uint8_t>(Kind::kAllreduce) || h.kind > static_cast<uint8_t>(Kind::kBarrier))
    return w + "has unknown kind " + std::to_string(h.kind);
  if (h.dtype > static_cast<uint8_t>(DataType::kUInt8)) return w + "has unknown dtype " + std::to_string(h.dtype);
  if (h.op > static_cast<uint8_t>(ReduceOp::kProduct)) return w + "has unknown reduce op " + std::to_string(h.op);
  return "";
}

}  // namespace

std::string agreement_problem(const Agreement& a, int size) {
  std::string p = header_fields_problem(a.lo, size, "lowest");
  if (p.empty() && a.bad.rank != -1) p = header_fields_problem(a.bad, size, "differing");
  if (p.empty() && a.bad.rank != -1 && a.bad.rank <= a.lo.rank) p = "its agreement names a differing rank below its lowest";
  if (p.empty() && a.host_mismatch != kNoRank && (a.host_mismatch < 0 || a.host_mismatch >= size))
    p = "its agreement names host " + std::to_string(a.host_mismatch);
  return p;
}

void throw_disagreement(const Agreement& a, const char* what, int rank) {
  if (a.host_mismatch != kNoRank)
    throw MismatchError("allreduce mismatch among the ranks of host " + std::to_string(a.host_mismatch) +
                        " (hierarchical local step)");
  const TcpCommunicator::Header& z = a.lo;
  const TcpCommunicator::Header& b = a.bad;
  if (z.reserved != b.reserved && z.kind == b.kind && z.seq == b.seq)
    throw MismatchError("allreduce count mismatch between hosts: host 0 has " + std::to_string(z.reserved) +
                        " elements, host " + std::to_string(b.rank) + " has " + std::to_string(b.reserved));
  std::string mm = mismatch_text(z, b, b.rank);
  if (!mm.empty()) throw MismatchError(mm);
  throw CommError(std::string(what) + " on rank " + std::to_string(rank) + ": rank " + std::to_string(b.rank) +
                  " chose " + algorithm_name(static_cast<AllreduceAlgorithm>(b.pad)) + " where rank 0 chose " +
                  algorithm_name(static_cast<AllreduceAlgorithm>(z.pad)) + " (AlgorithmTuning differs between ranks?)");
}

TcpCommunicator::Merge agreement_merge(int size, int rank, const char* what, PayloadMerge payload) {
  return [size, rank, what, payload = std::move(payload)](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs,
                                                           bool mine_lower) {
    const std::string where = std::string(what) + " on rank " + std::to_string(rank) + ": ";
    if (theirs.size() < sizeof(Agreement))
      throw CommError(where + "a partner sent a " + std::to_string(theirs.size()) +
                      "-byte message (the byte streams are out of sync)");
    Agreement a = read_agreement(mine), b = read_agreement(theirs);
    if (std::string p = agreement_problem(b, size); !p.empty()) throw CommError(where + "a partner's message: " + p);
    const bool both_agreed = agreed(a) && agreed(b);
    merge_agreement(a, b, mine_lower);
    write_agreement(mine, a);
    if (!agreed(a) || !both_agreed) {
      mine.resize(sizeof(Agreement));
      return;
    }
    if (payload) payload(mine, theirs, mine_lower);
  };
}

Agreement read_agreement(const std::vector<uint8_t>& msg) {
  Agreement a;
  std::memcpy(&a, msg.data(), sizeof(a));
  return a;
}

void write_agreement(std::vector<uint8_t>& msg, const Agreement& a) {
  if (msg.size() < sizeof(a)) msg.resize(sizeof(a));
  std::memcpy(msg.data(), &a, sizeof(a));
}

}  // namespace edl::collective
