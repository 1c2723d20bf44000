// Rendezvous: arrival, the decider's election and decision, waiting for it, publishing a generation
// (protocol: docs/elastic.md, "Rendezvous"). The lease thread and liveness: membership.cc.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "common/logging.h"
#include "edl/error.h"
#include "elastic/generation_change.h"
#include "elastic/liveness.h"
#include "elastic/membership.h"

namespace edl::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds left_until(Clock::time_point t) {
  auto d = std::chrono::duration_cast<milliseconds>(t - Clock::now());
  return d.count() > 0 ? d : milliseconds(0);
}

}  // namespace

void Membership::arrive(uint64_t round) {
  int64_t seq = store_->add(keys_.seq(), 1);
  store_->set(keys_.in(round, opt_.worker_id), std::to_string(seq) + " " + opt_.hostname);
  store_->add(keys_.count(round), 1);
}

GenerationView Membership::rendezvous(const GenerationView* previous) {
  start();
  heartbeat_now();  // arrive with a fresh lease (e.g. back from SIGSTOP, whose lease expired)
  bool member = previous != nullptr;
  uint64_t round = member ? previous->id + 1 : latest_generation() + 1;
  for (;;) {
    check_finished();
    if (leave_requested_.load()) throw LeftBeforeAdmission();
    fault("rendezvous:arrive");
    arrive(round);
    if (!member && round > 1) store_->add(keys_.event(round - 1), 1);  // wake the running members
    fault("rendezvous:arrived");
    auto decided = wait_decision(round, member);
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
  auto live = live_workers();
  std::set<std::string> alive(live.begin(), live.end());
  for (const auto& m : parse_members(*prev))
    if (alive.count(m.id) && !provably_dead(m.id)) return false;  // killed members count as gone at once
  return true;
}

std::optional<std::string> Membership::wait_decision(uint64_t round, bool member) {
  bool tried = false;
  const auto waiting_since = Clock::now();
  for (;;) {
    if (!tried && eligible(round, member)) {
      tried = true;
      if (store_->compare_set(keys_.decider(round), std::nullopt, opt_.worker_id)) decide(round, member);
    }
    // Wait for the decision in slices; after each empty slice the decider's liveness (lease gone or
    // probe refused = dead, taken over at once) and a newcomer's eligibility are checked again. A
    // member (its training waits for the decision) checks every 200 ms at most, so a decider killed
    // right after it won the election costs ~0.2 s; so does a newcomer during its first lease of
    // waiting (the members it replaces may be dying one after the other: a double kill), then every
    // two heartbeats (it may wait for long, e.g. at EDL_MAX_NP).
    const bool fast = member || Clock::now() - waiting_since < opt_.lease;
    const milliseconds slice = fast ? std::min<milliseconds>(2 * opt_.heartbeat, milliseconds(200)) : 2 * opt_.heartbeat;
    auto v = store_->wait_change(keys_.members(round), std::nullopt, slice);
    if (v) return v;
    check_finished();
    check_failed();
    if (leave_requested_.load()) throw LeftBeforeAdmission();
    std::optional<std::string> decision;
    if (round_over(round, &decision)) return decision;
    auto d = store_->get(keys_.decider(round));
    if (!d) {
      tried = false;
      continue;
    }
    if (*d != opt_.worker_id && provably_dead(*d) && eligible(round, member)) {
      EDL_LOG(1) << "edl: worker " << opt_.worker_id << ": decider " << *d << " of generation " << round
                 << " died; taking over";
      if (store_->compare_set(keys_.decider(round), d, opt_.worker_id)) decide(round, member);
    }
  }
}

// After an empty slice: has <job>/gen reached `round`? Then the round is over for this waiter, and
// *decision is the round's decision (which may well list us) when `round` is the current generation,
// nullopt when a newer one exists (the round is stale; its keys may be cleaned). The decision can
// land between the end of the empty slice and the read of <job>/gen (publish() sets g<round>/members,
// then <job>/gen), so it is read again here, after <job>/gen: a worker the decider admitted is never
// lost in that gap (it would wait as a newcomer for the next round while the generation's other
// members wait for it to connect, up to the connect timeout; docs/elastic.md, "Rendezvous").
bool Membership::round_over(uint64_t round, std::optional<std::string>* decision) {
  const uint64_t latest = latest_generation();
  if (latest < round) return false;  // not over: keep waiting
  *decision = latest == round ? store_->get(keys_.members(round)) : std::nullopt;
  if (*decision)
    EDL_LOG(3) << "edl: worker " << opt_.worker_id << ": the decision of generation " << round
               << " landed right after an empty wait slice; taking it";
  return true;
}

void Membership::decide(uint64_t round, bool member) {
  fault("rendezvous:decide");
  if (latest_generation() >= round) return;  // a stale round (we were stopped or slow): never re-decide it
  if (round == 1 || !store_->get(keys_.members(round - 1))) decide_first(round);
  else decide_next(round);
}

std::vector<Membership::Arrival> Membership::arrivals(uint64_t round) {
  std::vector<Arrival> out;
  std::string prefix = keys_.in_prefix(round);
  for (const auto& k : store_->keys(prefix)) {
    auto v = store_->get(k);
    if (!v) continue;
    Arrival a;
    a.id = k.substr(prefix.size());
    auto sp = v->find(' ');
    a.seq = parse_store_int(v->substr(0, sp));
    a.host = sp == std::string::npos ? "" : v->substr(sp + 1);
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
      if (!alive.count(a.id) || provably_dead(a.id)) continue;  // arrived, then died before the decision
      if (opt_.max_np != 0 && static_cast<int>(members.size()) >= opt_.max_np) break;
      members.push_back(Member{a.id, a.host});
    }
    if (publish_if_decided(round, members, deadline, "joined within")) return;
    cur = store_->wait_change(keys_.count(round), cur, std::min(left_until(deadline), opt_.lease));
  }
}

// Later rounds: the survivors of the previous generation (order kept) + newcomers in arrival order.
void Membership::decide_next(uint64_t round) {
  auto prev = parse_members(*store_->get(keys_.members(round - 1)));
  auto live = live_workers();
  std::set<std::string> alive(live.begin(), live.end());
  std::set<std::string> left;
  for (auto k : store_->keys(keys_.left_prefix(round - 1))) left.insert(k.substr(keys_.left_prefix(round - 1).size()));

  // Expected: previous members that are alive and not leaving. Wait for their arrival; a missing
  // one whose lease was not refreshed over ~1 heartbeat is dead (kill -9) or stopped and dropped at
  // once; a missing one that still heartbeats gets up to `grace` (it may be finishing a batch).
  std::set<std::string> expected;
  for (const auto& m : prev)
    if (alive.count(m.id) && !left.count(m.id)) expected.insert(m.id);
  // A member whose lease is already gone (and that did not leave) is recorded too, so that every
  // member of G-1 left out without a graceful leave has a reason at g<round>/dropped: edl-run ends a
  // local process so recorded at once (a stopped worker whose lease expired before this round).
  for (const auto& m : prev)
    if (!alive.count(m.id) && !left.count(m.id)) store_->set(keys_.dropped(round, m.id), "dead: its lease is gone");
  auto grace_end = Clock::now() + opt_.rendezvous_grace;
  auto arrived_ids = [&] {
    std::set<std::string> s;
    std::string prefix = keys_.in_prefix(round);
    for (const auto& k : store_->keys(prefix)) s.insert(k.substr(prefix.size()));
    return s;
  };
  auto arrived = arrived_ids();
  // A missing member is dead when its lease is gone (expired, or removed by the launcher when the
  // process exited), its liveness probe is refused, or its beat did not change for `stale` while we
  // watched it by our own monotonic clock (never by comparing its wall-clock stamp with ours) — from
  // when our lease thread first read that beat, if it did (a member judged silent is dropped at once).
  const milliseconds stale = opt_.heartbeat + opt_.heartbeat / 4 + milliseconds(30);
  std::map<std::string, std::pair<std::optional<std::string>, Clock::time_point>> seen;
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& id : expected)
      if (!arrived.count(id)) missing.push_back(id);
    if (missing.empty() || Clock::now() >= grace_end) break;
    for (const auto& id : missing) {
      auto beat = store_->get(keys_.lease(id));
      auto now = Clock::now();
      auto it = seen.find(id);
      if (it == seen.end() || it->second.first != beat) {
        Clock::time_point since = now;
        if (it == seen.end() && beat) {  // our lease thread may have watched this very beat for a while
          std::lock_guard<std::mutex> lock(silence_mu_);
          since = silence_.first_seen(id, *beat).value_or(now);
        }
        seen[id] = {beat, since};
      }
      bool dead = !beat || now - seen[id].second >= stale || probe_refused(parse_lease(*beat), opt_.hostname);
      if (dead) {
        EDL_LOG(1) << "edl: generation " << round << ": worker " << id << " is not heartbeating; dropping it";
        store_->set(keys_.dropped(round, id), !beat ? "dead: its lease is gone" : "dead or stopped: not heartbeating");
        expected.erase(id);
      }
    }
    std::vector<std::string> wait_keys;
    for (const auto& id : expected)
      if (!arrived.count(id)) wait_keys.push_back(keys_.in(round, id));
    if (wait_keys.empty()) break;
    // Short probes: arrivals wake us at once; liveness is re-checked every probe.
    store_->wait(wait_keys, std::min(left_until(grace_end), milliseconds(50)));
    arrived = arrived_ids();
  }
  for (const auto& id : expected)  // alive (heartbeating) but not here after the grace: stuck or slow
    if (!arrived.count(id))
      store_->set(keys_.dropped(round, id), "alive but did not arrive within EDL_RENDEZVOUS_GRACE_MS (stuck)");

  auto deadline = Clock::now() + opt_.rendezvous_timeout;
  std::optional<std::string> count = store_->get(keys_.count(round));
  for (;;) {
    std::vector<Member> members;
    std::set<std::string> in;
    auto arr = arrivals(round);
    for (const auto& a : arr) in.insert(a.id);
    live = live_workers();
    alive = std::set<std::string>(live.begin(), live.end());
    // Every arrival is probed once more at decision time: one that died after arriving (its lease
    // still runs) is dropped now instead of holding the new generation's connect for a lease.
    std::set<std::string> dead;
    for (const auto& a : arr) {
      if (!alive.count(a.id) || !provably_dead(a.id)) continue;
      dead.insert(a.id);
      store_->set(keys_.dropped(round, a.id), "dead: arrived, then its liveness probe was refused");
    }
    for (const auto& m : prev)  // arrived, still leased (not left since), not dead
      if (expected.count(m.id) && in.count(m.id) && alive.count(m.id) && !dead.count(m.id)) members.push_back(m);
    std::set<std::string> placed;
    for (const auto& m : members) placed.insert(m.id);
    for (const auto& a : arr) {  // newcomers (and members dropped above that arrived late) in arrival order
      if (placed.count(a.id) || left.count(a.id) || !alive.count(a.id) || dead.count(a.id)) continue;
      if (opt_.max_np != 0 && static_cast<int>(members.size()) >= opt_.max_np) break;
      members.push_back(Member{a.id, a.host});
    }
    if (publish_if_decided(round, members, deadline, "left for longer than")) return;
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
                                    std::chrono::steady_clock::time_point deadline, const char* what) {
  if (static_cast<int>(members.size()) >= opt_.min_np) {
    publish(round, members, "");
    return true;
  }
  if (Clock::now() < deadline) return false;
  publish(round, {},
          "only " + std::to_string(members.size()) + " worker(s) " + what + " " +
              std::to_string(opt_.rendezvous_timeout.count()) + " ms, below the minimum of " +
              std::to_string(opt_.min_np) + " (EDL_MIN_NP / --min-np)");
  return true;
}

void Membership::publish(uint64_t round, const std::vector<Member>& members, const std::string& job_error) {
  fault("rendezvous:publish");
  if (latest_generation() >= round) return;  // stale: a newer generation exists
  std::string value = job_error.empty() ? format_members(members, decide_change(*store_, keys_, round, members))
                                         : format_job_error(job_error);
  if (!store_->compare_set(keys_.members(round), std::nullopt, value)) return;  // someone else decided
  if (!job_error.empty()) {
    EDL_LOG(1) << "edl: job error: " << job_error;
    return;
  }
  // Advance <job>/gen monotonically (a stale decider never moves it back).
  auto cur = store_->get(keys_.gen());
  while (parse_store_int(cur) < static_cast<int64_t>(round)) {
    if (store_->compare_set(keys_.gen(), cur, std::to_string(round), &cur)) break;
  }
  EDL_LOG(2) << "edl: generation " << round << " formed with " << members.size() << " worker(s)";
}

}  // namespace edl::elastic
