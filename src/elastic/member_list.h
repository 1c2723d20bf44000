// The value of <job>/g<G>/members (docs/elastic.md, keys.h), in one place for the workers'
// membership and edl-run's store watcher: the decided members in rank order, "id host probe [note]
// [mesh=addr:port]" per line (probe: the member's liveness probe "addr:port", "-" for none; older
// lists have "id host"; note and mesh: Member),
// then the decider's record of the change, "#change <reason> <previous size>" (GenerationChange);
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
#include "edl/state.h"

namespace edl::elastic {

struct Member {
  std::string id;
  std::string host;
  std::string probe;  // "addr:port" of its liveness probe (docs/elastic.md), "" when unknown
  // What it reported with its arrival beside its address: the elastic runtime's record of its
  // state's commit (state_sync_note, "State: commit, restore, sync"); "" when none. No spaces.
  std::string note = "";
  // "host:port" of its mesh listener from its arrival (MembershipOptions::mesh_address): the members
  // of the generation dial it directly (CommunicatorOptions::addresses); "" when it published none.
  std::string mesh = "";
};

// The word that carries Member::mesh on a member line and in an arrival: "mesh=<host:port>".
inline constexpr char kMeshTag[] = "mesh=";

// The optional words after the probe of a member line or an arrival: "[<note>] [mesh=<host:port>]".
inline void read_note_and_mesh(std::istream& words, std::string* note, std::string* mesh) {
  for (std::string w; words >> w;) {
    if (w.rfind(kMeshTag, 0) == 0) *mesh = w.substr(sizeof(kMeshTag) - 1);
    else if (note->empty()) *note = w;
  }
}

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

// Why generation G differs from G-1 and the size of G-1, as the decider of G saw it when it published
// G: every member of G reads the same (GenerationInfo::reason / previous_size).
struct GenerationChange {
  ChangeReason reason = ChangeReason::kStart;
  int previous_size = 0;
};

// The line that carries a GenerationChange in a members value (worker ids never start with '#').
inline constexpr char kChangeTag[] = "#change ";

inline std::string format_members(const std::vector<Member>& members,
                                  const std::optional<GenerationChange>& change = std::nullopt) {
  std::string out;
  for (const auto& m : members)
    out += m.id + " " + m.host + " " + (m.probe.empty() ? "-" : m.probe) + (m.note.empty() ? "" : " " + m.note) +
           (m.mesh.empty() ? "" : " " + std::string(kMeshTag) + m.mesh) + "\n";
  if (change) out += kChangeTag + std::string(reason_name(change->reason)) + " " + std::to_string(change->previous_size) + "\n";
  return out;
}

// The decider's change record of a members value; nullopt when it has none (a value written by hand, or
// by an EDL that did not publish it) or the record is malformed.
inline std::optional<GenerationChange> parse_change(const std::string& text) {
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.rfind(kChangeTag, 0) != 0) continue;
    std::istringstream fields(line.substr(sizeof(kChangeTag) - 1));
    std::string word;
    GenerationChange c;
    if (!(fields >> word >> c.previous_size) || c.previous_size < 0) return std::nullopt;
    for (auto r : {ChangeReason::kStart, ChangeReason::kJoin, ChangeReason::kLeave, ChangeReason::kFailure,
                   ChangeReason::kEviction}) {
      if (word != reason_name(r)) continue;
      c.reason = r;
      return c;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// The member lines of a members value, in rank order (the change record is not a member).
inline std::vector<Member> parse_members(const std::string& text) {
  std::vector<Member> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Member m;
    words >> m.id >> m.host >> m.probe;
    read_note_and_mesh(words, &m.note, &m.mesh);
    if (m.probe == "-") m.probe.clear();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace edl::elastic
