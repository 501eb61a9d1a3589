// Which etcd server versions fencelock refuses by default: those whose stalled former leader can
// revoke live leases (etcd-io/etcd#15247; fixed in 3.4.31 and 3.5.13).
#include "etcd/etcd_version.h"

#include <gtest/gtest.h>

namespace fencelock::detail::etcd {
namespace {

bool affected(std::string_view text) {
  auto v = parse_server_version(text);
  EXPECT_TRUE(v.has_value()) << text;
  return v && revokes_live_leases_after_a_leader_stall(*v);
}

TEST(EtcdVersion, ParsesMajorMinorPatchAndIgnoresASuffix) {
  auto v = parse_server_version("3.4.23");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->major, 3);
  EXPECT_EQ(v->minor, 4);
  EXPECT_EQ(v->patch, 23);
  auto rc = parse_server_version("3.6.0-rc.1");
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(rc->minor, 6);
  for (std::string_view bad : {"", "3", "3.4", "3.4.", "3.4.x", "v3.4.23", "3.4.23x", "-1.2.3"})
    EXPECT_FALSE(parse_server_version(bad).has_value()) << bad;
}

TEST(EtcdVersion, VersionsBeforeTheFixOfEachSeriesAreAffected) {
  EXPECT_TRUE(affected("3.3.27"));
  EXPECT_TRUE(affected("3.4.23"));  // Debian 12
  EXPECT_TRUE(affected("3.4.30"));
  EXPECT_FALSE(affected("3.4.31"));
  EXPECT_FALSE(affected("3.4.37"));
  EXPECT_TRUE(affected("3.5.0"));
  EXPECT_TRUE(affected("3.5.12"));
  EXPECT_FALSE(affected("3.5.13"));
  EXPECT_FALSE(affected("3.5.21"));
  EXPECT_FALSE(affected("3.6.0"));
  EXPECT_TRUE(affected("2.3.8"));
  EXPECT_FALSE(affected("4.0.0"));
}

}  // namespace
}  // namespace fencelock::detail::etcd
