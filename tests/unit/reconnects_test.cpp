// The one reconnect back-off (src/core/reconnects.h) every driver uses: it was written three times
// and had drifted (Redis backed off when a server did not answer in time, PostgreSQL did not).
#include "core/reconnects.h"

#include <chrono>

#include <gtest/gtest.h>

#include "unit/printers.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(ReconnectBackoff, ANoAnswerBacksOffDoublingFrom25msTo1sAndReturnsTheLastError) {
  ReconnectBackoff backoff;
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(backoff.refusal(t0).ok()) << "no back-off before any failure";
  Clock::time_point now = t0;
  for (auto expected : {25ms, 50ms, 100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms}) {
    EXPECT_TRUE(backoff.failed(Status(Code::kUnavailable, "no answer"), now));
    EXPECT_EQ(backoff.refusal(now + expected - 1ms).code(), Code::kUnavailable) << expected.count();
    EXPECT_EQ(backoff.refusal(now + expected - 1ms).message(), "no answer");
    EXPECT_TRUE(backoff.refusal(now + expected).ok()) << expected.count();
    now += expected;
  }
}

TEST(ReconnectBackoff, ADeadlineExceededBacksOffTooAndOtherErrorsDoNot) {
  ReconnectBackoff backoff;
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(backoff.failed(Status(Code::kDeadlineExceeded, "silent"), t0));
  EXPECT_EQ(backoff.refusal(t0).code(), Code::kDeadlineExceeded);
  ReconnectBackoff refused;
  for (Code code : {Code::kUnauthenticated, Code::kPermissionDenied, Code::kInvalidArgument}) {
    EXPECT_FALSE(refused.failed(Status(code, "a clear error"), t0));
    EXPECT_TRUE(refused.refusal(t0).ok()) << "a retry must get the clear error again at once";
  }
}

TEST(ReconnectBackoff, ASuccessEndsTheBackOffAndStartsOverFrom25ms) {
  ReconnectBackoff backoff;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 5; ++i) (void)backoff.failed(Status(Code::kUnavailable, "down"), t0);
  backoff.connected();
  EXPECT_TRUE(backoff.refusal(t0).ok());
  (void)backoff.failed(Status(Code::kUnavailable, "down"), t0);
  EXPECT_FALSE(backoff.refusal(t0 + 24ms).ok());
  EXPECT_TRUE(backoff.refusal(t0 + 25ms).ok());
}

}  // namespace
}  // namespace fencelock::detail
