// MeshTopology: which peers a rank of a TcpCommunicator connects, and the virtual ranks of the
// recursive-doubling family of algorithms that run on them (docs/collectives.md, "Sparse mesh").
//
// Full mesh: every other rank (2(n-1) sockets per rank), for small communicators and the
// shared-memory transport (whose wake-ups and failure detection need a socket to every peer).
// Sparse mesh: only the peers the algorithms of a large communicator use, each with one connection
// per direction (this rank dials the one it sends on, accepts the one it receives on):
//   - the fold partner: with p2 the largest power of two <= n and rem = n - p2, ranks 2i and 2i+1
//     (i < rem) are partners; the even one is folded out of the power-of-two algorithms, the odd one
//     takes part as virtual rank i; every rank r >= 2*rem is virtual rank r - rem;
//   - the hypercube partners: real(v ^ 2^k) for k < log2(p2) (recursive doubling and halving,
//     binomial trees from any root: a tree rooted at virtual rank w uses the edges v -- v ^ 2^k);
//   - the ring neighbours r - 1 and r + 1 (mod n) (the pipelined ring).
// Every edge is used in both directions (a dead neighbour is then seen by every rank that links to
// it, whichever side dialled first): at most 2*floor(log2 n) + 4 sockets per rank.
//
// Thread-safety: an immutable value.
#pragma once

#include <vector>

#include "edl/export.h"

namespace edl::collective {

class EDL_API MeshTopology {
 public:
  static MeshTopology full(int rank, int size);
  static MeshTopology sparse(int rank, int size);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_sparse() const { return sparse_; }
  // The peers this rank connects, ascending (never itself).
  const std::vector<int>& peers() const { return peers_; }
  bool linked(int peer) const;

  // The recursive-doubling layout (defined for every n, used by both kinds of mesh).
  int p2() const { return p2_; }    // largest power of two <= size
  int rem() const { return size_ - p2_; }
  // This rank's virtual rank in [0, p2), or -1 when it is folded out (an even rank below 2*rem).
  int virtual_rank() const { return vrank_of(rank_); }
  static int vrank_of(int rank, int size);
  int vrank_of(int rank) const { return vrank_of(rank, size_); }
  // The real rank of virtual rank v (the odd rank of a folded pair).
  int real(int v) const { return v < rem() ? 2 * v + 1 : v + rem(); }
  // An even rank below 2*rem: it hands its data to rank + 1 and gets the result back.
  bool folded_out() const { return virtual_rank() < 0; }
  // An odd rank below 2*rem: it stands for itself and rank - 1.
  bool folds_in() const { return rank_ < 2 * rem() && rank_ % 2 == 1; }
  // ceil(log2(size)): the rounds of a recursive-doubling exchange (+1 with a fold).
  int rounds() const;

 private:
  MeshTopology(int rank, int size, bool sparse);
  int rank_;
  int size_;
  bool sparse_;
  int p2_ = 1;
  std::vector<int> peers_;
};

}  // namespace edl::collective
