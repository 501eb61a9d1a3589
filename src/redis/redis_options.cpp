#include "redis/redis_options.h"

#include <charconv>

#include <fmt/format.h>

namespace fencelock::detail::redis {

Result<RedisOptions> parse_redis_options(const ParsedUri& uri) {
  RedisOptions options;
  for (const auto& [name, value] : uri.query) {
    if (name == "allow_eviction") {
      if (value != "true" && value != "false") {
        return Status(Code::kInvalidArgument,
                      fmt::format("malformed backend URI: allow_eviction must be true or false, "
                                  "got '{}'",
                                  value));
      }
      options.allow_eviction = value == "true";
      continue;
    }
    if (name != "renew_batch") {
      return Status(Code::kInvalidArgument,
                    fmt::format("malformed backend URI: unknown option '{}' (the options are "
                                "renew_batch=LEASES and allow_eviction=true)",
                                name));
    }
    std::size_t parsed = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (error != std::errc() || end != value.data() + value.size() || parsed < 1 ||
        parsed > kMaxRenewBatch) {
      return Status(Code::kInvalidArgument,
                    fmt::format("malformed backend URI: renew_batch must be a number of leases "
                                "from 1 to {}, got '{}'",
                                kMaxRenewBatch, value));
    }
    options.renew_batch = parsed;
  }
  return options;
}

}  // namespace fencelock::detail::redis
