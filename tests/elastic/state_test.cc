// State: registration, commit / restore, snapshots, checkpoint files (atomic, checksummed).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "edl/error.h"
#include "edl/state.h"
#include "elastic/checkpoint.h"

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
  rmdir(dir.c_str());
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
  rmdir(dir.c_str());
}

TEST_CASE("a checkpoint that cannot be written is a DataError at the next commit", "[state][checkpoint]") {
  int64_t x = 1;
  State s;
  s.register_scalar("x", &x);
  s.set_checkpoint_dir("/proc/edl-no-such-dir");
  s.commit();  // written in the background
  s.flush_checkpoint();
  CHECK_THROWS_WITH(s.commit(), Catch::Contains("/proc/edl-no-such-dir"));
  CHECK(s.committed_step() == 0);  // the in-memory commit itself happened
}
