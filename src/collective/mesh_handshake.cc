#include "collective/mesh_handshake.h"

#include <algorithm>
#include <cstring>

#include "common/crypto.h"
#include "edl/error.h"

namespace edl::collective::mesh {
namespace {

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

HelloWire make_wire(uint64_t magic, const Identity& id, int rank, const std::string& nonce) {
  HelloWire w{};
  w.magic = magic;
  w.generation = id.generation;
  w.prefix_tag = id.prefix_tag;
  w.rank = rank;
  w.size = id.size;
  std::memcpy(w.nonce, nonce.data(), kNonceBytes);
  return w;
}

std::string bytes_of(const HelloWire& w) { return std::string(reinterpret_cast<const char*>(&w), sizeof(w)); }

void check_nonce(const std::string& nonce) {
  if (nonce.size() != kNonceBytes)
    throw InternalError("mesh handshake: nonce of " + std::to_string(nonce.size()) + " bytes (want 32)");
}

// Moves up to `want - got` bytes of p into buf; returns how many were taken.
size_t take(uint8_t* buf, size_t* got, size_t want, const uint8_t* p, size_t n) {
  size_t k = std::min(n, want - *got);
  std::memcpy(buf + *got, p, k);
  *got += k;
  return k;
}

}  // namespace

std::string describe(const HelloWire& h) {
  return "rank " + std::to_string(h.rank) + " of " + std::to_string(h.size) + ", generation " +
         std::to_string(h.generation);
}

std::string transcript_mac(const Identity& id, char role, int from, int to, uint64_t setup,
                           const std::string& nonce_c, const std::string& nonce_a) {
  std::string t = "edl-mesh-v2";
  t.push_back(role);
  put<uint64_t>(t, id.generation);
  put<uint64_t>(t, id.prefix_tag);
  put<int32_t>(t, id.size);
  put<int32_t>(t, from);
  put<int32_t>(t, to);
  put<uint64_t>(t, setup);
  t += nonce_c;
  t += nonce_a;
  crypto::Digest d = crypto::hmac_sha256(id.secret, t);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// ---- acceptor ----------------------------------------------------------------------------------

AcceptSide::AcceptSide(Identity id, int my_rank, std::string nonce)
    : id_(std::move(id)), rank_(my_rank), nonce_a_(std::move(nonce)) {
  check_nonce(nonce_a_);
}

size_t AcceptSide::wanted() const {
  switch (state_) {
    case State::kWantHello: return kHelloBytes - got_;
    case State::kWantProof: return kProofBytes - got_;
    default: return 0;
  }
}

std::string AcceptSide::feed(const uint8_t* p, size_t n) {
  std::string reply;
  while (n > 0 && (state_ == State::kWantHello || state_ == State::kWantProof)) {
    const size_t want = state_ == State::kWantHello ? kHelloBytes : kProofBytes;
    size_t k = take(buf_.data(), &got_, want, p, n);
    p += k;
    n -= k;
    if (state_ == State::kWantHello && got_ >= sizeof(uint64_t) && got_ < want) {
      uint64_t magic;
      std::memcpy(&magic, buf_.data(), sizeof(magic));
      if (magic != kHelloMagic) {  // refuse garbage at once, without waiting for a whole hello
        state_ = State::kRejected;
        reason_ = "bad magic (not an EDL mesh peer, or an older EDL version)";
        return reply;
      }
    }
    if (got_ < want) break;
    got_ = 0;
    reply += state_ == State::kWantHello ? on_hello() : on_proof();
  }
  if (n > 0 && state_ != State::kRejected) {
    state_ = State::kRejected;
    reason_ = "it sent bytes beyond the handshake";
  }
  return reply;
}

std::string AcceptSide::on_hello() {
  HelloWire h;
  std::memcpy(&h, buf_.data(), sizeof(h));
  std::string why;
  if (h.magic != kHelloMagic) why = "bad magic (not an EDL mesh peer, or an older EDL version)";
  else if (h.prefix_tag != id_.prefix_tag) why = "it belongs to another job or store prefix";
  else if (h.generation != id_.generation)
    why = "generation " + std::to_string(h.generation) + " != ours " + std::to_string(id_.generation);
  else if (h.size != id_.size) why = "size " + std::to_string(h.size) + " != ours " + std::to_string(id_.size);
  else if (h.rank < 0 || h.rank >= id_.size || h.rank == rank_)
    why = "rank " + std::to_string(h.rank) + " is not another rank of this generation";
  if (!why.empty()) {
    state_ = State::kRejected;
    stale_ = h.magic == kHelloMagic && h.prefix_tag == id_.prefix_tag && h.generation < id_.generation;
    reason_ = "its hello (" + describe(h) + ") was refused: " + why;
    return "";
  }
  peer_ = h.rank;
  std::memcpy(&peer_setup_, h.mac, sizeof(peer_setup_));
  nonce_c_.assign(reinterpret_cast<const char*>(h.nonce), kNonceBytes);
  HelloWire c = make_wire(kChallengeMagic, id_, rank_, nonce_a_);
  std::string mac = transcript_mac(id_, 'A', rank_, peer_, peer_setup_, nonce_c_, nonce_a_);
  std::memcpy(c.mac, mac.data(), mac.size());
  state_ = State::kWantProof;
  return bytes_of(c);
}

std::string AcceptSide::on_proof() {
  std::string expect = transcript_mac(id_, 'C', peer_, rank_, peer_setup_, nonce_c_, nonce_a_);
  if (!crypto::constant_time_equal(std::string_view(reinterpret_cast<const char*>(buf_.data()), kProofBytes), expect)) {
    state_ = State::kRejected;
    reason_ = "the connection claiming rank " + std::to_string(peer_) +
              " did not prove the job secret (wrong or missing EDL_JOB_SECRET)";
    std::string no;
    put<uint64_t>(no, kRejectMagic);
    return no;
  }
  state_ = State::kDone;
  std::string ok;
  put<uint64_t>(ok, kAcceptMagic);
  return ok;
}

// ---- connector ---------------------------------------------------------------------------------

ConnectSide::ConnectSide(Identity id, int my_rank, int peer, std::string nonce)
    : id_(std::move(id)), rank_(my_rank), peer_(peer), nonce_c_(std::move(nonce)) {
  check_nonce(nonce_c_);
}

std::string ConnectSide::hello() const {
  HelloWire h = make_wire(kHelloMagic, id_, rank_, nonce_c_);
  std::memcpy(h.mac, &id_.setup, sizeof(id_.setup));
  return bytes_of(h);
}

size_t ConnectSide::wanted() const {
  switch (state_) {
    case State::kWantChallenge: return kHelloBytes - got_;
    case State::kWantAccept: return kAcceptBytes - got_;
    default: return 0;
  }
}

std::string ConnectSide::feed(const uint8_t* p, size_t n) {
  std::string reply;
  while (n > 0 && (state_ == State::kWantChallenge || state_ == State::kWantAccept)) {
    const size_t want = state_ == State::kWantChallenge ? kHelloBytes : kAcceptBytes;
    size_t k = take(buf_.data(), &got_, want, p, n);
    p += k;
    n -= k;
    if (got_ < want) break;
    got_ = 0;
    if (state_ == State::kWantChallenge) reply += on_challenge();
    else on_accept();
  }
  if (n > 0 && state_ != State::kFailed) {
    state_ = State::kFailed;
    reason_ = "it sent bytes beyond the handshake";
  }
  return reply;
}

std::string ConnectSide::on_challenge() {
  HelloWire h;
  std::memcpy(&h, buf_.data(), sizeof(h));
  if (h.magic != kChallengeMagic || h.prefix_tag != id_.prefix_tag || h.generation != id_.generation ||
      h.size != id_.size || h.rank != peer_) {
    state_ = State::kFailed;
    reason_ = h.magic != kChallengeMagic ? std::string("it is not an EDL mesh peer (bad challenge magic)")
                                         : "it answered as " + describe(h) + " (stale address in the store?)";
    return "";
  }
  const std::string nonce_a(reinterpret_cast<const char*>(h.nonce), kNonceBytes);
  const std::string expect = transcript_mac(id_, 'A', peer_, rank_, id_.setup, nonce_c_, nonce_a);
  if (!crypto::constant_time_equal(std::string_view(reinterpret_cast<const char*>(h.mac), sizeof(h.mac)), expect)) {
    state_ = State::kFailed;
    auth_failure_ = true;
    reason_ = "it did not prove the job secret (EDL_JOB_SECRET differs between the ranks?)";
    return "";
  }
  state_ = State::kWantAccept;
  return transcript_mac(id_, 'C', rank_, peer_, id_.setup, nonce_c_, nonce_a);
}

void ConnectSide::on_accept() {
  uint64_t m;
  std::memcpy(&m, buf_.data(), sizeof(m));
  if (m == kRejectMagic) {
    state_ = State::kFailed;
    auth_failure_ = true;
    reason_ = "it rejected our proof of the job secret (EDL_JOB_SECRET differs between the ranks?)";
    return;
  }
  if (m != kAcceptMagic) {
    state_ = State::kFailed;
    reason_ = "it sent a corrupt handshake acceptance";
    return;
  }
  state_ = State::kDone;
}

}  // namespace edl::collective::mesh
