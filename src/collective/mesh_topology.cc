// MeshTopology (mesh_topology.h): the peers of a full or sparse mesh.
#include "collective/mesh_topology.h"

#include <algorithm>

namespace edl::collective {

MeshTopology::MeshTopology(int rank, int size, bool sparse) : rank_(rank), size_(size), sparse_(sparse) {
  while (p2_ * 2 <= size_) p2_ *= 2;
}

MeshTopology MeshTopology::full(int rank, int size) {
  MeshTopology t(rank, size, false);
  for (int p = 0; p < size; ++p)
    if (p != rank) t.peers_.push_back(p);
  return t;
}

MeshTopology MeshTopology::sparse(int rank, int size) {
  MeshTopology t(rank, size, true);
  std::vector<int> p;
  if (size > 1) {
    p.push_back((rank + 1) % size);         // ring: the rank this one sends to
    p.push_back((rank + size - 1) % size);  // ring: the rank this one receives from
  }
  if (t.folded_out()) p.push_back(rank + 1);
  if (t.folds_in()) p.push_back(rank - 1);
  const int v = t.virtual_rank();
  if (v >= 0)
    for (int mask = 1; mask < t.p2_; mask <<= 1) p.push_back(t.real(v ^ mask));
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  p.erase(std::remove(p.begin(), p.end(), rank), p.end());
  t.peers_ = std::move(p);
  return t;
}

bool MeshTopology::linked(int peer) const { return std::binary_search(peers_.begin(), peers_.end(), peer); }

int MeshTopology::vrank_of(int rank, int size) {
  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  const int rem = size - p2;
  if (rank < 2 * rem) return rank % 2 == 1 ? rank / 2 : -1;
  return rank - rem;
}

int MeshTopology::rounds() const {
  int k = 0;
  while ((1 << k) < p2_) ++k;
  return k + (rem() > 0 ? 1 : 0);
}

}  // namespace edl::collective
