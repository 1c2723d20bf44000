// Dataset readers against known bytes, and every bad-input case (tests/data/test_files.h writes the files).
#include <catch2/catch.hpp>

#include "data/test_files.h"
#include "edl/data.h"
#include "edl/error.h"
#include "testing/require_dep.h"

using namespace edl::data;
using edl::test::TempDir;
using Catch::Matchers::Contains;

namespace {

// 3 images of 2x3 pixels: image i has pixels 10*i + j.
std::vector<uint8_t> known_pixels() {
  std::vector<uint8_t> p;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 6; ++j) p.push_back(static_cast<uint8_t>(10 * i + j));
  return p;
}

void write_idx_pair(const TempDir& dir, bool gz, const std::vector<uint8_t>& images, const std::vector<uint8_t>& labels) {
  auto maybe = [&](const std::vector<uint8_t>& b) { return gz ? edl::test::gzip_bytes(b) : b; };
  edl::test::write_bytes(dir.file("img"), maybe(images));
  edl::test::write_bytes(dir.file("lab"), maybe(labels));
}

}  // namespace

TEST_CASE("IDX reader returns the known bytes, plain and gzip", "[data][reader]") {
  for (bool gz : {false, true}) {
    TempDir dir;
    write_idx_pair(dir, gz, edl::test::idx_images(3, 2, 3, known_pixels()), edl::test::idx_labels({4, 0, 9}));
    auto ds = open_idx(dir.file("img"), dir.file("lab"));
    REQUIRE(ds->size() == 3);
    CHECK(ds->shape().channels == 1);
    CHECK(ds->shape().height == 2);
    CHECK(ds->shape().width == 3);
    CHECK(ds->num_classes() == 10);
    CHECK(ds->label(0) == 4);
    CHECK(ds->label(1) == 0);
    CHECK(ds->label(2) == 9);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 6; ++j) CHECK(ds->pixels(i)[j] == 10 * i + j);
    CHECK_THROWS_AS(ds->pixels(3), edl::InvalidArgument);
    CHECK_THROWS_AS(ds->label(3), edl::InvalidArgument);
  }
}

TEST_CASE("IDX reader rejects bad input with the file and the problem", "[data][reader][bad-input]") {
  TempDir dir;
  const auto images = edl::test::idx_images(3, 2, 3, known_pixels());
  const auto labels = edl::test::idx_labels({4, 0, 9});

  SECTION("missing file") {
    edl::test::write_bytes(dir.file("lab"), labels);
    CHECK_THROWS_MATCHES(open_idx(dir.file("nope"), dir.file("lab")), edl::DataError,
                         Catch::Matchers::Predicate<edl::DataError>([&](const edl::DataError& e) {
                           std::string w = e.what();
                           return w.find(dir.file("nope")) != std::string::npos && w.find("cannot open") != std::string::npos;
                         }));
  }
  SECTION("wrong magic") {
    auto bad = images;
    bad[3] = 0x01;  // a label file's magic where an image file is expected
    write_idx_pair(dir, false, bad, labels);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")),
                      Contains(dir.file("img")) && Contains("wrong magic number 0x00000801") && Contains("0x00000803"));
  }
  SECTION("truncated data") {
    auto bad = images;
    bad.resize(bad.size() - 1);
    write_idx_pair(dir, false, bad, labels);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains(dir.file("img")) && Contains("truncated"));
  }
  SECTION("truncated header") {
    write_idx_pair(dir, false, std::vector<uint8_t>(images.begin(), images.begin() + 7), labels);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains("truncated IDX header"));
  }
  SECTION("trailing garbage") {
    auto bad = labels;
    bad.push_back(1);
    write_idx_pair(dir, false, images, bad);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains(dir.file("lab")) && Contains("1 bytes after"));
  }
  SECTION("images / labels count mismatch") {
    write_idx_pair(dir, false, images, edl::test::idx_labels({4, 0}));
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains("has 3 images but") && Contains("has 2 labels"));
  }
  SECTION("label out of range") {
    write_idx_pair(dir, true, images, edl::test::idx_labels({4, 10, 9}));
    CHECK_THROWS_AS(open_idx(dir.file("img"), dir.file("lab")), edl::DataError);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")),
                      Contains(dir.file("lab")) && Contains("label 10 of record 1 is out of range [0, 10)"));
  }
  SECTION("empty dataset") {
    write_idx_pair(dir, true, edl::test::idx_images(0, 2, 3, {}), edl::test::idx_labels({}));
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains("empty dataset"));
  }
  SECTION("truncated gzip") {
    auto gz = edl::test::gzip_bytes(images);
    gz.resize(gz.size() / 2);
    edl::test::write_bytes(dir.file("img"), gz);
    edl::test::write_bytes(dir.file("lab"), labels);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains(dir.file("img")) && Contains("truncated gzip"));
  }
  SECTION("corrupt gzip") {
    std::vector<uint8_t> big;
    for (int i = 0; i < 4000; ++i) big.push_back(static_cast<uint8_t>(i * 31 + (i >> 3)));
    auto gz = edl::test::gzip_bytes(edl::test::idx_images(1, 40, 100, big));
    for (size_t i = 20; i < gz.size() - 8; i += 3) gz[i] ^= 0x5a;  // scramble the deflate stream
    edl::test::write_bytes(dir.file("img"), gz);
    edl::test::write_bytes(dir.file("lab"), edl::test::idx_labels({1}));
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains(dir.file("img")) && Contains("corrupt gzip"));
  }
  SECTION("corrupt gzip checksum") {
    auto gz = edl::test::gzip_bytes(images);
    gz[gz.size() - 6] ^= 0xff;  // CRC32 of the trailer
    edl::test::write_bytes(dir.file("img"), gz);
    edl::test::write_bytes(dir.file("lab"), labels);
    CHECK_THROWS_WITH(open_idx(dir.file("img"), dir.file("lab")), Contains("corrupt gzip") && Contains("check"));
  }
  SECTION("bad num_classes") {
    write_idx_pair(dir, false, images, labels);
    CHECK_THROWS_AS(open_idx(dir.file("img"), dir.file("lab"), 0), edl::InvalidArgument);
  }
}

TEST_CASE("CIFAR-10 reader returns the known bytes across files", "[data][reader]") {
  TempDir dir;
  edl::test::write_bytes(dir.file("a.bin"), edl::test::cifar_records({3, 7}, 0));
  edl::test::write_bytes(dir.file("b.bin.gz"), edl::test::gzip_bytes(edl::test::cifar_records({9}, 2)));
  auto ds = open_cifar10({dir.file("a.bin"), dir.file("b.bin.gz")});
  REQUIRE(ds->size() == 3);
  CHECK(ds->shape().channels == 3);
  CHECK(ds->shape().height == 32);
  CHECK(ds->shape().width == 32);
  CHECK(ds->label(0) == 3);
  CHECK(ds->label(1) == 7);
  CHECK(ds->label(2) == 9);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 3072; j += 97) CHECK(ds->pixels(r)[j] == (r * 7 + j) % 256);
}

TEST_CASE("CIFAR-10 reader rejects bad input", "[data][reader][bad-input]") {
  TempDir dir;
  SECTION("truncated") {
    auto b = edl::test::cifar_records({1, 2});
    b.resize(b.size() - 100);
    edl::test::write_bytes(dir.file("t.bin"), b);
    CHECK_THROWS_WITH(open_cifar10({dir.file("t.bin")}), Contains(dir.file("t.bin")) && Contains("truncated CIFAR-10"));
  }
  SECTION("label out of range") {
    edl::test::write_bytes(dir.file("l.bin"), edl::test::cifar_records({1, 2, 10}));
    CHECK_THROWS_WITH(open_cifar10({dir.file("l.bin")}), Contains(dir.file("l.bin")) && Contains("label 10 of record 2"));
  }
  SECTION("empty") {
    edl::test::write_bytes(dir.file("e.bin"), {});
    CHECK_THROWS_WITH(open_cifar10({dir.file("e.bin")}), Contains("empty dataset"));
  }
  SECTION("missing") { CHECK_THROWS_WITH(open_cifar10({dir.file("m.bin")}), Contains(dir.file("m.bin"))); }
  SECTION("no files") { CHECK_THROWS_AS(open_cifar10({}), edl::InvalidArgument); }
}

TEST_CASE("synthetic dataset is deterministic and learnable", "[data][reader]") {
  SyntheticOptions o;
  o.records = 600;
  o.shape = {1, 8, 8};
  o.seed = 42;
  auto a = make_synthetic(o), b = make_synthetic(o);
  o.seed = 43;
  auto c = make_synthetic(o);
  size_t differ = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    REQUIRE(a->label(i) == b->label(i));
    REQUIRE(std::equal(a->pixels(i), a->pixels(i) + 64, b->pixels(i)));
    differ += !std::equal(a->pixels(i), a->pixels(i) + 64, c->pixels(i));
  }
  CHECK(differ > 500);
  // Learnable: a nearest-class-mean classifier fit on the first half scores well on the second half.
  std::vector<std::vector<double>> mean(10, std::vector<double>(64, 0.0));
  std::vector<int> count(10, 0);
  for (size_t i = 0; i < 300; ++i) {
    ++count[a->label(i)];
    for (int j = 0; j < 64; ++j) mean[a->label(i)][j] += a->pixels(i)[j];
  }
  for (int k = 0; k < 10; ++k)
    for (auto& v : mean[k]) v /= std::max(1, count[k]);
  int correct = 0;
  for (size_t i = 300; i < 600; ++i) {
    int best = 0;
    double best_d = 1e300;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (int j = 0; j < 64; ++j) d += (a->pixels(i)[j] - mean[k][j]) * (a->pixels(i)[j] - mean[k][j]);
      if (count[k] && d < best_d) best_d = d, best = k;
    }
    correct += best == a->label(i);
  }
  CHECK(correct > 270);
  SyntheticOptions bad;
  bad.records = 0;
  CHECK_THROWS_AS(make_synthetic(bad), edl::InvalidArgument);
}

TEST_CASE("real Fashion-MNIST smoke read", "[data][reader][fashion-mnist]") {
  const bool installed = access((std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz").c_str(), R_OK) == 0;
  if (!edl::testing::require_dep("Fashion-MNIST", installed,
                                 std::string("nothing under ") + kFashionMnistDir + " (Debian package dataset-fashion-mnist)"))
    return;
  auto train = open_fashion_mnist(kFashionMnistDir, true);
  auto test = open_fashion_mnist(kFashionMnistDir, false);
  CHECK(train->size() == 60000);
  CHECK(test->size() == 10000);
  CHECK(train->shape().height == 28);
  CHECK(train->shape().width == 28);
  // Known values of the published files.
  CHECK(train->label(0) == 9);
  CHECK(train->label(3) == 3);
  CHECK(test->label(1) == 2);
  long sum = 0;
  for (int j = 0; j < 784; ++j) sum += train->pixels(0)[j];
  CHECK(sum == 76247);
}

TEST_CASE("randomly corrupted IDX files give DataError or a consistent dataset, never a crash", "[data][reader][bad-input]") {
  TempDir dir;
  const auto images = edl::test::idx_images(3, 2, 3, known_pixels());
  const auto labels = edl::test::idx_labels({4, 0, 9});
  const auto gz_images = edl::test::gzip_bytes(images);
  uint64_t state = 12345;
  auto rnd = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
  int rejected = 0, accepted = 0;
  for (int i = 0; i < 400; ++i) {
    auto img = (i % 2) ? gz_images : images;
    int edits = 1 + static_cast<int>(rnd() % 3);
    for (int e = 0; e < edits; ++e) {
      switch (rnd() % 3) {
        case 0: img[rnd() % img.size()] ^= static_cast<uint8_t>(1 + rnd() % 255); break;
        case 1: img.resize(rnd() % img.size()); break;
        default: img.push_back(static_cast<uint8_t>(rnd())); break;
      }
      if (img.empty()) break;
    }
    edl::test::write_bytes(dir.file("img"), img);
    edl::test::write_bytes(dir.file("lab"), labels);
    try {
      auto ds = open_idx(dir.file("img"), dir.file("lab"));
      // Accepted: then it is self-consistent (every record readable, labels in range).
      REQUIRE(ds->size() == 3);
      for (size_t r = 0; r < ds->size(); ++r) {
        REQUIRE(ds->label(r) >= 0);
        REQUIRE(ds->label(r) < 10);
        (void)ds->pixels(r)[ds->shape().pixels() - 1];
      }
      ++accepted;
    } catch (const edl::DataError& e) {
      REQUIRE(std::string(e.what()).find(dir.file("img")) != std::string::npos);
      ++rejected;
    }
  }
  CHECK(rejected > 300);
  CHECK(accepted > 0);  // flipped pixel bytes are not detectable in a plain IDX file
}
