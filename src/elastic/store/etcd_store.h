// etcd backend of the Store interface (etcd://HOST:PORT[,HOST:PORT...]), created through connect_store().
//
// Talks to etcd v3 through its JSON gateway (EtcdClient: failover between the listed members,
// bounded backoff). Mapping (docs/store.md, "etcd"):
//   set/get/del/keys   put / range / deleterange / range over [prefix, prefix+1) (keys only)
//   compare_set        one txn: compare value (or version = 0 for "absent") and the absence of a
//                      per-request marker key; put the value and the marker, else read both back
//   add                read, then the compare_set txn guarded by mod_revision; retried on conflict
//   wait/wait_change   range; if not yet, a /v3/watch stream on the key and one more range once
//                      etcd confirms the watch; then its events — never polling
//   set_lease          one etcd lease per key (TTL rounded up to whole seconds, at least etcd's
//                      minimum), refreshed with /v3/lease/keepalive, the value put with the lease
// add and compare_set are applied exactly once across a lost answer: every attempt of one call
// carries the same marker key (under the reserved prefix "__edl_etcd/", hidden from keys()), the txn
// requires the marker to be absent, and a retry that finds it knows the first attempt was applied.
// Markers live on a client lease and vanish about a minute later.
// etcd://USER@HOST:PORT,... authenticates as etcd user USER with the job secret as password
// (AuthError when rejected); without a user the secret is not used.
// Thread-safety: every Store method may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "edl/store.h"
#include "elastic/store/etcd_client.h"

namespace edl::store {

// Throws StoreError when no member answers within options.connect_timeout, AuthError when etcd
// rejects `user` with options.secret as password (user "" = no authentication), InvalidArgument for a
// user without a secret. Every operation retries lost connections (failover to the next member,
// backoff) for options.reconnect_timeout (EDL_STORE_TIMEOUT_MS); one attempt waits at most
// options.request_timeout / 4 (1..2 s) for its answer.
std::shared_ptr<Store> connect_etcd_store(const std::string& url, std::vector<EtcdEndpoint> endpoints,
                                          const std::string& user, const StoreOptions& options);

}  // namespace edl::store
