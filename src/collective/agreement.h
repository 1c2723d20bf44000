// Agreement: what the ranks of a sparse-mesh collective must agree on, as one fixed-size record that
// recursive doubling combines (docs/collectives.md, "Sparse mesh"). On the full mesh every rank
// receives every header; on the sparse mesh it receives only its partners' messages, so each message
// carries, for the block of ranks it stands for, the header of the block's lowest rank and the header
// of the lowest rank whose header differs from that one. Merging two adjacent blocks keeps the lower
// block's lowest header and the lowest differing rank of both (the upper block's lowest rank when
// its header differs from the lower block's, else the upper block's own differing rank): after the
// combine every rank holds rank 0's header and the lowest rank that disagrees with it, which is
// exactly what the full mesh's check reports, so every rank throws the same error.
//
// "Differs" = the fields a MismatchError names (mismatch_text: seq, kind, dtype, count but for
// allgather, op for allreduce, root for broadcast), the allreduce algorithm chosen (pad: tunings
// differ, a CommError) and the hierarchical cross step's whole count (reserved). Within one kind
// these are equality on a fixed set of fields, so "agrees with" is an equivalence and the merge is
// associative: any tree of merges gives the same record.
//
// Thread-safety: pure functions on values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/tcp_internal.h"

namespace edl::collective {

struct Agreement {
  TcpCommunicator::Header lo;   // header of the block's lowest rank
  TcpCommunicator::Header bad;  // header of the lowest rank that differs from `lo`; rank -1: none
  int32_t host_mismatch;        // lowest rank whose whole count is kHostMismatch, or kNoRank
  int32_t pad;
};
static_assert(sizeof(Agreement) == 104, "the agreement record is 104 bytes");
constexpr int32_t kNoRank = 0x7fffffff;

// This rank's own record.
Agreement agreement_of(const TcpCommunicator::Header& mine);
// Whether two headers differ in a field that must agree (see above).
bool headers_differ(const TcpCommunicator::Header& a, const TcpCommunicator::Header& b);
// Merges `theirs` into `mine`; `mine_lower`: `mine` stands for the lower ranks.
void merge_agreement(Agreement& mine, const Agreement& theirs, bool mine_lower);
// Why a record received from a peer cannot be used ("" when it can): magic, ranks, kind, dtype, op.
std::string agreement_problem(const Agreement& a, int size);
// After the combine: whether every rank agreed (no differing rank, no host marked mismatching).
inline bool agreed(const Agreement& a) { return a.bad.rank < 0 && a.host_mismatch == kNoRank; }
// Throws the error every rank throws for a record that did not agree: MismatchError (the full
// mesh's text), or CommError when only the algorithm choice differs. `what` names the collective.
[[noreturn]] void throw_disagreement(const Agreement& a, const char* what, int rank);

// The merge of combine messages made of an agreement and a payload: the payloads are merged by
// `payload` only while the agreement holds (after a disagreement they are dropped: nobody uses
// them). A malformed agreement from a partner is a CommError naming `what` and `rank`.
using PayloadMerge = std::function<void(std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool mine_lower)>;
TcpCommunicator::Merge agreement_merge(int size, int rank, const char* what, PayloadMerge payload);

// A combine message: an agreement followed by a payload.
Agreement read_agreement(const std::vector<uint8_t>& msg);
void write_agreement(std::vector<uint8_t>& msg, const Agreement& a);

}  // namespace edl::collective
