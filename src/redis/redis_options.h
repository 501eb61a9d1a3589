// The query options of a redis:// or redlock:// URI, read once for the backends and the fence:
// pure (no I/O), unit-tested and fuzzed with the URI parser.
#pragma once

#include <cstddef>

#include "core/uri.h"
#include "fencelock/status.h"

namespace fencelock::detail::redis {

inline constexpr std::size_t kDefaultRenewBatch = 1024;
inline constexpr std::size_t kMaxRenewBatch = 1'000'000;

struct RedisOptions {
  // renew_batch=LEASES: leases per renewal script call, 1 to kMaxRenewBatch.
  std::size_t renew_batch = kDefaultRenewBatch;
  // allow_eviction=true|false: accept a maxmemory-policy that evicts keys without a TTL.
  bool allow_eviction = false;
};

// kInvalidArgument naming the option for an unknown option or a value out of its range.
Result<RedisOptions> parse_redis_options(const ParsedUri& uri);

}  // namespace fencelock::detail::redis
