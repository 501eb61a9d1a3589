// The query options of redis:// and redlock:// URIs, read once (redis/redis_options.h) for the
// backends and for RedisFence: the same values accepted and refused by both (before, the fence
// took allow_eviction=yes, or any unknown option, silently as false).
#include "redis/redis_options.h"

#include <gtest/gtest.h>

#include "fencelock/fence.h"

namespace fencelock::detail::redis {
namespace {

Result<RedisOptions> options_of(std::string_view uri) {
  auto parsed = parse_uri(uri, 6379);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return parse_redis_options(*parsed);
}

TEST(RedisOptions, DefaultsWithoutAQuery) {
  auto options = options_of("redis://127.0.0.1:6379");
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->renew_batch, kDefaultRenewBatch);
  EXPECT_FALSE(options->allow_eviction);
}

TEST(RedisOptions, ReadsEachOption) {
  auto options = options_of("redlock://a:1,b:2,c:3?renew_batch=7&allow_eviction=true");
  ASSERT_TRUE(options.ok()) << options.status().to_string();
  EXPECT_EQ(options->renew_batch, 7u);
  EXPECT_TRUE(options->allow_eviction);
}

TEST(RedisOptions, RefusesValuesOutOfRangeAndUnknownOptions) {
  for (const char* bad :
       {"?allow_eviction=yes", "?allow_eviction=", "?renew_batch=0", "?renew_batch=1000001",
        "?renew_batch=12abc", "?renew_batch=-1", "?evict=true"}) {
    auto options = options_of(std::string("redis://127.0.0.1:6379") + bad);
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_EQ(options.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(RedisOptions, TheFenceRefusesWhatTheBackendRefusesBeforeConnecting) {
  // Port 1 on loopback: nothing listens, so only a refused option can make this kInvalidArgument.
  auto fence = RedisFence::connect("redis://127.0.0.1:1?allow_eviction=yes");
  ASSERT_FALSE(fence.ok());
  EXPECT_EQ(fence.status().code(), Code::kInvalidArgument) << fence.status().to_string();
  EXPECT_NE(fence.status().message().find("allow_eviction must be true or false"),
            std::string::npos);
}

}  // namespace
}  // namespace fencelock::detail::redis
