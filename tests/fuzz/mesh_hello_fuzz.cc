// libFuzzer target for the mesh handshake (src/collective/mesh_handshake.cc).
//
// The input is what a stranger could send to a rank's mesh listener (AcceptSide) and, from the
// same bytes, what a fake peer could answer a dialling rank (ConnectSide). It is fed in chunks whose
// size comes from the first byte, never more than wanted(). Findings: a crash or sanitizer report,
// an accepted connection whose rank is not another rank of the generation, a refusal without a
// reason, or a stranger completing either side without the secret. Each run also checks that a
// genuine pair completes and that a pair with different secrets never does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "collective/mesh_handshake.h"

namespace mesh = edl::collective::mesh;

namespace {

mesh::Identity identity(const std::string& secret) {
  mesh::Identity id;
  id.generation = 7;
  id.prefix_tag = 0x1234;
  id.size = 4;
  id.secret = secret;
  return id;
}

// Runs a full handshake between a connector (rank 2) and an acceptor (rank 0).
bool pair_completes(const std::string& s_conn, const std::string& s_acc) {
  mesh::ConnectSide c(identity(s_conn), 2, 0, std::string(32, 'c'));
  mesh::AcceptSide a(identity(s_acc), 0, std::string(32, 'a'));
  std::string to_acc = c.hello();
  for (int round = 0; round < 4 && !to_acc.empty(); ++round) {
    std::string to_conn = a.feed(reinterpret_cast<const uint8_t*>(to_acc.data()), to_acc.size());
    to_acc = c.feed(reinterpret_cast<const uint8_t*>(to_conn.data()), to_conn.size());
  }
  return a.state() == mesh::AcceptSide::State::kDone && c.state() == mesh::ConnectSide::State::kDone;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 97;
  // Acceptor (rank 0) facing a stranger who does not know the secret "job-secret".
  mesh::AcceptSide a(identity("job-secret"), 0, std::string(32, 'n'));
  for (size_t off = 1; off < size && a.wanted() > 0;) {
    size_t k = std::min<size_t>({chunk, size - off, a.wanted()});
    a.feed(data + off, k);
    off += k;
  }
  switch (a.state()) {
    case mesh::AcceptSide::State::kRejected:
      if (a.reason().empty()) std::abort();
      break;
    case mesh::AcceptSide::State::kWantProof:
      if (a.peer_rank() < 1 || a.peer_rank() > 3) std::abort();
      break;
    case mesh::AcceptSide::State::kDone:
      // Only a proof computed with the secret passes: the stranger would have to forge HMAC-SHA256.
      std::abort();
    case mesh::AcceptSide::State::kWantHello: break;
  }
  // Connector (rank 1 dialling rank 0) facing a fake peer.
  mesh::ConnectSide c(identity("job-secret"), 1, 0, std::string(32, 'm'));
  for (size_t off = 1; off < size && c.wanted() > 0;) {
    size_t k = std::min<size_t>({chunk, size - off, c.wanted()});
    c.feed(data + off, k);
    off += k;
  }
  if (c.state() == mesh::ConnectSide::State::kFailed && c.reason().empty()) std::abort();
  if (c.state() == mesh::ConnectSide::State::kWantAccept || c.state() == mesh::ConnectSide::State::kDone)
    std::abort();  // the fake peer cannot prove the secret
  // Genuine pairs complete; pairs with different secrets never do.
  const std::string s(reinterpret_cast<const char*>(data), std::min<size_t>(size, 16));
  if (!pair_completes(s, s)) std::abort();
  if (pair_completes(s, s + "x")) std::abort();
  return 0;
}
