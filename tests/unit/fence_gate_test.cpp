// FenceGate (fencelock/fence.h), the in-process guard: tokens admitted in order, and writes run
// under the gate in token order across threads (run under TSan by scripts/test.sh --tsan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "fencelock/fence.h"

namespace fencelock {
namespace {

FencingToken T(std::uint64_t v) { return FencingToken(v); }

TEST(FenceGate, AdmitsEqualOrNewerTokensAndRefusesOlderOnesWithTheirNumbers) {
  FenceGate gate;
  EXPECT_EQ(gate.highest(), T(0));
  EXPECT_TRUE(gate.admit(T(5)).ok());
  EXPECT_TRUE(gate.admit(T(5)).ok());  // the same holder writes again
  Status stale = gate.admit(T(4));
  EXPECT_EQ(stale.code(), Code::kFenced);
  EXPECT_EQ(stale.message(), "rejected: stale token 4 < 5");
  EXPECT_EQ(stale.to_string(), "fenced: rejected: stale token 4 < 5");
  EXPECT_TRUE(gate.admit(T(9)).ok());
  EXPECT_EQ(gate.highest(), T(9));
  bool wrote = false;
  EXPECT_EQ(gate.run(T(8), [&] { wrote = true; }).code(), Code::kFenced);
  EXPECT_FALSE(wrote);
  EXPECT_TRUE(gate.run(T(10), [&] { wrote = true; }).ok());
  EXPECT_TRUE(wrote);
}

// One resource, one lock: after a token of lock A, the gate refuses lock B's tokens (newer or
// older: they do not compare) and bare tokens, until an administrator adopts the resource for B.
TEST(FenceGate, RefusesTheTokensOfAnotherLockUntilTheResourceIsAdoptedForIt) {
  FenceGate gate;
  const Fencing etcd{T(60), "etcd:cluster=1 jobs"};
  ASSERT_TRUE(gate.admit(etcd).ok());
  Status other = gate.admit(Fencing{T(4), "redis://h:1/0 jobs"});
  EXPECT_EQ(other.code(), Code::kFenced);
  EXPECT_NE(other.message().find("'etcd:cluster=1 jobs'"), std::string::npos) << other.message();
  EXPECT_NE(other.message().find("'redis://h:1/0 jobs'"), std::string::npos) << other.message();
  EXPECT_EQ(gate.admit(Fencing{T(99), "redis://h:1/0 jobs"}).code(), Code::kFenced);
  EXPECT_EQ(gate.admit(T(99)).code(), Code::kFenced) << "a bare token cannot prove its lock";
  bool wrote = false;
  EXPECT_EQ(gate.run(Fencing{T(5), "redis://h:1/0 jobs"}, [&] { wrote = true; }).code(),
            Code::kFenced);
  EXPECT_FALSE(wrote);
  EXPECT_EQ(gate.record(), etcd) << "nothing was recorded";

  ASSERT_TRUE(gate.adopt(Fencing{T(4), "redis://h:1/0 jobs"}).ok());
  EXPECT_TRUE(gate.admit(Fencing{T(5), "redis://h:1/0 jobs"}).ok());
  EXPECT_EQ(gate.admit(Fencing{T(3), "redis://h:1/0 jobs"}).message(),
            "rejected: stale token 3 < 5");
  EXPECT_EQ(gate.admit(Fencing{T(61), "etcd:cluster=1 jobs"}).code(), Code::kFenced);
  EXPECT_EQ(gate.admit(Fencing{T(9), "bad\nissuer"}).code(), Code::kInvalidArgument);
}

// Bare tokens (one lock, the old calls) compare as before, and the first named token that
// passes names the gate.
TEST(FenceGate, AnUnnamedGateIsNamedByTheFirstNamedTokenThatPasses) {
  FenceGate gate;
  ASSERT_TRUE(gate.admit(T(5)).ok());
  EXPECT_EQ(gate.admit(Fencing{T(4), "redis://h:1/0 jobs"}).message(),
            "rejected: stale token 4 < 5");
  EXPECT_TRUE(gate.admit(Fencing{T(6), "redis://h:1/0 jobs"}).ok());
  EXPECT_EQ(gate.record(), (Fencing{T(6), "redis://h:1/0 jobs"}));
  EXPECT_EQ(gate.admit(T(7)).code(), Code::kFenced);
}

// Writes that run under the gate happen in token order, whatever the threads' interleaving.
TEST(FenceGate, WritesUnderTheGateNeverGoBackwardsAcrossThreads) {
  FenceGate gate;
  std::vector<std::uint64_t> written;  // appended only under the gate
  std::vector<std::jthread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < 500; ++i) {
        const std::uint64_t token = i * 4 + static_cast<std::uint64_t>(t);
        (void)gate.run(T(token), [&] { written.push_back(token); });
      }
    });
  }
  threads.clear();  // joins
  ASSERT_FALSE(written.empty());
  EXPECT_TRUE(std::is_sorted(written.begin(), written.end()));
  EXPECT_EQ(gate.highest(), T(written.back()));
}

}  // namespace
}  // namespace fencelock
