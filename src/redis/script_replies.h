// The replies of fencelock's Lua scripts (src/redis/scripts/*.lua) and of SCAN (fencelock list),
// read as pure functions: no I/O, no clocks. A reply comes from a server (or a proxy, or something
// pretending to be one), so anything hiredis can parse must be handled, and only the exact shapes
// the scripts return count as an answer: a reply of any other shape is never read as a grant or a
// confirmed renewal.
// Error replies are the caller's (a NOSCRIPT drops the connection's script cache) and are not
// read here.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencelock::detail::redis {

// acquire.lua: {1, counter, ahead_ms} when granted, {0, retry_ms} when not.
struct AcquireReply {
  bool granted = false;
  std::uint64_t counter = 0;  // when granted: >= 1 (seeded from the server's clock)
  long long ahead_ms = 0;     // when granted: how far the counter ran ahead of the server's clock
  long long retry_ms = 0;     // when not: the holder's PTTL (-1 no TTL, -2 just gone) or more
};
// nullopt unless `reply` is {1, counter, ahead_ms} with the counter a canonical decimal token
// >= 1 as text (a counter of 0 would become a fencing token of 0) and ahead_ms an integer >= 0,
// or {0, retry_ms} with an integer.
std::optional<AcquireReply> interpret_acquire_reply(const redisReply& reply);

// renew.lua, one batch: one integer per lease, 1 extended, 0 no longer ours.
enum class RenewVote { kConfirmed, kRejected, kNoAnswer };
// Exactly `leases` votes, in the batch's order. A lease whose element is missing or is not the
// integer 0 or 1 gets kNoAnswer; elements past `leases` are ignored (they belong to no lease of
// this batch); a reply that is not an array answers for none.
std::vector<RenewVote> interpret_renew_reply(const redisReply& reply, std::size_t leases);

// release.lua: 1 when the lock was deleted, 0 when it was not this value's. True when `reply`
// is either (the instance answered the release).
bool release_answered(const redisReply& reply);

// raise_fence.lua: 1 when confirmed, 0 when the lock is no longer ours there.
bool raise_fence_confirmed(const redisReply& reply);

// inspect.lua: {owner, pttl, info} for a held lock, nil when free.
struct InspectReply {
  std::string owner;  // the lock value: the owner id, then the attempt's random part
  long long pttl = 0;
  std::uint64_t token = 0;  // 0 when the info holds no canonical token (a foreign client)
  std::string metadata;     // after "TOKEN " in the info
};
// nullopt for nil and for any reply that is not {string, integer, string}.
std::optional<InspectReply> interpret_inspect_reply(const redisReply& reply);

// SCAN: {cursor, {key, ...}}. The keys view the reply's strings (valid while it lives). nullopt
// unless the cursor is text and the keys an array of text: a reply of another shape is an
// instance that did not answer, never an empty page.
struct ScanReply {
  std::string cursor;
  std::vector<std::string_view> keys;
};
std::optional<ScanReply> interpret_scan_reply(const redisReply& reply);

// The text of a string, status or error reply; empty for any other (hiredis leaves `str` null).
std::string_view reply_text(const redisReply* reply);

}  // namespace fencelock::detail::redis
