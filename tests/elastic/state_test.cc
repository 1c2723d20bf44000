// State: registration, commit / restore, snapshots, checkpoint files (atomic, checksummed).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "edl/error.h"
#include "edl/state.h"
#include "elastic/checkpoint.h"
#include "elastic/group.h"
#include "elastic/snapshot.h"
#include "elastic/state_join.h"
#include "elastic/state_staged.h"

using edl::DataType;
using edl::elastic::State;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/edl_state_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

struct Counter : edl::elastic::Stateful {
  int value = 0;
  int generations = 0;
  std::string save() override { return std::to_string(value); }
  void load(const std::string& s) override { value = std::stoi(s); }
  void on_generation(const edl::elastic::GenerationInfo&) override { ++generations; }
};

}  // namespace

TEST_CASE("commit and restore roll every registered item back", "[state]") {
  std::vector<float> w = {1, 2, 3};
  int64_t seed = 7;
  std::string blob = "abc";
  Counter c;
  State s;
  s.register_tensor("w", w.data(), w.size(), DataType::kFloat32);
  s.register_scalar("seed", &seed);
  s.register_blob("blob", [&] { return blob; }, [&](const std::string& b) { blob = b; });
  s.register_component("counter", &c);
  CHECK(s.committed_step() == -1);
  CHECK_THROWS_AS(s.restore(), edl::InvalidArgument);
  s.step = 5;
  s.epoch = 1;
  s.commit();
  CHECK(s.committed_step() == 5);
  w = {9, 9, 9};
  seed = 0;
  blob = "zzzz";
  c.value = 42;
  s.step = 8;
  s.epoch = 2;
  s.restore();
  CHECK(w == std::vector<float>{1, 2, 3});
  CHECK(seed == 7);
  CHECK(blob == "abc");
  CHECK(c.value == 0);
  CHECK(s.step == 5);
  CHECK(s.epoch == 1);
}

TEST_CASE("commits recycle the buffer of the commit before last, never one still held", "[state]") {
  std::vector<float> w(4096, 1.0f);
  bool fail = false;
  State s;
  s.register_tensor("w", w.data(), w.size(), DataType::kFloat32);
  s.register_blob("b", [&]() -> std::string { if (fail) throw std::runtime_error("save failed"); return "x"; },
                  [](const std::string&) {});
  auto values = [&](const std::string& bytes) {  // the tensor of a commit, decoded into a scratch State
    std::vector<float> got(w.size());
    std::vector<edl::elastic::SnapshotItem> items(2);
    items[0].name = "w";
    items[0].kind = edl::elastic::SnapshotItem::kTensor;
    items[0].data = got.data();
    items[0].bytes = got.size() * sizeof(float);
    items[1].name = "b";
    items[1].kind = edl::elastic::SnapshotItem::kBlob;
    items[1].load = [](const std::string&) {};
    int64_t epoch = 0, step = 0;
    edl::elastic::decode_snapshot(bytes, items, &epoch, &step, "test");
    return got;
  };
  s.commit();
  const char* first = edl::elastic::state_commit(s)->data();
  w[0] = 2;
  s.commit();
  w[0] = 3;
  s.commit();  // nobody else holds the first commit's buffer: this one is written into it
  CHECK(edl::elastic::state_commit(s)->data() == first);
  std::shared_ptr<const std::string> held = edl::elastic::state_commit(s);  // a state server sending it
  w[0] = 4;
  s.commit();
  w[0] = 5;
  s.commit();  // the held commit is the spare now, but it is still held: a new buffer
  CHECK(held->data() == first);
  CHECK(values(*held)[0] == 3);
  CHECK(values(*edl::elastic::state_commit(s))[0] == 5);
  held.reset();
  w[0] = 6;
  s.commit();  // the buffer of step "4" (unheld) is reused; "5" stays the restore point until this one is done
  CHECK(values(*edl::elastic::state_commit(s))[0] == 6);
  fail = true;  // a commit that throws half-way leaves the last commit whole
  w[0] = 7;
  CHECK_THROWS(s.commit());
  w[0] = 0;
  s.restore();
  CHECK(w[0] == 6);
  CHECK(values(*edl::elastic::state_commit(s))[0] == 6);
}

TEST_CASE("registration errors are InvalidArgument naming the item", "[state]") {
  State s;
  int64_t x = 0;
  s.register_scalar("x", &x);
  CHECK_THROWS_WITH(s.register_scalar("x", &x), Catch::Contains("'x' is registered twice"));
  CHECK_THROWS_AS(s.register_tensor("t", nullptr, 4, DataType::kFloat32), edl::InvalidArgument);
  CHECK_THROWS_AS(s.register_component("c", nullptr), edl::InvalidArgument);
  CHECK_THROWS_AS(s.sync(), edl::InvalidArgument);  // outside elastic::run
}

TEST_CASE("checkpoint round trip resumes a new State", "[state][checkpoint]") {
  auto dir = temp_dir();
  {
    std::vector<double> w = {0.5, -1.25};
    State s;
    s.register_tensor("w", w.data(), w.size(), DataType::kFloat64);
    s.set_checkpoint_dir(dir);
    s.step = 11;
    s.commit();
  }
  std::vector<double> w2 = {0, 0};
  State s2;
  s2.register_tensor("w", w2.data(), w2.size(), DataType::kFloat64);
  s2.set_checkpoint_dir(dir);
  REQUIRE(s2.load_checkpoint());
  CHECK(w2 == std::vector<double>{0.5, -1.25});
  CHECK(s2.step == 11);
  CHECK(s2.committed_step() == 11);

  State none;
  none.set_checkpoint_dir(dir + "/missing");
  CHECK_FALSE(none.load_checkpoint());
  std::remove(edl::elastic::checkpoint_path(dir).c_str());
  std::remove((edl::elastic::checkpoint_path(dir) + ".lock").c_str());
  rmdir(dir.c_str());
}

namespace {

// A staged blob over `live` whose copy is `copy` (the stand-in of a device-side copy), counting how
// often its copy was made host bytes.
struct Staged {
  std::string live, copy;
  int to_host = 0, copied_back = 0, loaded = 0;
  edl::elastic::StagedBlob blob() {
    return {[this] { copy = live; }, [this] { ++to_host; return copy; }, [this] { ++copied_back; live = copy; },
            [this](const std::string& b) { ++loaded; live = b; }};
  }
};

}  // namespace

TEST_CASE("a staged blob commits and restores without host bytes, which are made only to leave", "[state][checkpoint]") {
  Staged a;
  int64_t n = 0;
  State s;
  s.register_scalar("n", &n);
  edl::elastic::register_staged_blob(s, "dev", a.blob());
  a.live = "committed";
  n = 1;
  s.commit();
  a.live = "later";
  n = 2;
  s.restore();
  CHECK(a.live == "committed");
  CHECK(n == 1);
  CHECK(a.copied_back == 1);
  CHECK(a.to_host == 0);  // commit and restore stayed "on the device"
  // A stop-free state server (or sync) asks for the bytes: made once; restore still takes the copy.
  const auto bytes = edl::elastic::state_commit(s);
  CHECK(a.to_host == 1);
  CHECK(edl::elastic::state_commit(s) == bytes);
  CHECK(bytes->find("committed") != std::string::npos);
  a.live = "later";
  s.restore();
  CHECK(a.live == "committed");
  CHECK(a.copied_back == 2);
  CHECK(a.loaded == 0);
  CHECK(a.to_host == 1);

  // A checkpoint file holds the bytes (made at commit on the writing member) and resumes a new State.
  auto dir = temp_dir();
  {
    Staged b;
    State w;
    edl::elastic::register_staged_blob(w, "dev", b.blob());
    w.set_checkpoint_dir(dir);
    b.live = "on disk";
    w.step = 5;
    w.commit();
    w.flush_checkpoint();
    CHECK(b.to_host == 1);
  }
  Staged c;
  State r;
  edl::elastic::register_staged_blob(r, "dev", c.blob());
  r.set_checkpoint_dir(dir);
  REQUIRE(r.load_checkpoint());
  CHECK(c.live == "on disk");
  CHECK(c.loaded == 1);
  c.live = "later";
  r.restore();  // the last commit came from the file: its bytes, not a copy
  CHECK(c.live == "on disk");
  CHECK(c.copied_back == 0);
  CHECK(r.step == 5);
  std::remove(edl::elastic::checkpoint_path(dir).c_str());
  std::remove((edl::elastic::checkpoint_path(dir) + ".lock").c_str());
  rmdir(dir.c_str());
  CHECK_THROWS_AS(edl::elastic::register_staged_blob(s, "x", edl::elastic::StagedBlob{}), edl::InvalidArgument);
}

TEST_CASE("a corrupt or truncated checkpoint is a DataError naming the file", "[state][checkpoint]") {
  auto dir = temp_dir();
  std::vector<float> w(64, 1.0f);
  State s;
  s.register_tensor("w", w.data(), w.size(), DataType::kFloat32);
  s.set_checkpoint_dir(dir);
  s.commit();
  s.flush_checkpoint();
  auto path = edl::elastic::checkpoint_path(dir);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  SECTION("flipped byte") {
    bytes[bytes.size() - 3] ^= 0x40;
    std::ofstream(path, std::ios::binary) << bytes;
    CHECK_THROWS_WITH(s.load_checkpoint(), Catch::Contains(path) && Catch::Contains("checksum"));
  }
  SECTION("truncated") {
    std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    CHECK_THROWS_WITH(s.load_checkpoint(), Catch::Contains(path) && Catch::Contains("truncated"));
  }
  SECTION("not a checkpoint") {
    std::ofstream(path, std::ios::binary) << "hello";
    CHECK_THROWS_AS(s.load_checkpoint(), edl::DataError);
  }
  SECTION("registration differs") {
    std::vector<float> other(32, 0.0f);
    State s2;
    s2.register_tensor("w", other.data(), other.size(), DataType::kFloat32);
    s2.set_checkpoint_dir(dir);
    CHECK_THROWS_WITH(s2.load_checkpoint(), Catch::Contains("'w' holds 256 bytes but 128 are registered"));
    CHECK(other == std::vector<float>(32, 0.0f));  // nothing half-loaded
  }
  CHECK(w == std::vector<float>(64, 1.0f));
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("a checkpoint that cannot be written is reported and retried, never thrown into training",
          "[state][checkpoint]") {
  char tmpl[] = "/tmp/edl_state_ro_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string parent = tmpl;
  std::string dir = parent + "/ckpt";
  REQUIRE(std::ofstream(dir).good());  // a plain file where the directory should be: every write fails
  int64_t x = 1;
  State s;
  s.register_scalar("x", &x);
  s.set_checkpoint_dir(dir);
  s.commit();  // written in the background
  s.flush_checkpoint();
  CHECK_THAT(s.checkpoint_error(), Catch::Contains(dir));
  x = 2;
  s.step = 1;
  CHECK_NOTHROW(s.commit());  // the failure never reaches training
  CHECK(s.committed_step() == 1);
  // The disk recovers: the retry (or the next commit) lands the newest commit.
  std::remove(dir.c_str());  // the writer's next retry creates the directory and lands the commit
  std::string path = edl::elastic::checkpoint_path(dir);
  for (int i = 0; i < 300 && !std::ifstream(path).good(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  s.flush_checkpoint();
  CHECK(s.checkpoint_error().empty());
  int64_t y = 0;
  State r;
  r.register_scalar("x", &y);
  r.set_checkpoint_dir(dir);
  REQUIRE(r.load_checkpoint());
  CHECK(y == 2);
  CHECK(r.step == 1);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir.c_str());
  rmdir(parent.c_str());
}

TEST_CASE("a checkpoint of an older step never replaces a newer one", "[state][checkpoint]") {
  auto dir = temp_dir();
  std::string payload_new = "new", payload_old = "old";
  CHECK(edl::elastic::write_checkpoint(dir, payload_new, 10));
  CHECK_FALSE(edl::elastic::write_checkpoint(dir, payload_old, 9));  // a slow former rank 0
  std::string path;
  auto got = edl::elastic::read_checkpoint(dir, &path);
  REQUIRE(got.has_value());
  CHECK(*got == "new");
  CHECK(edl::elastic::write_checkpoint(dir, "newer", 11));
  CHECK(*edl::elastic::read_checkpoint(dir, &path) == "newer");
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("a checkpoint of another job or an older lineage is refused, naming the file", "[state][checkpoint]") {
  auto dir = temp_dir();
  std::vector<float> w(4, 1.0f);
  {
    State s;
    s.register_tensor("w", w.data(), w.size(), DataType::kFloat32);
    edl::elastic::state_set_identity(s, "jobA", "lineage1");
    s.set_checkpoint_dir(dir);
    s.step = 3;
    s.commit();
  }
  auto path = edl::elastic::checkpoint_path(dir);
  std::vector<float> v(4, 0.0f);
  SECTION("another job") {
    State s;
    s.register_tensor("w", v.data(), v.size(), DataType::kFloat32);
    edl::elastic::state_set_identity(s, "jobB", "");
    s.set_checkpoint_dir(dir);
    CHECK_THROWS_WITH(s.load_checkpoint(), Catch::Contains(path) && Catch::Contains("'jobA'"));
  }
  SECTION("an older lineage of the same job") {
    State s;
    s.register_tensor("w", v.data(), v.size(), DataType::kFloat32);
    edl::elastic::state_set_identity(s, "jobA", "lineage2");
    s.set_checkpoint_dir(dir);
    CHECK_THROWS_WITH(s.load_checkpoint(), Catch::Contains(path) && Catch::Contains("lineage1"));
  }
  SECTION("the same job and lineage, or a fresh store (no lineage yet): loaded") {
    State s;
    s.register_tensor("w", v.data(), v.size(), DataType::kFloat32);
    edl::elastic::state_set_identity(s, "jobA", "");
    s.set_checkpoint_dir(dir);
    REQUIRE(s.load_checkpoint());
    CHECK(edl::elastic::state_lineage(s) == "lineage1");
    CHECK(s.step == 3);
  }
  CHECK((v == std::vector<float>(4, 0.0f) || v == std::vector<float>(4, 1.0f)));
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir.c_str());
}
