#include "progress.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace edl::trainer {

Progress::Progress(int epochs, uint64_t records_per_epoch) : epochs_(epochs), records_(records_per_epoch) {}

void Progress::step(bool talk, int64_t epoch, double records, double loss, double acc) {
  if (epoch != epoch_) {
    epoch_ = epoch;
    tenth_ = 0;
    start_ = std::chrono::steady_clock::now();
  }
  int tenth = records_ ? static_cast<int>(10.0 * records / static_cast<double>(records_)) : 0;
  if (tenth > tenth_ && tenth < 10) {
    tenth_ = tenth;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (talk) print(epoch, records, loss, acc, s > 0 ? records / s : 0.0, -1.0, 0, false);
  }
}

double Progress::end_epoch(bool talk, int64_t epoch, double records, double loss, double acc, double test_acc,
                           int workers) {
  double s = epoch == epoch_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() : 0.0;
  double ips = s > 0 ? records / s : 0.0;
  if (talk) print(epoch, records, loss, acc, ips, test_acc, workers, true);
  epoch_ = -1;
  return ips;
}

void Progress::print(int64_t epoch, double records, double loss, double acc, double ips, double test_acc, int workers,
                     bool final) const {
  const int kWidth = 20;
  double frac = records_ ? std::min(1.0, records / static_cast<double>(records_)) : 1.0;
  int filled = static_cast<int>(frac * kWidth + 0.5);
  std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '-');
  char tail[128] = "";
  if (final && test_acc >= 0) std::snprintf(tail, sizeof(tail), "  test acc %.2f%%", 100.0 * test_acc);
  char who[32] = "";
  if (final) std::snprintf(who, sizeof(who), "  (%d worker%s)", workers, workers == 1 ? "" : "s");
  std::printf("epoch %lld/%d [%s] %.0f/%llu records  %.0f img/s  loss %.4f  acc %.2f%%%s%s\n",
              static_cast<long long>(epoch + 1), epochs_, bar.c_str(), records, static_cast<unsigned long long>(records_),
              ips, loss, 100.0 * acc, tail, who);
  std::fflush(stdout);
}

}  // namespace edl::trainer
