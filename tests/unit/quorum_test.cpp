// Specification of the Redlock arithmetic (src/core/quorum.h, docs/PROTOCOLS.md, "Redis and
// Redlock"): majorities, the drift allowance, the validity deadline and the round-1 token choice.
#include "core/quorum.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "unit/printers.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

TEST(Quorum, IsTheSmallestMajority) {
  const int expected[] = {1, 2, 2, 3, 3, 4, 4};
  for (int n = 1; n <= 7; ++n) EXPECT_EQ(quorum(n), expected[n - 1]) << "n = " << n;
}

TEST(Quorum, TwoQuorumsOfTheSameClusterAlwaysShareAnInstance) {
  // The property round 2 relies on: two majorities of n overlap.
  for (int n = 1; n <= 15; ++n) EXPECT_GT(2 * quorum(n), n) << "n = " << n;
}

TEST(Quorum, IsComputableAtCompileTime) {
  static_assert(quorum(3) == 2);
  static_assert(has_quorum(2, 3));
  static_assert(!has_quorum(1, 3));
}

TEST(HasQuorum, NeedsAMajorityOfConfirmations) {
  EXPECT_TRUE(has_quorum(1, 1));
  EXPECT_FALSE(has_quorum(0, 1));
  EXPECT_FALSE(has_quorum(1, 2));
  EXPECT_TRUE(has_quorum(2, 2));
  EXPECT_FALSE(has_quorum(1, 3));
  EXPECT_TRUE(has_quorum(2, 3));
  EXPECT_TRUE(has_quorum(3, 3));
  EXPECT_FALSE(has_quorum(2, 5));
  EXPECT_TRUE(has_quorum(3, 5));
  EXPECT_FALSE(has_quorum(3, 7));
  EXPECT_TRUE(has_quorum(4, 7));
}

TEST(DriftAllowance, IsTtlTimesFactorPlusTwoMilliseconds) {
  EXPECT_EQ(drift_allowance(10'000ms, 0.01), 102ms);
  EXPECT_EQ(drift_allowance(30'000ms, 0.01), 302ms);
  EXPECT_EQ(drift_allowance(1'000ms, 0.01), 12ms);
}

TEST(DriftAllowance, RoundsAFractionalMillisecondUp) {
  EXPECT_EQ(drift_allowance(150ms, 0.01), 4ms);  // 1.5 ms -> 2 ms, + 2 ms
  EXPECT_EQ(drift_allowance(101ms, 0.01), 4ms);  // 1.01 ms -> 2 ms, + 2 ms
  EXPECT_EQ(drift_allowance(1ms, 0.01), 3ms);    // 0.01 ms -> 1 ms, + 2 ms
}

TEST(DriftAllowance, ZeroFactorLeavesTheFixedTwoMilliseconds) {
  EXPECT_EQ(drift_allowance(10'000ms, 0.0), 2ms);
}

TEST(DriftAllowance, WholeMillisecondProductsAreNotRoundedUpForDefaultFactor) {
  // With the default factor 0.01 every multiple of 100 ms gives an exact allowance.
  for (std::int64_t ttl = 100; ttl <= 100'000; ttl += 100) {
    EXPECT_EQ(drift_allowance(milliseconds(ttl), 0.01), milliseconds(ttl / 100 + 2)) << ttl;
  }
}

TEST(ValidityDeadline, IsSendTimePlusTtlMinusDrift) {
  const steady_clock::time_point sent = steady_clock::time_point(1'000'000s);
  EXPECT_EQ(validity_deadline(sent, 10'000ms, 0.01), sent + 10'000ms - 102ms);
  EXPECT_EQ(validity_deadline(sent, 150ms, 0.01), sent + 146ms);
  EXPECT_EQ(validity_deadline(sent, 1'000ms, 0.0), sent + 998ms);
}

TEST(ValidityDeadline, EqualsNowPlusRemainingValidityForAnyElapsedTime) {
  // Redlock's "ttl - elapsed - drift from now" is the same instant as the deadline from `sent`.
  const steady_clock::time_point sent = steady_clock::time_point(5s);
  for (milliseconds elapsed : {0ms, 1ms, 37ms, 500ms}) {
    steady_clock::time_point now = sent + elapsed;
    EXPECT_EQ(validity_deadline(sent, 1'000ms, 0.01),
              now + (1'000ms - elapsed - drift_allowance(1'000ms, 0.01)));
  }
}

TEST(SelectToken, IsTheMaximumGrantedCounter) {
  std::vector<std::uint64_t> counters = {3, 17, 5};
  EXPECT_EQ(select_token(counters), FencingToken(17));
  std::vector<std::uint64_t> one = {1};
  EXPECT_EQ(select_token(one), FencingToken(1));
  std::vector<std::uint64_t> big = {UINT64_MAX - 1, 2, UINT64_MAX};
  EXPECT_EQ(select_token(big), FencingToken(UINT64_MAX));
}

TEST(SelectToken, IsNulloptWhenNoInstanceGranted) { EXPECT_EQ(select_token({}), std::nullopt); }

}  // namespace
}  // namespace fencelock::detail
