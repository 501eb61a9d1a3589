// The backend registry (core/backend_registry.h): the built-in schemes, a backend registered from
// outside the core serving Client::connect and migrate(), and the errors for unknown schemes.
#include "core/backend_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fencelock/client.h"
#include "fencelock/migrate.h"
#include "stub_backend.h"

namespace fencelock::detail {
namespace {

using ::testing::HasSubstr;

TEST(BackendRegistry, EveryBuiltInSchemeIsKnownAndOthersAreNamedInTheError) {
  for (std::string_view scheme :
       {"redis", "redlock", "postgres", "postgresql", "etcd", "etcds", "memory"}) {
    EXPECT_TRUE(known_scheme(scheme)) << scheme;
  }
  for (std::string_view scheme : {"zk", "rediss", "", "REDIS", "memory2"}) {
    EXPECT_FALSE(known_scheme(scheme)) << scheme;
  }
  Status unknown = unknown_scheme("zk");
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("'zk://'"));
  // The list of schemes comes from the registry, not from a list in the message.
  EXPECT_THAT(unknown.message(), HasSubstr("redlock://"));
  EXPECT_THAT(unknown.message(), HasSubstr("etcds://"));
  EXPECT_THAT(unknown.message(), HasSubstr(" or "));
}

TEST(BackendRegistry, FindsTheBackendOfAUriCaseInsensitivelyExceptLibpqSchemes) {
  ASSERT_NE(find_backend_plugin("REDIS://h:1"), nullptr);
  EXPECT_EQ(find_backend_plugin("Redlock://a,b,c")->family, "redis");
  EXPECT_EQ(find_backend_plugin("postgresql://u@h/d")->family, "postgres");
  EXPECT_EQ(find_backend_plugin("POSTGRES://u@h/d"), nullptr);  // libpq takes lower case only
  EXPECT_EQ(find_backend_plugin("etcds://h:2379")->default_port, 2379);
  EXPECT_EQ(find_backend_plugin("memory://x")->default_port, 0);
  EXPECT_EQ(find_backend_plugin("redis:/h"), nullptr);
  EXPECT_EQ(find_backend_plugin("zk://h"), nullptr);
}

TEST(BackendRegistry, AUriWithoutAValidSchemeGetsTheParsersMessage) {
  auto none = backend_for_uri("127.0.0.1:6379");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("expected SCHEME://"));
  auto odd = backend_for_uri("re dis://h");
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(odd.status().message(), HasSubstr("scheme has characters"));
  auto unknown = backend_for_uri("Zk://h");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown backend scheme 'Zk://'"));
}

// A backend from outside the core: what a new backend folder does with its one registration.
struct FakeBackends {
  static inline int connects = 0;
  static inline int checks = 0;
  static Result<std::unique_ptr<Backend>> connect(std::string_view uri,
                                                  const ClientOptions& /*options*/,
                                                  bool check_only) {
    if (uri.find("bad") != std::string_view::npos) {
      return Status(Code::kInvalidArgument, "fake:// refused the URI");
    }
    if (check_only) {
      ++checks;
      return std::unique_ptr<Backend>();
    }
    ++connects;
    return std::unique_ptr<Backend>(std::make_unique<detail::testing::StubBackend>());
  }
};

const BackendPlugin& fake_plugin() {
  static const BackendPlugin plugin{.family = "fake",
                                    .schemes = {"fake", "fakes"},
                                    .default_port = 4242,
                                    .uri_forms = {"fake://HOST"},
                                    .connect = FakeBackends::connect};
  return plugin;
}

TEST(BackendRegistry, ARegisteredBackendServesConnectAndMigrateAndJoinsTheSchemeList) {
  static const Status registered = register_backend_plugin(fake_plugin());
  ASSERT_TRUE(registered.ok()) << registered.to_string();
  EXPECT_TRUE(known_scheme("fakes"));
  EXPECT_THAT(scheme_list(), HasSubstr("fakes://"));

  auto client = Client::connect("FAKE://anywhere");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_EQ(FakeBackends::connects, 1);

  auto refused = Client::connect("fake://bad");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "fake:// refused the URI");

  // No migrate function: migrate() checks the URI as connect() would and creates nothing.
  auto migrated = migrate("fakes://anywhere");
  ASSERT_TRUE(migrated.ok()) << migrated.status().to_string();
  EXPECT_TRUE(migrated->empty());
  EXPECT_EQ(FakeBackends::checks, 1);
  EXPECT_FALSE(migrate("fake://bad").ok());
}

TEST(BackendRegistry, RefusesASchemeTakenAlreadyOrNotLowerCase) {
  static const BackendPlugin taken{
      .family = "x", .schemes = {"redis"}, .connect = FakeBackends::connect};
  Status twice = register_backend_plugin(taken);
  EXPECT_EQ(twice.code(), Code::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("'redis://' is registered already"));
  static const BackendPlugin upper{
      .family = "x", .schemes = {"Upper"}, .connect = FakeBackends::connect};
  EXPECT_EQ(register_backend_plugin(upper).code(), Code::kInvalidArgument);
  static const BackendPlugin no_connect{.family = "x", .schemes = {"noconnect"}};
  EXPECT_EQ(register_backend_plugin(no_connect).code(), Code::kInvalidArgument);
  EXPECT_FALSE(known_scheme("upper"));
  EXPECT_FALSE(known_scheme("noconnect"));
}

}  // namespace
}  // namespace fencelock::detail
