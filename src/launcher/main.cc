// edl-run: launches an EDL job (docs/launcher.md).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "common/config.h"
#include "edl/error.h"
#include "elastic/checkpoint.h"
#include "launcher/binding.h"
#include "launcher/fd_limit.h"
#include "launcher/launcher.h"
#include "launcher/output.h"
#include "launcher/process.h"

namespace edl::launcher {
namespace {

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (fd >= 0 && got < bytes) {
    ssize_t r = ::read(fd, raw.data() + got, bytes - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (fd >= 0) ::close(fd);
  if (got != bytes) throw InternalError("edl-run: cannot read /dev/urandom for the job secret");
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

// The job id: --job-id; else the one stamped in the checkpoint of EDL_CHECKPOINT_DIR (edl-run's
// environment, which the workers inherit), so that rerunning the same command after a whole-job crash
// resumes from that checkpoint; else job-<8 random hex>. A corrupt checkpoint is a DataError naming it.
std::string job_id_of(const LaunchOptions& o) {
  if (!o.job_id.empty()) return o.job_id;
  const std::string dir = Config::from_env().checkpoint_dir;
  std::string path;
  if (!dir.empty()) {
    if (auto id = elastic::checkpoint_job_id(dir, &path); id && !id->empty()) {
      log_event("job id " + *id + " taken from the checkpoint " + path +
                " (EDL_CHECKPOINT_DIR, no --job-id given): the job resumes from it");
      return *id;
    }
  }
  return "job-" + random_hex(4);
}

}  // namespace

void write_pid_file(const std::string& path, const std::string& contents) {
  if (path.empty()) return;
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    log_event("cannot write pid file " + tmp);
    return;
  }
  std::fputs(contents.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

Job prepare_job(const LaunchOptions& o) {
  Job job;
  job.secret = o.secret;
  if (job.secret.empty()) job.secret = Config::from_env().secret;  // EDL_JOB_SECRET
  if (job.secret.empty()) job.secret = random_hex(16);
  job.job_id = job_id_of(o);
  // Open files: the most workers this job may have (the embedded store serves all of them).
  const int workers = std::max(o.np, o.elastic ? o.max_np : 0);
  ensure_descriptors(descriptors_needed(workers, workers, o.store_url.empty()), workers);
  if (!o.store_url.empty()) {
    job.store_url = o.store_url;
  } else {
    StoreServerOptions so;
    so.bind_address = o.store_bind_address;
    so.port = o.store_port;
    so.secret = job.secret;
    // Room for two connections per worker (a worker's beats share its client's connection on this
    // store, but a reconnecting client's old connection may linger), all of them possibly in the
    // handshake at once when a large job starts.
    so.max_connections = std::max(so.max_connections, 3 * static_cast<size_t>(workers) + 64);
    so.max_unauthenticated = std::max(so.max_unauthenticated, 2 * static_cast<size_t>(workers));
    job.server = std::make_unique<StoreServer>(so);
    job.store_url = job.server->url();
  }
  return job;
}

}  // namespace edl::launcher

namespace {

int run_main(int argc, char** argv) {
  using namespace edl::launcher;
  LaunchOptions options;
  std::string help;
  try {
    if (!parse_command_line(argc, argv, &options, &help)) {
      std::cout << help;
      return 0;
    }
  } catch (const UsageError& e) {
    std::cerr << "edl-run: error: " << e.what() << "\n\n" << help;
    return 2;
  }
  try {  // a malformed EDL_* variable (e.g. EDL_STRAGGLER_FACTOR) would fail every worker: say so now
    (void)edl::Config::from_env();
  } catch (const edl::InvalidArgument& e) {
    std::cerr << "edl-run: error: " << e.what() << "\n";
    return 2;
  }
  try {  // --bind-to core with more worker slots than CPUs is a usage error
    (void)cpus_for_slot(options.bind_to, 0, options.elastic ? options.max_np : options.np, allowed_cpus());
  } catch (const edl::InvalidArgument& e) {
    std::cerr << "edl-run: error: " << e.what() << "\n";
    return 2;
  }
  try {
    resolve_program(options.command[0]);
  } catch (const edl::InvalidArgument& e) {
    log_event(std::string("error: ") + e.what());
    return 127;  // like a shell: command not found / not executable
  }
  // Every error of edl-run itself is an edl::Error (docs/errors.md): InvalidArgument (a bad
  // value, exit 2), StoreError / AuthError (the store cannot be reached or refuses the secret),
  // JobError (a worker cannot be started), InternalError (a bug). Anything else is a bug too.
  try {
    Job job = prepare_job(options);
    return options.elastic ? run_elastic(options, job) : run_static(options, job);
  } catch (const edl::InvalidArgument& e) {
    log_event(std::string("error: ") + e.what());
    return 2;
  } catch (const edl::Error& e) {
    log_event(std::string("error: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    log_event(std::string("internal error: ") + e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int code = run_main(argc, argv);
  edl::launcher::finish_output(std::chrono::seconds(10));  // a stuck consumer must not hold edl-run forever
  return code;
}
