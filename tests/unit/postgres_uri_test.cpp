// split_postgres_uri (src/postgres/postgres_uri.h): fencelock's own parameters off a libpq URI,
// the credentials split at the last '@', and a description that never holds the password.
// Before, a raw '?' in the password cut the URI there: the description (shown in FENCELOCK_BACKEND,
// --json and metrics labels) read "postgres://app:topsecret?mode=advisory".
#include "postgres/postgres_uri.h"

#include <gtest/gtest.h>

#include <string>

namespace fencelock::detail::postgres {
namespace {

// What every URI without keepalive parameters gets (postgres_uri.h).
constexpr const char* kKeepalives =
    "&keepalives_idle=5&keepalives_interval=2&keepalives_count=3&tcp_user_timeout=11000";

TEST(PostgresUri, FencelockParametersAreTakenOffAndTheRestGoesToLibpq) {
  auto uri =
      split_postgres_uri("postgres://app:pw@db1:5432/locks?mode=lease&pool=4&sslmode=require");
  ASSERT_TRUE(uri.ok()) << uri.status().to_string();
  EXPECT_EQ(uri->mode, "lease");
  EXPECT_EQ(uri->pool, 4u);
  EXPECT_EQ(uri->conninfo,
            "postgres://app:pw@db1:5432/locks?sslmode=require" + std::string(kKeepalives));
  EXPECT_EQ(uri->description, "postgres://app@db1:5432/locks?mode=lease");
}

TEST(PostgresUri, APasswordWithQuestionMarksSlashesOrAtSignsStaysAPassword) {
  for (const std::string password : {"topsecret?2", "top/secret", "top@secret", "t?p/s@cret"}) {
    auto uri = split_postgres_uri("postgres://app:" + password + "@127.0.0.1:7201/db");
    ASSERT_TRUE(uri.ok()) << uri.status().to_string();
    EXPECT_EQ(uri->mode, "advisory") << password;
    EXPECT_EQ(uri->description, "postgres://app@127.0.0.1:7201/db?mode=advisory") << password;
    EXPECT_EQ(uri->description.find("secret"), std::string::npos) << uri->description;
    // libpq gets it percent-encoded, so it cannot be read as the query, database or host.
    EXPECT_EQ(uri->conninfo.find(password), std::string::npos) << uri->conninfo;
    EXPECT_TRUE(uri->conninfo.ends_with("@127.0.0.1:7201/db?" + std::string(kKeepalives + 1)))
        << uri->conninfo;
  }
}

TEST(PostgresUri, AMalformedPasswordEscapeIsAnErrorThatDoesNotShowIt) {
  auto uri = split_postgres_uri("postgres://app:topsecret%@127.0.0.1/db");
  EXPECT_EQ(uri.code(), Code::kInvalidArgument);
  EXPECT_EQ(uri.status().message().find("topsecret"), std::string::npos) << uri.status().message();
  EXPECT_NE(uri.status().message().find("%25"), std::string::npos) << uri.status().message();
}

TEST(PostgresUri, AnEscapedPasswordIsPassedOnEscaped) {
  auto uri = split_postgres_uri("postgres://app:a%3Fb@h/db");
  ASSERT_TRUE(uri.ok()) << uri.status().to_string();
  EXPECT_EQ(uri->conninfo, "postgres://app:a%3Fb@h/db?" + std::string(kKeepalives + 1));
}

// libpq would try a long host list one host after another, each up to connect_timeout.
TEST(PostgresUri, MoreThan64HostsIsAShortError) {
  std::string hosts = "h0";
  for (int i = 1; i < 65; ++i) hosts += ",h" + std::to_string(i);
  auto uri = split_postgres_uri("postgres://app:topsecret@" + hosts + "/db?mode=lease");
  EXPECT_EQ(uri.code(), Code::kInvalidArgument);
  EXPECT_NE(uri.status().message().find("65 hosts"), std::string::npos) << uri.status().message();
  EXPECT_EQ(uri.status().message().find("topsecret"), std::string::npos);
  auto ok = split_postgres_uri("postgres://app@h0,h1,h2/db");
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

// TCP keepalives are added to every URI, each only where the URI does not set it; the user
// timeout follows the keepalive values in effect; keepalives=0 adds none.
TEST(PostgresUri, KeepalivesAreAddedWhereTheUriDoesNotSetThem) {
  struct Case {
    std::string query;
    std::string conninfo_query;
  };
  for (const Case& c : {
           Case{"",
                "?keepalives_idle=5&keepalives_interval=2&keepalives_count=3&"
                "tcp_user_timeout=11000"},
           Case{"?keepalives_idle=30",
                "?keepalives_idle=30&keepalives_interval=2&"
                "keepalives_count=3&tcp_user_timeout=36000"},
           Case{"?mode=lease&keepalives_count=5&tcp_user_timeout=1000",
                "?keepalives_count=5&tcp_user_timeout=1000&keepalives_idle=5&"
                "keepalives_interval=2"},
           Case{"?keepalives=0", "?keepalives=0"},
           Case{"?keepalives=1",
                "?keepalives=1&keepalives_idle=5&keepalives_interval=2&"
                "keepalives_count=3&tcp_user_timeout=11000"},
       }) {
    auto uri = split_postgres_uri("postgres://app@h/db" + c.query);
    ASSERT_TRUE(uri.ok()) << c.query << ": " << uri.status().to_string();
    EXPECT_EQ(uri->conninfo, "postgres://app@h/db" + c.conninfo_query) << c.query;
    EXPECT_EQ(uri->description.find("keepalives"), std::string::npos) << uri->description;
  }
}

}  // namespace
}  // namespace fencelock::detail::postgres
