// Hierarchy: host layout, the two child communicators and the hierarchical allreduce (hierarchy.h,
// docs/collectives.md "Hierarchical allreduce").
#include "collective/hierarchy.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "collective/reduce.h"
#include "collective/span_index.h"
#include "collective/tcp_internal.h"
#include "edl/error.h"

namespace edl::collective {

HostLayout HostLayout::of(const std::vector<std::string>& host_of_rank, int rank) {
  HostLayout l;
  std::map<std::string, int> index;
  std::vector<std::vector<int>> members;
  for (int r = 0; r < static_cast<int>(host_of_rank.size()); ++r) {
    auto it = index.find(host_of_rank[r]);
    if (it == index.end()) {
      it = index.emplace(host_of_rank[r], static_cast<int>(members.size())).first;
      members.emplace_back();
      l.host_names.push_back(host_of_rank[r]);
    }
    members[it->second].push_back(r);
  }
  l.hosts = static_cast<int>(members.size());
  l.local_size = static_cast<int>(members.empty() ? 0 : members[0].size());
  for (size_t h = 0; h < members.size(); ++h)
    if (static_cast<int>(members[h].size()) != l.local_size) {
      l.problem = "the hosts have different numbers of ranks ('" + l.host_names[0] + "' " +
                  std::to_string(members[0].size()) + ", '" + l.host_names[h] + "' " +
                  std::to_string(members[h].size()) + ")";
      return l;
    }
  if (l.hosts < 2) {
    l.problem = "all ranks are on one host";
    return l;
  }
  if (l.local_size < 2) {
    l.problem = "every host has one rank (the flat TCP path is the hierarchical one)";
    return l;
  }
  l.host_index = index.at(host_of_rank.at(rank));
  l.local_members = members[l.host_index];
  l.local_rank = static_cast<int>(std::find(l.local_members.begin(), l.local_members.end(), rank) -
                                  l.local_members.begin());
  for (const auto& m : members) l.cross_members.push_back(m[l.local_rank]);
  return l;
}

HostLayout HostLayout::decide(const std::vector<std::string>& host_of_rank, int rank, Hierarchical mode,
                              const std::string& setup, const std::string& hosts) {
  HostLayout l = HostLayout::of(host_of_rank, rank);
  if (l.problem.empty() && mode == Hierarchical::kOff) l.problem = "EDL_HIERARCHICAL=0";
  if (!l.problem.empty() && mode == Hierarchical::kOn)
    throw CommError(setup + ": EDL_HIERARCHICAL=1, but " + l.problem + ": " + hosts);
  return l;
}

std::string default_host_id() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

TransportHello TransportHello::of(const CommunicatorOptions& options) {
  std::string host = options.host_id.empty() ? default_host_id() : options.host_id;
  host.resize(std::min(host.size(), kHostMax));
  TransportHello h{};
  h.magic = kMagic;
  h.transport = static_cast<uint32_t>(options.transport);
  h.hierarchical = static_cast<uint32_t>(options.hierarchical);
  h.loopback = is_loopback_address(options.bind_address) ? 1 : 0;
  h.host_len = static_cast<uint32_t>(host.size());
  std::memcpy(h.host, host.data(), host.size());
  return h;
}

std::unique_ptr<Hierarchy> Hierarchy::build(const std::shared_ptr<Store>& store, const std::string& prefix, int size,
                                            const CommunicatorOptions& options, const HostLayout& layout) {
  std::unique_ptr<Hierarchy> h(new Hierarchy(layout, size));
  CommunicatorOptions lo = options;
  lo.addresses.clear();  // the children meet through the store, each on a listener of its own
  lo.listen_fd = -1;
  lo.transport = Transport::kAuto;  // one host: shared memory (TCP if the segment cannot be shared)
  lo.hierarchical = Hierarchical::kOff;
  h->local_ = TcpCommunicator::connect(store, prefix + "hier/local/" + std::to_string(layout.host_index) + "/",
                                       layout.local_rank, layout.local_size, lo);
  CommunicatorOptions co = lo;
  co.transport = Transport::kTcp;
  co.hierarchical = Hierarchical::kOff;
  h->cross_ = TcpCommunicator::connect(store, prefix + "hier/cross/" + std::to_string(layout.local_rank) + "/",
                                       layout.host_index, layout.hosts, co);
  return h;
}

void Hierarchy::set_tuning(const AlgorithmTuning& t) {
  tuning_ = t;
  if (local_) local_->set_tuning(t);
  if (cross_) cross_->set_tuning(t);
}

void Hierarchy::abort(const std::string& reason) {
  if (local_) local_->abort(reason);
  if (cross_) cross_->abort(reason);
}

void Hierarchy::shutdown() {
  if (local_) local_->shutdown_sockets();
  if (cross_) cross_->shutdown_sockets();
}

std::string Hierarchy::where(bool cross) const {
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s;
  };
  return cross ? "hierarchical allreduce, cross-host step (group of local rank " + std::to_string(layout_.local_rank) +
                     ": global ranks " + list(layout_.cross_members) + "; group rank k = host k): "
               : "hierarchical allreduce, local step on host '" + layout_.host_names[layout_.host_index] +
                     "' (global ranks " + list(layout_.local_members) + "; group rank k = k-th of them): ";
}

namespace {

// Rethrows the exception in flight as the same EDL type with `context` in front of its message.
[[noreturn]] void rethrow_in(const std::string& context) {
  try {
    throw;
  } catch (const MismatchError& e) {
    throw MismatchError(context + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(context + e.what());
  } catch (const PeerLostError& e) {
    throw PeerLostError(context + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(context + e.what());
  } catch (const AbortedError& e) {
    throw AbortedError(context + e.what());
  } catch (const CommError& e) {
    throw CommError(context + e.what());
  } catch (...) {
    throw;  // any other error: unchanged
  }
}

}  // namespace

bool Hierarchy::allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                          Clock::time_point deadline) {
  local_->outer_deadline_ = deadline;
  cross_->outer_deadline_ = deadline;
  if (!is_16bit_float(dt)) return run(spans, count, dt, op);
  // 16-bit floats: accumulate in float32 on both levels, round once at the end.
  bool sliced = false;
  with_float32(spans, count, dt, widened_,
               [&](const std::vector<Span>& s, DataType t) { sliced = run(s, count, t, op); });
  return sliced;
}

bool Hierarchy::run(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op) {
  const size_t es = dtype_size(dt);
  const int L = layout_.local_size;
  const ReduceOp level_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  const bool sliced = count >= static_cast<size_t>(L) && count * es >= tuning_.hier_slice_bytes;
  const bool shm = std::string(local_->transport_name()) == "shm";
  // 1. Local: sliced over shared memory, a reduce-scatter (this rank's slice of every staging
  //    window); else an allreduce (every local rank holds the host's reduction).
  std::vector<Span> part;
  try {
    if (sliced && shm) {
      part = local_->shm_reduce_scatter(spans, dt, level_op);
    } else {
      local_->allreduce_spans(spans, dt, level_op);
    }
  } catch (const MismatchError&) {
    // The ranks of this host disagree: tell the other hosts through the cross step, which they
    // run next (so every rank of the job reports a MismatchError and all stay in step).
    try {
      cross_->allreduce_spans({}, dt, level_op, kHostMismatch);
    } catch (const MismatchError&) {
    } catch (const Error&) {
      rethrow_in(where(true));
    }
    rethrow_in(where(false));
  } catch (const Error&) {
    rethrow_in(where(false));
  }
  // 2. Across hosts: the whole buffer, or this local rank's slices (every local rank drives its
  //    own part of the links). The header carries the whole count (mismatches between hosts).
  SpanIndex index(spans);
  size_t first = 0, len = count;
  if (sliced && !shm) {  // TCP between the local ranks: one contiguous slice of L
    first = count / L * layout_.local_rank + std::min<size_t>(layout_.local_rank, count % L);
    len = count / L + (static_cast<size_t>(layout_.local_rank) < count % L ? 1 : 0);
    index.for_each(first * es, len * es, [&](char* p, size_t take, size_t) { part.push_back(Span{p, take}); });
  }
  try {
    cross_->allreduce_spans(sliced ? part : spans, dt, level_op, count);
  } catch (const Error&) {
    rethrow_in(where(true));
  }
  // 3. Sliced: gather the other local ranks' slices.
  if (sliced) {
    try {
      if (shm) {
        local_->shm_allgather_slices(spans, dt);
      } else {
        gather_over_tcp(spans, part, count, len, dt, index);
      }
    } catch (const Error&) {
      rethrow_in(where(false));
    }
  }
  if (op == ReduceOp::kAverage)
    for (const Span& s : spans) divide_inplace(s.data, s.bytes / es, dt, size_);
  return sliced;
}

void Hierarchy::gather_over_tcp(const std::vector<Span>& spans, const std::vector<Span>& part, size_t count,
                                size_t len, DataType dt, const SpanIndex& index) {
  const size_t es = dtype_size(dt);
  const void* in = part.empty() ? nullptr : part[0].data;
  if (part.size() > 1) {
    slice_copy_.resize(len * es);
    size_t at = 0;
    for (const Span& s : part) std::memcpy(slice_copy_.data() + at, s.data, s.bytes), at += s.bytes;
    in = slice_copy_.data();
  }
  local_->allgatherv(in, len, dt, gathered_);  // the slices in local-rank order: the whole buffer
  if (gathered_.size() != count * es)
    throw CommError(where(false) + "the gathered slices hold " + std::to_string(gathered_.size()) + " bytes, not " +
                    std::to_string(count * es));
  index.for_each(0, count * es, [&](char* p, size_t take, size_t rel) { std::memcpy(p, gathered_.data() + rel, take); });
  if (gathered_.capacity() > (size_t{64} << 20)) std::vector<uint8_t>().swap(gathered_);
  (void)spans;
}

}  // namespace edl::collective
