// edl-run internals: the job context shared by the static and the elastic mode.
// Thread-safety: main thread only.
#pragma once

#include <memory>
#include <string>

#include "edl/store_server.h"
#include "launcher/options.h"

namespace edl::launcher {

struct Job {
  std::unique_ptr<StoreServer> server;  // the embedded store (null with --store URL)
  std::string store_url;                // what workers get in EDL_STORE
  std::string secret;
  std::string job_id;
};

// Resolves the secret and job id and starts the embedded store unless --store was given.
Job prepare_job(const LaunchOptions& options);

// The two modes; each returns edl-run's exit code (docs/launcher.md).
int run_static(const LaunchOptions& options, Job& job);
int run_elastic(const LaunchOptions& options, Job& job);

// One event-log line on stderr: "edl-run: <UTC time> <text>" (single write; output.h, event_line).
void log_event(const std::string& text);

// Writes lines atomically to path (tmp + rename); no-op for an empty path.
void write_pid_file(const std::string& path, const std::string& contents);

}  // namespace edl::launcher
