// Config: every EDL_* environment variable, read in exactly one place (Config::from_env).
//
// edl-run sets the identity variables for its workers; users may set the tuning variables.
// The table of variables with their defaults is in docs/api.md. Malformed values throw
// InvalidArgument naming the variable and the value.
// Thread-safety: a Config is a plain value; from_env() reads the process environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "edl/export.h"

namespace edl {

struct EDL_API Config {  // exported for the tests of its validation (tests/collective/hier_test.cc)
  // --- identity, set by edl-run ---------------------------------------------------------------
  bool launched = false;            // true when EDL_STORE is set (the process belongs to a job)
  std::string store_url;            // EDL_STORE: tcp://HOST:PORT | redis://HOST:PORT | memory://NAME
  std::string job_id = "edl";       // EDL_JOB_ID
  std::string secret;               // EDL_JOB_SECRET (proved to the store on connect)
  std::string worker_id;            // EDL_WORKER_ID: unique per process; default "<hostname>:<pid>"
  int rank = 0;                     // EDL_RANK (static mode)
  int size = 1;                     // EDL_SIZE (static mode)
  int local_rank = 0;               // EDL_LOCAL_RANK
  int local_size = 1;               // EDL_LOCAL_SIZE
  std::string hostname;             // EDL_HOSTNAME: default gethostname()
  std::string bind_address = "127.0.0.1";  // EDL_BIND_ADDR: address peers connect to
  int launcher_fd = -1;             // EDL_LAUNCHER_FD: edl-run's liveness pipe (EOF = edl-run died; -1 = none)

  // --- elastic mode ----------------------------------------------------------------------------
  bool elastic = false;             // EDL_ELASTIC=1
  int min_np = 1;                   // EDL_MIN_NP
  int max_np = 0;                   // EDL_MAX_NP (0 = unbounded)
  int heartbeat_ms = 500;           // EDL_HEARTBEAT_MS: lease refresh period
  int lease_ms = 3000;              // EDL_LEASE_MS: a worker silent this long is declared dead
  int rendezvous_timeout_ms = 60000;  // EDL_RENDEZVOUS_TIMEOUT_MS: below min_np this long = JobError
  int reset_limit = -1;             // EDL_RESET_LIMIT: max generation resets (-1 = unlimited; the variable
                                    //   also says unlimited with 0, its historic spelling)
  std::string checkpoint_dir;       // EDL_CHECKPOINT_DIR: persist commits here ("" = memory only)
  int rendezvous_grace_ms = 3000;   // EDL_RENDEZVOUS_GRACE_MS: longest wait for a live but late member
  int start_window_ms = 1000;       // EDL_START_WINDOW_MS: first rendezvous waits this long for more workers
  int commit_every = 1;             // EDL_COMMIT_EVERY: notify_batch_end commits every N batches
  int progress_timeout_ms = 0;      // EDL_PROGRESS_TIMEOUT_MS: no batch boundary this long aborts the
                                    //   generation (0 = auto: max(EDL_TIMEOUT_MS, 10 x longest batch); -1 = off)
  bool retry_user_errors = false;   // EDL_RETRY_USER_ERRORS: retry user/mismatch/data errors in place
  bool allow_restart_from_scratch = false;  // EDL_ALLOW_RESTART_FROM_SCRATCH: all members lost and no
                                            //   checkpoint: start over instead of JobError
  double straggler_factor = 1.5;    // EDL_STRAGGLER_FACTOR: slow = step time > factor x median (> 1)
  int straggler_steps = 20;         // EDL_STRAGGLER_STEPS: slow this many boundaries in a row = straggler
  bool evict_stragglers = false;    // EDL_EVICT_STRAGGLERS: remove stragglers at a batch boundary
  bool rebalance_stragglers = false;  // EDL_REBALANCE_STRAGGLERS: the job's shard generator splits the
                                      //   global batch by the ranks' measured speed (docs/data.md)
  bool deterministic = false;       // EDL_DETERMINISTIC: ask for the reproducible mode (edl::deterministic())
  // How a newcomer gets the job's state (docs/elastic.md, "Stop-free joins").
  std::string join = "stop";        // EDL_JOIN: stop (the job waits while the best member broadcasts its
                                    // commit) | stopfree (the newcomer fetches it in the background)
  double join_fetch_share = 0.5;    // EDL_JOIN_FETCH_SHARE: share of the others' compute per step a
                                    // stop-free newcomer may spend receiving state, (0, 1]
  uint64_t join_max_chunk_bytes = 0;  // EDL_JOIN_MAX_CHUNK_BYTES: cap per batch boundary (0 = none)
  int test_clock_offset_ms = 0;     // EDL_TEST_CLOCK_OFFSET_MS: test hook, skews this worker's wall clock
  std::string test_kill_at;         // EDL_TEST_KILL_AT: test hook, SIGKILL self at this elastic protocol
                                    //   point (e.g. "rendezvous:arrived"); "" = never

  // --- collectives -----------------------------------------------------------------------------
  int timeout_ms = 30000;           // EDL_TIMEOUT_MS: deadline of every collective
  int connect_timeout_ms = 30000;   // EDL_CONNECT_TIMEOUT_MS: connecting the mesh / the store
  int store_timeout_ms = 30000;     // EDL_STORE_TIMEOUT_MS: how long a lost store connection is retried
                                    // before the store counts as lost (edl-run: the job fails naming it)
  size_t fusion_threshold = 64u << 20;  // EDL_FUSION_THRESHOLD: fusion buffer bytes
  double cycle_time_ms = 1.0;       // EDL_CYCLE_TIME_MS: engine cycle
  bool engine_tick = false;         // EDL_ENGINE_TICK: negotiate every cycle even when idle (Horovod's way)
  std::string transport = "auto";   // EDL_TRANSPORT: auto | tcp | shm (shared memory when all ranks share a host)
  std::string hierarchical = "auto";  // EDL_HIERARCHICAL: auto | 0 | 1 (hierarchical allreduce across hosts;
                                      // needs EDL_TRANSPORT=auto, see docs/collectives.md)
  std::string mesh = "auto";        // EDL_MESH: auto | full | sparse (which peers a rank connects:
                                    // docs/collectives.md, "Sparse mesh")

  // --- GPU path (libedl_cuda; docs/gpu.md) --------------------------------------------------------
  std::string gpu_transport = "nccl";  // EDL_GPU_TRANSPORT: nccl | host (device tensors staged through
                                       //   pinned host memory and the host collectives)
  bool nccl_shrink = true;          // EDL_NCCL_SHRINK: build a generation that only lost members with
                                    //   ncclCommShrink (0 = always a fresh communicator)

  // --- diagnostics -----------------------------------------------------------------------------
  int log_level = 1;                // EDL_LOG_LEVEL: 0 quiet, 1 warnings+events, 2 info, 3 debug
  std::string metrics_addr;         // EDL_METRICS_ADDR: edl-run's metrics socket ("@name" = abstract Unix
                                    //   datagram socket; set by edl-run; "" = no reports)
  int metrics_interval_ms = 250;    // EDL_METRICS_INTERVAL_MS: a worker reports at most this often
                                    //   (and on every phase change)
  std::string timeline_path;        // EDL_TIMELINE: write a Chrome trace-event timeline here ("" = off;
                                    //   edl-run --timeline DIR sets one file per worker)

  static Config from_env();
};

}  // namespace edl
