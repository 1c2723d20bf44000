#include "launcher/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cxxopts.hpp>
#include <set>

namespace edl::launcher {
namespace {

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// --metrics-port, --metrics-bind, --metrics-file, --metrics-interval, --report.
// A whole number or a decimal, all of `text`; throws UsageError naming `flag`.
double number_of(const std::string& flag, const std::string& text, const std::string& wanted) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw UsageError(flag + " '" + text + "' is not " + wanted);
  return v;
}

void parse_metrics_options(const cxxopts::ParseResult& r, LaunchOptions* L) {
  if (r.count("metrics-port")) {
    const std::string text = r["metrics-port"].as<std::string>();
    const double p = number_of("--metrics-port", text, "a port number (0..65535)");
    if (p != static_cast<int>(p) || p < 0 || p > 65535)
      throw UsageError("--metrics-port '" + text + "' is not a port number (0..65535)");
    L->metrics_port = static_cast<int>(p);
  }
  L->metrics_bind_address = r["metrics-bind"].as<std::string>();
  if (L->metrics_bind_address.empty() || L->metrics_bind_address.find_first_of(" \t/") != std::string::npos)
    throw UsageError("--metrics-bind '" + L->metrics_bind_address + "' is not an address");
  if (r.count("metrics-file")) {
    L->metrics_file = r["metrics-file"].as<std::string>();
    if (L->metrics_file.empty()) throw UsageError("--metrics-file must not be empty");
  }
  const std::string interval = r["metrics-interval"].as<std::string>();
  L->metrics_interval_s = number_of("--metrics-interval", interval, "a number of seconds (0.05..3600)");
  if (!(L->metrics_interval_s >= 0.05 && L->metrics_interval_s <= 3600))
    throw UsageError("--metrics-interval '" + interval + "' is not a number of seconds in 0.05..3600");
  if (r.count("report")) {
    L->report_path = r["report"].as<std::string>();
    if (L->report_path.empty()) throw UsageError("--report must not be empty");
  }
}

// --timeline DIR: created when missing (its parent must exist); must be a writable directory.
void check_timeline_dir(const std::string& dir) {
  if (dir.empty()) throw UsageError("--timeline needs a directory, got ''");
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw UsageError("--timeline '" + dir + "': cannot create the directory: " + std::strerror(errno));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError("--timeline '" + dir + "' is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError("--timeline '" + dir + "': the directory is not writable: " + std::strerror(errno));
}

// --straggler-*, --evict-stragglers, --rebalance-stragglers, --autoscale, --scaling-*, --max-global-batch.
void parse_observability(const cxxopts::ParseResult& r, LaunchOptions* out) {
  LaunchOptions& L = *out;
  if (r.count("straggler-factor")) {
    L.straggler_factor = r["straggler-factor"].as<double>();
    if (!(L.straggler_factor > 1.0) || L.straggler_factor > 1e6)
      throw UsageError("--straggler-factor must be greater than 1, got " + std::to_string(L.straggler_factor));
  }
  if (r.count("straggler-steps")) {
    L.straggler_steps = r["straggler-steps"].as<int>();
    if (L.straggler_steps < 1)
      throw UsageError("--straggler-steps must be at least 1, got " + std::to_string(L.straggler_steps));
  }
  L.evict_stragglers = r.count("evict-stragglers") > 0;
  L.rebalance_stragglers = r.count("rebalance-stragglers") > 0;
  L.autoscale = r.count("autoscale") > 0;
  L.scaling_threshold = r["scaling-threshold"].as<double>();
  if (!(L.scaling_threshold >= 0 && L.scaling_threshold <= 1))
    throw UsageError("--scaling-threshold must be in [0, 1], got " + std::to_string(L.scaling_threshold));
  L.scaling_step = r["scaling-step"].as<int>();
  if (L.scaling_step < 1) throw UsageError("--scaling-step must be at least 1, got " + std::to_string(L.scaling_step));
  L.scaling_interval = r["scaling-interval"].as<int>();
  if (L.scaling_interval < 1)
    throw UsageError("--scaling-interval must be at least 1, got " + std::to_string(L.scaling_interval));
  L.max_global_batch = r["max-global-batch"].as<long long>();
  if (L.max_global_batch < 0)
    throw UsageError("--max-global-batch must not be negative, got " + std::to_string(L.max_global_batch));
  const bool elastic_only = r.count("straggler-factor") || r.count("straggler-steps") || L.evict_stragglers ||
                            L.rebalance_stragglers || L.autoscale || r.count("scaling-threshold") || r.count("scaling-step") ||
                            r.count("scaling-interval") || r.count("max-global-batch");
  if (elastic_only && !L.elastic)
    throw UsageError("--straggler-*, --evict-stragglers, --rebalance-stragglers, --autoscale, --scaling-* and "
                     "--max-global-batch need "
                     "elastic mode (--min-np/--max-np/--elastic)");
  if (L.autoscale && r.count("host-discovery-script"))
    throw UsageError("--autoscale sets the local slots itself: use -np with --min-np/--max-np, not "
                     "--host-discovery-script");
}

}  // namespace

void set_timeline_env(std::vector<std::string>* env, const LaunchOptions& o, const std::string& name) {
  if (o.timeline_dir.empty()) return;
  env->erase(std::remove_if(env->begin(), env->end(),
                            [](const std::string& e) { return e.rfind("EDL_TIMELINE=", 0) == 0; }),
             env->end());
  env->push_back("EDL_TIMELINE=" + o.timeline_dir + "/worker-" + name + ".json");
}

void set_gpu_env(std::vector<std::string>* env, const LaunchOptions& o, int slot) {
  if (!o.one_gpu_test && o.gpus_per_host <= 0) return;
  auto take = [&](const std::string& name) {  // removes NAME=... and returns its value ("" if absent)
    std::string value;
    for (auto it = env->begin(); it != env->end();)
      if (it->rfind(name + "=", 0) == 0) {
        value = it->substr(name.size() + 1);
        it = env->erase(it);
      } else {
        ++it;
      }
    return value;
  };
  const std::string visible = take("CUDA_VISIBLE_DEVICES");
  if (o.one_gpu_test) {
    take("NCCL_HOSTID");
    env->push_back("CUDA_VISIBLE_DEVICES=0");
    env->push_back("NCCL_HOSTID=" + o.hostname + "-slot" + std::to_string(slot));
    return;
  }
  const int i = slot % o.gpus_per_host;
  if (visible.empty()) {
    env->push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(i));
    return;
  }
  std::vector<std::string> devices;  // edl-run's own list (a scheduler's allocation): index into it
  std::string cur;
  for (char c : visible + ",") {
    if (c != ',') {
      cur += c;
    } else if (!cur.empty()) {
      devices.push_back(cur);
      cur.clear();
    }
  }
  if (static_cast<int>(devices.size()) < o.gpus_per_host)
    throw UsageError("--gpus-per-host " + std::to_string(o.gpus_per_host) + " but CUDA_VISIBLE_DEVICES='" + visible +
                     "' lists " + std::to_string(devices.size()) + " device(s)");
  env->push_back("CUDA_VISIBLE_DEVICES=" + devices[static_cast<size_t>(i)]);
}

namespace {

// The option table of edl-run (its --help).
void declare_options(cxxopts::Options& o) {
  o.add_options()
      ("n,np", "number of workers (static) / initial local workers (elastic)", cxxopts::value<int>())
      ("min-np", "elastic: fewest workers the job may run with", cxxopts::value<int>())
      ("max-np", "elastic: most workers the job may run with", cxxopts::value<int>())
      ("elastic", "elastic mode (implied by --min-np, --max-np, --host-discovery-script)")
      ("host-discovery-script", "elastic: executable printing 'host:slots' lines", cxxopts::value<std::string>())
      ("discovery-interval-ms", "elastic: discovery poll period", cxxopts::value<int>()->default_value("1000"))
      ("reset-limit", "elastic: resets (new generations after the first) the job may go through; also "
                      "bounds restarts of failed workers (default -1: unlimited)", cxxopts::value<int>())
      ("blacklist-cooldown-range", "elastic: MIN,MAX seconds a failed slot rests (doubles per failure)",
       cxxopts::value<std::string>()->default_value("0,0"))
      ("crash-loop-limit", "elastic: a slot whose worker fails N times in a row without committing a step "
                           "(within --crash-loop-window) fails the job (0 = off)",
       cxxopts::value<int>()->default_value("5"))
      ("crash-loop-window", "elastic: seconds the --crash-loop-limit failures must fall within (0 = any span)",
       cxxopts::value<double>()->default_value("600"))
      ("store", "external store URL (etcd://H1:2379,H2:2379,... or redis://HOST:PORT); default: embedded store", cxxopts::value<std::string>())
      ("store-bind", "address the embedded store listens on", cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("store-port", "port of the embedded store (0 = ephemeral)", cxxopts::value<int>()->default_value("0"))
      ("secret", "job secret (default: $EDL_JOB_SECRET, else random)", cxxopts::value<std::string>())
      ("job-id", "job id (default: random)", cxxopts::value<std::string>())
      ("hostname", "this host's name in discovery output (default: gethostname)", cxxopts::value<std::string>())
      ("grace-period", "seconds between SIGTERM and SIGKILL when stopping workers",
       cxxopts::value<double>()->default_value("10"))
      ("rendezvous-timeout", "elastic: seconds below --min-np before the job fails",
       cxxopts::value<double>()->default_value("60"))
      ("pid-file", "write '<rank|slot> <pid>' lines here whenever workers change", cxxopts::value<std::string>())
      ("bind-to", "CPU binding of local workers: none | core (each slot its own share of the CPUs) | auto "
                  "(core when the slots fit the CPUs)", cxxopts::value<std::string>()->default_value("none"))
      ("retry-user-errors", "elastic: restart workers after a non-retryable error too (exit code 3, "
                            "EDL_RETRY_USER_ERRORS=1) instead of failing the job")
      ("allow-restart-from-scratch", "elastic: workers may restart from step 0 when no committed state "
                                     "survives (EDL_ALLOW_RESTART_FROM_SCRATCH=1)")
      ("metrics-port", "serve Prometheus metrics on this port (0 = any free port, logged)",
       cxxopts::value<std::string>())
      ("metrics-bind", "address of the metrics endpoint", cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("metrics-file", "write the job-wide metrics as CSV rows to this file", cxxopts::value<std::string>())
      ("metrics-interval", "seconds between --metrics-file rows", cxxopts::value<std::string>()->default_value("1"))
      ("report", "write the goodput report as JSON to this file at the end", cxxopts::value<std::string>())
      ("timeline", "write a Chrome trace-event timeline per worker into DIR (EDL_TIMELINE; "
                   "docs/observability.md)", cxxopts::value<std::string>())
      ("straggler-factor", "elastic: a worker whose step compute time exceeds this x the median is slow (> 1; "
                           "default 1.5)", cxxopts::value<double>())
      ("straggler-steps", "elastic: slow this many batches in a row = straggler (default 20)", cxxopts::value<int>())
      ("evict-stragglers", "elastic: remove stragglers at a batch boundary; their slot cools down as after a failure")
      ("rebalance-stragglers", "elastic: give slower workers fewer records per step and faster ones more, from "
                               "their measured speed (the job's shard generator; docs/data.md)")
      ("autoscale", "elastic: apply the recommended world size (s_{k,d} heuristic) to the local slots")
      ("scaling-threshold", "elastic: S, scale while s_{k,d} > S (0..1)", cxxopts::value<double>()->default_value("0.7"))
      ("scaling-step", "elastic: d, workers added or removed per scaling decision", cxxopts::value<int>()->default_value("1"))
      ("scaling-interval", "elastic: K, steps between scaling decisions", cxxopts::value<int>()->default_value("50"))
      ("max-global-batch", "elastic: no scale-out past this global batch (workers x local batch)",
       cxxopts::value<long long>()->default_value("0"))
      ("gpus-per-host", "give local worker slot i the GPU i % N (CUDA_VISIBLE_DEVICES: one device per worker; "
                        "docs/gpu.md)", cxxopts::value<int>())
      ("one-gpu-test", "test mode: every local worker on GPU 0 with its own NCCL_HOSTID, so that several NCCL "
                       "ranks share one GPU (proves behaviour, not speed; docs/gpu.md)")
      ("v,verbose", "log every worker start and exit")
      ("h,help", "print this help");
}

// "--name" (and "-x") of every option that takes a value: needed to find where PROGRAM starts (its
// own flags are not ours), derived from the table so that the two never disagree.
std::set<std::string> valued_options(const cxxopts::Options& o) {
  std::set<std::string> valued = {"-np"};  // Horovod / mpirun spelling of --np
  for (const auto& d : o.group_help("").options) {
    if (d.is_boolean) continue;
    if (!d.s.empty()) valued.insert("-" + d.s);
    for (const auto& l : d.l) valued.insert("--" + l);
  }
  return valued;
}

// Splits "edl-run [OPTIONS] PROGRAM ARGS..." (or "... -- PROGRAM ARGS...") into our arguments (values
// joined as "--opt=value", since values may start with '-') and the command.
std::vector<std::string> split_arguments(int argc, char** argv, const std::set<std::string>& valued,
                                         std::vector<std::string>* command) {
  std::vector<std::string> ours{argc > 0 ? argv[0] : "edl-run"};
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;
    if (a == "-np" || a == "-n") a = "--np";
    if (valued.count(a) && a.find('=') == std::string::npos) {
      if (i + 1 >= argc) throw UsageError("option " + a + " needs a value");
      a += "=" + std::string(argv[++i]);
    }
    ours.push_back(a);
  }
  for (; i < argc; ++i) command->push_back(argv[i]);
  return ours;
}

// --blacklist-cooldown-range MIN,MAX (whole seconds).
void parse_cooldown_range(const std::string& range, LaunchOptions* out) {
  LaunchOptions& L = *out;
  size_t comma = range.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    size_t p1 = 0, p2 = 0;
    L.cooldown_min_s = std::stoi(range.substr(0, comma), &p1);
    L.cooldown_max_s = std::stoi(range.substr(comma + 1), &p2);
    if (p1 != comma || p2 != range.size() - comma - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw UsageError("--blacklist-cooldown-range '" + range + "' is not MIN,MAX (whole seconds)");
  }
  if (L.cooldown_min_s < 0 || L.cooldown_max_s < L.cooldown_min_s)
    throw UsageError("--blacklist-cooldown-range '" + range + "' needs 0 <= MIN <= MAX");

}

// The job shape, the store, identity and worker handling flags.
void read_core_options(const cxxopts::ParseResult& r, LaunchOptions* out) {
  LaunchOptions& L = *out;
  if (r.count("np")) L.np = r["np"].as<int>();
  L.elastic = r.count("elastic") || r.count("min-np") || r.count("max-np") || r.count("host-discovery-script");
  if (r.count("min-np")) L.min_np = r["min-np"].as<int>();
  if (r.count("max-np")) L.max_np = r["max-np"].as<int>();
  if (r.count("host-discovery-script")) L.discovery_script = r["host-discovery-script"].as<std::string>();
  L.discovery_interval_ms = r["discovery-interval-ms"].as<int>();
  if (r.count("reset-limit")) {
    L.reset_limit = r["reset-limit"].as<int>();
    if (L.reset_limit < -1) throw UsageError("--reset-limit must be -1 (unlimited) or at least 0");
  }
  if (r.count("store")) L.store_url = r["store"].as<std::string>();
  L.store_bind_address = r["store-bind"].as<std::string>();
  L.store_port = r["store-port"].as<int>();
  if (r.count("secret")) L.secret = r["secret"].as<std::string>();
  if (r.count("job-id")) L.job_id = r["job-id"].as<std::string>();
  L.hostname = r.count("hostname") ? r["hostname"].as<std::string>() : local_hostname();
  L.grace_period_s = r["grace-period"].as<double>();
  L.rendezvous_timeout_s = r["rendezvous-timeout"].as<double>();
  if (r.count("pid-file")) L.pid_file = r["pid-file"].as<std::string>();
  if (r.count("timeline")) {
    L.timeline_dir = r["timeline"].as<std::string>();
    check_timeline_dir(L.timeline_dir);
  }
  L.verbose = r.count("verbose") > 0;
  L.retry_user_errors = r.count("retry-user-errors") > 0;
  L.allow_restart_from_scratch = r.count("allow-restart-from-scratch") > 0;
  L.bind_to = r["bind-to"].as<std::string>();
  if (L.bind_to != "none" && L.bind_to != "core" && L.bind_to != "auto")
    throw UsageError("--bind-to must be none, core or auto, got '" + L.bind_to + "'");
  if (r.count("gpus-per-host")) {
    L.gpus_per_host = r["gpus-per-host"].as<int>();
    if (L.gpus_per_host < 1) throw UsageError("--gpus-per-host must be at least 1, got " + std::to_string(L.gpus_per_host));
  }
  L.one_gpu_test = r.count("one-gpu-test") > 0;
  if (L.one_gpu_test && L.gpus_per_host > 0) throw UsageError("--one-gpu-test and --gpus-per-host exclude each other");

  parse_cooldown_range(r["blacklist-cooldown-range"].as<std::string>(), &L);
  L.crash_loop_limit = r["crash-loop-limit"].as<int>();
  L.crash_loop_window_s = r["crash-loop-window"].as<double>();
  if (L.crash_loop_limit < 0) throw UsageError("--crash-loop-limit must be at least 0 (0 = off)");
  if (!(L.crash_loop_window_s >= 0)) throw UsageError("--crash-loop-window must not be negative (0 = any span)");
}

// Checks across options, after every option was read.
void validate(const cxxopts::ParseResult& r, LaunchOptions* out) {
  LaunchOptions& L = *out;
  if (L.command.empty()) throw UsageError("no PROGRAM given");
  if (!L.elastic) {
    if (L.np < 1) throw UsageError(r.count("np") ? "-np must be at least 1, got " + std::to_string(L.np)
                                                   : "-np N is required");
  } else {
    if (L.np < 0) throw UsageError("-np must not be negative, got " + std::to_string(L.np));
    if (L.np == 0 && L.discovery_script.empty())
      throw UsageError("elastic mode needs -np N (local workers) or --host-discovery-script");
    if (L.min_np == 0) L.min_np = L.np > 0 ? L.np : 1;
    if (!r.count("max-np")) L.max_np = L.discovery_script.empty() ? std::max(L.np, L.min_np) : 0;
    if (L.min_np < 1) throw UsageError("--min-np must be at least 1, got " + std::to_string(L.min_np));
    if (L.max_np < 0) throw UsageError("--max-np must not be negative");
    if (L.max_np != 0 && L.max_np < L.min_np)
      throw UsageError("--max-np " + std::to_string(L.max_np) + " is below --min-np " + std::to_string(L.min_np));
    if (L.max_np != 0 && L.np > L.max_np)
      throw UsageError("-np " + std::to_string(L.np) + " is above --max-np " + std::to_string(L.max_np));
  }
  if (L.discovery_interval_ms < 10) throw UsageError("--discovery-interval-ms must be at least 10");
  if (!(L.grace_period_s >= 0)) throw UsageError("--grace-period must not be negative");
  if (!(L.rendezvous_timeout_s > 0)) throw UsageError("--rendezvous-timeout must be positive");
  if (L.hostname.empty() || L.hostname.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                         "0123456789.-_@") != std::string::npos)
    throw UsageError("--hostname '" + L.hostname + "' may only contain letters, digits and . - _ @ "
                     "(it becomes part of the worker ids)");
  if (!L.job_id.empty() && L.job_id.find_first_of(" \t\n/") != std::string::npos)
    throw UsageError("--job-id '" + L.job_id + "' must not contain whitespace or '/'");
  if (L.store_port < 0 || L.store_port > 65535) throw UsageError("--store-port must be in 0..65535");
  if (!L.store_url.empty() && L.store_url.rfind("redis://", 0) != 0 && L.store_url.rfind("tcp://", 0) != 0 &&
      L.store_url.rfind("etcd://", 0) != 0)
    throw UsageError("--store '" + L.store_url + "' must be etcd://HOST:PORT[,HOST:PORT...], redis://HOST:PORT "
                     "or tcp://HOST:PORT");
}

}  // namespace

bool parse_command_line(int argc, char** argv, LaunchOptions* out, std::string* help_text) {
  cxxopts::Options o("edl-run", "Launch an EDL job: N local worker processes around an embedded store.");
  declare_options(o);
  *help_text = o.help() + "\nExamples:\n  edl-run -np 4 ./train --epochs 3\n"
               "  edl-run --min-np 2 --max-np 4 -np 3 --reset-limit 3 ./train\n";
  std::vector<std::string> ours = split_arguments(argc, argv, valued_options(o), &out->command);
  std::vector<char*> cargv;
  for (auto& s : ours) cargv.push_back(s.data());
  cxxopts::ParseResult r;
  try {
    r = o.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (r.count("help")) return false;
  if (!r.unmatched().empty()) throw UsageError("unexpected argument '" + r.unmatched()[0] + "'");
  read_core_options(r, out);
  parse_observability(r, out);
  parse_metrics_options(r, out);
  validate(r, out);
  return true;
}

}  // namespace edl::launcher
