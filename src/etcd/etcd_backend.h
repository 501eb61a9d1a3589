// etcd:// backend (docs/PROTOCOLS.md, "etcd"): etcd's concurrency.Mutex over the project's own
// gRPC stubs, with one session lease per distinct TTL per Client.
//
// Layout (etcd/etcd_keys.h): lock NAME is held by the key NAME/<lease hex> with the lowest
// create revision; the fencing token is that create revision. Waiters watch only their immediate
// predecessor's deletion and, on waking, check that their own key still exists (etcd issue
// 11456). Keep-alives go out only through renew_all() (one LeaseKeepAlive per session per
// round, however many locks) and from a waiting acquisition, which keeps its own session alive.
// A renewal round also checks that each renewed lock's own key still exists with its create
// revision (one Txn per 128 locks, etcd/etcd_own_keys.h): a key deleted behind the holder's back
// (etcdctl del) rejects that lease. A delete of an own key that got no answer (a release, a
// give-up) is retried before the session's next keep-alive, and none is sent until it succeeded,
// so the key never outlives its TTL.
// Validity is the client's steady clock: send time of the last answered keep-alive + TTL - drift.
// See docs/PROTOCOLS.md ("etcd") for the full protocol and its limits.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/backend.h"
#include "core/uri.h"
#include "fencelock/options.h"

namespace fencelock::detail {

// etcd://[user:pass@]h1:2379,h2:2379,... (port default 2379), or
// etcds://...?cacert=PATH[&cert=PATH&key=PATH] for TLS (default CA: the system roots).
// User and password may also come from FENCELOCK_ETCD_USER / FENCELOCK_ETCD_PASSWORD when the URI
// has none. Connects (kUnavailable when no member answers within connect_timeout) and
// authenticates when credentials are given (kUnauthenticated when refused). With `check_only`,
// returns a null backend once the URI is found valid (TLS files read), connecting to nothing.
Result<std::unique_ptr<Backend>> make_etcd_backend(std::string_view text,
                                                   const ClientOptions& options,
                                                   bool check_only = false);

namespace etcd {
class EtcdConnection;
// The backend on a connected, authenticated `connection` (make_etcd_backend's last step):
// `members` the URI's endpoint count, `key_namespace` the namespace option ("" or ending in '/'),
// `issuer_identity` the fence issuer's (the cluster id).
std::unique_ptr<Backend> make_backend_on(std::unique_ptr<EtcdConnection> connection,
                                         std::string description, std::size_t members,
                                         std::string key_namespace, std::string issuer_identity);
}  // namespace etcd

}  // namespace fencelock::detail
