// Own-key checks of a renewal round, as pure functions on the wire messages: no I/O.
//
// A keep-alive only says that the session lease lives. A holder's own key NAME/<lease hex> can go
// while its lease lives on (an admin's `etcdctl del`), and the next key in line then holds the
// lock. So every renewal round also confirms that each held own key still exists with the create
// revision it was granted with (its fencing token): a Txn of "create_revision(key) == token"
// compares, at most kMaxCompares per Txn (etcd refuses a Txn with more than --max-txn-ops
// compares or operations: 128 by default). It succeeds when every key is still held; otherwise
// its failure branch reads each key (keys only), so that one Txn names exactly the keys lost.
// Such a Txn writes nothing, so etcd serves it as a linearizable read (no Raft entry, no fsync).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "etcd/fencelock_etcd.pb.h"

namespace fencelock::detail::etcd {

namespace pb = fencelock::etcdserverpb;

// etcd's default --max-txn-ops: the most compares (and operations) one Txn may carry.
inline constexpr std::size_t kMaxCompares = 128;

struct OwnKey {
  std::string key;        // NAME/<lease hex>
  std::int64_t revision;  // its create revision when granted: the lease's fencing token
};

// The checks for `keys`, in order: the first Txn checks keys[0 .. kMaxCompares), the next the
// following kMaxCompares, and so on (none for no keys).
std::vector<pb::TxnRequest> own_key_checks(std::span<const OwnKey> keys);

// Per key of `check` (one Txn of own_key_checks()), in its order: whether `response` shows the
// key still there with its create revision. A response that lacks a key's read says it is gone.
std::vector<bool> still_held(const pb::TxnRequest& check, const pb::TxnResponse& response);

}  // namespace fencelock::detail::etcd
