// torture::split_uri: the servers of a backend URI for the fault proxies, through the one URI
// parser of core/uri.h. A password with '/', '?' or '@' is never taken for a host, and no error
// message shows it (before: "bad port in 'bob:hunter2'").
#include "torture/endpoints.h"

#include <gtest/gtest.h>

#include <string>

namespace fencelock::torture {
namespace {

TEST(SplitUri, HostsAreSplitOutAndJoinedBackAroundThem) {
  auto split = split_uri("redlock://u:p@10.0.0.1:7001,localhost,h3:7003/2?renew_batch=8");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  ASSERT_EQ(split->hosts.size(), 3u);
  EXPECT_EQ(split->hosts[0].host, "10.0.0.1");
  EXPECT_EQ(split->hosts[0].port, 7001);
  EXPECT_EQ(split->hosts[1].host, "127.0.0.1");
  EXPECT_EQ(split->hosts[1].port, 6379);
  EXPECT_EQ(split->head, "redlock://u:p@");
  EXPECT_EQ(split->tail, "/2?renew_batch=8");
  split->hosts[2].port = 9;
  EXPECT_EQ(join_uri(*split), "redlock://u:p@10.0.0.1:7001,127.0.0.1:6379,h3:9/2?renew_batch=8");
}

TEST(SplitUri, APasswordWithSlashesQuestionMarksOrAtSignsIsNeverAHost) {
  for (const std::string password : {"hun/ter2", "hun?ter2", "hun@ter2", "hunter2"}) {
    const std::string uri = "redis://bob:" + password + "@127.0.0.1:7101/0";
    auto split = split_uri(uri);
    ASSERT_TRUE(split.ok()) << password << ": " << split.status().to_string();
    ASSERT_EQ(split->hosts.size(), 1u) << password;
    EXPECT_EQ(split->hosts[0].port, 7101) << password;
    EXPECT_EQ(join_uri(*split), uri);
  }
}

TEST(SplitUri, ErrorsNeverShowThePassword) {
  for (const std::string uri :
       {"redis://bob:hunter2@127.0.0.1:notaport", "redis://bob:hunter2@[::1]:6379",
        "etcd://bob:hunter2@h1:1,,h2:2", "memory://bob:hunter2@x"}) {
    auto split = split_uri(uri);
    EXPECT_FALSE(split.ok()) << uri;
    EXPECT_EQ(split.status().message().find("hunter2"), std::string::npos)
        << split.status().message();
  }
}

}  // namespace
}  // namespace fencelock::torture
