// The value of <job>/g<G>/members (docs/elastic.md, keys.h), in one place for the workers'
// membership and edl-run's store watcher: the decided members in rank order, "id host probe" per
// line (probe: the member's liveness probe "addr:port", "-" for none; older lists have "id host"),
// or kJobErrorTag + reason when the job cannot go on. Also the decimal values (<job>/gen, <job>/seq,
// arrival sequence numbers): parse_store_int.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "edl/error.h"

namespace edl::elastic {

struct Member {
  std::string id;
  std::string host;
  std::string probe;  // "addr:port" of its liveness probe (docs/elastic.md), "" when unknown
};

// Prefix of a members value that carries a job error instead of a member list.
inline constexpr char kJobErrorTag[] = "!job-error ";

// The members value that carries `reason` as a job error.
inline std::string format_job_error(const std::string& reason) { return kJobErrorTag + reason; }

// The reason a members value carries as a job error; nullopt when it is a member list.
inline std::optional<std::string> parse_job_error(const std::string& value) {
  if (value.rfind(kJobErrorTag, 0) != 0) return std::nullopt;
  return value.substr(sizeof(kJobErrorTag) - 1);
}

// A decimal store value (<job>/gen, <job>/seq, an arrival's sequence number); an absent key is 0.
// Throws StoreError naming the value when it is not a number.
inline int64_t parse_store_int(const std::optional<std::string>& v) {
  if (!v) return 0;
  try {
    return std::stoll(*v);
  } catch (const std::exception&) {
    throw StoreError("elastic: store value '" + *v + "' is not a number");
  }
}

inline std::string format_members(const std::vector<Member>& members) {
  std::string out;
  for (const auto& m : members) out += m.id + " " + m.host + " " + (m.probe.empty() ? "-" : m.probe) + "\n";
  return out;
}

inline std::vector<Member> parse_members(const std::string& text) {
  std::vector<Member> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.empty()) continue;
    std::istringstream words(line);
    Member m;
    words >> m.id >> m.host >> m.probe;
    if (m.probe == "-") m.probe.clear();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace edl::elastic
