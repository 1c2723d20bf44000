// Real-server fixture for tests and benches: a private etcd cluster (/usr/bin/etcd, 3.4) of 1..N members on free 127.0.0.1 ports,
// data in a temp dir (on /dev/shm when there is one: etcd fsyncs every write). Members can be killed
// (SIGKILL) and restarted on their data dir; the leader can be found. Every member is killed by pid
// and the dir removed when the object dies (and by PR_SET_PDEATHSIG if the test process dies).
// Not thread-safe: drive it from the test's main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace edl::testing {

// The command line of one member of a new etcd cluster: `name`, data in `data_dir`, clients on
// `client_url`, peers on `peer_url` (http://ADDR:PORT), of `initial_cluster` ("name=peer_url,...")
// and `token`; `extra` flags appended. Shared by EtcdCluster, EmulatedHosts (a member per emulated
// host) and the Slurm scenarios (a member on the controller host).
std::vector<std::string> etcd_member_command(const std::string& name, const std::string& data_dir,
                                             const std::string& client_url, const std::string& peer_url,
                                             const std::string& initial_cluster, const std::string& token,
                                             const std::vector<std::string>& extra = {});

class EtcdCluster {
 public:
  // Starts `members` members and waits until they have elected a leader. available() is false when
  // etcd is not installed (tests then call edl::testing::require_dep); start failures throw
  // std::runtime_error with the tail of the member's log.
  // extra_args go to every member (e.g. {"--auth-token-ttl", "1"}).
  explicit EtcdCluster(int members = 3, std::vector<std::string> extra_args = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool available() const { return !members_.empty(); }
  int size() const { return static_cast<int>(members_.size()); }
  // "etcd://127.0.0.1:A,127.0.0.1:B,..." with member `first` listed first (the one a client talks to).
  std::string url(int first = 0) const;
  int client_port(int i) const { return members_[i].client_port; }
  bool running(int i) const { return members_[i].pid > 0; }
  pid_t pid(int i) const { return members_[i].pid; }  // -1 when killed
  // Member i's Prometheus metrics (GET /metrics on its client port); "" when it does not answer.
  std::string metrics(int i) const;
  // Messages of one gRPC method ("Range", "Txn", "Watch", ...) the members received so far
  // (grpc_server_msg_received_total: the JSON gateway forwards every HTTP request, and every watch
  // or keepalive stream's messages, to it); killed members count nothing.
  double received(const std::string& method) const;

  // The index of the leader as the running members see it; waits up to 20 s for one (throws otherwise).
  int leader() const;
  // A running member that is not the leader.
  int follower() const;
  void kill(int i);     // SIGKILL, reaped
  void restart(int i);  // starts a killed member again on its data dir; waits until the cluster has a leader
  void clear();         // deletes every key (between test cases; not after enable_auth)
  // Creates etcd user `user` with `password` and read-write access to every key (and a root user
  // with a random password), then turns authentication on.
  void enable_auth(const std::string& user, const std::string& password);

  // A process-wide 3-member cluster shared by test cases (started on first use).
  static EtcdCluster& shared();
  // A process-wide single-member cluster.
  static EtcdCluster& shared_single();

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  void spawn(int i);
  void wait_ready() const;
  void check_alive(int i) const;
  std::string log_tail(int i) const;

  std::vector<Member> members_;
  std::string dir_;
  std::string initial_cluster_;
  std::vector<std::string> extra_args_;
};

}  // namespace edl::testing
