// TcpCommunicator::sparse_setup: the transport hello of a communicator on the sparse mesh
// (docs/collectives.md, "Sparse mesh"). The full mesh sends every peer a hello (shm_setup.cc); the
// sparse mesh gathers every rank's hello (hierarchy.h: TransportHello) with one allgatherv over the
// mesh instead.
// Every rank then knows whether all ranks listen on loopback (one_host(): the algorithm choice),
// checks that every rank has its transport and hierarchical settings, and derives the same
// HostLayout: on several hosts the hierarchical children are built as on the full mesh; on one host
// the collectives stay on TCP (the shared-memory transport needs the full mesh: Mesh::kAuto gives
// it up to TcpCommunicator::kShmFullMeshRanks ranks).
// When the caller knows that every rank runs on this host (CommunicatorOptions::one_host_known)
// there is no exchange at all: each rank's setup word (setup_word) rides in its mesh Hellos, every
// accepted neighbour's is compared with this rank's (setup_mismatch: CommError at construction), and
// since the mesh is connected, matching neighbours mean matching ranks.
#include <cstring>

#include "collective/hierarchy.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl::collective {

namespace {
// The fields of a setup word: one byte each.
int field(uint64_t word, int i) { return static_cast<int>((word >> (8 * i)) & 0xff); }
enum Field { kTransport = 0, kHierarchical = 1, kLoopback = 2, kOneHostKnown = 3 };
}  // namespace

uint64_t TcpCommunicator::setup_word(const TransportHello& h, bool one_host_known) {
  return static_cast<uint64_t>(h.transport & 0xff) | static_cast<uint64_t>(h.hierarchical & 0xff) << 8 |
         static_cast<uint64_t>(h.loopback ? 1 : 0) << 16 | static_cast<uint64_t>(one_host_known ? 1 : 0) << 24;
}

uint64_t TcpCommunicator::setup_word(const CommunicatorOptions& o) {
  return setup_word(TransportHello::of(o), o.one_host_known);
}

std::string TcpCommunicator::setup_mismatch(uint64_t mine, uint64_t theirs) {
  auto differs = [&](int f, const char* name, const char* values) {
    return "another " + std::string(name) + " setting (" + std::to_string(field(theirs, f)) + ", this rank " +
           std::to_string(field(mine, f)) + "; " + values + ")";
  };
  if (field(theirs, kTransport) != field(mine, kTransport))
    return differs(kTransport, "EDL_TRANSPORT", "0 auto, 1 tcp, 2 shm");
  if (field(theirs, kHierarchical) != field(mine, kHierarchical))
    return differs(kHierarchical, "EDL_HIERARCHICAL", "0 auto, 1 off, 2 on");
  if (field(theirs, kOneHostKnown) != field(mine, kOneHostKnown))
    return differs(kOneHostKnown, "one_host_known",
                   "1 = the caller knows every rank runs on this host: the ranks' views of their hosts differ");
  if (field(mine, kOneHostKnown) && field(theirs, kLoopback) != field(mine, kLoopback))
    return differs(kLoopback, "loopback listening address",
                   "1 = loopback: EDL_BIND_ADDR differs between the ranks of one host");
  return "";
}

void TcpCommunicator::sparse_setup(const std::shared_ptr<Store>& store, const std::string& prefix) {
  const std::string setup = "communicator setup on rank " + std::to_string(rank_);
  const TransportHello mine = TransportHello::of(options_);
  if (options_.one_host_known) {
    // Every neighbour's setup word matched ours in its handshake (MeshBuilder), and the mesh is
    // connected, so every rank has our settings and listens on loopback exactly when we do.
    one_host_ = mine.loopback == 1;
    EDL_LOG(3) << setup << ": " << size_ << " ranks on one host (known to the caller): TCP on the sparse mesh, no "
               << "transport exchange";
    return;
  }
  const std::string host = mine.host_id();
  std::vector<uint8_t> all;
  try {
    allgatherv(&mine, sizeof(mine), DataType::kUInt8, all, nullptr);
  } catch (const MismatchError& e) {
    throw CommError(setup + ": the ranks disagree about the setup (" + e.what() + ")");
  }
  if (all.size() != sizeof(TransportHello) * static_cast<size_t>(size_))
    throw CommError(setup + ": the transport hellos hold " + std::to_string(all.size()) + " bytes for " +
                    std::to_string(size_) + " ranks");
  std::vector<std::string> host_of(size_);
  std::string hosts = "rank " + std::to_string(rank_) + " on '" + host + "'";
  bool same = true;
  one_host_ = true;
  for (int p = 0; p < size_; ++p) {
    TransportHello h;
    std::memcpy(&h, all.data() + sizeof(TransportHello) * static_cast<size_t>(p), sizeof(h));
    if (!h.valid())
      throw CommError(setup + ": rank " + std::to_string(p) + " sent a malformed transport hello" + peer_text(p));
    const std::string why = setup_mismatch(setup_word(mine, false), setup_word(h, false));
    if (!why.empty()) throw CommError(setup + ": rank " + std::to_string(p) + " has " + why);
    one_host_ = one_host_ && h.loopback == 1;
    host_of[p] = h.host_id();
    if (host_of[p] != host) {
      if (same) hosts += "; other hosts:";
      same = false;
      if (hosts.size() < 400) hosts += " rank " + std::to_string(p) + " on '" + host_of[p] + "'";
    }
  }
  if (options_.transport == Transport::kTcp) return;
  if (same) {
    EDL_LOG(3) << setup << ": " << size_ << " ranks on one host: TCP on the sparse mesh (the shared-memory transport "
               << "needs the full mesh: EDL_MESH=full, or at most " << kShmFullMeshRanks << " ranks)";
    return;
  }
  HostLayout layout = HostLayout::decide(host_of, rank_, options_.hierarchical, setup, hosts);
  if (!layout.problem.empty()) return;
  hier_ = Hierarchy::build(store, prefix, size_, options_, layout);
  hier_->set_tuning(tuning_);
}

}  // namespace edl::collective
