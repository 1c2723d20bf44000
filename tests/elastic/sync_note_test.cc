// The sync of a new generation from the notes its members arrived with (docs/elastic.md, "State:
// commit, restore, sync"): no allgather when every member reported its commit, the same result as
// the allgather's, and a member whose commit moved since its arrival fails the generation.
#include <catch2/catch.hpp>

#include <atomic>
#include <deque>
#include <future>
#include <string>
#include <vector>

#include "edl/error.h"
#include "edl/state.h"
#include "elastic/group.h"
#include "elastic/member_list.h"
#include "local_comm.h"

using edl::DataType;
using edl::elastic::Group;
using edl::elastic::State;

namespace {

// A Group over LocalComm that counts the allgathers it runs.
class CountingGroup final : public Group {
 public:
  CountingGroup(std::shared_ptr<edl::Communicator> comm, std::atomic<int>* allgathers)
      : inner_(std::move(comm)), allgathers_(allgathers) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void allreduce(void* d, size_t n, DataType t, edl::ReduceOp op) override { inner_.allreduce(d, n, t, op); }
  void broadcast(void* d, size_t n, DataType t, int root) override { inner_.broadcast(d, n, t, root); }
  void allgatherv(const void* in, size_t n, DataType t, std::vector<uint8_t>& out, std::vector<size_t>* counts) override {
    ++*allgathers_;
    inner_.allgatherv(in, n, t, out, counts);
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  std::shared_ptr<edl::Communicator> communicator() const override { return inner_.communicator(); }

 private:
  edl::elastic::CommGroup inner_;
  std::atomic<int>* allgathers_;
};

struct Rank {
  std::vector<float> w = std::vector<float>(8, 0.0f);
  State state;
  Rank() {
    state.register_tensor("w", w.data(), w.size(), DataType::kFloat32);
    state.commit();  // its initial values, as edl::elastic::run commits them
  }
  // Trains `steps` steps (w += 1 each) and commits after each.
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      for (auto& x : w) x += 1.0f;
      state.step++;
      state.commit();
    }
  }
};

// Runs sync_state(notes) on every rank of a LocalComm generation; returns each rank's result or
// exception, and the allgathers run.
std::vector<std::future<bool>> sync_all(std::deque<Rank>& ranks, const std::vector<std::string>& notes,
                                        const std::string& prefix, std::atomic<int>* allgathers) {
  auto hub = edl::elastic::testing::LocalHub::get(prefix, static_cast<int>(ranks.size()));
  std::vector<std::future<bool>> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out.push_back(std::async(std::launch::async, [&ranks, allgathers, notes, r, hub] {
      auto comm = std::make_shared<edl::elastic::testing::LocalComm>(hub, static_cast<int>(r), 1,
                                                                   std::chrono::milliseconds(3000),
                                                                   std::chrono::milliseconds(1500));
      CountingGroup g(comm, allgathers);
      return edl::elastic::sync_state(ranks[r].state, g, notes);
    }));
  return out;
}

std::vector<std::string> notes_of(std::deque<Rank>& ranks) {
  std::vector<std::string> notes;
  for (auto& r : ranks) notes.push_back(edl::elastic::state_sync_note(r.state));
  return notes;
}

// The first sync of fresh states (a fresh start: true on every rank); afterwards they are synced.
void first_sync(std::deque<Rank>& ranks, const std::string& prefix) {
  std::atomic<int> allgathers{0};
  for (auto& f : sync_all(ranks, notes_of(ranks), prefix, &allgathers)) CHECK(f.get());
  CHECK(allgathers.load() == 0);
}

}  // namespace

TEST_CASE("sync from the arrival notes: no allgather, the laggard adopts the best commit", "[state][sync]") {
  std::deque<Rank> ranks(3);
  first_sync(ranks, "sync-note-0/");
  for (auto& r : ranks) r.train(4);
  ranks[1].train(1);  // rank 1 committed one step more (it passed a boundary the others did not)
  std::vector<std::string> notes = notes_of(ranks);
  CHECK(notes[0] == notes[2]);
  CHECK(notes[0] != notes[1]);
  std::atomic<int> allgathers{0};
  for (auto& f : sync_all(ranks, notes, "sync-note-a/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 0);
  for (auto& r : ranks) {
    CHECK(r.state.step == 5);
    CHECK(r.w == std::vector<float>(8, 5.0f));
  }
  // Every note equal: nothing moves, still no collective.
  notes.assign(3, edl::elastic::state_sync_note(ranks[0].state));
  for (auto& f : sync_all(ranks, notes, "sync-note-b/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 0);
}

TEST_CASE("a member without a note only receives (no allgather), and with no note at all or a malformed one the allgather runs",
          "[state][sync]") {
  std::deque<Rank> ranks(3);
  first_sync(ranks, "sync-note-1/");
  for (auto& r : ranks) r.train(2);
  ranks[2].train(2);
  // Rank 1 arrived without a note (a newcomer that joined before its State existed): it is counted
  // as having nothing to offer, and rank 2's commit reaches everyone with the broadcast alone.
  std::vector<std::string> notes = {edl::elastic::state_sync_note(ranks[0].state), "",
                                    edl::elastic::state_sync_note(ranks[2].state)};
  std::atomic<int> allgathers{0};
  for (auto& f : sync_all(ranks, notes, "sync-note-c/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 0);
  for (auto& r : ranks) CHECK(r.w == std::vector<float>(8, 4.0f));
  // No note from anyone (the job's first generation): the allgather.
  notes.assign(3, "");
  for (auto& f : sync_all(ranks, notes, "sync-note-c2/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 3);
  // A malformed note is no note.
  notes = {"c4.0.x", edl::elastic::state_sync_note(ranks[2].state), edl::elastic::state_sync_note(ranks[2].state)};
  for (auto& f : sync_all(ranks, notes, "sync-note-d/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 6);
}

TEST_CASE("a newcomer without a note joins by the broadcast alone", "[state][sync]") {
  std::deque<Rank> ranks(3);
  first_sync(ranks, "sync-note-3/");
  for (auto& r : ranks) r.train(3);
  ranks.emplace_back();  // rank 3: a newcomer, its initial commit (step 0, fresh), no note
  std::vector<std::string> notes = notes_of(ranks);
  notes[3] = "";
  std::atomic<int> allgathers{0};
  for (auto& f : sync_all(ranks, notes, "sync-note-g/", &allgathers)) CHECK_FALSE(f.get());
  CHECK(allgathers.load() == 0);
  for (auto& r : ranks) {
    CHECK(r.state.step == 3);
    CHECK(r.w == std::vector<float>(8, 3.0f));
  }
}

TEST_CASE("a member without a note whose commit would be the source fails the generation", "[state][sync]") {
  std::deque<Rank> ranks(3);
  first_sync(ranks, "sync-note-4/");
  for (auto& r : ranks) r.train(2);
  ranks[1].train(1);  // the best commit, but rank 1 reports no note
  std::vector<std::string> notes = {edl::elastic::state_sync_note(ranks[0].state), "",
                                    edl::elastic::state_sync_note(ranks[2].state)};
  std::atomic<int> allgathers{0};
  auto f = sync_all(ranks, notes, "sync-note-f/", &allgathers);
  CHECK_THROWS_AS(f[1].get(), edl::CommError);
  // The others broadcast from rank 0 (the best they know of) and fail once rank 1 gives up.
  for (int r : {0, 2}) CHECK_THROWS(f[r].get());
  CHECK(allgathers.load() == 0);
}

TEST_CASE("a member whose commit moved after it arrived fails the generation", "[state][sync]") {
  std::deque<Rank> ranks(2);
  first_sync(ranks, "sync-note-2/");
  for (auto& r : ranks) r.train(3);
  std::vector<std::string> notes(2, edl::elastic::state_sync_note(ranks[0].state));
  ranks[1].train(1);  // after its arrival
  std::atomic<int> allgathers{0};
  auto f = sync_all(ranks, notes, "sync-note-e/", &allgathers);
  CHECK_FALSE(f[0].get());
  CHECK_THROWS_AS(f[1].get(), edl::CommError);
}

TEST_CASE("member lists carry the arrival notes, and lists without them still parse", "[state][sync]") {
  using edl::elastic::Member;
  std::vector<Member> m = {Member{"a", "h1", "127.0.0.1:5", "c3.0.40"}, Member{"b", "h2", "", ""}};
  const auto parsed = edl::elastic::parse_members(edl::elastic::format_members(m));
  REQUIRE(parsed.size() == 2);
  CHECK(parsed[0].note == "c3.0.40");
  CHECK(parsed[0].probe == "127.0.0.1:5");
  CHECK(parsed[1].note.empty());
  CHECK(parsed[1].probe.empty());
  const auto old = edl::elastic::parse_members("a h1 127.0.0.1:5\nb h2\n");
  REQUIRE(old.size() == 2);
  CHECK(old[0].note.empty());
  CHECK(old[1].probe.empty());
}

TEST_CASE("member lists carry each member's mesh listener beside its note", "[state][sync]") {
  using edl::elastic::Member;
  std::vector<Member> m = {Member{"a", "h1", "127.0.0.1:5", "c3.0.40", "127.0.0.1:7"},
                           Member{"b", "h2", "127.0.0.1:6", "", "127.0.0.1:8"}, Member{"c", "h2", "", "", ""}};
  const auto parsed = edl::elastic::parse_members(edl::elastic::format_members(m));
  REQUIRE(parsed.size() == 3);
  CHECK(parsed[0].note == "c3.0.40");
  CHECK(parsed[0].mesh == "127.0.0.1:7");
  CHECK(parsed[1].note.empty());  // the mesh word is never taken for a note
  CHECK(parsed[1].mesh == "127.0.0.1:8");
  CHECK(parsed[2].mesh.empty());
  CHECK(edl::elastic::parse_members("a h1 127.0.0.1:5 mesh=127.0.0.1:9 c1.0.2\n")[0].note == "c1.0.2");
}
