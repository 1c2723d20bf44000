// Keys: the store key layout of the elastic protocol (docs/elastic.md, "Store keys").
//
//   <job>/gen                  latest decided generation G (decimal), advanced monotonically by CAS
//   <job>/finished             set when training finished (late joiners leave quietly)
//   <job>/failed               the reason the job failed for good (user error, mismatch): no restart
//   <job>/lineage              "<lineage id>": the history the job's commits belong to (members of a fresh start)
//   <job>/checkpoint           "<lineage> <step>": the newest checkpoint file written (its writer)
//   <job>/seq                  counter: arrival order across rounds (newcomers are appended in this order)
//   <job>/lease/<worker>       liveness lease "<beat> <host> <wall ms> <probe>", refreshed every heartbeat, expires after lease
//   <job>/g<G>/n               arrivals counter of the round that forms generation G
//   <job>/g<G>/in/<worker>     arrival of <worker> at round G: "<seq> <host> <probe addr:port>"
//   <job>/g<G>/decider         worker deciding round G (compare_set from absent; taken over if its lease dies)
//   <job>/g<G>/members         decided members of G, rank order, "id host probe" per line (write-once via CAS);
//                              or "!job-error <reason>" when the job cannot go on (member_list.h)
//   <job>/g<G>/event           counter bumped to wake the members of G (join request or abort)
//   <job>/g<G>/abort           reason G was aborted (first writer wins)
//   <job>/g<G>/left/<worker>   <worker> leaves gracefully at the agreed batch boundary of G
//   <job>/g<G>/c/...           the Communicator's bootstrap keys for G
//   <job>/g<G>/lineage         the lineage agreed by the members of G when G starts a new one
//   <job>/g<G>/dropped/<w>     why member <w> of G-1 was left out of G (dead, or alive but stuck, or a straggler)
//   <job>/throughput           "<G> <size> <steps> <seconds> <local batch>": rank 0's measured rate in G
//   <job>/straggler/<w>        the latest straggler report about worker <w> (straggler.h), rank 0 writes
// Thread-safety: immutable value.
#pragma once

#include <cstdint>
#include <string>

namespace edl::elastic {

class Keys {
 public:
  explicit Keys(const std::string& job) : j_(job + "/") {}
  std::string gen() const { return j_ + "gen"; }
  std::string finished() const { return j_ + "finished"; }
  std::string failed() const { return j_ + "failed"; }
  std::string lineage() const { return j_ + "lineage"; }
  std::string checkpoint() const { return j_ + "checkpoint"; }
  std::string seq() const { return j_ + "seq"; }
  std::string lease_prefix() const { return j_ + "lease/"; }
  std::string lease(const std::string& w) const { return lease_prefix() + w; }
  std::string g(uint64_t gen) const { return j_ + "g" + std::to_string(gen) + "/"; }
  std::string count(uint64_t gen) const { return g(gen) + "n"; }
  std::string in_prefix(uint64_t gen) const { return g(gen) + "in/"; }
  std::string in(uint64_t gen, const std::string& w) const { return in_prefix(gen) + w; }
  std::string decider(uint64_t gen) const { return g(gen) + "decider"; }
  std::string members(uint64_t gen) const { return g(gen) + "members"; }
  std::string event(uint64_t gen) const { return g(gen) + "event"; }
  std::string abort(uint64_t gen) const { return g(gen) + "abort"; }
  std::string left_prefix(uint64_t gen) const { return g(gen) + "left/"; }
  std::string left(uint64_t gen, const std::string& w) const { return left_prefix(gen) + w; }
  std::string comm_prefix(uint64_t gen) const { return g(gen) + "c/"; }
  std::string lineage_of(uint64_t gen) const { return g(gen) + "lineage"; }
  std::string dropped(uint64_t gen, const std::string& w) const { return g(gen) + "dropped/" + w; }
  std::string throughput() const { return j_ + "throughput"; }
  std::string straggler_prefix() const { return j_ + "straggler/"; }
  std::string straggler(const std::string& w) const { return straggler_prefix() + w; }

 private:
  std::string j_;
};

}  // namespace edl::elastic
