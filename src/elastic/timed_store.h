// TimedStore: a Store that forwards every call to another one and reports the latency of each
// non-blocking request (set, get, add, compare_set, del, keys, set_lease) to the worker metrics
// (WorkerMetrics::store_op). The blocking calls (wait, wait_change) are forwarded untimed: their
// duration is how long a key took to appear, not the store's latency. Shaped like make_prefix_store.
// Thread-safety: as the wrapped store.
#pragma once

#include <memory>

#include "edl/store.h"

namespace edl::metrics {

std::shared_ptr<Store> make_timed_store(std::shared_ptr<Store> base);

}  // namespace edl::metrics
