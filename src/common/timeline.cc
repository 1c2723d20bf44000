// Timeline: the process-wide bounded event queue and its JSON writer thread (see timeline.h).
#include "common/timeline.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "edl/error.h"

namespace edl::timeline {
namespace detail {
std::atomic<bool> g_on{false};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

const Clock::time_point g_origin = Clock::now();
const int64_t g_origin_unix_us =
    std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::kElastic: return "elastic";
    case Lane::kOptimizer: return "optimizer";
    case Lane::kNegotiation: return "negotiation";
    case Lane::kCollectives: return "collectives";
    case Lane::kTensor: break;
  }
  return "tensor";
}

// JSON string body (no quotes) of s.
void escape(std::string& out, const char* s) {
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
}

// One timeline file: the queue (pending_, bounded by capacity) and the writer thread that drains it.
class Writer {
 public:
  explicit Writer(const Options& o) : opt_(o) {
    if (opt_.pid == 0) opt_.pid = getpid();
    if (opt_.process_name.empty()) opt_.process_name = "edl pid " + std::to_string(getpid());
    file_ = std::fopen(opt_.path.c_str(), "w");
    if (!file_)
      throw InvalidArgument(opt_.variable + "='" + opt_.path + "': cannot create the timeline file: " +
                            std::strerror(errno));
    pending_.reserve(opt_.capacity);
    batch_.reserve(opt_.capacity);
    out_.reserve(1 << 16);
    write_header();
    thread_ = std::thread([this] { loop(); });
  }

  ~Writer() { close(); }

  void push(const Event* e, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      if (pending_.size() >= opt_.capacity) {
        stats_.dropped += n - i;
        return;
      }
      pending_.push_back(e[i]);
      ++stats_.recorded;
    }
    // No wake-up per event: the writer runs every flush_period, or now when the queue is half full.
    if (pending_.size() >= opt_.capacity / 2 && pending_.size() - n < opt_.capacity / 2) cv_.notify_one();
  }

  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;
      closing_ = true;
    }
    if (getpid() != owner_) {
      // A forked child: the writer thread and the file belong to the parent. Leave both alone.
      new std::thread(std::move(thread_));  // never joined nor destroyed (the thread is not here)
      file_ = nullptr;
      return;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    write_footer();
    std::fclose(file_);
    file_ = nullptr;
  }

 private:
  void loop() {
    for (;;) {
      bool last;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, opt_.flush_period,
                     [this] { return closing_ || pending_.size() >= opt_.capacity / 2; });
        batch_.swap(pending_);  // both keep their capacity: no allocation on either side
        last = closing_;
      }
      write_batch();
      if (last) return;
    }
  }

  void write_header() {
    out_ = "[";
    first_ = true;
    std::string meta = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(opt_.pid) +
                       ",\"tid\":0,\"args\":{\"name\":\"";
    escape(meta, opt_.process_name.c_str());
    meta += "\"}}";
    line(meta);
    line("{\"name\":\"edl_timeline\",\"ph\":\"M\",\"pid\":" + std::to_string(opt_.pid) +
         ",\"tid\":0,\"args\":{\"start_unix_us\":" + std::to_string(g_origin_unix_us) +
         ",\"os_pid\":" + std::to_string(getpid()) + ",\"clock\":\"steady\"}}");
    for (Lane l : {Lane::kElastic, Lane::kOptimizer, Lane::kNegotiation, Lane::kCollectives})
      thread_meta(static_cast<int>(l), lane_name(l));
    flush();
  }

  void thread_meta(int tid, const char* name) {
    std::string m = "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(opt_.pid) +
                    ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":\"";
    escape(m, name);
    m += "\"}}";
    line(m);
    line("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(opt_.pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
  }

  int tid_of(const Event& e) {
    if (e.lane != Lane::kTensor) return static_cast<int>(e.lane);
    auto it = tensor_tids_.find(e.label);
    if (it != tensor_tids_.end()) return it->second;
    const int tid = kFirstTensorTid + static_cast<int>(tensor_tids_.size());
    tensor_tids_.emplace(e.label, tid);
    thread_meta(tid, e.label);
    return tid;
  }

  void format(const Event& e) {
    const int tid = tid_of(e);
    std::string& s = scratch_;
    s = "{\"name\":\"";
    escape(s, e.name);
    s += "\",\"ph\":\"";
    s += e.dur_us >= 0 ? "X" : "i";
    s += "\",\"pid\":" + std::to_string(opt_.pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"ts\":" + std::to_string(e.ts_us);
    if (e.dur_us >= 0) {
      s += ",\"dur\":" + std::to_string(e.dur_us);
    } else {
      s += ",\"s\":\"t\"";
    }
    s += ",\"args\":{";
    bool comma = false;
    if (e.label[0]) {
      s += "\"name\":\"";
      escape(s, e.label);
      s += "\"";
      comma = true;
    }
    for (uint8_t i = 0; i < e.nargs; ++i) {
      if (comma) s += ",";
      s += "\"";
      escape(s, e.args[i].key);
      s += "\":" + std::to_string(e.args[i].value);
      comma = true;
    }
    s += "}}";
    line(s);
  }

  void write_batch() {
    for (const Event& e : batch_) format(e);
    written_ += batch_.size();
    batch_.clear();
    Stats st = stats();
    if (st.dropped != reported_dropped_) {  // a counter track shows when the queue overflowed
      reported_dropped_ = st.dropped;
      line("{\"name\":\"timeline dropped events\",\"ph\":\"C\",\"pid\":" + std::to_string(opt_.pid) +
           ",\"tid\":0,\"ts\":" + std::to_string(now_us()) + ",\"args\":{\"dropped\":" +
           std::to_string(st.dropped) + "}}");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.written = written_;
    }
    flush();
  }

  void write_footer() {
    Stats st = stats();
    line("{\"name\":\"edl_timeline_stats\",\"ph\":\"M\",\"pid\":" + std::to_string(opt_.pid) +
         ",\"tid\":0,\"args\":{\"recorded\":" + std::to_string(st.recorded) + ",\"dropped\":" +
         std::to_string(st.dropped) + ",\"written\":" + std::to_string(st.written) + "}}");
    out_ += "\n]\n";
    flush();
  }

  void line(const std::string& json) {
    out_ += first_ ? "\n" : ",\n";
    out_ += json;
    first_ = false;
  }

  void flush() {
    if (!out_.empty() && file_) {
      std::fwrite(out_.data(), 1, out_.size(), file_);
      std::fflush(file_);
    }
    out_.clear();
  }

  static constexpr int kFirstTensorTid = 100;
  Options opt_;
  const pid_t owner_ = getpid();
  std::FILE* file_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> pending_;  // guarded by mu_
  bool closing_ = false;        // guarded by mu_
  Stats stats_;                 // guarded by mu_
  // Writer thread only (and close() after the join).
  std::vector<Event> batch_;
  std::string out_, scratch_;
  bool first_ = true;
  uint64_t written_ = 0;
  uint64_t reported_dropped_ = 0;
  std::unordered_map<std::string, int> tensor_tids_;
  std::thread thread_;
};

// The running timeline. Never destroyed (threads may record during static destruction); the
// file is closed by stop(), which start() registers with atexit.
struct Global {
  std::mutex mu;
  std::unique_ptr<Writer> writer;
  Stats last;  // of the last stopped timeline
  bool atexit_registered = false;
};

std::atomic<Global*> g_global{nullptr};

// A forked child (benches and tests fork workers) starts without a timeline: the parent's writer
// thread does not exist there and its locks may have been held at the fork. The parent's Global is
// abandoned (never touched again) and the child gets a fresh one.
void after_fork_in_child() {
  detail::g_on.store(false);
  g_global.store(new Global);
}

Global& global() {
  static const bool once = [] {
    g_global.store(new Global);
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
    return true;
  }();
  (void)once;
  return *g_global.load();
}

std::atomic<uint64_t> g_collective_ids{0};

}  // namespace

Event& Event::set_label(const std::string& s) {
  const size_t n = std::min(s.size(), kLabelBytes - 1);
  std::memcpy(label, s.data(), n);
  label[n] = '\0';
  return *this;
}

void start(const Options& options) {
  EDL_CHECK(!options.path.empty(), InvalidArgument, options.variable + ": the timeline path is empty");
  EDL_CHECK(options.capacity >= 2, InvalidArgument,
            "timeline queue capacity must be at least 2, got " + std::to_string(options.capacity));
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  detail::g_on.store(false);
  if (g.writer) {
    g.writer->close();
    g.last = g.writer->stats();
    g.writer.reset();
  }
  g.writer = std::make_unique<Writer>(options);
  if (!g.atexit_registered) {
    g.atexit_registered = true;
    std::atexit([] { stop(); });
  }
  detail::g_on.store(true);
}

void stop() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  detail::g_on.store(false);
  if (!g.writer) return;
  g.writer->close();
  g.last = g.writer->stats();
  g.writer.reset();
}

Stats stats() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.writer ? g.writer->stats() : g.last;
}

void record(const Event* events, size_t n) {
  if (!on() || n == 0) return;
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.writer) g.writer->push(events, n);
}

void record(const Event& e) { record(&e, 1); }

int64_t to_us(Clock::time_point t) {
  return g_origin_unix_us + std::chrono::duration_cast<std::chrono::microseconds>(t - g_origin).count();
}

int64_t now_us() { return to_us(Clock::now()); }

int64_t steady_seconds_to_us(double s) {
  const double origin_s = std::chrono::duration<double>(g_origin.time_since_epoch()).count();
  return g_origin_unix_us + static_cast<int64_t>((s - origin_s) * 1e6);
}

uint64_t next_collective_id() { return g_collective_ids.fetch_add(1, std::memory_order_relaxed) + 1; }

}  // namespace edl::timeline
