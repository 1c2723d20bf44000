#include "launcher/binding.h"

#include <sched.h>

#include <stdexcept>

#include "edl/error.h"

namespace edl::launcher {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> cpus_for_slot(const std::string& mode, int slot, int slots, const std::vector<int>& cpus) {
  if (mode != "none" && mode != "core" && mode != "auto")
    throw InvalidArgument("--bind-to must be none, core or auto, got '" + mode + "'");
  if (mode == "none" || slots <= 0 || cpus.empty()) return {};
  const int n = static_cast<int>(cpus.size());
  if (slots > n) {
    if (mode == "core")
      throw InvalidArgument("--bind-to core: " + std::to_string(slots) + " worker slots but only " +
                                  std::to_string(n) + " CPUs to bind them to (use --bind-to auto or none)");
    return {};
  }
  if (slot < 0 || slot >= slots) return {};  // a slot beyond the planned ones: leave it unbound
  const int k = n / slots;
  return std::vector<int>(cpus.begin() + slot * k, cpus.begin() + (slot + 1) * k);
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s.empty() ? "-" : s;
}

}  // namespace edl::launcher
