// Mesh handshake: the messages that open every mesh connection and prove the job secret, as two
// sans-I/O state machines (the acceptor's and the connector's side). TcpCommunicator::build_mesh
// moves the bytes; the fuzz target tests/fuzz/mesh_hello_fuzz.cc drives the acceptor side directly.
//
// Step by step (docs/collectives.md, "Mesh bootstrap"); fixed-size messages, host byte order:
//   1. connector -> acceptor  Hello (96 B): magic "EDLMESH3", generation, prefix tag, rank, size,
//                             nonce_c (32 random bytes), the connector's setup word (8 bytes: its
//                             transport settings, opaque here), 24 zero bytes.
//      The acceptor checks magic, prefix tag (job), generation, size and that the rank is another
//      rank of this generation; otherwise it rejects (closes) the connection.
//   2. acceptor -> connector  Challenge (96 B): magic "EDLMCHAL", its generation, tag, rank, size,
//                             nonce_a, mac_a = HMAC-SHA256(secret, transcript('A')).
//      The connector checks that the acceptor is the rank it dialled, of this generation, and mac_a.
//   3. connector -> acceptor  Proof (32 B): mac_c = HMAC-SHA256(secret, transcript('C')).
//   4. acceptor -> connector  Accept (8 B): "EDLMACPT" once mac_c verified (constant-time compare),
//                             or Reject (8 B): "EDLMREJT" when it did not verify, then it closes.
//      A connection closed without a Reject is a lost peer (it died), never an authentication failure.
//   transcript(role) = "edl-mesh-v2" | role | generation | tag | size | sender rank | receiver rank |
//                      connector's setup word | nonce_c | nonce_a
// The acceptor learns the connector's setup word (AcceptSide::peer_setup), authenticated once the
// proof verified; the caller compares it with its own (the handshake itself does not judge it).
// Both sides prove the secret over both fresh nonces; the role byte keeps one side's MAC from
// being reflected as the other's, and the secret never crosses the wire. An empty secret is a valid
// (well-known) key: the handshake then only keeps jobs and generations apart.
//
// Thread-safety: an object per connection, used by one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "edl/export.h"

namespace edl::collective::mesh {

// What both ends must agree on.
struct Identity {
  uint64_t generation = 0;
  uint64_t prefix_tag = 0;  // FNV-1a of the store prefix
  int32_t size = 0;
  std::string secret;  // job secret (EDL_JOB_SECRET); may be empty
  uint64_t setup = 0;  // this rank's setup word, sent in its Hellos (opaque to the handshake)
};

constexpr size_t kNonceBytes = 32;
constexpr size_t kHelloBytes = 96;  // Hello and Challenge
constexpr size_t kProofBytes = 32;
constexpr size_t kAcceptBytes = 8;
constexpr uint64_t kHelloMagic = 0x334853454d4c4445ull;      // "EDLMESH3" (bytes on the wire)
constexpr uint64_t kChallengeMagic = 0x4c4148434d4c4445ull;  // "EDLMCHAL"
constexpr uint64_t kAcceptMagic = 0x545043414d4c4445ull;     // "EDLMACPT"
constexpr uint64_t kRejectMagic = 0x544a45524d4c4445ull;     // "EDLMREJT"

// The fixed layout of Hello and Challenge.
struct HelloWire {
  uint64_t magic;
  uint64_t generation;
  uint64_t prefix_tag;
  int32_t rank;
  int32_t size;
  uint8_t nonce[kNonceBytes];
  uint8_t mac[32];  // a Hello: the connector's setup word (8 bytes), then zeros
};
static_assert(sizeof(HelloWire) == kHelloBytes, "mesh Hello is 96 bytes");

// "rank 3 of 4, generation 7" for log and error messages.
std::string describe(const HelloWire& h);

// Acceptor side of one accepted connection. feed() the received bytes (at most wanted()); it
// returns the bytes to send back (possibly empty). After kRejected, reason() says why; the caller
// sends what feed() returned (a Reject after a wrong proof), closes the connection and keeps
// waiting for the genuine peer.
class EDL_API AcceptSide {
 public:
  enum class State { kWantHello, kWantProof, kDone, kRejected };
  AcceptSide(Identity id, int my_rank, std::string nonce);
  size_t wanted() const;
  std::string feed(const uint8_t* p, size_t n);
  State state() const { return state_; }
  const std::string& reason() const { return reason_; }
  // Rejected for a hello of an older generation of this job: routine on a listener kept across
  // generations (CommunicatorOptions::listen_fd), where a failed build's dials may wait.
  bool stale() const { return stale_; }
  int peer_rank() const { return peer_; }  // valid from kWantProof on
  // The connector's setup word from its Hello; authenticated once kDone.
  uint64_t peer_setup() const { return peer_setup_; }

 private:
  std::string on_hello();
  std::string on_proof();
  Identity id_;
  int rank_;
  std::string nonce_a_;
  std::string nonce_c_;
  State state_ = State::kWantHello;
  std::array<uint8_t, kHelloBytes> buf_{};
  size_t got_ = 0;
  int peer_ = -1;
  uint64_t peer_setup_ = 0;
  std::string reason_;
  bool stale_ = false;
};

// Connector side of one connection this rank dialled to `peer`. hello() is sent first; then feed()
// the received bytes (at most wanted()) and send what it returns. kFailed: reason() says why and
// auth_failure() tells a wrong job secret (AuthError: the acceptor's MAC did not verify, or it sent
// a Reject) from a wrong or stale peer (PeerLostError).
class EDL_API ConnectSide {
 public:
  enum class State { kWantChallenge, kWantAccept, kDone, kFailed };
  ConnectSide(Identity id, int my_rank, int peer, std::string nonce);
  std::string hello() const;
  size_t wanted() const;
  std::string feed(const uint8_t* p, size_t n);
  State state() const { return state_; }
  const std::string& reason() const { return reason_; }
  bool auth_failure() const { return auth_failure_; }

 private:
  std::string on_challenge();
  void on_accept();
  Identity id_;
  int rank_;
  int peer_;
  std::string nonce_c_;
  State state_ = State::kWantChallenge;
  std::array<uint8_t, kHelloBytes> buf_{};
  size_t got_ = 0;
  std::string reason_;
  bool auth_failure_ = false;
};

// HMAC-SHA256 over the transcript (exposed for tests).
// `setup`: the connector's setup word (its Hello's).
EDL_API std::string transcript_mac(const Identity& id, char role, int from, int to, uint64_t setup,
                                   const std::string& nonce_c, const std::string& nonce_a);

}  // namespace edl::collective::mesh
