// StoreServer::Impl: the state and the parts of the embedded TCP store's event loop.
//
// One thread (loop()) owns everything below the "loop-thread state" line; the public StoreServer
// methods only touch the atomics and stop(). The parts live in concept files:
//   tcp_store_server.cc       set-up, the epoll loop, stop(), the public facade
//   tcp_store_connections.cc  accepting (connection caps), reading (pre-auth byte budget), the
//                             handshake, back-pressure, output, closing
//   tcp_store_commands.cc     the command table and the replay journal (exactly-once add/compare_set
//                             across client reconnects)
//   tcp_store_waits.cc        server-side wait/wait_change and lease expiry
// Every per-connection step runs inside a try/catch: an exception closes that connection, never the
// loop (docs/store.md, "Limits").
// Thread-safety: see StoreServer (include/edl/store_server.h).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <time.h>
#include <unordered_map>
#include <vector>

#include "edl/store_server.h"
#include "elastic/store/tcp_store_frame.h"

namespace edl {

class StoreServer::Impl {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Impl(const StoreServerOptions& o);
  ~Impl();
  void stop();

  int port() const { return port_; }
  const std::string& bind_address() const { return opts_.bind_address; }
  size_t connection_count() const { return nconns_.load(); }
  uint64_t rejected_auth_count() const { return rejected_auth_.load(); }
  uint64_t bad_frame_count() const { return bad_frames_.load(); }
  uint64_t throttle_count() const { return throttled_.load(); }
  uint64_t refused_count() const { return refused_.load(); }
  uint64_t replay_count() const { return replayed_.load(); }
  uint64_t request_count() const { return requests_.load(); }
  std::chrono::nanoseconds cpu_time() const;

 private:
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    std::string peer;
    store::FrameReader reader;
    std::string out;
    size_t out_off = 0;
    bool authed = false;
    bool writing = false;          // EPOLLOUT armed
    bool paused = false;           // EPOLLIN disarmed: too many replies queued (back-pressure)
    bool close_after_flush = false;
    bool dead = false;
    size_t preauth_bytes = 0;      // bytes read before authentication (capped)
    std::string nonce;
    std::string session;           // client id from AUTH ("" = no replay journal)
    std::set<uint64_t> waiters;
    explicit Conn(size_t max_frame) : reader(max_frame) {}
  };
  struct Entry {
    std::string value;
    Clock::time_point expires = Clock::time_point::max();
  };
  using WatchMap = std::multimap<std::string, uint64_t>;
  using DeadlineMap = std::multimap<Clock::time_point, uint64_t>;
  struct Waiter {
    uint64_t conn = 0;
    uint64_t req = 0;
    store::Op op = store::Op::kWait;
    std::vector<std::string> keys;
    std::optional<std::string> known;
    Clock::time_point deadline;
    std::vector<WatchMap::iterator> watching;  // its entries in watch_ (removed in O(1) each)
    DeadlineMap::iterator deadline_entry;
  };
  // The outcome of a request that changed the data, kept so that a re-sent copy (same client id and
  // request id, after a reconnect) is answered without being applied again.
  struct Outcome {
    store::Status status = store::Status::kOk;
    int64_t number = 0;
  };
  struct Session {
    std::map<uint64_t, Outcome> done;  // request id -> outcome; the oldest dropped above the cap
    size_t conns = 0;                  // open connections using this client id
    uint64_t last_used = 0;            // session_clock_ value of the last request
  };

  // --- tcp_store_server.cc: set-up and loop ---
  void open_listener();
  void close_fds();
  void add_fd(int fd, uint64_t id, uint32_t events);
  void loop();
  void dispatch(uint64_t id, uint32_t events);
  void housekeeping(bool drained);
  int next_timeout_ms();

  // --- tcp_store_connections.cc ---
  void accept_all();
  bool accept_one();
  void admit(int fd, const std::string& peer);
  void evict_oldest_unauthenticated();
  void on_readable(Conn& c);
  size_t read_budget(const Conn& c) const;
  size_t pending_output(const Conn& c) const { return c.out.size() - c.out_off; }
  void drain_frames(Conn& c);
  void bad_frame(Conn& c, const std::string& why);
  void authenticate(Conn& c, const store::Message& m);
  void pause(Conn& c);
  void resume_paused();
  void expire_handshakes(Clock::time_point now);
  void send(Conn& c, const store::Message& m);
  void flush(Conn& c);
  void set_writing(Conn& c, bool on);
  void update_events(Conn& c);
  void close_conn(Conn& c);
  void reap();

  // --- tcp_store_commands.cc ---
  void handle(Conn& c, store::Message&& m);
  bool apply(store::Message& m, store::Message* r);  // true when the data changed
  void apply_add(const store::Message& m, store::Message* r, bool* changed);
  void apply_compare_set(store::Message& m, store::Message* r, bool* changed);
  void apply_set_lease(store::Message& m, store::Message* r, bool* changed);
  std::optional<std::string> lookup(const std::string& key) const;
  Session* session_of(const Conn& c);
  void open_session(Conn& c, const std::string& client_id);
  void evict_sessions();

  // --- tcp_store_waits.cc ---
  void start_wait(Conn& c, store::Message&& m);
  bool satisfied(const Waiter& w, store::Message* r) const;
  void timeout_reply(const Waiter& w, store::Message* r) const;
  void remove_waiter(uint64_t wid);
  void touched(const std::string& key);
  void expire_waiters(Clock::time_point now);
  void expire_leases(Clock::time_point now);

  StoreServerOptions opts_;
  int listenfd_ = -1, epfd_ = -1, wakefd_ = -1;
  int spare_fd_ = -1;  // held open so that accept() can still shed a connection at EMFILE
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex stop_mu_;
  std::atomic<size_t> nconns_{0};
  std::atomic<uint64_t> rejected_auth_{0}, bad_frames_{0}, throttled_{0}, refused_{0}, replayed_{0}, requests_{0};
  clockid_t loop_clock_{};                 // the loop thread's CPU clock (valid while it runs)
  std::atomic<int64_t> final_cpu_ns_{-1};  // its CPU time once it has ended

  // Loop-thread state.
  uint64_t next_conn_id_ = 2;
  uint64_t next_waiter_id_ = 1;
  uint64_t session_clock_ = 0;
  Clock::time_point last_drained_;  // the last round that read every ready connection
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::set<uint64_t> unauthenticated_;  // ids of connections still in the handshake, oldest first
  std::unordered_map<std::string, Session> sessions_;
  std::map<std::string, Entry> data_;
  std::multimap<Clock::time_point, std::string> lease_queue_;
  std::map<uint64_t, Waiter> waiters_;
  WatchMap watch_;
  DeadlineMap waiter_deadlines_;
  std::multimap<Clock::time_point, uint64_t> handshake_deadlines_;
};

}  // namespace edl
