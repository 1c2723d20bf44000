// edl-run command line: LaunchOptions and its parser (docs/launcher.md lists every flag).
// Thread-safety: plain values and a pure parser.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "edl/error.h"

namespace edl::launcher {

struct LaunchOptions {
  int np = 0;                        // -np: workers (static) / initial local workers (elastic)
  bool elastic = false;              // set by --elastic or any elastic-only flag
  int min_np = 0;                    // --min-np (elastic; default = np)
  int max_np = 0;                    // --max-np (elastic; default = np, or unbounded (0) with discovery)
  std::string discovery_script;      // --host-discovery-script: prints "host:slots" lines
  int discovery_interval_ms = 1000;  // --discovery-interval-ms: how often the script runs
  int reset_limit = -1;              // --reset-limit: resets / restarts allowed (-1 = unlimited, 0 = none)
  int cooldown_min_s = 0;            // --blacklist-cooldown-range MIN,MAX (seconds)
  int cooldown_max_s = 0;
  // Crash loop (docs/launcher.md, "Crash loops"): a slot whose worker fails crash_loop_limit times in
  // a row without committing a step, within crash_loop_window_s, fails the job.
  int crash_loop_limit = 5;          // --crash-loop-limit N (0 = off)
  double crash_loop_window_s = 600;  // --crash-loop-window S (0 = no window: any span)
  std::string store_url;             // --store: "" = embedded StoreServer
  std::string store_bind_address = "127.0.0.1";  // --store-bind: address of the embedded store
  int store_port = 0;                // --store-port: 0 = ephemeral
  std::string secret;                // --secret, else EDL_JOB_SECRET, else random
  std::string job_id;                // --job-id, else random
  std::string hostname;              // --hostname: this host's name in discovery output (default gethostname)
  double grace_period_s = 10.0;             // --grace-period: SIGTERM -> SIGKILL delay
  double rendezvous_timeout_s = 60.0;  // --rendezvous-timeout: below --min-np this long = job failure
  std::string pid_file;              // --pid-file: "<rank-or-slot> <pid>" lines, rewritten on change
  bool verbose = false;              // --verbose: log every process start/exit
  std::string bind_to = "none";      // --bind-to none|core|auto: CPU binding of worker slots (binding.h)
  bool retry_user_errors = false;    // --retry-user-errors: EDL_RETRY_USER_ERRORS=1; exit code 3 is restarted
  bool allow_restart_from_scratch = false;  // --allow-restart-from-scratch: EDL_ALLOW_RESTART_FROM_SCRATCH=1
  // Job metrics (docs/observability.md).
  int metrics_port = -1;             // --metrics-port: Prometheus endpoint (-1 = none, 0 = any free port)
  std::string metrics_bind_address = "127.0.0.1";  // --metrics-bind: its address
  std::string metrics_file;          // --metrics-file: CSV of the job-wide samples ("" = none)
  double metrics_interval_s = 1.0;   // --metrics-interval: seconds between CSV rows
  std::string report_path;           // --report: goodput report as JSON ("" = only the log line)
  std::string timeline_dir;          // --timeline DIR: each worker writes DIR/worker-<host>-<slot>[-<n>].json
  // Stragglers and autoscaling (docs/observability.md). The straggler flags reach the workers as
  // EDL_STRAGGLER_FACTOR / EDL_STRAGGLER_STEPS / EDL_EVICT_STRAGGLERS, only when given.
  double straggler_factor = 0;       // --straggler-factor F (> 1; 0 = not given: the workers' default 1.5)
  int straggler_steps = 0;           // --straggler-steps N (>= 1; 0 = not given: default 20)
  bool evict_stragglers = false;     // --evict-stragglers
  bool rebalance_stragglers = false; // --rebalance-stragglers: workers get EDL_REBALANCE_STRAGGLERS=1
  bool autoscale = false;            // --autoscale: apply the recommended world size to the local slots
  double scaling_threshold = 0.7;    // --scaling-threshold S in [0, 1]
  int scaling_step = 1;              // --scaling-step d >= 1
  int scaling_interval = 50;         // --scaling-interval K >= 1 (steps)
  long long max_global_batch = 0;    // --max-global-batch: cap on workers x local batch (0 = none)
  // GPUs of the local worker slots (docs/gpu.md, "Elastic jobs on GPUs").
  int gpus_per_host = 0;             // --gpus-per-host N: slot i gets GPU i % N (0 = devices untouched)
  bool one_gpu_test = false;         // --one-gpu-test: every slot on GPU 0 with its own NCCL_HOSTID (test mode)
  std::vector<std::string> command;  // PROGRAM ARGS...
};

// With --timeline: sets EDL_TIMELINE=<timeline_dir>/worker-<name>.json in a worker's environment
// (replacing an inherited EDL_TIMELINE). Without it the environment is left as it is.
void set_timeline_env(std::vector<std::string>* env, const LaunchOptions& o, const std::string& name);

// The GPU of local slot `slot`: with --gpus-per-host N, CUDA_VISIBLE_DEVICES = the (slot % N)-th
// device edl-run itself may use (its own CUDA_VISIBLE_DEVICES list when set, else slot % N); with
// --one-gpu-test, CUDA_VISIBLE_DEVICES=0 and NCCL_HOSTID=<hostname>-slot<slot> (so that NCCL accepts
// several ranks on one GPU). Without either flag the environment is left as it is. Throws
// UsageError when edl-run's CUDA_VISIBLE_DEVICES lists fewer than N devices.
void set_gpu_env(std::vector<std::string>* env, const LaunchOptions& o, int slot);

// Bad command line: message for the user; edl-run prints it with the usage and exits 2. An
// edl::InvalidArgument (docs/errors.md), like every other bad value edl-run refuses.
class UsageError : public edl::InvalidArgument {
 public:
  using edl::InvalidArgument::InvalidArgument;
};

// Parses argv. Returns false when --help was printed (exit 0). Throws UsageError.
bool parse_command_line(int argc, char** argv, LaunchOptions* out, std::string* help_text);

}  // namespace edl::launcher
