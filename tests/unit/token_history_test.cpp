// Specification of TokenHistory (src/core/token_history.h): the largest token a Client was
// granted per key, remembered for the most recently granted keys only.
#include "core/token_history.h"

#include <gtest/gtest.h>

#include <string>

namespace fencelock::detail {
namespace {

TEST(TokenHistory, AKeyNeverGrantedHasNone) {
  TokenHistory history;
  EXPECT_EQ(history.largest("jobs/a"), 0u);
}

TEST(TokenHistory, KeepsTheLargestTokenPerKey) {
  TokenHistory history;
  history.record("jobs/a", 7);
  history.record("jobs/a", 5);  // a shared grant completing out of order never lowers it
  history.record("jobs/b", 9);
  EXPECT_EQ(history.largest("jobs/a"), 7u);
  EXPECT_EQ(history.largest("jobs/b"), 9u);
  history.record("jobs/a", 11);
  EXPECT_EQ(history.largest("jobs/a"), 11u);
}

TEST(TokenHistory, ForgetsTheKeyGrantedLongestAgoWhenFull) {
  TokenHistory history(2);
  history.record("a", 1);
  history.record("b", 2);
  history.record("a", 3);  // a is now the most recent
  history.record("c", 4);  // b goes
  EXPECT_EQ(history.largest("a"), 3u);
  EXPECT_EQ(history.largest("b"), 0u);
  EXPECT_EQ(history.largest("c"), 4u);
}

TEST(TokenHistory, HoldsAtMostItsCapacity) {
  TokenHistory history(100);
  for (int i = 0; i < 1000; ++i) history.record("key" + std::to_string(i), 1);
  int remembered = 0;
  for (int i = 0; i < 1000; ++i) remembered += history.largest("key" + std::to_string(i)) != 0;
  EXPECT_EQ(remembered, 100);
  EXPECT_EQ(history.largest("key999"), 1u);
  EXPECT_EQ(history.largest("key899"), 0u);
}

}  // namespace
}  // namespace fencelock::detail
