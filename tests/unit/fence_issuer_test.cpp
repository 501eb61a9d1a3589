// Fence issuers (core/fence_issuer.h): which lock a token comes from, as fences record it. The
// same lock must get the same issuer from every Client in every process (host names in any case,
// Redlock instances in any order, a default port or database written out or not), two locks
// must not share one, and the one rule every fence applies must refuse another lock's token.
#include "core/fence_issuer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "fencelock/fence.h"

namespace fencelock::detail {
namespace {

FencingToken T(std::uint64_t v) { return FencingToken(v); }

TEST(FenceIssuer, TheSameRedisOrRedlockServersGiveOneIdentityHoweverTheUriSpellsThem) {
  EXPECT_EQ(issuer_identity_of_uri("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379/0");
  EXPECT_EQ(issuer_identity_of_uri("redis://127.0.0.1"), "redis://127.0.0.1:6379/0");
  EXPECT_EQ(issuer_identity_of_uri("redis://user:secret@Cache.Example:6379/0"),
            "redis://cache.example:6379/0");
  EXPECT_EQ(issuer_identity_of_uri("redis://h:1/2"), "redis://h:1/2");
  EXPECT_NE(issuer_identity_of_uri("redis://h:1/2"), issuer_identity_of_uri("redis://h:1/3"));
  EXPECT_NE(issuer_identity_of_uri("redis://h:1"), issuer_identity_of_uri("redis://h:2"));
  EXPECT_EQ(issuer_identity_of_uri("redlock://c:3,a:1,b:2"), "redlock://a:1,b:2,c:3/0");
  EXPECT_EQ(issuer_identity_of_uri("redlock://B:2,c:3,A:1"),
            issuer_identity_of_uri("redlock://a:1,b:2,c:3/0"));
  EXPECT_EQ(issuer_identity_of_uri("redlock://[::1]:1,[::1]:2,[::1]:3"),
            "redlock://[::1]:1,[::1]:2,[::1]:3/0");
  // One instance is not a Redlock of one: the counters differ (round 2 runs only on Redlock).
  EXPECT_NE(issuer_identity_of_uri("redis://a:1"), issuer_identity_of_uri("redlock://a:1"));
  EXPECT_EQ(issuer_identity_of_uri("etcd://a:2379"), "") << "etcd names itself (cluster id)";
  EXPECT_EQ(issuer_identity_of_uri("postgres://a/db"), "");
  EXPECT_EQ(issuer_identity_of_uri("redis://user:secret@h:1").find("secret"), std::string::npos);
}

// A memory:// table lives in one process: two processes' tables are two issuers.
TEST(FenceIssuer, AMemoryTableIsNamedWithItsProcess) {
  EXPECT_EQ(issuer_identity_of_uri("memory://tests"),
            "memory://tests?pid=" + std::to_string(getpid()));
  EXPECT_EQ(issuer_identity_of_uri("memory://"),
            "memory://default?pid=" + std::to_string(getpid()));
}

TEST(FenceIssuer, AnIssuerIsPrintableAsciiWithOneSpaceBeforeTheEscapedLockName) {
  EXPECT_EQ(make_issuer("redis://h:1/0", "jobs/nightly"), "redis://h:1/0 jobs/nightly");
  EXPECT_EQ(make_issuer("redis://h:1/0", "a b%c\n\xff"), "redis://h:1/0 a%20b%25c%0A%FF");
  // Escaping is one-to-one: "a b" and "a%20b" are two locks, and stay two issuers.
  EXPECT_NE(make_issuer("x", "a b"), make_issuer("x", "a%20b"));
  const std::string issuer = make_issuer("x", std::string(512, '\x01'));
  EXPECT_LE(issuer.size(), Fencing::kMaxIssuerBytes);
  EXPECT_TRUE(check_issuer(issuer, "test").ok());
}

TEST(FenceIssuer, OnlyPrintableAsciiUpToTheLimitIsAnIssuer) {
  EXPECT_TRUE(check_issuer("", "RedisFence").ok()) << "empty: a bare token";
  EXPECT_TRUE(check_issuer("redis://h:1/0 k", "RedisFence").ok());
  EXPECT_TRUE(check_issuer(std::string(Fencing::kMaxIssuerBytes, 'a'), "RedisFence").ok());
  for (const std::string& bad :
       {std::string("a\nb"), std::string("a\0b", 3), std::string("caf\xc3\xa9"),
        std::string("\x7f"), std::string(Fencing::kMaxIssuerBytes + 1, 'a')}) {
    Status refused = check_issuer(bad, "RedisFence");
    EXPECT_EQ(refused.code(), Code::kInvalidArgument) << bad.size();
    EXPECT_NE(refused.message().find("RedisFence"), std::string::npos) << refused.message();
  }
}

// The rule of every fence (Lua, PL/pgSQL and FenceGate implement the same table).
TEST(FenceIssuer, ANamedRecordRefusesAnotherLockAndABareTokenAnUnnamedOneComparesTokens) {
  const Fencing none{T(0), ""};
  const Fencing redis{T(4), "redis://h:1/0 k"};
  const Fencing etcd{T(60), "etcd:cluster=1 k"};
  EXPECT_EQ(judge_fencing(redis, none), FenceVerdict::kAdmit) << "no record admits any token";
  EXPECT_EQ(judge_fencing(Fencing{T(0), ""}, none), FenceVerdict::kAdmit);
  EXPECT_EQ(judge_fencing(redis, etcd), FenceVerdict::kOtherLock) << "older, but another lock";
  EXPECT_EQ(judge_fencing(Fencing{T(99), "redis://h:1/0 k"}, etcd), FenceVerdict::kOtherLock);
  EXPECT_EQ(judge_fencing(Fencing{T(99), ""}, etcd), FenceVerdict::kOtherLock) << "a bare token";
  EXPECT_EQ(judge_fencing(Fencing{T(59), "etcd:cluster=1 k"}, etcd), FenceVerdict::kStale);
  EXPECT_EQ(judge_fencing(etcd, etcd), FenceVerdict::kAdmit) << "equal tokens pass";
  // An unnamed record (bare tokens, or a record from before issuers): tokens only.
  EXPECT_EQ(judge_fencing(Fencing{T(5), "x k"}, Fencing{T(6), ""}), FenceVerdict::kStale);
  EXPECT_EQ(judge_fencing(Fencing{T(6), "x k"}, Fencing{T(6), ""}), FenceVerdict::kAdmit);
  EXPECT_EQ(judge_fencing(Fencing{T(7), ""}, Fencing{T(6), ""}), FenceVerdict::kAdmit);
}

TEST(FenceIssuer, AnotherLocksRefusalNamesBothLocksAndTheWayOut) {
  Status refused = other_lock(Fencing{T(4), "redis://h:1/0 k"}, Fencing{T(60), "etcd:cluster=1 k"});
  EXPECT_EQ(refused.code(), Code::kFenced);
  EXPECT_NE(refused.message().find("token 4 of lock 'redis://h:1/0 k'"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("lock 'etcd:cluster=1 k', which fences this resource (its "
                                   "highest token is 60)"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("adopts"), std::string::npos) << refused.message();
  Status bare = other_lock(Fencing{T(4), ""}, Fencing{T(60), "etcd:cluster=1 k"});
  EXPECT_NE(bare.message().find("names no lock (a bare token)"), std::string::npos)
      << bare.message();
  EXPECT_NE(bare.message().find("fencing()"), std::string::npos) << bare.message();
  const std::string huge(5000, 'h');
  EXPECT_LT(other_lock(Fencing{T(1), huge}, Fencing{T(2), huge}).message().size(), 1500u)
      << "issuers are cut in messages";
}

}  // namespace
}  // namespace fencelock::detail
