// The query options of etcd:// and etcds:// URIs, read once (etcd/etcd_options.h) without I/O:
// what each scheme accepts, what it refuses before anything is connected or read.
#include "etcd/etcd_options.h"

#include <gtest/gtest.h>

#include <string>

#include "fencelock/client.h"

namespace fencelock::detail::etcd {
namespace {

Result<EtcdOptions> options_of(std::string_view uri) {
  auto parsed = parse_uri(uri, 2379);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return parse_etcd_options(*parsed);
}

TEST(EtcdOptions, DefaultsWithoutAQuery) {
  auto options = options_of("etcd://127.0.0.1:2379");
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->key_namespace, "");
  EXPECT_FALSE(options->allow_stale_leader_revoke);
  EXPECT_EQ(options->cacert, "");
  EXPECT_EQ(describe_etcd_options(*options), "");
}

TEST(EtcdOptions, ReadsEachOptionAndDescribesThemWithoutPaths) {
  auto options = options_of(
      "etcds://a:1,b:2?namespace=locks%2F&allow_stale_leader_revoke=true&cacert=%2Fca.pem&"
      "cert=%2Fc.pem&key=%2Fk.pem");
  ASSERT_TRUE(options.ok()) << options.status().to_string();
  EXPECT_EQ(options->key_namespace, "locks/");
  EXPECT_TRUE(options->allow_stale_leader_revoke);
  EXPECT_EQ(options->cacert, "/ca.pem");
  EXPECT_EQ(options->cert, "/c.pem");
  EXPECT_EQ(options->key, "/k.pem");
  EXPECT_EQ(describe_etcd_options(*options), "namespace=locks%2F&allow_stale_leader_revoke=true");
}

TEST(EtcdOptions, RefusesBadValuesUnknownOptionsAndTlsOptionsWithoutTls) {
  for (const char* bad :
       {"etcd://h?allow_stale_leader_revoke=yes", "etcd://h?namespace=locks",
        "etcd://h?namespace=", "etcd://h?namespace=a%00b%2F", "etcd://h?cacert=%2Fca.pem",
        "etcd://h?evict=true", "etcds://h?evict=true", "etcds://h?cert=%2Fc.pem",
        "etcds://h?key=%2Fk.pem", "etcds://h?cacert="}) {
    auto options = options_of(bad);
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_EQ(options.status().code(), Code::kInvalidArgument) << bad;
  }
  auto too_long = options_of("etcd://h?namespace=" + std::string(kMaxNamespaceBytes, 'n') + "%2F");
  EXPECT_EQ(too_long.status().code(), Code::kInvalidArgument);
  auto longest =
      options_of("etcd://h?namespace=" + std::string(kMaxNamespaceBytes - 1, 'n') + "%2F");
  EXPECT_TRUE(longest.ok()) << longest.status().to_string();
}

TEST(EtcdOptions, AnUnreadableCertificateIsRefusedAtConnectBeforeAnyNetworkCall) {
  // Port 1 on loopback: nothing listens, so only the file can make this kInvalidArgument.
  auto client = Client::connect("etcds://127.0.0.1:1?cacert=%2Fno%2Fsuch%2Fca.pem");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kInvalidArgument) << client.status().to_string();
  EXPECT_NE(client.status().message().find("cacert=/no/such/ca.pem: cannot read the file"),
            std::string::npos)
      << client.status().to_string();
}

}  // namespace
}  // namespace fencelock::detail::etcd
