// Rendezvous: arrival, the decider's election and decision, waiting for it, publishing a generation
// (protocol: docs/elastic.md, "Rendezvous"). The lease thread and liveness: membership.cc.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"
#include "elastic/generation_change.h"
#include "elastic/liveness.h"
#include "elastic/membership.h"

namespace edl::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Rounded up: a wait truncated to 0 ms in the last millisecond before `t` returns at once, and a
// loop waiting until `t` would spin on the store (a thousand requests) in that millisecond.
milliseconds left_until(Clock::time_point t) {
  auto d = std::chrono::ceil<milliseconds>(t - Clock::now());
  return d.count() > 0 ? d : milliseconds(0);
}

// The first arrivals of a round that watch its decider closely (every 200 ms at most) and take over
// from a dead one; every other waiter looks only every two heartbeats, so that a rendezvous costs
// each of them O(1) store requests however many wait.
constexpr int64_t kBackupDeciders = 3;

}  // namespace

// The global order (<job>/seq) only orders newcomers: a member of the previous generation keeps its
// order from it, so it arrives with seq 0 and no add (on etcd two txns per survivor per recovery).
int64_t Membership::arrive(uint64_t round, const std::string& note, bool member) {
  const int64_t seq = member ? 0 : store_->add(keys_.seq(), 1);
  std::string probe;
  {
    std::lock_guard<std::mutex> lock(mu_);
    probe = probe_;
  }
  const std::string mesh = opt_.mesh_address ? opt_.mesh_address() : "";
  store_->set(keys_.in(round, opt_.worker_id),
              std::to_string(seq) + " " + opt_.hostname + " " + probe + (note.empty() ? "" : " " + note) +
                  (mesh.empty() ? "" : " " + std::string(kMeshTag) + mesh));
  return store_->add(keys_.count(round), 1);
}

void Membership::set_arrival_note(std::string note) {
  std::lock_guard<std::mutex> lock(mu_);
  arrival_note_ = std::move(note);
}

// --- a survivor's arrival prepared before the boundary (stop-free joins) ------------------------

void Membership::prepare_arrival(uint64_t round) {
  std::string note;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (prepared_.round == round || frozen_ || stopped_) return;
    note = arrival_note_;
    prepared_ = Prepared{round, note, 0};
  }
  if (preparer_.joinable()) preparer_.join();  // the previous join's, long done
  // A thread of its own: the watch thread may be waiting on the store for up to a heartbeat, and the
  // boundary that needs the arrival is one step away.
  preparer_ = std::thread([this, round, note] {
    int64_t place = 0;
    bool decider = false;
    try {
      place = arrive(round, note, true);
      timeline::instant(timeline::Lane::kElastic, "arrived");
      // The election too (as wait_decision's first try: a read first); the decision waits for the boundary.
      const std::string key = keys_.decider(round);
      decider = !store_->get(key) && store_->compare_set(key, std::nullopt, opt_.worker_id);
    } catch (const std::exception& e) {  // the rendezvous arrives itself (and meets the store's error)
      EDL_LOG(2) << "edl: worker " << opt_.worker_id << ": prepared arrival at generation " << round
                 << " failed: " << e.what();
      place = 0;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (prepared_.round == round) {
      prepared_.place = place;
      prepared_.decider = decider;
    } else if (place > 0) {
      discarded_ = round;  // discarded meanwhile: our election may stand (rendezvous: recheck)
    }
  });
}

bool Membership::prepared_for(uint64_t round) {
  std::lock_guard<std::mutex> lock(mu_);
  return prepared_.round == round;
}

void Membership::discard_prepared() {
  std::lock_guard<std::mutex> lock(mu_);
  if (prepared_.round != 0) discarded_ = prepared_.round;
  prepared_ = Prepared{};
}

// The place of the prepared arrival at `round`; waits for its three requests when they are still
// under way (else the rendezvous would arrive a second time: harmless, but no faster).
Membership::Arrived Membership::take_prepared(uint64_t round, const std::string& note) {
  if (preparer_.joinable()) preparer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  const Prepared p = prepared_;
  prepared_ = Prepared{};
  Arrived a;
  if (p.round == round && p.note == note && p.place > 0) {
    a.place = p.place;
    a.prepared = true;
    a.decider = p.decider;
  } else {
    a.recheck = p.round == round || discarded_ == round;  // a preparation of this round did not stand
  }
  return a;
}

GenerationView Membership::rendezvous(const GenerationView* previous) {
  start();
  bool member = previous != nullptr;
  uint64_t round = member ? previous->id + 1 : latest_generation() + 1;
  std::string note;
  {
    std::lock_guard<std::mutex> lock(mu_);
    note = arrival_note_;
  }
  // A stop-free join's survivor arrived (and tried the election) in the background before the
  // boundary (prepare_arrival): its lease is fresh (it trained until now), its arrival stands, and the
  // job is not finished (it is inside the training function; a wait slice checks it anyway).
  Arrived arrived = member ? take_prepared(round, note) : Arrived{};
  if (!arrived.prepared) heartbeat_now();  // arrive with a fresh lease (e.g. back from SIGSTOP, whose lease expired)
  for (;;) {
    if (!arrived.prepared) {
      check_finished();
      if (leave_requested_.load()) throw LeftBeforeAdmission();
    }
    fault("rendezvous:arrive");
    if (!arrived.prepared) {
      arrived.place = arrive(round, note, member);
      if (!member && round > 1) store_->add(keys_.event(round - 1), 1);  // wake the running members
      timeline::instant(timeline::Lane::kElastic, "arrived");
    }
    fault("rendezvous:arrived");
    auto decided = wait_decision(round, member, arrived);
    arrived = Arrived{};
    if (auto job_error = decided ? parse_job_error(*decided) : std::nullopt) throw JobError(*job_error);
    if (decided) {
      auto members = parse_members(*decided);
      for (size_t r = 0; r < members.size(); ++r) {
        if (members[r].id != opt_.worker_id) continue;
        GenerationView v;
        v.id = round;
        v.rank = static_cast<int>(r);
        v.size = static_cast<int>(members.size());
        // The decider's record of the change (the same for every member); a decision without one
        // (written by an EDL before the record existed) is judged from the store as the decider would.
        auto change = parse_change(*decided);
        if (!change) change = decide_change(*store_, keys_, round, members);
        v.previous_size = change->previous_size;
        v.reason = change->reason;
        for (size_t i = 0; i < members.size(); ++i) {
          if (members[i].host != opt_.hostname) continue;
          if (i < r) v.local_rank++;
          if (i != r) v.local_size++;
        }
        v.members = std::move(members);
        return v;
      }
    }
    // Not admitted (too late, judged dead, or over max): wait as a newcomer for the next round.
    member = false;
    round = std::max(round, latest_generation()) + 1;
  }
}

bool Membership::eligible(uint64_t round, bool member) {
  if (round == 1 || member) return true;
  // A newcomer decides only when no member of the previous generation is alive (whole job died),
  // or when that generation was aborted: its survivors arrive within milliseconds and the decision
  // waits for them, but a generation whose every live member is stuck inside a batch (it aborted
  // itself by the progress deadline) has nobody else left to decide and drop the stuck ones.
  auto prev = store_->get(keys_.members(round - 1));
  if (!prev) return false;
  if (store_->get(keys_.abort(round - 1))) return true;
  for (const auto& m : parse_members(*prev))
    if (!provably_dead(m.id)) return false;  // the first live member ends the check; killed ones count as gone
  return true;
}

void Membership::try_to_decide(uint64_t round, bool member, const Arrived& arrived) {
  if (arrived.prepared) {  // the election was tried before the boundary
    if (arrived.decider) decide(round, member);
    return;
  }
  // A read first: a thousand arrivals of a first round would each try a write (a raft round on etcd).
  const std::string key = keys_.decider(round);
  const auto d = store_->get(key);
  bool mine = !d && store_->compare_set(key, std::nullopt, opt_.worker_id);
  // After a discarded preparation, the key may hold our own election, or that of a member that died
  // since (the failure): taken over now, not after a wait slice.
  if (d && arrived.recheck)
    mine = *d == opt_.worker_id || (provably_dead(*d) && store_->compare_set(key, d, opt_.worker_id));
  if (mine) decide(round, member);
}

std::optional<std::string> Membership::wait_decision(uint64_t round, bool member, const Arrived& arrived) {
  bool tried = false, first = true;
  const auto waiting_since = Clock::now();
  const int64_t place = arrived.place;
  const bool staying = arrived.prepared;
  for (;;) {
    if (!tried && eligible(round, member)) {
      try_to_decide(round, member, first ? arrived : Arrived{});  // later tries: an election afresh
      tried = true;
      first = false;
      if (published_) return std::exchange(published_, std::nullopt);  // our own decision: no read back
    }
    // Wait for the decision in slices; after each empty slice the decider's liveness (lease gone or
    // probe refused = dead, taken over at once) and a newcomer's eligibility are checked again. The
    // round's first kBackupDeciders arrivals check every 200 ms at most when they are members (their
    // training waits for the decision), so a decider killed right after it won the election costs
    // ~0.2 s; so do they as newcomers during their first lease of waiting (the members they replace
    // may be dying one after the other: a double kill), then every two heartbeats. Every other waiter
    // checks once per lease (the backups normally act first), so that a thousand waiters cost the
    // store a few requests each per rendezvous, not a stream of them.
    const bool backup = place <= kBackupDeciders;
    const bool fast = backup && (member || Clock::now() - waiting_since < opt_.lease);
    const milliseconds slice = fast ? std::min<milliseconds>(2 * opt_.heartbeat, milliseconds(200))
                               : backup ? 2 * opt_.heartbeat
                                        : std::max<milliseconds>(2 * opt_.heartbeat, opt_.lease);
    auto v = store_->wait_change(keys_.members(round), std::nullopt, slice);
    if (v) return v;
    // One read (get_many: one round trip, one txn on etcd) for every check after an empty slice: a
    // thousand waiters of a slow rendezvous each made four requests per slice, and on etcd those
    // made the rendezvous slower still.
    const auto now = store_->get_many({keys_.finished(), keys_.failed(), keys_.gen(), keys_.decider(round)});
    if (now[0]) throw JobFinished();
    if (now[1]) throw JobFailed(*now[1]);
    if (!staying && leave_requested_.load()) throw LeftBeforeAdmission();
    std::optional<std::string> decision;
    if (round_over(round, static_cast<uint64_t>(parse_store_int(now[2])), &decision)) return decision;
    const auto& d = now[3];
    if (!d) {
      tried = false;
      continue;
    }
    if (*d != opt_.worker_id && provably_dead(*d) && eligible(round, member)) {
      EDL_LOG(1) << "edl: worker " << opt_.worker_id << ": decider " << *d << " of generation " << round
                 << " died; taking over";
      if (store_->compare_set(keys_.decider(round), d, opt_.worker_id)) decide(round, member);
      if (published_) return std::exchange(published_, std::nullopt);
    }
  }
}

// After an empty slice: has <job>/gen (read after the slice: `latest`) reached `round`? Then the round is over for this waiter, and
// *decision is the round's decision (which may well list us) when `round` is the current generation,
// nullopt when a newer one exists (the round is stale; its keys may be cleaned). The decision can
// land between the end of the empty slice and the read of <job>/gen (publish() sets g<round>/members,
// then <job>/gen), so it is read again here, after <job>/gen: a worker the decider admitted is never
// lost in that gap (it would wait as a newcomer for the next round while the generation's other
// members wait for it to connect, up to the connect timeout; docs/elastic.md, "Rendezvous").
bool Membership::round_over(uint64_t round, uint64_t latest, std::optional<std::string>* decision) {
  if (latest < round) return false;  // not over: keep waiting
  *decision = latest == round ? store_->get(keys_.members(round)) : std::nullopt;
  if (*decision) {
    EDL_LOG(3) << "edl: worker " << opt_.worker_id << ": the decision of generation " << round
               << " landed right after an empty wait slice; taking it";
  }
  return true;
}

void Membership::decide(uint64_t round, bool member) {
  timeline::Span span(timeline::Lane::kElastic, "decide");
  span.arg("generation", static_cast<int64_t>(round));
  published_.reset();
  fault("rendezvous:decide");
  // One round trip for both: whether the round went stale, and the previous generation's members.
  const auto now = store_->get_many({keys_.gen(), keys_.members(round > 1 ? round - 1 : round)});
  if (parse_store_int(now[0]) >= static_cast<int64_t>(round)) return;  // stale (we were stopped or slow): never re-decide it
  if (round == 1 || !now[1]) decide_first(round);
  else decide_next(round, *now[1]);
}

std::vector<Membership::Arrival> Membership::arrivals(uint64_t round) {
  std::vector<Arrival> out;
  std::string prefix = keys_.in_prefix(round);
  const std::vector<std::string> ks = store_->keys(prefix);
  const auto values = store_->get_many(ks);  // one round trip for the lot on the tcp:// store
  for (size_t i = 0; i < ks.size(); ++i) {
    const auto& v = values[i];
    if (!v) continue;
    Arrival a;
    a.id = ks[i].substr(prefix.size());
    std::istringstream words(*v);  // "<seq> <host> <probe> [<note>] [mesh=<host:port>]"
    std::string seq;
    words >> seq >> a.host >> a.probe;
    read_note_and_mesh(words, &a.note, &a.mesh);
    a.seq = parse_store_int(seq);
    if (a.probe == "-") a.probe.clear();
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const Arrival& a, const Arrival& b) { return a.seq < b.seq; });
  return out;
}

// First round of a job: wait for min workers, then a short window for more (up to max).
void Membership::decide_first(uint64_t round) {
  auto deadline = Clock::now() + opt_.rendezvous_timeout;
  std::optional<std::string> cur = store_->get(keys_.count(round));
  for (;;) {
    while (parse_store_int(cur) < opt_.min_np && Clock::now() < deadline)
      cur = store_->wait_change(keys_.count(round), cur, left_until(deadline));
    while (opt_.max_np == 0 || parse_store_int(cur) < opt_.max_np) {
      auto next = store_->wait_change(keys_.count(round), cur, opt_.start_window);
      if (next == cur) break;
      cur = next;
    }
    auto live = live_workers();
    std::set<std::string> alive(live.begin(), live.end());
    std::vector<Member> members;
    for (const auto& a : arrivals(round)) {
      // arrived, then died before the decision (its lease may still run: its probe is refused)
      if (!alive.count(a.id) || probe_refused(a.host, a.probe, opt_.hostname)) continue;
      if (opt_.max_np != 0 && static_cast<int>(members.size()) >= opt_.max_np) break;
      members.push_back(Member{a.id, a.host, a.probe, a.note, a.mesh});
    }
    if (publish_if_decided(round, members, deadline, "joined within")) return;
    cur = store_->wait_change(keys_.count(round), cur, std::min(left_until(deadline), opt_.lease));
  }
}

// Waits for the `expected` members of `round` to arrive, until EDL_RENDEZVOUS_GRACE_MS passed without
// any arrival (every arrival restarts the grace: a large job on a busy machine or a slow store takes
// longer to assemble, and its members are not stuck while others still arrive); returns the
// arrivals, read after the wait. A missing member is dropped (g<G>/dropped, erased from *expected)
// only on evidence of death: its lease is gone (the store expired it — the embedded store expires a
// lease only after serving every request it has read, so a beat still in its input never loses one
// — or edl-run removed it when the process exited), its liveness probe is refused (the process
// died; the address comes from the member list of G-1), or its beat did not change for a whole
// lease while we watched it by our own monotonic clock (never by comparing its wall-clock stamp
// with ours), from when our watch thread first read that beat if it did. A live member that is
// merely slow to beat on a busy machine is never dropped as dead.
// Requests: arrivals wake us through the round's counter and the list of arrivals is read again at
// most every 20 ms (or when the counter reaches the expected number); every half heartbeat one
// `keys` request tells whose lease still exists and the missing members are probed (no request);
// their beats are read only once they have been missing for half a lease (a lease the store expires
// on time is caught by the `keys` request; the beats are for stores whose expiry lags, e.g. etcd
// after a leader change). So the decider's requests do not grow with the members on their way.
std::set<std::string> Membership::await_members(uint64_t round, const std::vector<Member>& prev,
                                                std::set<std::string>* expected, std::set<std::string> arrived) {
  auto grace_end = Clock::now() + opt_.rendezvous_grace;
  const auto since = Clock::now();
  const std::string prefix = keys_.in_prefix(round);
  auto arrived_ids = [&] {
    std::set<std::string> s;
    for (const auto& k : store_->keys(prefix)) s.insert(k.substr(prefix.size()));
    return s;
  };
  std::map<std::string, const Member*> by_id;
  for (const auto& m : prev) by_id[m.id] = &m;
  std::optional<std::string> count = store_->get(keys_.count(round));
  BeatsSeen seen;
  Clock::time_point next_pass{}, next_read{};
  // The arrival counter moved since `arrived` was read: `arrived` (read by the caller) may miss an
  // arrival made between that read and the counter's (an arrival writes its key, then bumps the
  // counter), and the counter would then never move again: without this the decider waited out
  // the whole EDL_RENDEZVOUS_GRACE_MS for a member that was already in.
  bool unread = parse_store_int(count) != static_cast<int64_t>(arrived.size());
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& id : *expected)
      if (!arrived.count(id)) missing.push_back(id);
    if (missing.empty() || Clock::now() >= grace_end) break;
    if (Clock::now() >= next_pass) {
      next_pass = Clock::now() + opt_.heartbeat / 2;
      auto leased = live_workers();
      const std::set<std::string> alive(leased.begin(), leased.end());
      for (const auto& id : missing) {
        const Member& m = *by_id.at(id);
        std::string why;
        if (!alive.count(id)) why = "dead: its lease is gone";
        else if (probe_refused(m.host, m.probe, opt_.hostname)) why = "dead: its liveness probe was refused";
        else if (Clock::now() - since >= opt_.lease / 2 && silent_for_a_lease(id, &seen))
          why = "dead or stopped: not heartbeating";
        if (why.empty()) continue;
        EDL_LOG(1) << "edl: generation " << round << ": worker " << id << " is " << why << "; dropping it";
        store_->set(keys_.dropped(round, id), why);
        expected->erase(id);
      }
      continue;
    }
    if (unread && (parse_store_int(count) >= static_cast<int64_t>(expected->size()) || Clock::now() >= next_read)) {
      arrived = arrived_ids();
      unread = false;
      next_read = Clock::now() + milliseconds(20);
      continue;
    }
    auto until = std::min(grace_end, next_pass);
    if (unread) until = std::min(until, next_read);
    auto c = store_->wait_change(keys_.count(round), count, left_until(until));
    if (c != count) {
      count = c;
      unread = true;
      grace_end = Clock::now() + opt_.rendezvous_grace;
    }
  }
  return unread ? arrived_ids() : arrived;
}

// Whether member `id`'s beat has not changed for a whole lease as this decider read it (`seen`: the
// last value read and since when), counting from when our watch thread first read that value if it
// did (SilenceTracker::first_seen). One read of its lease.
bool Membership::silent_for_a_lease(const std::string& id, BeatsSeen* seen) {
  auto beat = store_->get(keys_.lease(id));
  if (!beat) return false;  // gone meanwhile: the next pass says so
  auto now = Clock::now();
  auto it = seen->find(id);
  if (it == seen->end() || it->second.first != beat) {
    Clock::time_point from = now;
    if (it == seen->end()) {  // our watch thread may have watched this very beat for a while
      std::lock_guard<std::mutex> lock(silence_mu_);
      from = silence_.first_seen(id, *beat).value_or(now);
    }
    (*seen)[id] = {beat, from};
  }
  return now - (*seen)[id].second >= opt_.lease;
}

// Later rounds: the survivors of the previous generation (order kept) + newcomers in arrival order.
void Membership::decide_next(uint64_t round, const std::string& previous_members) {
  const auto prev = parse_members(previous_members);
  auto live = live_workers();
  std::set<std::string> alive(live.begin(), live.end());
  std::set<std::string> left;
  for (auto k : store_->keys(keys_.left_prefix(round - 1))) left.insert(k.substr(keys_.left_prefix(round - 1).size()));

  // Expected: previous members that are alive and not leaving. Wait for their arrival (a missing one
  // that is provably dead is dropped at once; one that lives gets up to `grace`: it may be finishing
  // a batch).
  std::set<std::string> expected;
  for (const auto& m : prev)
    if (alive.count(m.id) && !left.count(m.id)) expected.insert(m.id);
  // A member whose lease is already gone (and that did not leave) is recorded too, so that every
  // member of G-1 left out without a graceful leave has a reason at g<round>/dropped: edl-run ends a
  // local process so recorded at once (a stopped worker whose lease expired before this round).
  for (const auto& m : prev)
    if (!alive.count(m.id) && !left.count(m.id)) store_->set(keys_.dropped(round, m.id), "dead: its lease is gone");
  // One read of the arrivals serves the wait and, when every expected member is in already (a
  // stop-free join's survivors arrive before the boundary: "Stop-free joins"), the decision too.
  std::vector<Arrival> first = arrivals(round);
  std::set<std::string> arrived;
  for (const auto& a : first) arrived.insert(a.id);
  fault("rendezvous:arrivals-read");
  const bool all_in = std::includes(arrived.begin(), arrived.end(), expected.begin(), expected.end());
  if (!all_in) arrived = await_members(round, prev, &expected, std::move(arrived));
  std::set<std::string> stuck;  // alive (heartbeating) but not here after the grace: stuck in a batch
  for (const auto& id : expected)
    if (!arrived.count(id)) stuck.insert(id);
  for (const auto& id : stuck) expected.erase(id);

  auto deadline = Clock::now() + opt_.rendezvous_timeout;
  std::optional<std::string> count = store_->get(keys_.count(round));
  bool fast = all_in && !parse_job_error(previous_members);  // the first pass decides from the reads above
  for (;;) {
    std::vector<Member> members;
    std::set<std::string> in;
    auto arr = fast ? std::move(first) : arrivals(round);
    for (const auto& a : arr) in.insert(a.id);
    if (!fast) {
      live = live_workers();
      alive = std::set<std::string>(live.begin(), live.end());
    }
    // Every arrival is probed once more at decision time: one that died after arriving (its lease
    // still runs) is dropped now instead of holding the new generation's connect for a lease.
    std::set<std::string> dead;
    for (const auto& a : arr) {
      if (!alive.count(a.id) || !probe_refused(a.host, a.probe, opt_.hostname)) continue;
      dead.insert(a.id);
      store_->set(keys_.dropped(round, a.id), "dead: arrived, then its liveness probe was refused");
    }
    std::map<std::string, const Arrival*> arrival;
    for (const auto& a : arr) arrival[a.id] = &a;
    for (const auto& m : prev)  // arrived, still leased (not left since), not dead
      if (expected.count(m.id) && in.count(m.id) && alive.count(m.id) && !dead.count(m.id)) {
        members.push_back(m);
        members.back().note = arrival[m.id]->note;  // this round's note and mesh, not the previous one's
        members.back().mesh = arrival[m.id]->mesh;
      }
    std::set<std::string> placed;
    for (const auto& m : members) placed.insert(m.id);
    for (const auto& a : arr) {  // newcomers (and stuck members that arrived since) in arrival order
      if (placed.count(a.id) || left.count(a.id) || !alive.count(a.id) || dead.count(a.id)) continue;
      if (opt_.max_np != 0 && static_cast<int>(members.size()) >= opt_.max_np) break;
      members.push_back(Member{a.id, a.host, a.probe, a.note, a.mesh});
      placed.insert(a.id);
    }
    // Written before the decision, for the members it leaves out only: edl-run ends the processes
    // that g<G>/dropped names (a stuck member that arrived meanwhile is a member, not dropped).
    for (const auto& id : stuck)
      if (!placed.count(id))
        store_->set(keys_.dropped(round, id), "alive but did not arrive within EDL_RENDEZVOUS_GRACE_MS (stuck)");
    // The fast pass judges the change from the records it read (no member of G-1 is missing but
    // those that left or whose lease was gone, both read above).
    const GenerationChange change = fast ? decide_change(*store_, keys_, round, members, &prev, &left) : GenerationChange{};
    if (publish_if_decided(round, members, deadline, "left for longer than", fast ? &change : nullptr)) return;
    fast = false;
    // The job failed for good meanwhile (a member's user error, <job>/failed): a lone decider waiting
    // for EDL_MIN_NP must not wait out the timeout and end with "below the minimum" instead.
    check_failed();
    EDL_LOG(1) << "edl: generation " << round << ": " << members.size() << " worker(s), waiting for "
               << opt_.min_np << " (EDL_MIN_NP)";
    count = store_->wait_change(keys_.count(round), count, std::min(left_until(deadline), opt_.lease));
  }
}

// The end of a decision attempt: `members` when they reach the minimum; past `deadline` the job error
// "only N worker(s) <what> T ms, below the minimum"; else nothing (the decider waits on). Returns
// whether round was published.
bool Membership::publish_if_decided(uint64_t round, const std::vector<Member>& members,
                                    std::chrono::steady_clock::time_point deadline, const char* what,
                                    const GenerationChange* change) {
  if (static_cast<int>(members.size()) >= opt_.min_np) {
    publish(round, members, "", change);
    return true;
  }
  if (Clock::now() < deadline) return false;
  publish(round, {},
          "only " + std::to_string(members.size()) + " worker(s) " + what + " " +
              std::to_string(opt_.rendezvous_timeout.count()) + " ms, below the minimum of " +
              std::to_string(opt_.min_np) + " (EDL_MIN_NP / --min-np)");
  return true;
}

void Membership::publish(uint64_t round, const std::vector<Member>& members, const std::string& job_error,
                         const GenerationChange* change) {
  fault("rendezvous:publish");
  // Stale: a newer generation exists. The fast pass of decide_next read <job>/gen a few requests ago
  // (decide), and the write below is write-once anyway.
  if (!change && latest_generation() >= round) return;
  std::string value = !job_error.empty() ? format_job_error(job_error)
                      : change           ? format_members(members, *change)
                                         : format_members(members, decide_change(*store_, keys_, round, members));
  if (!store_->compare_set(keys_.members(round), std::nullopt, value)) return;  // someone else decided
  published_ = value;  // wait_decision takes it without reading it back
  if (!job_error.empty()) {
    EDL_LOG(1) << "edl: job error: " << job_error;
    return;
  }
  // <job>/gen is advanced by the watch thread (write_pending), not here: the decider's requests
  // right after the decision queue behind those of every member it just woke, and every member's
  // communicator waits for the decider's. Nothing of this round reads <job>/gen: a waiter takes the
  // decision from g<round>/members, a newcomer that reads G-1 still arrives at G and finds it decided.
  {
    std::lock_guard<std::mutex> lock(mu_);
    gen_to_advance_ = std::max(gen_to_advance_, round);
  }
  cv_.notify_all();
  EDL_LOG(2) << "edl: generation " << round << " formed with " << members.size() << " worker(s)";
}

// Advances <job>/gen to `round` monotonically (a stale decider never moves it back). It normally
// holds round - 1 (absent before the first round): one compare_set, whose failure returns the value
// to retry from, instead of a read first.
void Membership::advance_generation(uint64_t round) {
  std::optional<std::string> cur;
  if (round > 1) cur = std::to_string(round - 1);
  while (!store_->compare_set(keys_.gen(), cur, std::to_string(round), &cur)) {
    if (parse_store_int(cur) >= static_cast<int64_t>(round)) break;
  }
}

}  // namespace edl::elastic
