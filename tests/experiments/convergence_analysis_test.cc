// Experiment 3's analysis (experiments/convergence_analysis.h): resize plans, loss-log rows, resize
// detection and the loss spike of each resize.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "convergence_analysis.h"

namespace cv = edl::bench::convergence;

namespace {

// A series with `workers[i]` workers and loss `loss[i]` at step i + 1.
std::vector<cv::LossPoint> series(const std::vector<int>& workers, const std::vector<double>& loss) {
  std::vector<cv::LossPoint> s;
  for (size_t i = 0; i < workers.size(); ++i)
    s.push_back({static_cast<int64_t>(i + 1), 0.01 * static_cast<double>(i + 1), loss[i], workers[i]});
  return s;
}

}  // namespace

TEST_CASE("resize plan: parsing and the worker count due at a progress", "[experiments][convergence]") {
  auto plan = cv::parse_resize_plan("0.5:3,2.5:2", 1);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].at == Approx(0.5));
  CHECK(plan[0].workers == 3);
  CHECK(plan[1].at == Approx(2.5));
  CHECK(plan[1].workers == 2);
  CHECK(cv::workers_due(plan, 1, 0.0) == 1);
  CHECK(cv::workers_due(plan, 1, 0.4999) == 1);
  CHECK(cv::workers_due(plan, 1, 0.5) == 3);
  CHECK(cv::workers_due(plan, 1, 2.4) == 3);
  CHECK(cv::workers_due(plan, 1, 2.5) == 2);
  CHECK(cv::workers_due(plan, 1, 9.0) == 2);
  CHECK(cv::parse_resize_plan("", 2).empty());
  CHECK(cv::workers_due({}, 2, 5.0) == 2);
}

TEST_CASE("resize plan: bad plans are rejected with the element named", "[experiments][convergence]") {
  auto message = [](const std::string& text, int start) {
    try {
      cv::parse_resize_plan(text, start);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(message("0.5", 1), Catch::Contains("'0.5'"));
  CHECK_THAT(message("x:3", 1), Catch::Contains("'x:3'"));
  CHECK_THAT(message("0.5:3x", 1), Catch::Contains("'0.5:3x'"));
  CHECK_THAT(message("-1:3", 1), Catch::Contains(">= 0"));
  CHECK_THAT(message("0.5:0", 1), Catch::Contains("workers must be >= 1"));
  CHECK_THAT(message("1:3,0.5:2", 1), Catch::Contains("increase"));
  CHECK_THAT(message("0.5:1", 1), Catch::Contains("does not change"));
  CHECK_THAT(message("0.5:3,1:3", 1), Catch::Contains("does not change"));
  CHECK_THAT(message("0.5:3", 0), Catch::Contains("start worker count"));
}

TEST_CASE("loss-log rows are parsed, partial and foreign lines are skipped", "[experiments][convergence]") {
  auto p = cv::parse_loss_row(
      R"({"run":"b","step":12,"epoch_progress":0.384,"loss":1.25,"workers":3,"lr":0.15,"momentum_gamma":1.25})");
  REQUIRE(p.has_value());
  CHECK(p->step == 12);
  CHECK(p->epoch_progress == Approx(0.384));
  CHECK(p->loss == Approx(1.25));
  CHECK(p->workers == 3);
  CHECK_FALSE(cv::parse_loss_row("").has_value());
  CHECK_FALSE(cv::parse_loss_row(R"({"run":"b","step":12,"epoch_prog)").has_value());  // a line still being written
  CHECK_FALSE(cv::parse_loss_row(R"({"run":"b","epoch":1,"test_acc":0.8})").has_value());
  CHECK_FALSE(cv::parse_loss_row(R"({"step":"12","epoch_progress":0.1,"loss":1,"workers":1})").has_value());
}

TEST_CASE("normalize orders by step and keeps the redone step's last row", "[experiments][convergence]") {
  std::vector<cv::LossPoint> s = {{1, 0.1, 2.0, 2}, {2, 0.2, 1.9, 2}, {3, 0.3, 1.8, 2},
                                  {3, 0.3, 1.7, 1}, {2, 0.2, 1.6, 1}, {4, 0.4, 1.5, 1}};  // rollback to step 1
  auto n = cv::normalize(s);
  REQUIRE(n.size() == 4);
  CHECK(n[0].step == 1);
  CHECK(n[1].loss == Approx(1.6));
  CHECK(n[2].loss == Approx(1.7));
  CHECK(n[3].step == 4);
  // The rollback's own size change is what remains visible: one resize 2 -> 1 at step 2.
  auto ev = cv::detect_resizes(n);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].step == 2);
  CHECK(ev[0].from_workers == 2);
  CHECK(ev[0].to_workers == 1);
}

TEST_CASE("resizes are found where the worker count changes", "[experiments][convergence]") {
  auto s = series({1, 1, 1, 3, 3, 3, 3, 2, 2}, std::vector<double>(9, 1.0));
  auto ev = cv::detect_resizes(s);
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].index == 3);
  CHECK(ev[0].from_workers == 1);
  CHECK(ev[0].to_workers == 3);
  CHECK(ev[0].step == 4);
  CHECK(ev[0].epoch_progress == Approx(0.04));
  CHECK(ev[1].index == 7);
  CHECK(ev[1].from_workers == 3);
  CHECK(ev[1].to_workers == 2);
  CHECK(cv::detect_resizes(series({2, 2, 2}, {1, 1, 1})).empty());
  CHECK(cv::detect_resizes({}).empty());
}

TEST_CASE("spike = mean of W steps after the change minus mean of W before", "[experiments][convergence]") {
  //                       before (W=2): 1.0, 0.8        after: 1.6, 1.2
  auto s = series({1, 1, 1, 1, 3, 3, 3, 3}, {2.0, 1.5, 1.0, 0.8, 1.6, 1.2, 0.9, 0.7});
  auto k = cv::spikes(s, 2);
  REQUIRE(k.size() == 1);
  CHECK(k[0].loss_before == Approx(0.9));
  CHECK(k[0].loss_after == Approx(1.4));
  CHECK(k[0].spike == Approx(0.5));
  CHECK(k[0].steps_before == 2);
  CHECK(k[0].steps_after == 2);
  // A falling loss gives a negative spike.
  auto d = cv::spikes(series({2, 2, 3, 3}, {1.0, 1.0, 0.5, 0.7}), 4);
  REQUIRE(d.size() == 1);
  CHECK(d[0].spike == Approx(-0.4));
  CHECK(d[0].steps_before == 2);  // clipped at the start of the series
  CHECK(d[0].steps_after == 2);   // clipped at its end
}

TEST_CASE("spike windows stop at the neighbouring resizes", "[experiments][convergence]") {
  // Events at index 3 (1 -> 3) and 5 (3 -> 2); W = 10 would otherwise overlap.
  auto s = series({1, 1, 1, 3, 3, 2, 2, 2}, {1.0, 1.0, 1.0, 2.0, 4.0, 0.5, 0.5, 0.5});
  auto k = cv::spikes(s, 10);
  REQUIRE(k.size() == 2);
  CHECK(k[0].steps_before == 3);
  CHECK(k[0].steps_after == 2);
  CHECK(k[0].spike == Approx(2.0));   // (2 + 4) / 2 - 1
  CHECK(k[1].steps_before == 2);
  CHECK(k[1].steps_after == 3);
  CHECK(k[1].spike == Approx(-2.5));  // 0.5 - 3
  CHECK_THROWS_AS(cv::spikes(s, 0), std::invalid_argument);
}

TEST_CASE("paired difference: the same steps of two runs from a resize", "[experiments][convergence]") {
  auto a = series({1, 1, 3, 3, 3, 2, 2}, {1.0, 1.0, 0.5, 0.7, 0.9, 0.4, 0.4});
  auto b = series({1, 1, 3, 3, 3, 3, 2}, {1.0, 1.0, 0.6, 0.6, 1.0, 0.5, 0.3});  // b shrinks a step later
  auto d = cv::paired_difference(a, b, 3, 3);  // steps 3..5
  CHECK(d.n == 3);
  CHECK(d.mean == Approx((-0.1 + 0.1 - 0.1) / 3));
  CHECK(d.below == 2);
  CHECK(d.sd > 0);
  auto two = cv::paired_difference(a, b, 3, 2);  // the window bounds it
  CHECK(two.n == 2);
  CHECK(two.mean == Approx(0.0).margin(1e-12));
  auto all = cv::paired_difference(a, b, 3, 10);  // runs past a's next resize: steps 3..7
  CHECK(all.n == 5);
  CHECK(all.mean == Approx((-0.1 + 0.1 - 0.1 - 0.1 + 0.1) / 5));
  b.erase(b.begin() + 3);  // step 4 missing in b: skipped
  CHECK(cv::paired_difference(a, b, 3, 3).n == 2);
  CHECK_THROWS_AS(cv::paired_difference(a, b, 3, 0), std::invalid_argument);
}

TEST_CASE("spike noise: the after-minus-before statistic at every step with full windows", "[experiments][convergence]") {
  // Loss 1 for 4 steps then 0 for 4 steps: with W = 2 the statistic at i = 2..6 is
  // 0, -0.5, -1, -0.5, 0; point i has progress 0.01 * (i + 1).
  // (Built in a loop: GCC 12.2 at -O3 -march=native on this machine miscompiles the initializer list
  // {1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0} into eight 1.0s.)
  std::vector<double> loss;
  for (int i = 0; i < 8; ++i) loss.push_back(i < 4 ? 1.0 : 0.0);
  auto s = series(std::vector<int>(8, 2), loss);
  auto all = cv::spike_noise(s, 2, 0, 1);
  CHECK(all.n == 5);
  CHECK(all.mean == Approx(-0.4));
  CHECK(all.below == 3);
  auto part = cv::spike_noise(s, 2, 0.055, 1);  // i = 5, 6
  CHECK(part.n == 2);
  CHECK(part.mean == Approx(-0.25));
  CHECK(part.sd == Approx(std::sqrt(0.125)));
  CHECK_THROWS_AS(cv::spike_noise(s, 0, 0, 1), std::invalid_argument);
}
