// Membership: rendezvous into numbered generations, liveness leases and the watch that turns store
// events into a failure callback or a pending-change flag. The protocol is written down step by
// step in docs/elastic.md; key layout in keys.h.
//
// A Membership takes a Store and options only (no process-global state), so tests run many of them
// as threads over one memory store.
//
// Cost at scale (docs/elastic.md, "Cost as the job grows"): a worker's lease and its watch of the
// generation are O(1) store requests per heartbeat whatever the job's size — the beat, a read of
// the leases of the kWatchedPeers members after it in rank order (ring order: every member is watched
// by kWatchedPeers others), and one wait on the generation's event key, where a watcher's abort
// reaches every member. A rendezvous is O(1) requests per worker besides one read of the member
// list; only the round's decider reads every arrival.
//
// Thread-safety: rendezvous()/watch()/unwatch()/announce_*() from the owning (training) thread;
// change_pending() from any thread. Two background threads: the beat thread refreshes the lease
// (on its own store connection when MembershipOptions::beat_store is set, so that no request of the
// watch or of the training thread delays a beat) and drains the liveness probe; the watch thread
// checks the watched members and waits for the generation's events.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "edl/elastic.h"
#include "edl/error.h"
#include "edl/export.h"
#include "edl/store.h"
#include "elastic/keys.h"
#include "elastic/member_list.h"
#include "elastic/silence.h"

namespace edl::elastic {

struct MembershipOptions {
  std::string job_id = "edl";               // EDL_JOB_ID
  std::string worker_id;                    // EDL_WORKER_ID: required, [A-Za-z0-9._:@-]+
  std::string hostname = "localhost";       // EDL_HOSTNAME: local ranks are computed per host
  std::string bind_address = "127.0.0.1";   // EDL_BIND_ADDR: address of the liveness probe socket
  // Called at every arrival for the "host:port" of this process's mesh listener (Runtime::mesh_address:
  // open from the arrival until the generation's mesh is built), published with the arrival: the
  // members of a generation then dial each other's meshes at once from the decision
  // (CommunicatorOptions::addresses). Unset (default) or "" = none: the communicators meet through
  // the store.
  std::function<std::string()> mesh_address;
  int min_np = 1;                           // EDL_MIN_NP
  int max_np = 0;                           // EDL_MAX_NP (0 = unbounded)
  std::chrono::milliseconds heartbeat{500};            // EDL_HEARTBEAT_MS: lease refresh period
  std::chrono::milliseconds lease{3000};               // EDL_LEASE_MS: silent this long = dead
  std::chrono::milliseconds rendezvous_timeout{60000}; // EDL_RENDEZVOUS_TIMEOUT_MS: below min this long = JobError
  std::chrono::milliseconds rendezvous_grace{3000};  // EDL_RENDEZVOUS_GRACE_MS: longest wait for a live but late member
  std::chrono::milliseconds start_window{1000};  // EDL_START_WINDOW_MS: first round, wait for more workers
  // Progress deadline (EDL_PROGRESS_TIMEOUT_MS): a generation in which this worker passed no batch
  // boundary for this long is aborted (a rank stuck in user code while keeping its lease). 0 = auto:
  // max(progress_floor, 10 x the longest batch this worker observed); negative = no deadline.
  std::chrono::milliseconds progress_timeout{0};
  std::chrono::milliseconds progress_floor{30000};  // EDL_TIMEOUT_MS: floor of the automatic deadline
  // Test hook: called at named protocol points ("rendezvous:decide", ...); may throw to simulate a crash.
  std::function<void(const std::string& point)> fault;
  // Test hook (EDL_TEST_CLOCK_OFFSET_MS): added to this worker's wall clock. Liveness never compares
  // wall clocks across workers, so a skewed clock must not change any decision.
  std::chrono::milliseconds wall_clock_offset{0};
  // The beat thread's own connection to the job's store (edl::init opens a second one); null = the
  // beats share the Membership's store.
  std::shared_ptr<Store> beat_store;
};

// Members each member watches (reads the lease of, probes while the communicator is built).
inline constexpr int kWatchedPeers = 2;

// The ranks the member of rank `rank` watches in a generation of `size`: the next kWatchedPeers
// ranks in ring order (fewer in a generation of up to kWatchedPeers members). Every member is
// watched by as many others, so a death goes unseen only when all its watchers died too — and
// their own deaths are seen by theirs.
EDL_API std::vector<int> watched_ranks(int rank, int size);

// One decided generation as seen by one member.
struct GenerationView {
  uint64_t id = 0;
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 1;
  // The decider's record of the change from generation id - 1 (member_list.h, GenerationChange): the
  // same on every member of the generation.
  int previous_size = 0;
  ChangeReason reason = ChangeReason::kStart;
  std::vector<Member> members;  // rank order
  // Set by the worker when the generation fails while its communicator is being built; a group
  // factory passes it to CommunicatorOptions::cancel so that the build stops at once.
  std::shared_ptr<std::atomic<bool>> cancel;
};

// Not a failure (like MembershipChanged): thrown by rendezvous() when the job finished while this
// worker waited to join. Worker::run returns quietly on it (or throws JobError for a worker that
// trained, was evicted and missed the end); edl::init turns it into a JobError naming the job. An
// edl::Error (docs/errors.md) so that a catch of edl::Error never lets it pass as a foreign exception.
class EDL_API JobFinished : public Error {
 public:
  JobFinished() : Error("edl: the elastic job has finished") {}
};

// Internal: thrown by rendezvous() when request_leave() was called while this worker waited for a
// decision (e.g. edl-run ends a worker that a generation left out): it leaves instead of joining.
class EDL_API LeftBeforeAdmission : public std::exception {
 public:
  const char* what() const noexcept override { return "edl: asked to leave while waiting to be admitted"; }
};

class EDL_API Membership {
 public:
  Membership(std::shared_ptr<Store> store, MembershipOptions options);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Starts the lease (heartbeat) thread. Idempotent.
  void start();
  // Stops heartbeating and removes the lease (a clean exit). Idempotent.
  void stop();
  // Test hook: stop heartbeating but leave the lease to expire: a SIGSTOP, or with process_dead a
  // kill -9 (the liveness probe socket closes too, as the kernel does for a dead process).
  void freeze(bool process_dead = false);
  // Test hook: resume heartbeating after freeze() (SIGCONT).
  void thaw();

  // Blocks until this worker is a member of a generation newer than `previous` (null: first join).
  // Throws JobError (below min workers for rendezvous_timeout), JobFinished, StoreError.
  GenerationView rendezvous(const GenerationView* previous);
  // A word (no spaces) this worker reports with its next arrivals; the decider copies it into its
  // line of the member list (Member::note), so every member reads every member's note with the
  // decision. The elastic runtime reports its state's commit (state_sync_note). "" = none.
  void set_arrival_note(std::string note);
  // Stop-free joins (docs/elastic.md, "Stop-free joins", step 3): this member contributed the join
  // bit to the agreement that makes the next boundary a change to generation `round`, and every
  // member has built the current generation. A thread of its own writes its arrival at `round` now,
  // in the background, with the note set at that moment; the rendezvous at the boundary then takes it
  // instead of arriving (when the note is still the same). Training thread.
  void prepare_arrival(uint64_t round);
  // Whether an arrival at `round` was prepared and not discarded (written or about to be). Any thread.
  bool prepared_for(uint64_t round);
  // Voids a prepared arrival (the generation failed: the rendezvous arrives afresh). Any thread.
  void discard_prepared();

  // Watches generation `g`: on a failure (peer lease expired, abort announced) calls on_failure
  // once from the background thread; a join request sets change_pending().
  void watch(const GenerationView& g, std::function<void(const std::string&)> on_failure);
  void unwatch();
  bool change_pending() const { return pending_.load(std::memory_order_relaxed); }
  // Asks a rendezvous in progress to give up (LeftBeforeAdmission) at its next check (within two
  // heartbeats); a decision that already includes this worker is still taken. Any thread.
  void request_leave() { leave_requested_.store(true); }

  // The training thread passed a batch boundary (or entered the user's function): resets the
  // progress deadline of the watched generation and arms it.
  void progress();
  // The communicator of the watched generation is built: the lease thread stops probing the
  // members' liveness sockets every heartbeat (leases and socket errors cover the rest).
  void built();

  // Throws StoreError when the lease thread lost the store (its client gave up after its own retry
  // deadline, EDL_STORE_TIMEOUT_MS); the message names the worker and the store. Any thread.
  void check_store();

  // `<job>/failed`: the job failed with an error a restart cannot cure (first reason wins).
  void mark_failed(const std::string& reason);
  std::optional<std::string> failed_reason();
  // Throws JobFailed when `<job>/failed` is set.
  void check_failed();

  void announce_abort(uint64_t gen, const std::string& reason);
  void announce_leave(uint64_t gen);
  // Sets key = value in the store from the lease thread, after its next heartbeat, so that the
  // caller (the training thread at a batch boundary) never waits for the store: observability
  // samples (throughput, straggler reports). A newer value of a key not yet written replaces the
  // older one; a write that fails is logged and dropped (the lease itself reports a lost store).
  void publish_later(const std::string& key, const std::string& value);
  void announce_finished(uint64_t gen);

  const MembershipOptions& options() const { return opt_; }
  const Keys& keys() const { return keys_; }

 private:
  struct Arrival {
    std::string id;
    std::string host;
    std::string probe;  // its liveness probe, from the arrival value
    std::string note;   // set_arrival_note() of the arriving worker ("" when none)
    std::string mesh;   // its mesh listener (MembershipOptions::mesh_address; "" when none)
    int64_t seq = 0;
  };
  struct Watch {
    uint64_t epoch = 0;  // bumped by every watch()/unwatch()
    bool active = false;
    GenerationView view;
    std::optional<std::string> known_event;
    std::function<void(const std::string&)> on_failure;
    bool reported = false;
    bool building = true;  // until built(): probe every member each heartbeat
  };

  // prepare_arrival(): requested by the training thread, written by the watch thread. Guarded by mu_.
  struct Prepared {
    uint64_t round = 0;    // 0 = none
    std::string note;      // the note it arrives with
    int64_t place = 0;     // its place in the round once written (0 = not (yet))
    bool decider = false;  // it won the round's decider election too
  };
  // How this worker arrived at the round it waits for.
  struct Arrived {
    int64_t place = 0;      // its place in the round (1 = first): the first kBackupDeciders watch the decider closely
    bool prepared = false;  // before the boundary (prepare_arrival): a leave request no longer ends the wait
                            // (the decision may list it; it leaves from there), and the election was tried
    bool decider = false;   // prepared: it won the election, it decides at once
    bool recheck = false;   // a preparation was discarded (a failure): the decider key may be its own, or a
                            // member that died since: judged at the first try instead of after a slice
  };

  void fault(const std::string& point);
  // Arrives at `round`; returns the arrival's place in the round (1 = first). `note`: the arrival's.
  // A `member` of the previous generation draws no <job>/seq (it keeps its rank order; seq 0).
  int64_t arrive(uint64_t round, const std::string& note, bool member);
  // This worker's prepared arrival at `round` when it stands with `note` (place 0 = none: arrive).
  Arrived take_prepared(uint64_t round, const std::string& note);
  // The decided member list of `round`, or nullopt when the round went stale (a newer generation).
  std::optional<std::string> wait_decision(uint64_t round, bool member, const Arrived& arrived);
  // The first try of wait_decision: the election (or its result, prepared) and the decision when it is ours.
  void try_to_decide(uint64_t round, bool member, const Arrived& arrived);
  // Whether <job>/gen (`latest`, read after the slice) reached `round`; then *decision =
  // g<round>/members if `round` is current.
  bool round_over(uint64_t round, uint64_t latest, std::optional<std::string>* decision);
  bool eligible(uint64_t round, bool member);
  void decide(uint64_t round, bool member);
  void decide_first(uint64_t round);
  void decide_next(uint64_t round, const std::string& previous_members);
  std::set<std::string> await_members(uint64_t round, const std::vector<Member>& prev, std::set<std::string>* expected,
                                      std::set<std::string> arrived);
  // A missing member's last beat read by the decider and since when it has not changed.
  using BeatsSeen = std::map<std::string, std::pair<std::optional<std::string>, std::chrono::steady_clock::time_point>>;
  bool silent_for_a_lease(const std::string& id, BeatsSeen* seen);
  void publish(uint64_t round, const std::vector<Member>& members, const std::string& job_error,
               const GenerationChange* change = nullptr);
  void advance_generation(uint64_t round);  // <job>/gen := round unless it is past it (watch thread)
  // `change`: the record already judged for `members` (null: publish judges it).
  bool publish_if_decided(uint64_t round, const std::vector<Member>& members,
                          std::chrono::steady_clock::time_point deadline, const char* what,
                          const GenerationChange* change = nullptr);
  std::vector<Arrival> arrivals(uint64_t round);
  std::vector<std::string> live_workers();
  uint64_t latest_generation();
  void check_finished();
  bool provably_dead(const std::string& id);
  void check_progress(const Watch& w);

  void loop();           // the watch thread
  void beat_loop();      // the beat thread
  void heartbeat();      // caller holds mu_ or runs on the beat thread
  void heartbeat_now();
  std::chrono::milliseconds beat_period() const;
  void lost_store(const std::string& what);  // a StoreError of a background thread: escalate it
  void write_pending(std::unique_lock<std::mutex>& lock);
  void check_peers(const Watch& w);
  std::vector<std::pair<int, std::string>> peer_failures(const Watch& w, const std::vector<int>& ranks,
                                                         const std::vector<std::optional<std::string>>& read);
  void handle_event(const Watch& w);
  void report_failure(uint64_t epoch, const std::string& reason);
  void cleanup(uint64_t from, uint64_t to);
  void drain_probe();
  void close_probe();

  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> beat_store_;  // opt_.beat_store, or store_
  MembershipOptions opt_;
  Keys keys_;

  std::mutex mu_;
  std::map<std::string, std::string> pending_writes_;  // publish_later(), written by the lease thread
  uint64_t gen_to_advance_ = 0;  // publish(): <job>/gen to advance to, by the watch thread
  uint64_t gen_advanced_ = 0;    // the latest generation the watch thread advanced <job>/gen to
  std::condition_variable cv_;
  std::thread thread_;       // watch
  std::thread beat_thread_;  // lease refresh
  bool running_ = false;
  bool stopping_ = false;
  bool frozen_ = false;
  bool stopped_ = false;
  std::atomic<uint64_t> beat_{0};
  std::atomic<std::chrono::steady_clock::rep> last_beat_{0};  // when the last beat that reached the store was sent
  std::atomic<std::chrono::steady_clock::rep> last_slow_beat_{0};  // when the last beat that took over a heartbeat got through
  std::mutex probe_mu_;
  int probe_fd_ = -1;           // liveness probe: listening socket, refused once this process is gone
  std::string probe_ = "-";     // "addr:port" published in the lease
  std::string arrival_note_;    // set_arrival_note()
  Prepared prepared_;           // prepare_arrival()
  uint64_t discarded_ = 0;      // the round of the last preparation discarded_prepared() voided
  std::thread preparer_;        // prepare_arrival()'s writer (joined by the training thread)
  // The decision this worker's publish() just wrote (rendezvous thread only): its wait_decision
  // returns it instead of reading it back.
  std::optional<std::string> published_;
  // check_peers()' last read of the watched members' arrivals at the next round (watch thread only).
  std::chrono::steady_clock::time_point arrivals_read_{};
  uint64_t cleanup_below_ = 0;  // generations below this may be deleted (rank 0 only)
  uint64_t cleaned_below_ = 1;
  Watch watch_;
  // Silence by observed beats: the lease thread observes, the rendezvous decider reads first_seen();
  // reset whenever another watch epoch is checked. Guarded by silence_mu_.
  std::mutex silence_mu_;
  SilenceTracker silence_;
  uint64_t silence_epoch_ = 0;
  std::atomic<bool> pending_{false};
  std::atomic<bool> leave_requested_{false};
  std::optional<std::string> store_error_;  // guarded by mu_: the lease thread's fatal store error
  // Progress (guarded by mu_): last batch boundary by this worker's monotonic clock, armed by the
  // first progress() of a watch, and the longest batch seen (for the automatic deadline).
  std::chrono::steady_clock::time_point last_progress_{};
  bool progress_armed_ = false;
  std::chrono::milliseconds longest_batch_{0};
};

}  // namespace edl::elastic
