// edl::elastic::State: registration, commit / restore in memory, checkpoint files, and sync().
//
// A snapshot is one byte string (format in snapshot.h); commit() builds it, restore() loads it back
// into the registered memory, sync() ships the best member's snapshot to everyone.
#include "edl/state.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/logging.h"
#include "edl/error.h"
#include "elastic/checkpoint.h"
#include "elastic/group.h"
#include "elastic/snapshot.h"
#include "elastic/state_join.h"
#include "elastic/state_staged.h"

namespace edl::elastic {

Stateful::~Stateful() = default;
void Stateful::on_generation(const GenerationInfo&) {}

struct State::Impl {
  std::vector<SnapshotItem> items;  // registration order
  std::vector<std::function<void(const GenerationInfo&)>> callbacks;
  // The last commit ("" = none). Shared and never modified: a stop-free join's state server sends
  // from it while the training thread makes the next commit (state_server.h).
  std::shared_ptr<const std::string> committed = std::make_shared<const std::string>();
  int64_t committed_step = -1;
  // Commit buffers are recycled: `own` is the buffer the last commit() wrote (null once a sync, a
  // checkpoint or a restamp replaced it), `spare` the one before; the next commit() writes into
  // `spare` when nobody else holds it any more (a state server sending from it), so a commit copies
  // into warm pages instead of allocating and faulting in the whole state again (at 1 GiB a fresh
  // buffer costs ~10x the copy). The State holds at most these two, as a commit did before while
  // it built the next one.
  std::shared_ptr<std::string> own;
  std::shared_ptr<std::string> spare;
  // The last commit holds staged blobs' copies, not their bytes (empty payloads): whole() fills them.
  bool staged_pending = false;
  // The staged blobs' copies are the last commit (until a sync or a checkpoint replaces it): restore()
  // takes them back without host bytes, whether or not whole() made the bytes meanwhile.
  bool staged_current = false;
  std::string checkpoint_dir;
  bool persist = true;              // only one member of a job writes checkpoint files (rank 0)
  bool synced = false;              // false until the first sync: a fresh member never wins a tie

  SnapshotIdentity ident;           // job id and lineage carried by every commit (set by the worker)
  std::function<void(int64_t step, const std::string& lineage)> on_written;  // after a checkpoint file was written (writer thread)

  // Checkpoint files are written by a background thread so commit() (every batch by default) never
  // waits for the disk; if it falls behind, only the newest commit is written. A failed write is
  // logged and retried (backoff 100 ms doubling to 10 s) until it succeeds or a newer commit
  // replaces it; it never throws into the training loop.
  std::mutex wmu;
  std::condition_variable wcv;
  std::thread writer;
  struct Pending {
    std::shared_ptr<const std::string> bytes;  // the commit itself (shared, never modified): no copy
    int64_t step;
    std::string lineage;
  };
  std::optional<Pending> pending;
  uint64_t handed = 0;     // commits handed to the writer
  uint64_t attempted = 0;  // commits the writer tried at least once (or skipped for a newer one)
  bool writing = false;
  bool wstop = false;
  std::string werror;  // the last write failure ("" after a success)

  void persist_async(std::shared_ptr<const std::string> bytes, int64_t step) {
    std::unique_lock<std::mutex> lock(wmu);
    pending = Pending{std::move(bytes), step, ident.lineage};
    ++handed;
    if (!writer.joinable()) writer = std::thread([this] { write_loop(); });
    wcv.notify_all();
  }

  void write_loop() {
    std::unique_lock<std::mutex> lock(wmu);
    std::chrono::milliseconds backoff{100};
    for (;;) {
      wcv.wait(lock, [&] { return wstop || pending.has_value(); });
      if (!pending) return;  // stopping and nothing left to write
      Pending job = std::move(*pending);
      pending.reset();
      const int64_t step = job.step;
      uint64_t seq = handed;
      std::string dir = checkpoint_dir;
      auto cb = on_written;
      writing = true;
      lock.unlock();
      std::string error;
      bool written = false;
      try {
        written = write_checkpoint(dir, *job.bytes, step);
        if (written && cb) cb(step, job.lineage);
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      writing = false;
      attempted = std::max(attempted, seq);
      werror = error;
      if (error.empty()) {
        backoff = std::chrono::milliseconds(100);
        if (!written) {
          EDL_LOG(2) << "edl: checkpoint of step " << step << " skipped: " << dir << " holds a newer one";
        }
      } else {
        EDL_LOG(1) << "edl: checkpoint write of step " << step << " failed (retrying in " << backoff.count()
                   << " ms): " << error;
        wcv.notify_all();
        // Retry the same commit unless a newer one arrives (or the State goes away) meanwhile.
        wcv.wait_for(lock, backoff, [&] { return wstop || pending.has_value(); });
        backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
        if (!pending && !wstop) pending = std::move(job);
      }
      wcv.notify_all();
    }
  }

  // Blocks until every commit handed to the writer was written or tried once (see checkpoint_error).
  void flush() {
    std::unique_lock<std::mutex> lock(wmu);
    wcv.wait(lock, [&] { return attempted >= handed && !writing; });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(wmu);
      wstop = true;
      wcv.notify_all();
    }
    if (writer.joinable()) writer.join();
  }

  // The buffer the next commit() writes into: the spare when no one else holds it, else a new one.
  std::shared_ptr<std::string> take_buffer() {
    std::shared_ptr<std::string> buf = std::move(spare);  // leaves spare empty
    if (buf && buf.use_count() == 1) {
      // The other holders' last reads of it (a server thread's send) happen before this reuse.
      std::atomic_thread_fence(std::memory_order_acquire);
      return buf;
    }
    return std::make_shared<std::string>();
  }

  // `bytes` is the last commit now (a sync's or a checkpoint's, not a buffer of commit()): the
  // buffer of the last commit() is kept as the spare, the older one goes.
  void replace_committed(std::shared_ptr<const std::string> bytes) {
    if (own) spare = std::move(own);  // leaves own empty
    committed = std::move(bytes);
  }

  // The last commit as whole bytes (a staged blob's copy made host bytes once, when it is asked for).
  const std::shared_ptr<const std::string>& whole() {
    if (staged_pending) {
      replace_committed(std::make_shared<const std::string>(snapshot_fill_staged(*committed, items, "the last in-memory commit")));
      staged_pending = false;
    }
    return committed;
  }

  void add(SnapshotItem item) {
    EDL_CHECK(!item.name.empty(), InvalidArgument, "State: an item name must not be empty");
    for (const auto& it : items)
      EDL_CHECK(it.name != item.name, InvalidArgument, "State: item '" + item.name + "' is registered twice");
    items.push_back(std::move(item));
  }
};

State::State() : impl_(std::make_unique<Impl>()) {}
State::~State() = default;

void State::register_tensor(const std::string& name, void* data, size_t count, DataType dtype) {
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument, "State: tensor '" + name + "' has a null pointer");
  SnapshotItem it;
  it.name = name;
  it.kind = SnapshotItem::kTensor;
  it.data = data;
  it.bytes = count * dtype_size(dtype);
  impl_->add(std::move(it));
}

void State::register_scalar(const std::string& name, int64_t* value) {
  EDL_CHECK(value != nullptr, InvalidArgument, "State: scalar '" + name + "' has a null pointer");
  SnapshotItem it;
  it.name = name;
  it.kind = SnapshotItem::kScalar;
  it.data = value;
  it.bytes = sizeof(int64_t);
  impl_->add(std::move(it));
}

void State::register_blob(const std::string& name, std::function<std::string()> save,
                          std::function<void(const std::string&)> load) {
  EDL_CHECK(save && load, InvalidArgument, "State: blob '" + name + "' needs both save and load functions");
  SnapshotItem it;
  it.name = name;
  it.kind = SnapshotItem::kBlob;
  it.save = std::move(save);
  it.load = std::move(load);
  impl_->add(std::move(it));
}

void register_staged_blob(State& state, const std::string& name, StagedBlob blob) {
  EDL_CHECK(blob.capture && blob.captured && blob.restore_captured && blob.load, InvalidArgument,
            "State: staged blob '" + name + "' needs capture, captured, restore_captured and load functions");
  SnapshotItem it;
  it.name = name;
  it.kind = SnapshotItem::kBlob;
  it.load = std::move(blob.load);
  it.capture = std::move(blob.capture);
  it.captured = std::move(blob.captured);
  it.restore_captured = std::move(blob.restore_captured);
  state.impl().add(std::move(it));
}

void State::register_component(const std::string& name, Stateful* component) {
  EDL_CHECK(component != nullptr, InvalidArgument, "State: component '" + name + "' is null");
  SnapshotItem it;
  it.name = name;
  it.kind = SnapshotItem::kComponent;
  it.component = component;
  impl_->add(std::move(it));
}

void State::on_generation(std::function<void(const GenerationInfo&)> callback) {
  EDL_CHECK(callback != nullptr, InvalidArgument, "State::on_generation: empty callback");
  impl_->callbacks.push_back(std::move(callback));
}

void State::commit() {
  auto& im = *impl_;
  std::shared_ptr<std::string> buf = im.take_buffer();
  encode_snapshot_into(im.items, epoch, step, im.ident, buf.get());
  im.spare = std::move(im.own);
  im.own = buf;
  im.committed = std::move(buf);
  im.staged_pending = std::any_of(im.items.begin(), im.items.end(), [](const SnapshotItem& it) { return it.staged(); });
  im.staged_current = im.staged_pending;
  im.committed_step = step;
  if (!im.checkpoint_dir.empty() && im.persist) im.persist_async(im.whole(), step);
}

void State::restore() {
  auto& im = *impl_;
  EDL_CHECK(im.committed_step >= 0, InvalidArgument, "State::restore: nothing was committed yet");
  if (!im.staged_current) {
    decode_snapshot(*im.committed, im.items, &epoch, &step, "the last in-memory commit");
    return;
  }
  std::vector<SnapshotItem> items = im.items;  // staged blobs take their own copy back, not bytes
  for (auto& it : items)
    if (it.staged()) it.load = [back = it.restore_captured](const std::string&) { back(); };
  decode_snapshot(*im.committed, items, &epoch, &step, "the last in-memory commit");
}

std::string State::checkpoint_error() {
  std::lock_guard<std::mutex> lock(impl_->wmu);
  return impl_->werror;
}

int64_t State::committed_step() const { return impl_->committed_step; }

void State::set_checkpoint_dir(const std::string& dir) {
  impl_->flush();
  std::lock_guard<std::mutex> lock(impl_->wmu);
  impl_->checkpoint_dir = dir;
}

void State::flush_checkpoint() { impl_->flush(); }

bool State::load_checkpoint() {
  if (impl_->checkpoint_dir.empty()) return false;
  impl_->flush();
  std::string path;
  auto bytes = read_checkpoint(impl_->checkpoint_dir, &path);
  if (!bytes) return false;
  // A checkpoint of another job, or of an older lineage of this one, is refused (DataError).
  SnapshotIdentity got;
  decode_snapshot(*bytes, impl_->items, &epoch, &step, "checkpoint file " + path, impl_->ident, &got);
  impl_->replace_committed(std::make_shared<const std::string>(std::move(*bytes)));
  impl_->staged_pending = impl_->staged_current = false;
  impl_->committed_step = step;
  impl_->ident = got;
  EDL_LOG(1) << "edl: resumed from checkpoint " << path << " at step " << step << " (lineage " << got.lineage << ")";
  return true;
}

void State::sync() {
  Group* g = current_group();
  EDL_CHECK(g != nullptr, InvalidArgument, "State::sync: no elastic generation (call it inside edl::elastic::run)");
  sync_state(*this, *g);
}

// --- internal hooks used by the elastic worker ----------------------------------------------------

void state_set_persist(State& s, bool persist) { s.impl().persist = persist; }

void state_set_identity(State& s, const std::string& job, const std::string& lineage) {
  auto& im = s.impl();
  im.ident.job = job;
  im.ident.lineage = lineage;
  if (im.committed_step >= 0)
    im.replace_committed(std::make_shared<const std::string>(restamp_snapshot(*im.committed, im.ident, "the last in-memory commit")));
}

const std::string& state_lineage(State& s) { return s.impl().ident.lineage; }

void state_on_checkpoint_written(State& s, std::function<void(int64_t step, const std::string& lineage)> cb) {
  std::lock_guard<std::mutex> lock(s.impl().wmu);
  s.impl().on_written = std::move(cb);
}

const std::string& state_committed_bytes(State& s) { return *s.impl().whole(); }

const std::string& state_checkpoint_dir(State& s) { return s.impl().checkpoint_dir; }

void state_adopt(State& s, std::string bytes, const std::string& origin) {
  auto& im = s.impl();
  SnapshotIdentity got;
  decode_snapshot(bytes, im.items, &s.epoch, &s.step, origin, SnapshotIdentity{im.ident.job, ""}, &got);
  im.ident.lineage = got.lineage;
  auto adopted = std::make_shared<std::string>(std::move(bytes));
  im.replace_committed(adopted);
  im.own = std::move(adopted);  // the State's own buffer: recycled by a later commit like its own
  im.staged_pending = im.staged_current = false;
  im.committed_step = s.step;
}

bool state_fresh(State& s) { return !s.impl().synced; }

std::shared_ptr<const std::string> state_commit(State& s) { return s.impl().whole(); }

std::vector<iovec> state_tensor_space(State& s) {
  std::vector<iovec> space;
  for (const auto& it : s.impl().items)
    if (it.kind == SnapshotItem::kTensor) space.push_back(iovec{it.data, it.bytes});
  return space;
}

void state_adopt_skeleton(State& s, const std::string& skeleton, const std::string& origin, SnapshotIdentity* got) {
  auto& im = s.impl();
  decode_skeleton(skeleton, im.items, &s.epoch, &s.step, origin, SnapshotIdentity{im.ident.job, ""}, got);
}

void state_caught_up(State& s, const SnapshotIdentity& id) {
  auto& im = s.impl();
  im.ident.lineage = id.lineage;
  im.synced = true;
}

void state_notify_generation(State& s, const GenerationInfo& info) {
  for (auto& it : s.impl().items)
    if (it.kind == SnapshotItem::kComponent) it.component->on_generation(info);
  for (auto& cb : s.impl().callbacks) cb(info);
}

// sync: allgather of (committed step, fresh, commit bytes) triples, then a broadcast of the best
// member's commit (its size is known from the allgather: no collective just for the length).
// Best = highest committed step; among equals a member that was synced before beats a fresh one
// (a newcomer's initial state never overwrites the job's); remaining ties: lowest rank.
namespace {

constexpr int kSyncFields = 3;  // committed step, fresh, commit bytes

// This member's fields. The size of the whole commit: a staged blob's copy is made host bytes here
// (once per sync).
std::array<int64_t, kSyncFields> sync_fields(State& s) {
  auto& im = s.impl();
  return {s.committed_step(), im.synced ? 0 : 1, im.committed ? static_cast<int64_t>(im.whole()->size()) : 0};
}

bool parse_sync_note(const std::string& note, std::array<int64_t, kSyncFields>* out) {
  long long a = 0, b = 0, c = 0;
  char tail = 0;
  if (std::sscanf(note.c_str(), "c%lld.%lld.%lld%c", &a, &b, &c, &tail) != 3) return false;
  *out = {a, b, c};
  return true;
}

// What a sync does, from every member's fields (v: kSyncFields per rank, `size` ranks).
struct SyncPlan {
  int best = 0;              // the source: highest step, synced before fresh, then lowest rank
  bool nothing_moves = true;  // every member holds the same commit and none is fresh
  bool all_fresh = true;     // no member synced before (a fresh start)
};

SyncPlan plan_sync(const std::vector<int64_t>& v, int size) {
  auto step = [&](int r) { return v[kSyncFields * r]; };
  auto fresh = [&](int r) { return v[kSyncFields * r + 1] != 0; };
  auto better = [&](int a, int b) {  // is rank a a better source than rank b?
    if (step(a) != step(b)) return step(a) > step(b);
    return fresh(a) < fresh(b);
  };
  SyncPlan p;
  bool any_fresh = false;
  for (int r = 0; r < size; ++r) {
    if (r > 0 && better(r, p.best)) p.best = r;
    if (step(r) != step(0)) p.nothing_moves = false;
    any_fresh = any_fresh || fresh(r);
    p.all_fresh = p.all_fresh && fresh(r);
  }
  p.nothing_moves = p.nothing_moves && !any_fresh;
  return p;
}

// The fields a member without a note stands for in the sync from notes: a newcomer that joined
// before its State existed, with nothing to offer (it only receives).
constexpr std::array<int64_t, kSyncFields> kNoNote = {-1, 1, 0};

bool sync_from(State& s, Group& g, const std::vector<int64_t>& v);

}  // namespace

std::string state_sync_note(State& s) {
  if (s.committed_step() < 0) return "";
  const auto f = sync_fields(s);
  return "c" + std::to_string(f[0]) + "." + std::to_string(f[1]) + "." + std::to_string(f[2]);
}

bool sync_state(State& s, Group& g) {
  auto& im = s.impl();
  if (g.size() == 1) {
    bool restart = !im.synced;
    im.synced = true;
    return restart;
  }
  const auto mine = sync_fields(s);
  std::vector<uint8_t> all;
  g.allgatherv(mine.data(), kSyncFields, DataType::kInt64, all, nullptr);
  EDL_ASSERT(all.size() == static_cast<size_t>(g.size()) * kSyncFields * sizeof(int64_t));
  std::vector<int64_t> v(kSyncFields * g.size());
  std::memcpy(v.data(), all.data(), all.size());
  return sync_from(s, g, v);
}

bool sync_state(State& s, Group& g, const std::vector<std::string>& notes) {
  if (g.size() == 1 || notes.size() != static_cast<size_t>(g.size())) return sync_state(s, g);
  std::vector<int64_t> v(kSyncFields * g.size());
  bool any_note = false;
  for (int r = 0; r < g.size(); ++r) {
    std::array<int64_t, kSyncFields> f = kNoNote;
    // Every member reads the same decision, so all take the same path here.
    const std::string& note = notes[static_cast<size_t>(r)];
    if (!note.empty() && !parse_sync_note(note, &f)) return sync_state(s, g);
    any_note = any_note || !note.empty();
    std::copy(f.begin(), f.end(), v.begin() + kSyncFields * r);
  }
  if (!any_note) return sync_state(s, g);  // nobody reported a commit (the job's first generation)
  const auto mine = sync_fields(s);
  const std::string& my_note = notes[static_cast<size_t>(g.rank())];
  if (my_note.empty()) {
    // This member arrived without a note and is counted as having nothing to offer. That holds
    // unless its commit would change the plan (it would be the source, or it synced before while
    // everyone else is fresh): then it fails the generation, and arrives at the next with a note.
    std::vector<int64_t> real = v;
    std::copy(mine.begin(), mine.end(), real.begin() + kSyncFields * g.rank());
    const SyncPlan assumed = plan_sync(v, g.size()), actual = plan_sync(real, g.size());
    if (actual.best != assumed.best || actual.all_fresh != assumed.all_fresh)
      throw CommError("State::sync: this member arrived without a note of its commit (it joined before its State "
                      "existed) and its commit (step " + std::to_string(mine[0]) +
                      (mine[1] ? ", fresh" : ", synced") + ") changes which member is the source; the generation is "
                      "formed again");
  } else if (!std::equal(mine.begin(), mine.end(), v.begin() + kSyncFields * g.rank())) {
    throw CommError("State::sync: this member's commit (step " + std::to_string(mine[0]) +
                    ") moved after it arrived at the rendezvous (its note says " + my_note +
                    "); the generation is formed again");
  }
  return sync_from(s, g, v);
}

namespace {

// The rest of a sync once every member's fields are known (v: kSyncFields per rank).
bool sync_from(State& s, Group& g, const std::vector<int64_t>& v) {
  auto& im = s.impl();
  const SyncPlan p = plan_sync(v, g.size());
  const int best = p.best;
  if (v[kSyncFields * best] < 0)
    throw InvalidArgument("State::sync: no member has committed state (call commit() first)");
  if (p.nothing_moves) return false;  // every member holds the same commit of the same history
  const int64_t len = v[kSyncFields * best + 2];
  // The broadcast goes through the spare commit buffer (no more buffers than a commit holds, no
  // fresh pages): the best member copies its commit into it, the others receive into it and adopt it.
  std::shared_ptr<std::string> buf = im.take_buffer();
  if (g.rank() == best) buf->assign(*im.committed);
  else buf->resize(static_cast<size_t>(len));
  g.broadcast(buf->data(), buf->size(), DataType::kUInt8, best);
  if (g.rank() != best) {
    state_adopt(s, std::move(*buf), "the snapshot of rank " + std::to_string(best));
  } else {
    im.spare = std::move(buf);
    s.restore();  // the best member also rolls back to its commit (uncommitted work is discarded)
  }
  im.synced = true;
  return p.all_fresh;
}

}  // namespace

}  // namespace edl::elastic
