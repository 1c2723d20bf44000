// SlurmCluster (see slurm_cluster.h): the configuration, the daemons inside the namespaces, the
// client commands, node faults and cleanup on every path.
#include "testing/slurm_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace edl::testing {
namespace {

constexpr int kSlurmctldPort = 6817;
constexpr int kSlurmdPort = 6818;
constexpr long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC

double mono_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The short host name: slurmctld accepts to run only on the host SlurmctldHost names.
std::string short_hostname() {
  char b[256] = {0};
  gethostname(b, sizeof b - 1);
  std::string h = b;
  return h.substr(0, h.find('.'));
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw std::runtime_error("SlurmCluster: cannot write " + path + ": " + std::strerror(errno));
  ssize_t n = ::write(fd, text.data(), text.size());
  ::fchmod(fd, mode);
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) throw std::runtime_error("SlurmCluster: short write to " + path);
}

void make_dir(const std::string& path, mode_t mode) {
  std::filesystem::create_directories(path);
  ::chmod(path.c_str(), mode);
}

void reap(pid_t* pid) {
  if (*pid > 0) {
    ::kill(*pid, SIGKILL);
    waitpid(*pid, nullptr, 0);
  }
  *pid = -1;
}

}  // namespace

std::string SlurmCluster::unavailable() {
  std::string why = NetnsCluster::unsupported_reason();
  if (!why.empty()) return why;
  for (const char* p : {"slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "srun", "sinfo", "munged"}) {
    if (find_program(p).empty())
      return std::string(p) + " is not installed (Debian slurmctld, slurmd, slurm-client, munge)";
  }
  return "";
}

SlurmCluster::SlurmCluster(const SlurmClusterOptions& options) : options_(options) {
  if (options_.nodes < 1 || options_.nodes > 16)
    throw std::invalid_argument("SlurmCluster: nodes must be 1..16, got " + std::to_string(options_.nodes));
  char tmpl[] = "/tmp/edl-slurm-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("SlurmCluster: mkdtemp failed: ") + std::strerror(errno));
  dir_ = tmpl;
  ::chmod(dir_.c_str(), 0755);  // munged wants every directory above its socket searchable by all
  slurmd_.assign(options_.nodes, -1);
  try {
    NetnsCluster::remove_stale();
    net_ = std::make_unique<NetnsCluster>(options_.nodes + 1, parse_link("loopback"));
    for (const char* d : {"/state", "/log", "/spool", "/jobs"}) make_dir(dir_ + d, 0755);
    write_config();
    start_munge();
    slurmctld_ = spawn_daemon(controller_ns(), {"slurmctld", "-D", "-f", conf_path()}, dir_ + "/log/slurmctld.out");
    if (!net_->wait_listening(controller_address(), kSlurmctldPort, 20000))
      throw std::runtime_error("SlurmCluster: slurmctld does not listen after 20 s: " +
                               log_tail(dir_ + "/log/slurmctld.out"));
    for (int i = 0; i < options_.nodes; ++i) start_slurmd(i);
    if (!wait_idle(30000))
      throw std::runtime_error("SlurmCluster: the nodes are not idle after 30 s (sinfo: " +
                               slurm_command({"sinfo", "-N", "-h", "-o", "%N %t"}).output + "); " +
                               log_tail(dir_ + "/log/slurmd-n0.log"));
  } catch (...) {
    teardown();
    throw;
  }
}

SlurmCluster::~SlurmCluster() { teardown(); }

void SlurmCluster::teardown() noexcept {
  if (net_) {
    for (int i = 0; i <= options_.nodes && i < net_->size(); ++i) {
      try {
        net_->kill_all(i);  // slurmd, slurmctld, the jobs' slurmstepd and processes
      } catch (const std::exception&) {  // our own children are killed below anyway
      }
    }
  }
  for (pid_t& p : slurmd_) reap(&p);
  reap(&slurmctld_);
  reap(&munged_);
  net_.reset();
  if (!dir_.empty() && !options_.keep_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  dir_.clear();
}

void SlurmCluster::write_config() const {
  std::ostringstream c;
  c << "# Written by edl::testing::SlurmCluster (testing/slurm_cluster.cc)\n"
    << "ClusterName=edltest\n"
    << "SlurmctldHost=" << short_hostname() << "(" << controller_address() << ")\n"
    << "SlurmctldPort=" << kSlurmctldPort << "\nSlurmdPort=" << kSlurmdPort << "\n"
    << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << dir_ << "/munge/munge.socket\n"
    << "SlurmUser=root\nSlurmdUser=root\n"
    << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool/%n\n"
    << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
    << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\nSlurmdLogFile=" << dir_ << "/log/slurmd-%n.log\n"
    << "SlurmctldDebug=info\nSlurmdDebug=info\n"
    << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
    << "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
    << "SelectType=select/linear\nSchedulerType=sched/builtin\nMpiDefault=none\nSwitchType=switch/none\n"
    << "MailProg=/bin/true\nReturnToService=2\nSlurmdParameters=config_overrides\n"
    << "SlurmdTimeout=30\nKillWait=10\nMinJobAge=600\n";
  for (int i = 0; i < options_.nodes; ++i)
    c << "NodeName=" << node_name(i) << " NodeAddr=" << node_address(i) << " CPUs=" << options_.cpus
      << " State=UNKNOWN\n";
  bool partition = false;
  for (const auto& l : options_.conf_lines) {
    c << l << "\n";
    partition = partition || l.rfind("PartitionName=", 0) == 0;
  }
  if (!partition) c << "PartitionName=edl Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  write_file(conf_path(), c.str(), 0644);
  // slurmd loads its cgroup plugin even with proctrack/linuxproc and task/none: name the hierarchy
  // the machine has (autodetect fails on a tmpfs of v1 controllers).
  struct statfs fs{};
  bool v2 = statfs("/sys/fs/cgroup", &fs) == 0 && static_cast<long>(fs.f_type) == kCgroup2Magic;
  write_file(dir_ + "/cgroup.conf", v2 ? "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n" : "CgroupPlugin=cgroup/v1\n", 0644);
}

void SlurmCluster::start_munge() {
  // The key directory is root's alone; the socket's is searchable by all (munged checks both).
  make_dir(dir_ + "/munge-key", 0700);
  make_dir(dir_ + "/munge", 0755);
  std::string key(1024, '\0');
  if (getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size()))
    throw std::runtime_error("SlurmCluster: getrandom failed for the munge key");
  const std::string k = dir_ + "/munge-key/munge.key", sock = dir_ + "/munge/munge.socket";
  write_file(k, key, 0400);
  SpawnOptions o;
  o.log = dir_ + "/log/munged.out";
  o.null_stdin = true;
  o.die_with_parent = true;
  munged_ = spawn({"munged", "-F", "--socket=" + sock, "--key-file=" + k, "--pid-file=" + dir_ + "/munge-key/munged.pid",
                   "--log-file=" + dir_ + "/log/munged.log", "--seed-file=" + dir_ + "/munge-key/munged.seed"},
                  o);
  for (int i = 0; i < 200; ++i) {
    struct stat st{};
    if (::stat(sock.c_str(), &st) == 0) return;
    if (waitpid(munged_, nullptr, WNOHANG) == munged_) {
      munged_ = -1;
      break;
    }
    sleep_ms(50);
  }
  reap(&munged_);
  throw std::runtime_error("SlurmCluster: munged did not create its socket: " + log_tail(dir_ + "/log/munged.out"));
}

pid_t SlurmCluster::spawn_daemon(int ns_index, const std::vector<std::string>& argv, const std::string& log) {
  SpawnOptions o;
  o.log = log;
  o.append = true;
  o.null_stdin = true;
  o.die_with_parent = true;
  o.env = {"SLURM_CONF=" + conf_path()};
  std::vector<std::string> full = net_->exec_prefix(ns_index);
  full.insert(full.end(), argv.begin(), argv.end());
  return spawn(full, o);
}

void SlurmCluster::start_slurmd(int i) {
  make_dir(dir_ + "/spool/" + node_name(i), 0755);
  slurmd_.at(i) = spawn_daemon(i, {"slurmd", "-D", "-f", conf_path(), "-N", node_name(i)},
                               dir_ + "/log/slurmd-" + node_name(i) + ".out");
  if (!net_->wait_listening(node_address(i), kSlurmdPort, 20000))
    throw std::runtime_error("SlurmCluster: slurmd of " + node_name(i) + " does not listen after 20 s: " +
                             log_tail(dir_ + "/log/slurmd-" + node_name(i) + ".out"));
}

CommandResult SlurmCluster::slurm_command(const std::vector<std::string>& argv, const std::vector<std::string>& env) const {
  std::vector<std::string> full = net_->exec_prefix(controller_ns());
  full.insert(full.end(), {"env", "SLURM_CONF=" + conf_path()});
  full.insert(full.end(), env.begin(), env.end());
  full.insert(full.end(), argv.begin(), argv.end());
  return run_command(full);
}

long SlurmCluster::submit(const std::vector<std::string>& args, const std::vector<std::string>& env) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = slurm_command(argv, env);
  long id = r.status == 0 ? std::strtol(r.output.c_str(), nullptr, 10) : 0;
  if (id <= 0) throw std::runtime_error("SlurmCluster: sbatch failed (status " + std::to_string(r.status) + "): " + r.output);
  return id;
}

std::map<std::string, std::string> SlurmCluster::job(long id) const {
  std::map<std::string, std::string> fields;
  CommandResult r = slurm_command({"scontrol", "show", "job", "-o", std::to_string(id)});
  if (r.status != 0) return fields;
  std::istringstream in(r.output);
  for (std::string tok; in >> tok;) {
    size_t eq = tok.find('=');
    if (eq != std::string::npos && eq > 0) fields.emplace(tok.substr(0, eq), tok.substr(eq + 1));
  }
  return fields;
}

std::string SlurmCluster::node_state(int i) const {
  CommandResult r = slurm_command({"sinfo", "-h", "-N", "-n", node_name(i), "-o", "%t"});
  if (r.status != 0) return "";
  std::string s = r.output.substr(0, r.output.find('\n'));
  return s;
}

bool SlurmCluster::wait_idle(double timeout_ms) const {
  double deadline = mono_ms() + timeout_ms;
  do {
    CommandResult r = slurm_command({"sinfo", "-h", "-N", "-o", "%N %t"});  // a node once per partition
    std::istringstream in(r.output);
    std::set<std::string> idle;
    for (std::string node, st; in >> node >> st;)
      if (st == "idle") idle.insert(node);
    if (r.status == 0 && static_cast<int>(idle.size()) == options_.nodes) return true;
    sleep_ms(200);
  } while (mono_ms() < deadline);
  return false;
}

double SlurmCluster::crash_node(int i) {
  net_->set_link(i, false);  // first: the peers must not see the kernel close the sockets
  double t = mono_ms();
  net_->kill_all(i);
  if (slurmd_.at(i) > 0) {
    waitpid(slurmd_[i], nullptr, 0);
    slurmd_[i] = -1;
  }
  return t;
}

void SlurmCluster::set_node_state(int i, const std::string& state, const std::string& reason) const {
  std::vector<std::string> argv = {"scontrol", "update", "nodename=" + node_name(i), "state=" + state};
  if (!reason.empty()) argv.push_back("reason=" + reason);
  CommandResult r = slurm_command(argv);
  if (r.status != 0) throw std::runtime_error("SlurmCluster: `scontrol update nodename=" + node_name(i) +
                                              " state=" + state + "` failed: " + r.output);
}

void SlurmCluster::restart_node(int i) {
  if (slurmd_.at(i) > 0) throw std::logic_error("SlurmCluster::restart_node: " + node_name(i) + "'s slurmd runs");
  net_->set_link(i, true);
  start_slurmd(i);
}

std::string SlurmCluster::log_tail(const std::string& path) const {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > 1500 ? "..." + s.substr(s.size() - 1500) : s;
}

}  // namespace edl::testing
