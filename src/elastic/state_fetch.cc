// The newcomer's striped fetch and catch-up pacing of stop-free joins (state_fetch.h).
#include "elastic/state_fetch.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "collective/socket.h"
#include "common/host_port.h"
#include "edl/error.h"
#include "elastic/state_wire.h"

namespace edl::elastic {

namespace wire = state_wire;
using Clock = wire::Clock;

// One slice in flight: the reply header, then the bytes.
struct StateFetch::Peer {
  int fd = -1;
  size_t source = 0;
  uint64_t offset = 0, length = 0;
  std::string head = std::string(wire::kReplyBytes, '\0');
  wire::IovCursor cur;
  bool in_body = false;
  bool done = false;
  bool committed = true;
};

StateFetch::StateFetch(StateFetchOptions o, std::vector<FetchSource> sources, std::vector<iovec> space,
                       const std::atomic<bool>* cancel)
    : o_(std::move(o)), sources_(std::move(sources)), space_(std::move(space)), cancel_(cancel) {
  EDL_CHECK(!sources_.empty(), InvalidArgument, "StateFetch: no survivor to fetch from");
  total_ = wire::total_bytes(space_);
}

StateFetch::~StateFetch() {
  for (int fd : fds_) ::close(fd);
}

void StateFetch::connect() {
  if (!fds_.empty()) return;
  const auto id = wire::identity(o_.job, o_.generation, o_.size, o_.secret);
  for (const auto& s : sources_) {
    const auto deadline = Clock::now() + o_.io_timeout;
    int fd = -1;  // in slices of 100 ms, so a failure of the generation (cancel) ends the wait
    while (fd < 0 && Clock::now() < deadline && !(cancel_ && cancel_->load()))
      fd = collective::connect_until(s.address, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (cancel_ && cancel_->load() && fd < 0) throw AbortedError("stop-free join: the fetch was cancelled (the generation failed)");
    if (fd < 0)
      throw PeerLostError("stop-free join: cannot reach the state server of rank " + std::to_string(s.rank) + " at " +
                          s.address);
    fds_.push_back(fd);
    collective::tune_data_socket(fd);
    bool auth = false;
    const std::string why = wire::connect_handshake(fd, id, o_.rank, s.rank, deadline, cancel_, &auth);
    if (cancel_ && cancel_->load()) throw AbortedError("stop-free join: the fetch was cancelled (the generation failed)");
    if (auth) throw AuthError("stop-free join: the state server of rank " + std::to_string(s.rank) + " at " + s.address +
                              " proved another job secret (EDL_JOB_SECRET): " + why);
    if (!why.empty())
      throw PeerLostError("stop-free join: handshake with the state server of rank " + std::to_string(s.rank) + " at " +
                          s.address + " failed: " + why);
  }
}

bool StateFetch::fetch(int64_t step, uint64_t offset, uint64_t length) {
  EDL_CHECK(offset <= total_ && length <= total_ - offset, InvalidArgument, "StateFetch: range beyond the tensors");
  connect();
  const std::string where = " (step " + std::to_string(step) + ")";
  // Each source an equal slice; the first ones take the remainder.
  std::vector<Peer> peers;
  const uint64_t n = sources_.size(), base = length / n, extra = length % n;
  uint64_t at = offset;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const uint64_t len = base + (i < extra ? 1 : 0);
    if (len == 0) continue;
    Peer p;
    p.fd = fds_[i];
    p.source = i;
    p.offset = at;
    p.length = len;
    at += len;
    peers.push_back(std::move(p));
  }
  for (auto& p : peers) p.cur = wire::IovCursor({iovec{p.head.data(), p.head.size()}});  // peers no longer move
  auto lost = [&](const Peer& p, const std::string& what) {
    return "stop-free join: the state server of rank " + std::to_string(sources_[p.source].rank) + " at " +
           sources_[p.source].address + " " + what + where;
  };
  for (auto& p : peers) {
    std::string req = wire::encode(wire::Request{step, p.offset, p.length});
    wire::IovCursor req_cur({iovec{req.data(), req.size()}});
    int err = 0;
    const wire::Io io = wire::send_all(p.fd, req_cur, Clock::now() + o_.io_timeout, cancel_, &err);
    if (io == wire::Io::kCancelled) throw AbortedError("stop-free join: the fetch was cancelled (the generation failed)");
    if (io != wire::Io::kOk) throw PeerLostError(lost(p, "did not take the request: " + (err ? errno_text(err) : "timeout")));
  }
  const auto t0 = Clock::now();
  auto last_progress = t0, answered = t0;
  size_t headers = 0;
  for (;;) {
    std::vector<pollfd> pf;
    std::vector<Peer*> waiting;
    for (auto& p : peers)
      if (!p.done) {
        pf.push_back(pollfd{p.fd, POLLIN, 0});
        waiting.push_back(&p);
      }
    if (pf.empty()) break;
    if (cancel_ && cancel_->load()) throw AbortedError("stop-free join: the fetch was cancelled (the generation failed)");
    if (Clock::now() - last_progress > o_.io_timeout)
      throw TimeoutError(lost(*waiting.front(), "sent nothing for " + std::to_string(o_.io_timeout.count()) +
                                                     " ms (EDL_TIMEOUT_MS)"));
    if (::poll(pf.data(), pf.size(), 50) <= 0) continue;
    for (size_t i = 0; i < pf.size(); ++i) {
      if (!pf[i].revents) continue;
      Peer& p = *waiting[i];
      int err = 0;
      const wire::Io io = wire::recv_some(p.fd, p.cur, &err);
      last_progress = Clock::now();
      if (io == wire::Io::kClosed)
        throw PeerLostError(lost(p, "closed the connection" + (err ? ": " + errno_text(err) : std::string())));
      if (io != wire::Io::kOk) continue;
      if (p.in_body) {
        p.done = true;
        continue;
      }
      const wire::Reply r = wire::decode_reply(reinterpret_cast<const uint8_t*>(p.head.data()));
      if (++headers == peers.size()) answered = Clock::now();
      if (r.status == wire::kBadRange || (r.status == wire::kOk && r.total != total_))
        throw MismatchError(lost(p, "holds " + std::to_string(r.total) + " bytes of tensors, this worker registered " +
                                        std::to_string(total_)));
      if (r.status != wire::kOk || r.length != p.length) {
        p.committed = r.status == wire::kOk;
        if (r.status == wire::kOk) throw PeerLostError(lost(p, "answered with a range of another length"));
        p.done = true;
        continue;
      }
      p.in_body = true;
      p.cur = wire::IovCursor(wire::cut(space_, p.offset, p.length));
      if (p.cur.done()) p.done = true;
    }
  }
  const auto end = Clock::now();
  answer_s_ = std::chrono::duration<double>(answered - t0).count();
  transfer_s_ = std::chrono::duration<double>(end - answered).count();
  return std::all_of(peers.begin(), peers.end(), [](const Peer& p) { return p.committed; });
}

CatchUp::CatchUp(std::unique_ptr<StateFetch> fetch, double share, uint64_t max_chunk)
    : fetch_(std::move(fetch)), share_(share), max_chunk_(max_chunk) {
  fetch_->connect();  // early, so the survivors see a newcomer (and commit) from their next boundary
}

bool CatchUp::fetch_chunk(int64_t step, uint64_t bytes) {
  bytes = std::min(bytes, total() - installed_);
  if (bytes > 0 && fetch_->fetch(step, installed_, bytes)) {
    installed_ += bytes;
    ++chunks_;
    const double s = std::max(fetch_->transfer_s(), 1e-6), r = static_cast<double>(bytes) / s;
    rate_ = rate_ > 0 && r > rate_ ? 0.5 * rate_ + 0.5 * r : r;  // down at once, up gently
    answer_ = fetch_->answer_s();
    last_ = bytes;
  }
  return installed_ == total();
}

bool CatchUp::at_boundary(int64_t step, int64_t others_us, int64_t own_us) {
  uint64_t bytes = kFirstChunk;
  if (rate_ > 0 && others_us > 0) {
    const double left_s = std::max(0.0, static_cast<double>(others_us) / 1e6 - answer_);
    const double budget_s = share_ * left_s - static_cast<double>(own_us) / 1e6;
    bytes = budget_s > 0 ? static_cast<uint64_t>(rate_ * budget_s) : 0;
  }
  if (last_ > 0) bytes = std::min(bytes, 2 * last_);  // at most double the last chunk: a rate measured on
                                                      // a small chunk (socket buffers) overstates
  bytes = std::max({bytes, kMinChunk, (total() + kMaxBoundaries - 1) / kMaxBoundaries});
  return fetch_chunk(step, max_chunk_ > 0 ? std::min(bytes, max_chunk_) : bytes);
}

bool CatchUp::finish(int64_t step) { return fetch_chunk(step, total() - installed_); }

}  // namespace edl::elastic
