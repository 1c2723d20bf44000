#include "common/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "edl/error.h"

namespace edl {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long long env_int(const char* name, long long def, long long lo, long long hi) {
  const char* v = env(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + v + "' is not an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

double env_double(const char* name, double def, double lo, double hi) {
  const char* v = env(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= lo && x <= hi)) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + v + "' is not a number in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

bool env_bool(const char* name, bool def) {
  const char* v = env(name);
  if (!v) return def;
  std::string s(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw InvalidArgument(std::string("environment variable ") + name + "='" + v + "' is not a boolean (0/1)");
}

std::string env_str(const char* name, const std::string& def) {
  const char* v = env(name);
  return v ? std::string(v) : def;
}

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

Config Config::from_env() {
  Config c;
  c.store_url = env_str("EDL_STORE", "");
  c.launched = !c.store_url.empty();
  c.job_id = env_str("EDL_JOB_ID", c.job_id);
  c.secret = env_str("EDL_JOB_SECRET", "");
  c.hostname = env_str("EDL_HOSTNAME", local_hostname());
  c.worker_id = env_str("EDL_WORKER_ID", c.hostname + ":" + std::to_string(getpid()));
  c.size = static_cast<int>(env_int("EDL_SIZE", 1, 1, 1 << 20));
  c.rank = static_cast<int>(env_int("EDL_RANK", 0, 0, c.size - 1));
  c.local_size = static_cast<int>(env_int("EDL_LOCAL_SIZE", 1, 1, 1 << 20));
  c.local_rank = static_cast<int>(env_int("EDL_LOCAL_RANK", 0, 0, c.local_size - 1));
  c.bind_address = env_str("EDL_BIND_ADDR", c.bind_address);
  c.launcher_fd = static_cast<int>(env_int("EDL_LAUNCHER_FD", -1, -1, 1 << 20));

  c.elastic = env_bool("EDL_ELASTIC", false);
  c.min_np = static_cast<int>(env_int("EDL_MIN_NP", 1, 1, 1 << 20));
  c.max_np = static_cast<int>(env_int("EDL_MAX_NP", 0, 0, 1 << 20));
  if (c.max_np != 0 && c.max_np < c.min_np)
    throw InvalidArgument("EDL_MAX_NP=" + std::to_string(c.max_np) + " is below EDL_MIN_NP=" + std::to_string(c.min_np));
  c.heartbeat_ms = static_cast<int>(env_int("EDL_HEARTBEAT_MS", c.heartbeat_ms, 10, 600000));
  c.lease_ms = static_cast<int>(env_int("EDL_LEASE_MS", c.lease_ms, 50, 3600000));
  if (c.lease_ms <= c.heartbeat_ms)
    throw InvalidArgument("EDL_LEASE_MS=" + std::to_string(c.lease_ms) + " must exceed EDL_HEARTBEAT_MS=" +
                          std::to_string(c.heartbeat_ms));
  c.rendezvous_timeout_ms =
      static_cast<int>(env_int("EDL_RENDEZVOUS_TIMEOUT_MS", c.rendezvous_timeout_ms, 100, 86400000));
  // -1 = unlimited, as every reset_limit member (docs/api.md, "Option names"); the variable's own
  // spelling of unlimited, 0 (it cannot say "no resets"), is kept.
  c.reset_limit = static_cast<int>(env_int("EDL_RESET_LIMIT", -1, -1, 1 << 30));
  if (c.reset_limit == 0) c.reset_limit = -1;
  c.checkpoint_dir = env_str("EDL_CHECKPOINT_DIR", "");
  c.rendezvous_grace_ms =
      static_cast<int>(env_int("EDL_RENDEZVOUS_GRACE_MS", c.rendezvous_grace_ms, 0, 86400000));
  c.start_window_ms = static_cast<int>(env_int("EDL_START_WINDOW_MS", c.start_window_ms, 0, 86400000));
  c.commit_every = static_cast<int>(env_int("EDL_COMMIT_EVERY", c.commit_every, 1, 1 << 30));
  c.progress_timeout_ms = static_cast<int>(env_int("EDL_PROGRESS_TIMEOUT_MS", 0, -1, 86400000));
  c.retry_user_errors = env_bool("EDL_RETRY_USER_ERRORS", false);
  c.allow_restart_from_scratch = env_bool("EDL_ALLOW_RESTART_FROM_SCRATCH", false);
  c.straggler_factor = env_double("EDL_STRAGGLER_FACTOR", c.straggler_factor, 1.0, 1e6);
  if (!(c.straggler_factor > 1.0))
    throw InvalidArgument("environment variable EDL_STRAGGLER_FACTOR='" + env_str("EDL_STRAGGLER_FACTOR", "") +
                          "' must be greater than 1");
  c.straggler_steps = static_cast<int>(env_int("EDL_STRAGGLER_STEPS", c.straggler_steps, 1, 1 << 30));
  c.evict_stragglers = env_bool("EDL_EVICT_STRAGGLERS", false);
  c.rebalance_stragglers = env_bool("EDL_REBALANCE_STRAGGLERS", false);
  c.deterministic = env_bool("EDL_DETERMINISTIC", false);
  c.join = env_str("EDL_JOIN", c.join);
  if (c.join != "stop" && c.join != "stopfree")
    throw InvalidArgument("EDL_JOIN='" + c.join + "' is not one of stop, stopfree");
  // The reproducible mode's fixed schedule hands micro-batches to every rank, a stop-free newcomer
  // still catching up included, whose contribution would not be the job's: not supported together.
  if (c.deterministic && c.join == "stopfree")
    throw InvalidArgument("EDL_DETERMINISTIC=1 and EDL_JOIN=stopfree cannot be combined: the reproducible mode needs "
                          "the stop joins (EDL_JOIN=stop, the default)");
  c.join_fetch_share = env_double("EDL_JOIN_FETCH_SHARE", c.join_fetch_share, 0.01, 1.0);
  c.join_max_chunk_bytes =
      static_cast<uint64_t>(env_int("EDL_JOIN_MAX_CHUNK_BYTES", 0, 0, 1LL << 50));
  c.test_clock_offset_ms = static_cast<int>(env_int("EDL_TEST_CLOCK_OFFSET_MS", 0, -86400000, 86400000));
  c.test_kill_at = env_str("EDL_TEST_KILL_AT", "");

  c.timeout_ms = static_cast<int>(env_int("EDL_TIMEOUT_MS", c.timeout_ms, 1, 86400000));
  c.connect_timeout_ms = static_cast<int>(env_int("EDL_CONNECT_TIMEOUT_MS", c.connect_timeout_ms, 1, 86400000));
  c.store_timeout_ms = static_cast<int>(env_int("EDL_STORE_TIMEOUT_MS", c.store_timeout_ms, 0, 86400000));
  c.fusion_threshold = static_cast<size_t>(env_int("EDL_FUSION_THRESHOLD", static_cast<long long>(c.fusion_threshold),
                                                   0, 1LL << 40));
  c.cycle_time_ms = env_double("EDL_CYCLE_TIME_MS", c.cycle_time_ms, 0.0, 10000.0);
  c.engine_tick = env_bool("EDL_ENGINE_TICK", c.engine_tick);
  c.transport = env_str("EDL_TRANSPORT", c.transport);
  if (c.transport != "auto" && c.transport != "tcp" && c.transport != "shm")
    throw InvalidArgument("EDL_TRANSPORT='" + c.transport + "' is not one of auto, tcp, shm");
  c.hierarchical = env_str("EDL_HIERARCHICAL", c.hierarchical);
  if (c.hierarchical != "auto" && c.hierarchical != "0" && c.hierarchical != "1")
    throw InvalidArgument("EDL_HIERARCHICAL='" + c.hierarchical + "' is not one of auto, 0, 1");
  c.gpu_transport = env_str("EDL_GPU_TRANSPORT", c.gpu_transport);
  if (c.gpu_transport != "nccl" && c.gpu_transport != "host")
    throw InvalidArgument("EDL_GPU_TRANSPORT='" + c.gpu_transport + "' is not one of nccl, host");
  c.nccl_shrink = env_bool("EDL_NCCL_SHRINK", c.nccl_shrink);
  if (c.hierarchical == "1" && c.transport != "auto")
    throw InvalidArgument("EDL_HIERARCHICAL=1 needs EDL_TRANSPORT=auto (it is '" + c.transport + "')");
  c.mesh = env_str("EDL_MESH", c.mesh);
  if (c.mesh != "auto" && c.mesh != "full" && c.mesh != "sparse")
    throw InvalidArgument("EDL_MESH='" + c.mesh + "' is not one of auto, full, sparse");
  if (c.mesh == "sparse" && c.transport == "shm")
    throw InvalidArgument("EDL_MESH=sparse cannot carry EDL_TRANSPORT=shm (the shared-memory transport needs the full mesh)");
  c.log_level = static_cast<int>(env_int("EDL_LOG_LEVEL", c.log_level, 0, 3));
  c.metrics_addr = env_str("EDL_METRICS_ADDR", "");
  if (!c.metrics_addr.empty() && (c.metrics_addr[0] != '@' || c.metrics_addr.size() < 2 || c.metrics_addr.size() > 100))
    throw InvalidArgument("EDL_METRICS_ADDR='" + c.metrics_addr + "' is not an abstract socket name '@NAME' (1..99 characters)");
  c.metrics_interval_ms = static_cast<int>(env_int("EDL_METRICS_INTERVAL_MS", c.metrics_interval_ms, 10, 60000));
  c.timeline_path = env_str("EDL_TIMELINE", "");
  if (!c.timeline_path.empty() && c.timeline_path.back() == '/')
    throw InvalidArgument("EDL_TIMELINE='" + c.timeline_path + "' names a directory; it must name a file "
                          "(edl-run --timeline DIR writes one file per worker)");
  return c;
}

}  // namespace edl
