// Membership: the lease thread, liveness of the generation's members, failure reports (protocol:
// docs/elastic.md). The rendezvous itself: membership_rendezvous.cc.
#include "elastic/membership.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <sstream>

#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"
#include "elastic/liveness.h"

namespace edl::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool valid_worker_id(const std::string& id) {
  if (id.empty() || id.size() > 200) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '@' || c == '-'))
      return false;
  return true;
}

int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Rounded up: a wait truncated to 0 ms in the last millisecond before `t` returns at once, and a
// loop waiting until `t` would spin on the store (a thousand requests) in that millisecond.
milliseconds left_until(Clock::time_point t) {
  auto d = std::chrono::ceil<milliseconds>(t - Clock::now());
  return d.count() > 0 ? d : milliseconds(0);
}

}  // namespace

std::vector<int> watched_ranks(int rank, int size) {
  std::vector<int> out;
  for (int d = 1; d <= kWatchedPeers && d < size; ++d) out.push_back((rank + d) % size);
  return out;
}

Membership::Membership(std::shared_ptr<Store> store, MembershipOptions options)
    : store_(std::move(store)),
      beat_store_(options.beat_store ? options.beat_store : store_),
      opt_(std::move(options)),
      keys_(opt_.job_id),
      silence_(SilenceOptions{opt_.lease, 2 * opt_.heartbeat, std::max(2 * opt_.heartbeat, opt_.lease / 3)}) {
  EDL_CHECK(store_ != nullptr, InvalidArgument, "elastic: no store");
  EDL_CHECK(valid_worker_id(opt_.worker_id), InvalidArgument,
            "elastic: worker id '" + opt_.worker_id + "' is empty or has characters outside [A-Za-z0-9._:@-]");
  EDL_CHECK(opt_.min_np >= 1, InvalidArgument, "elastic: min workers must be >= 1");
  EDL_CHECK(opt_.max_np == 0 || opt_.max_np >= opt_.min_np, InvalidArgument,
            "elastic: max workers " + std::to_string(opt_.max_np) + " is below min workers " +
                std::to_string(opt_.min_np));
  EDL_CHECK(opt_.lease > opt_.heartbeat, InvalidArgument, "elastic: the lease must be longer than the heartbeat");
  if (opt_.hostname.empty() || opt_.hostname.find_first_of(" \n") != std::string::npos) opt_.hostname = "localhost";
}

Membership::~Membership() {
  try {
    stop();
  } catch (...) {
  }
}

void Membership::fault(const std::string& point) {
  if (opt_.fault) opt_.fault(point);
}

// --- lease thread -------------------------------------------------------------------------------

void Membership::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ || stopped_) return;
  running_ = true;
  int port = 0;
  probe_fd_ = open_probe(opt_.bind_address, &port);
  probe_ = probe_fd_ >= 0 ? opt_.bind_address + ":" + std::to_string(port) : "-";
  heartbeat();  // the lease exists before start() returns
  thread_ = std::thread([this] { loop(); });
  beat_thread_ = std::thread([this] { beat_loop(); });
}

void Membership::stop() {
  bool frozen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    frozen = frozen_;
    watch_.active = false;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (beat_thread_.joinable()) beat_thread_.join();
  if (preparer_.joinable()) preparer_.join();  // a prepared arrival still being written
  close_probe();
  if (!frozen) {
    try {
      store_->del(keys_.lease(opt_.worker_id));
    } catch (const Error& e) {
      EDL_LOG(2) << "edl: could not remove lease: " << e.what();
    }
  }
}

void Membership::close_probe() {
  std::lock_guard<std::mutex> lock(probe_mu_);
  if (probe_fd_ >= 0) ::close(probe_fd_);
  probe_fd_ = -1;
}

void Membership::freeze(bool process_dead) {
  if (process_dead) close_probe();  // as the kernel does when a process dies
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = true;
  watch_.active = false;
  cv_.notify_all();
}

void Membership::thaw() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = false;
  cv_.notify_all();
}

// Accepts and closes the connections of other workers' probes, so the backlog never fills.
void Membership::drain_probe() {
  std::lock_guard<std::mutex> lock(probe_mu_);
  if (probe_fd_ < 0 || frozen_) return;
  for (int i = 0; i < 64; ++i) {
    int c = ::accept4(probe_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) break;
    ::close(c);
  }
}

void Membership::heartbeat_now() {
  std::lock_guard<std::mutex> lock(mu_);
  if (frozen_ || stopped_) return;
  // A beat that reached the store within the last beat period leaves the lease fresh: at a rendezvous
  // after a failure every survivor gets here at once, and on etcd each beat is a raft write.
  const auto last = Clock::time_point(Clock::duration(last_beat_.load()));
  if (last != Clock::time_point{} && Clock::now() - last < beat_period()) return;
  heartbeat();
}

// The wall-clock stamp is for people reading the store; no liveness decision ever compares it with
// another host's clock (docs/elastic.md, "Failure detection").
void Membership::heartbeat() {
  int64_t wall = wall_ms() + opt_.wall_clock_offset.count();
  const auto sent = Clock::now();
  beat_store_->set_lease(keys_.lease(opt_.worker_id),
                    std::to_string(++beat_) + " " + opt_.hostname + " " + std::to_string(wall) + " " + probe_,
                    opt_.lease);
  last_beat_.store(sent.time_since_epoch().count());
  const auto done = Clock::now();
  if (done - sent > opt_.heartbeat) last_slow_beat_.store(done.time_since_epoch().count());
}

void Membership::publish_later(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_[key] = value;
  cv_.notify_all();
}

// The lease thread's half of publish_later(); called with `lock` held, returns with it held.
void Membership::write_pending(std::unique_lock<std::mutex>& lock) {
  if (frozen_) return;
  if (gen_to_advance_ > gen_advanced_) {  // a decision this worker published (publish())
    const uint64_t round = gen_to_advance_;
    lock.unlock();
    try {
      advance_generation(round);
      lock.lock();
      gen_advanced_ = std::max(gen_advanced_, round);
    } catch (const Error& e) {  // tried again at the next turn
      EDL_LOG(2) << "edl: worker " << opt_.worker_id << ": could not advance the generation: " << e.what();
      lock.lock();
    }
  }
  if (pending_writes_.empty()) return;
  auto writes = std::move(pending_writes_);
  pending_writes_.clear();
  lock.unlock();
  for (const auto& [key, value] : writes) {
    try {
      store_->set(key, value);
    } catch (const Error& e) {
      EDL_LOG(2) << "edl: worker " << opt_.worker_id << ": could not write " << key << ": " << e.what();
    }
  }
  lock.lock();
}

// How often the lease is written: every heartbeat, stretched in generations of more than
// kBeatStretchFrom members to heartbeat x N / kBeatStretchFrom (not floored: 255 members beat as
// 256), at most a third of the lease. Each beat is a store write (on etcd a request of ~0.5 ms of
// the members' CPU: at 256 workers, 512 a second with the 500 ms default, half of what a 3-member
// etcd serves on a 2-core machine); a live member still shows a new beat at least twice per lease,
// so the silence rule (no new beat for a lease) is unchanged, and a stopped member is seen within
// the lease + one beat period. Before this worker is in a generation (the first rendezvous, a
// newcomer's wait) the job has at least EDL_MIN_NP members: its beats are stretched by that size
// (at the start of a 256-worker etcd job the unstretched beats were two thirds of the raft
// writes). Caller holds mu_.
milliseconds Membership::beat_period() const {
  constexpr int kBeatStretchFrom = 128;
  const int size = std::max(watch_.view.size, opt_.min_np);  // a generation never has fewer
  const auto stretched = opt_.heartbeat * size / kBeatStretchFrom;
  return std::max(opt_.heartbeat, std::min<milliseconds>(stretched, opt_.lease / 3));
}

// The beat thread: every heartbeat it drains the liveness probe and, once per beat_period(), refreshes
// the lease, on its own store connection when there is one, and nothing else that could make it late
// (the peer checks and waits run on the watch thread).
void Membership::beat_loop() {
  auto next = Clock::now() + opt_.heartbeat;
  bool failing = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (Clock::now() < next) {
      cv_.wait_until(lock, next);
      continue;
    }
    next = std::max(next + opt_.heartbeat, Clock::now());  // a late beat does not start a burst
    const bool frozen = frozen_;
    // Half a heartbeat of slack: the ticks jitter, and a beat due a millisecond after a tick would wait
    // for the next one.
    const auto last = Clock::time_point(Clock::duration(last_beat_.load()));
    const bool due = Clock::now() - last >= beat_period() - opt_.heartbeat / 2;
    lock.unlock();
    drain_probe();
    try {
      if (!frozen && due) heartbeat();
      failing = false;
    } catch (const StoreError& e) {
      lost_store(e.what());
    } catch (const std::exception& e) {
      if (!failing) {
        EDL_LOG(1) << "edl: worker " << opt_.worker_id << ": error in the beat thread: " << e.what();
      }
      failing = true;
    }
    lock.lock();
  }
}

// The store client retried for its own deadline (EDL_STORE_TIMEOUT_MS) before throwing: the lease
// can no longer be kept. Escalated to the training thread (check_store()) once.
void Membership::lost_store(const std::string& what) {
  uint64_t epoch = 0;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (store_error_) return;
    why = std::string("worker ") + opt_.worker_id + " lost the store: " + what;
    store_error_ = why;
    epoch = watch_.epoch;
  }
  report_failure(epoch, why);  // wakes a training thread blocked in a collective
}

// The watch thread: publish_later() writes, the cleanup of old generations, the peer checks every
// heartbeat and, in between, a wait on the watched generation's event key.
void Membership::loop() {
  auto next_check = Clock::now() + opt_.heartbeat;
  bool store_failed = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    try {
      write_pending(lock);
      Watch w = watch_;  // copy: the store calls below run unlocked
      bool watching = w.active && !frozen_;
      // The cleanup (hundreds of deletes at a large job) waits until training resumed in this
      // generation: during the rebuild the store serves every member's rendezvous and mesh keys.
      if (watching && progress_armed_ && cleanup_below_ > cleaned_below_) {
        uint64_t from = cleaned_below_, to = cleanup_below_;
        cleaned_below_ = to;
        lock.unlock();
        cleanup(from, to);
        lock.lock();
        continue;
      }
      if (watching && Clock::now() >= next_check) {
        next_check = Clock::now() + opt_.heartbeat;
        lock.unlock();
        check_peers(w);
        check_progress(w);
        lock.lock();
        continue;
      }
      if (!watching) {
        cv_.wait_until(lock, Clock::now() + opt_.heartbeat);
        continue;
      }
      lock.unlock();
      auto v = store_->wait_change(keys_.event(w.view.id), w.known_event, left_until(next_check));
      lock.lock();
      if (v != w.known_event && watch_.epoch == w.epoch) {
        watch_.known_event = v;
        lock.unlock();
        handle_event(w);
        lock.lock();
      }
      store_failed = false;
    } catch (const StoreError& e) {
      if (lock.owns_lock()) lock.unlock();
      lost_store(e.what());
      lock.lock();
      cv_.wait_for(lock, opt_.heartbeat);
    } catch (const std::exception& e) {
      if (!lock.owns_lock()) lock.lock();
      if (!store_failed) {
        EDL_LOG(1) << "edl: worker " << opt_.worker_id << ": error in the lease thread: " << e.what();
      }
      store_failed = true;
      cv_.wait_for(lock, opt_.heartbeat);
    }
  }
  write_pending(lock);  // the last observability samples (e.g. a straggler report just before the end)
}

void Membership::check_store() {
  std::lock_guard<std::mutex> lock(mu_);
  if (store_error_) throw StoreError(*store_error_);
}

// One read of the watched members' leases per round (watched_ranks: the next kWatchedPeers members
// in ring order; whatever the job's size), and while the communicator is being built also their
// arrival keys at the next round. The read is get_many_watched: on etcd the values come from watch
// streams on those keys (no request per heartbeat: at 256 workers a read per worker per heartbeat
// was 512 requests a second, as many as the beats); a member that looks failed there is judged again
// from a linearizable get_many (a stream may lag), so a lagging stream costs a read, never a false
// report. A watched member is reported when its lease is gone (the store expired or removed it),
// when it is silent by the beats we read (SilenceTracker: the store's own expiry may lag, e.g.
// etcd's whole-second TTLs restarted by a leader change), or, while the communicator is being built,
// when its liveness probe is refused (the process died) or when it arrived at the next rendezvous
// instead of connecting. The report is an abort of the generation (g<G>/abort + g<G>/event), which
// every member's watch thread is waiting on: each death is seen by its watchers and, one store round
// trip later, by every member.
void Membership::check_peers(const Watch& w) {
  std::vector<int> ranks = watched_ranks(w.view.rank, static_cast<int>(w.view.members.size()));
  std::vector<std::string> leases, arrivals;
  for (int r : ranks) leases.push_back(keys_.lease(w.view.members[static_cast<size_t>(r)].id));
  // While the communicator is being built, their arrival keys at the next round too (see moved_on):
  // read, not watched (a stream per key and generation would cost more than the reads of a build),
  // once per beat period (stretched as the beats above 128 members: at 256 workers these reads,
  // every heartbeat, were as many requests as the beats while a generation was being built).
  milliseconds period;
  {
    std::lock_guard<std::mutex> lock(mu_);
    period = beat_period();
  }
  if (w.building && Clock::now() - arrivals_read_ >= period - opt_.heartbeat / 2) {
    arrivals_read_ = Clock::now();
    for (int r : ranks) arrivals.push_back(keys_.in(w.view.id + 1, w.view.members[static_cast<size_t>(r)].id));
  }
  auto read = store_->get_many_watched(leases);
  if (!arrivals.empty()) {
    auto more = store_->get_many(arrivals);
    read.insert(read.end(), more.begin(), more.end());
  }
  auto failed = peer_failures(w, ranks, read);
  if (!failed.empty()) {  // confirmed by a read: a stream may lag
    std::vector<std::string> wanted = leases;
    wanted.insert(wanted.end(), arrivals.begin(), arrivals.end());
    failed = peer_failures(w, ranks, store_->get_many(wanted));
  }
  for (const auto& [r, why] : failed) {
    const auto& m = w.view.members[static_cast<size_t>(r)];
    if (store_->get(keys_.left(w.view.id, m.id))) continue;  // graceful leave in progress
    if (store_->get(keys_.finished())) return;               // the job is over; leases go away
    std::string reason = "worker " + m.id + " (rank " + std::to_string(r) + " of generation " +
                         std::to_string(w.view.id) + ") " + why;
    announce_abort(w.view.id, reason);
    report_failure(w.epoch, reason);
    return;
  }
}

// check_peers' verdict on one read of the watched members' keys (`read`: their leases, then while
// building their arrival keys at the next round): the rank of each member that looks failed, and why.
std::vector<std::pair<int, std::string>> Membership::peer_failures(const Watch& w, const std::vector<int>& ranks,
                                                                   const std::vector<std::optional<std::string>>& read) {
  std::vector<std::pair<int, std::string>> out;
  const std::vector<std::optional<std::string>> leases(read.begin(), read.begin() + static_cast<std::ptrdiff_t>(ranks.size()));
  std::map<std::string, std::string> beats;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& m = w.view.members[static_cast<size_t>(ranks[i])];
    if (leases[i] && m.id != opt_.worker_id) beats[m.id] = *leases[i];
  }
  // Our own beats are this observer's view of the store's health: reads served from watch streams
  // are never late, but a store too busy to take our beats is too busy to take our peers' (at 256
  // workers on etcd a healthy member's beats were 3.6 s late): a beat that has not reached the store
  // for two beat periods, or that took more than a heartbeat to get through, is an interruption of
  // our view (SilenceTracker), as a late round is: every member gets the recovery time after it.
  milliseconds period;
  {
    std::lock_guard<std::mutex> lock(mu_);
    period = beat_period();
  }
  const auto now = Clock::now();
  const bool beats_late = now - Clock::time_point(Clock::duration(last_beat_.load())) > 2 * period;
  const auto slow_beat = Clock::time_point(Clock::duration(last_slow_beat_.load()));
  std::map<std::string, milliseconds> silent;
  {
    std::lock_guard<std::mutex> lock(silence_mu_);
    if (w.epoch != silence_epoch_) {
      silence_.reset();  // a new generation: its members are judged afresh
      silence_epoch_ = w.epoch;
    }
    if (beats_late) silence_.interrupted(now);
    if (slow_beat != Clock::time_point{}) silence_.interrupted(slow_beat);
    for (auto& [id, quiet] : silence_.observe(beats, now)) silent[id] = quiet;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    const auto& m = w.view.members[static_cast<size_t>(r)];
    const auto& lease = leases[i];
    bool refused = lease && w.building && m.id != opt_.worker_id && probe_refused(parse_lease(*lease), opt_.hostname);
    bool quiet = silent.count(m.id) > 0;
    // A member that arrived at the next round while we still connect will never connect to G (a
    // member gets there only after G failed, or after a batch boundary that all members passed).
    // (The arrivals are read once per beat period: `read` holds them only then.)
    bool moved_on = lease && !refused && !quiet && w.building && m.id != opt_.worker_id &&
                    read.size() == 2 * ranks.size() && read[ranks.size() + i].has_value();
    if (moved_on) {  // still connecting now, after that read (`w` is a copy: built() may have come since)
      std::lock_guard<std::mutex> lock(mu_);
      moved_on = watch_.epoch == w.epoch && watch_.building;
      if (!moved_on) continue;
    }
    if (lease && !refused && !quiet && !moved_on) continue;
    out.emplace_back(r, moved_on  ? "arrived at the rendezvous of generation " + std::to_string(w.view.id + 1) +
                                             " instead of connecting"
                             : refused ? std::string("died: its liveness probe was refused")
                             : !lease  ? std::string("stopped heartbeating: its lease expired")
                                       : "stopped heartbeating: its lease expired (no new beat for " +
                                             std::to_string(silent[m.id].count()) + " ms as seen by worker " +
                                             opt_.worker_id + ")");
  }
  return out;
}

// The progress deadline, judged by this worker's own monotonic clock: in a synchronous job a rank
// stuck inside a batch stalls every member, so any member that passed no batch boundary for the
// deadline aborts the generation. The stuck rank does not arrive at the next rendezvous and is left
// out of it (after EDL_RENDEZVOUS_GRACE_MS); when it resumes it finds its generation gone.
void Membership::check_progress(const Watch& w) {
  milliseconds limit{0}, idle{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!progress_armed_ || watch_.epoch != w.epoch || opt_.progress_timeout.count() < 0) return;
    limit = opt_.progress_timeout.count() > 0 ? opt_.progress_timeout
                                              : std::max(opt_.progress_floor, 10 * longest_batch_);
    idle = std::chrono::duration_cast<milliseconds>(Clock::now() - last_progress_);
    if (idle < limit) return;
    progress_armed_ = false;
  }
  std::string reason = "no batch boundary on worker " + opt_.worker_id + " for " + std::to_string(idle.count()) +
                       " ms (progress deadline " + std::to_string(limit.count()) +
                       " ms, EDL_PROGRESS_TIMEOUT_MS): a member of generation " + std::to_string(w.view.id) +
                       " is stuck";
  announce_abort(w.view.id, reason);
  report_failure(w.epoch, reason);
}

void Membership::progress() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  if (progress_armed_) longest_batch_ = std::max(longest_batch_, std::chrono::duration_cast<milliseconds>(now - last_progress_));
  last_progress_ = now;
  progress_armed_ = true;
}

void Membership::built() {
  std::lock_guard<std::mutex> lock(mu_);
  watch_.building = false;
}

void Membership::handle_event(const Watch& w) {
  if (auto reason = store_->get(keys_.abort(w.view.id))) {
    report_failure(w.epoch, "generation " + std::to_string(w.view.id) + " was aborted: " + *reason);
    return;
  }
  // A join request. Only worth a batch-boundary round when there is room for the newcomer.
  if (opt_.max_np == 0 || w.view.size < opt_.max_np) pending_.store(true);
  timeline::instant(timeline::Lane::kElastic, "join seen");
}

void Membership::report_failure(uint64_t epoch, const std::string& reason) {
  std::function<void(const std::string&)> cb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!watch_.active || watch_.epoch != epoch || watch_.reported) return;
    watch_.reported = true;
    cb = watch_.on_failure;
  }
  EDL_LOG(1) << "edl: worker " << opt_.worker_id << ": " << reason;
  if (cb) cb(reason);
}

// Deletes the keys of generations [from, to): rank 0 of each generation keeps the store small by
// dropping generations older than the previous two (stragglers of those find <job>/gen moved on).
void Membership::cleanup(uint64_t from, uint64_t to) {
  for (uint64_t g = std::max<uint64_t>(from, 1); g < to; ++g)
    for (const auto& k : store_->keys(keys_.g(g))) store_->del(k);
}

void Membership::watch(const GenerationView& g, std::function<void(const std::string&)> on_failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (g.rank == 0 && g.id > 3) cleanup_below_ = std::max(cleanup_below_, g.id - 2);
  watch_.epoch++;
  watch_.active = true;
  watch_.view = g;
  watch_.known_event.reset();  // any bump of g<G>/event, even one made before we watch, is news
  watch_.on_failure = std::move(on_failure);
  watch_.reported = false;
  watch_.building = true;
  progress_armed_ = false;  // armed by the first progress() in this generation
  pending_.store(false);
  cv_.notify_all();
}

void Membership::unwatch() {
  std::lock_guard<std::mutex> lock(mu_);
  watch_.epoch++;
  watch_.active = false;
  watch_.on_failure = nullptr;
  progress_armed_ = false;
  pending_.store(false);
}

// The first announcer writes g<G>/abort and bumps g<G>/event, which wakes every member. When a
// failure is seen by many members at once (a kill -9 closes the sockets of all its mesh peers, whose
// aborts then close theirs), each later announcer only reads: a bump per announcer would wake every
// member once per announcer, O(N^2) wake-ups for the store. A later announcer bumps only when the
// counter never moved (the first one died between its two writes).
// Both keys are read in one get_many (one round trip on tcp://): every survivor of a failure
// announces it, so this is on the path of each one's recovery.
void Membership::announce_abort(uint64_t gen, const std::string& reason) {
  const auto now = store_->get_many({keys_.abort(gen), keys_.event(gen)});
  if (!now[0] && store_->compare_set(keys_.abort(gen), std::nullopt, reason)) {
    store_->add(keys_.event(gen), 1);
    return;
  }
  // The event read may precede the first announcer's bump (it lost the race to us by a hair): one
  // extra bump then wakes the members once more, which is harmless.
  if (!now[1]) store_->add(keys_.event(gen), 1);
}

void Membership::announce_leave(uint64_t gen) { store_->set(keys_.left(gen, opt_.worker_id), "1"); }

void Membership::announce_finished(uint64_t gen) {
  store_->compare_set(keys_.finished(), std::nullopt, std::to_string(gen));
}

// --- rendezvous ---------------------------------------------------------------------------------

std::vector<std::string> Membership::live_workers() {
  auto ks = store_->keys(keys_.lease_prefix());
  for (auto& k : ks) k.erase(0, keys_.lease_prefix().size());
  return ks;
}

uint64_t Membership::latest_generation() {
  return static_cast<uint64_t>(parse_store_int(store_->get(keys_.gen())));
}

void Membership::check_finished() {
  if (store_->get(keys_.finished())) throw JobFinished();
}

void Membership::check_failed() {
  if (auto reason = store_->get(keys_.failed())) throw JobFailed(*reason);
}

void Membership::mark_failed(const std::string& reason) {
  store_->compare_set(keys_.failed(), std::nullopt, reason);  // the first reason wins
}

std::optional<std::string> Membership::failed_reason() { return store_->get(keys_.failed()); }

// Provably gone: the lease is absent (expired, or removed at a clean exit) or the liveness probe is
// refused (the process is dead: the kernel closed its socket). A stopped or busy process is neither.
bool Membership::provably_dead(const std::string& id) {
  auto v = store_->get(keys_.lease(id));
  return !v || probe_refused(parse_lease(*v), opt_.hostname);
}

}  // namespace edl::elastic
