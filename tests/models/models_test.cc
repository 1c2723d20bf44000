#include <random>
#include <set>

#include "models/common/sgd.h"
#include "models/grad_check.h"
#include "models/mobilenetv2/mobilenetv2.h"
#include "models/resnet20/resnet20.h"

namespace edl::models {
namespace {

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Batch random_batch(const ModelConfig& c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.images.resize(static_cast<size_t>(n) * c.channels * c.height * c.width);
  test::fill_uniform(b.images.data(), b.images.size(), rng);
  std::uniform_int_distribution<int32_t> label(0, c.classes - 1);
  for (int i = 0; i < n; ++i) b.labels.push_back(label(rng));
  return b;
}

void check_registry(Model& m, size_t params, size_t tensors, size_t buffers) {
  auto ps = m.parameters();
  CHECK(m.parameter_count() == params);
  CHECK(ps.size() == tensors);
  CHECK(m.buffers().size() == buffers);
  std::set<std::string> names;
  size_t total = 0;
  for (const ParamRef& p : ps) {
    names.insert(p.name);
    total += p.count;
    CHECK(p.data != nullptr);
    CHECK(p.grad != nullptr);
  }
  CHECK(names.size() == ps.size());
  CHECK(total == params);
}

// backward() reports every parameter exactly once, in reverse registration order.
void check_ready_order(Model& m, const Batch& b, int n) {
  m.forward(b.images.data(), b.labels.data(), n, true);
  std::vector<size_t> order;
  m.backward([&](size_t i) { order.push_back(i); });
  const size_t count = m.parameters().size();
  REQUIRE(order.size() == count);
  for (size_t i = 0; i < count; ++i) CHECK(order[i] == count - 1 - i);
}

TEST_CASE("ResNet20 has 269,722 parameters in 59 tensors", "[models][resnet20]") {
  ResNet20 m;
  check_registry(m, 269722, 59, 38);
  auto ps = m.parameters();
  CHECK(ps.front().name == "conv1.weight");
  CHECK(ps[3].name == "layer1.0.conv1.weight");
  CHECK(ps.back().name == "linear.bias");
  ResNet20 mnist({1, 28, 28, 10});
  CHECK(mnist.parameter_count() == 269722 - 2 * 9 * 16);
}

TEST_CASE("MobileNetV2 has 2,236,682 parameters in 158 tensors", "[models][mobilenetv2]") {
  MobileNetV2 m;
  check_registry(m, 2236682, 158, 104);
  auto ps = m.parameters();
  CHECK(ps.front().name == "features.0.0.weight");
  CHECK(ps[3].name == "features.1.conv.0.0.weight");
  CHECK(ps.back().name == "classifier.1.bias");
}

TEST_CASE("Models report gradients in reverse order and run 1x28x28 inputs", "[models]") {
  ModelConfig fm{1, 28, 28, 10};
  Batch b = random_batch(fm, 3, 1);
  ResNet20 r(fm);
  check_ready_order(r, b, 3);
  CHECK(r.logits().shape() == Shape{3, 1, 1, 10});
  MobileNetV2 mb(fm);
  check_ready_order(mb, b, 3);
  std::vector<int32_t> cls(3);
  mb.predict(b.images.data(), 3, cls.data());
  for (int32_t c : cls) CHECK((c >= 0 && c < 10));
}

TEST_CASE("ResNet20 whole-model gradient matches finite differences", "[models][resnet20][gradcheck]") {
  ModelConfig c{2, 8, 8, 10};
  ResNet20 m(c);
  Batch b = random_batch(c, 16, 2);
  m.forward(b.images.data(), b.labels.data(), 16, true);
  m.backward();
  auto loss = [&] { return static_cast<double>(m.forward(b.images.data(), b.labels.data(), 16, true).loss); };
  auto ps = m.parameters();
  // First conv, a mid-network BN, a stage-3 conv and the classifier. The network is piecewise smooth
  // (ReLU kinks, batch statistics), so the step must be small; float loss noise sets atol.
  for (size_t i : {size_t(0), size_t(1), size_t(20), size_t(52), size_t(57), size_t(58)}) {
    test::check_gradient(ps[i].name.c_str(), ps[i].data, ps[i].grad, ps[i].count, loss, {5e-4, 1.5e-3, 5e-2}, 12, 1);
  }
}

TEST_CASE("Two threads give the same loss and gradients as one", "[models][threads]") {
  ModelConfig c{3, 16, 16, 10};
  Batch b = random_batch(c, 6, 3);
  MobileNetV2 one(c), two(c);
  two.set_threads(2);
  LossResult l1 = one.forward(b.images.data(), b.labels.data(), 6, true);
  LossResult l2 = two.forward(b.images.data(), b.labels.data(), 6, true);
  CHECK(l1.loss == Approx(l2.loss).epsilon(1e-5));
  CHECK(l1.correct == l2.correct);
  one.backward();
  two.backward();
  auto p1 = one.parameters(), p2 = two.parameters();
  for (size_t i = 0; i < p1.size(); ++i) {
    INFO(p1[i].name);
    double n1 = 0, diff = 0;
    for (size_t j = 0; j < p1[i].count; ++j) {
      n1 += double(p1[i].grad[j]) * p1[i].grad[j];
      diff += double(p1[i].grad[j] - p2[i].grad[j]) * (p1[i].grad[j] - p2[i].grad[j]);
    }
    CHECK(diff <= 1e-6 * n1 + 1e-12);
  }
}

template <typename M>
void check_training_reduces_loss(ModelConfig c, int steps, float lr) {
  M m(c);  // one thread: thread equivalence is its own test, and this one stays fast on a busy machine
  Batch b = random_batch(c, 16, 4);
  SgdMomentum sgd(m.parameters(), {lr, 0.9f, 0.0f});
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    LossResult r = m.forward(b.images.data(), b.labels.data(), 16, true);
    if (s == 0) first = r.loss;
    last = r.loss;
    m.backward();
    sgd.step();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.5f * first);
  // Eval mode after training still predicts most of the memorised batch.
  std::vector<int32_t> cls(16);
  for (int s = 0; s < 40; ++s) m.forward(b.images.data(), b.labels.data(), 16, true);  // settle running stats
  m.predict(b.images.data(), 16, cls.data());
  int correct = 0;
  for (int i = 0; i < 16; ++i) correct += cls[i] == b.labels[i];
  CHECK(correct >= 8);
}

TEST_CASE("SGD momentum memorises a small batch", "[models][training]") {
  SECTION("resnet20") { check_training_reduces_loss<ResNet20>({3, 16, 16, 10}, 30, 0.05f); }
  SECTION("mobilenetv2") { check_training_reduces_loss<MobileNetV2>({3, 16, 16, 10}, 30, 0.05f); }
}

}  // namespace
}  // namespace edl::models
