// Specification of the Redis key layout (src/redis/redis_keys.h): every key of one lock shares
// one non-empty Redis Cluster hash tag, and lock names map one to one onto lock keys.
#include "redis/redis_keys.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace fencelock::detail::redis {
namespace {

// Redis Cluster's rule (cluster.c keyHashSlot): the part between the first '{' and the first '}'
// after it, if that is not empty; otherwise the whole key is hashed.
std::string cluster_hashed_part(std::string_view key) {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return std::string(key);
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return std::string(key);
  return std::string(key.substr(open + 1, close - open - 1));
}

const char* const kNames[] = {"jobs/nightly", "}",   "}x",   "{",  "{x", "{}",
                              "}}",           "a}b", "a{b}", "{{", "x}"};

// Before: a name starting with '}' closed the tag at once ("fencelock:{}x}"), and Redis Cluster
// hashed every key of the lock whole: four keys, four slots.
TEST(RedisKeys, EveryKeyOfALockSharesOneNonEmptyHashTag) {
  for (std::string_view name : kNames) {
    const std::string tag = cluster_hashed_part(lock_key(name));
    EXPECT_NE(tag, lock_key(name)) << name << ": no hash tag";
    for (const std::string& k : {fence_key(name), holder_key(name), queue_key(name),
                                 queue_expiry_key(name), queue_wake_key(name)}) {
      EXPECT_EQ(cluster_hashed_part(k), tag) << name << ": " << k;
    }
  }
}

TEST(RedisKeys, NamesMapOneToOneOntoLockKeysAndBack) {
  std::set<std::string> keys;
  for (std::string_view name : kNames) {
    EXPECT_EQ(key_from_lock_key(lock_key(name)), name);
    keys.insert(lock_key(name));
  }
  EXPECT_EQ(keys.size(), std::size(kNames));
  EXPECT_EQ(lock_key("jobs/nightly"), "fencelock:{jobs/nightly}") << "the interoperable layout";
  EXPECT_EQ(lock_key("}x"), "fencelock:{{}x}");
  EXPECT_EQ(key_from_lock_key("fencelock:{{abc}"), "") << "not a key lock_key() writes";
  EXPECT_EQ(key_from_lock_key("fencelock:{abc}:fence"), "");
}

}  // namespace
}  // namespace fencelock::detail::redis
