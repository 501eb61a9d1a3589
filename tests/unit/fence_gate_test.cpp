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
