// Specification: ClientOptions are validated once, before any backend connects, with the same
// rule for every scheme (fencelock/options.h). The servers named here do not exist: a check that
// ran only after connecting would report them unreachable instead.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fencelock/client.h"

namespace fencelock {
namespace {

const char* const kEveryScheme[] = {
    "memory://options-test", "redis://127.0.0.1:1", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
    "postgres://fencelock@127.0.0.1:1/fencelock", "etcd://127.0.0.1:1"};

// Before: only redis:// and redlock:// checked drift_factor; PostgreSQL and etcd took a negative
// factor, which pushes valid_until() past the TTL.
TEST(ClientOptions, ADriftFactorOutsideZeroToOneHalfIsRefusedOnEveryBackend) {
  for (double factor : {-0.01, -1.0, 0.5, 2.0, std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity()}) {
    for (const char* uri : kEveryScheme) {
      ClientOptions options;
      options.drift_factor = factor;
      options.connect_timeout = std::chrono::milliseconds(100);
      auto client = Client::connect(uri, options);
      ASSERT_FALSE(client.ok()) << uri << " drift_factor " << factor;
      EXPECT_EQ(client.code(), Code::kInvalidArgument)
          << uri << ": " << client.status().to_string();
      EXPECT_NE(client.status().message().find("drift_factor"), std::string::npos)
          << client.status().to_string();
    }
  }
}

TEST(ClientOptions, ADriftFactorFromZeroToBelowOneHalfIsAccepted) {
  for (double factor : {0.0, 0.01, 0.49}) {
    ClientOptions options;
    options.drift_factor = factor;
    EXPECT_TRUE(Client::connect("memory://options-test", options).ok()) << factor;
  }
}

}  // namespace
}  // namespace fencelock
