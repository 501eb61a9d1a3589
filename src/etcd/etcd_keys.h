// The etcd mutex key layout (docs/PROTOCOLS.md, "etcd"), as pure functions: no I/O.
//
// A lock NAME is a set of keys NAME/<lease id in lowercase hex>, one per session in line for it
// (the layout of etcd's concurrency.Mutex, so `etcdctl lock NAME` and fencelock exclude each
// other). A key belongs to lock NAME exactly when it is NAME + "/" + 1..16 lowercase hex digits:
// NAME is everything before the key's last '/'. So lock "a" (keys "a/<hex>") and lock "a/b"
// (keys "a/b/<hex>") never mistake each other's keys for their own, although the second lies
// under the first one's prefix "a/": every key read under a prefix is filtered through
// lock_name_of(). No key name needs to be rejected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencelock::detail::etcd {

// "NAME/": the prefix under which every key of lock NAME lies.
std::string lock_prefix(std::string_view name);
// "NAME/<lease hex>": the key a session owns while in line for (or holding) lock NAME.
std::string own_key(std::string_view name, std::int64_t lease);
// Lowercase hex without leading zeros, as etcd's Go client prints a lease id ("%x").
std::string lease_hex(std::int64_t lease);
// The range_end that makes a Range cover every key starting with `prefix` (etcd's
// GetPrefixRangeEnd); "\0" (every key) for an empty prefix or one of only 0xff bytes.
std::string prefix_end(std::string prefix);
// The lock a key belongs to, or nullopt for a key outside the layout.
std::optional<std::string_view> lock_name_of(std::string_view key);

// The value fencelock stores in its own key: {"owner":"<owner short hex>","metadata":<holder
// metadata>} (metadata embedded as JSON when it parses, as a string otherwise).
std::string encode_value(std::string_view owner_short_hex, std::string_view metadata);
struct DecodedValue {
  std::string owner_prefix;  // empty for a key written by another client (etcdctl lock)
  std::string metadata;
};
DecodedValue decode_value(std::string_view value);

}  // namespace fencelock::detail::etcd
