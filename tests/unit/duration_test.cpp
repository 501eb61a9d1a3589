// Specification of human durations (src/core/duration.h): a whole number and a required unit
// (ms, s, m, h); anything else is an InvalidArgument.
#include "core/duration.h"

#include <chrono>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "core/saturate.h"
#include "fencelock/options.h"
#include "unit/printers.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

milliseconds parse_ok(std::string_view text) {
  auto parsed = parse_duration(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status().to_string();
  return parsed.ok() ? *parsed : milliseconds(-1);
}

TEST(ParseDuration, MillisecondsSecondsMinutesAndHours) {
  EXPECT_EQ(parse_ok("500ms"), 500ms);
  EXPECT_EQ(parse_ok("10s"), 10s);
  EXPECT_EQ(parse_ok("2m"), 2min);
  EXPECT_EQ(parse_ok("1h"), 1h);
}

TEST(ParseDuration, ZeroIsAcceptedWithAUnit) {
  EXPECT_EQ(parse_ok("0ms"), 0ms);
  EXPECT_EQ(parse_ok("0s"), 0ms);
}

// The cap (kMaxDuration, 596 h) is what every backend can represent: PostgreSQL's lock_timeout
// is a 32-bit count of milliseconds, and no deadline `now + d` can overflow below it.
TEST(ParseDuration, TheLongestEveryBackendCanRepresentIsAccepted) {
  EXPECT_EQ(parse_ok("596h"), std::chrono::hours(596));
  EXPECT_EQ(parse_ok("35760m"), std::chrono::hours(596));
  EXPECT_EQ(parse_ok("2145600000ms"), kMaxDuration);
  EXPECT_EQ(kMaxDuration, std::chrono::hours(596));
  EXPECT_LT(kMaxDuration.count(), INT32_MAX);
}

TEST(ParseDuration, LongerThanTheCapIsTooLargeAndNamesTheCap) {
  for (const char* text : {"597h", "2145600001ms", "2562047h", "9223372036854775807ms"}) {
    auto parsed = parse_duration(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.code(), Code::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("too large (at most 596h"), std::string::npos)
        << parsed.status().message();
  }
}

class RejectedDuration : public ::testing::TestWithParam<const char*> {};

TEST_P(RejectedDuration, IsInvalidArgumentNamingTheInput) {
  auto parsed = parse_duration(GetParam());
  ASSERT_FALSE(parsed.ok()) << "'" << GetParam() << "' was accepted";
  EXPECT_EQ(parsed.code(), Code::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find(GetParam()), std::string::npos)
      << parsed.status().message();
}

INSTANTIATE_TEST_SUITE_P(ParseDuration, RejectedDuration,
                         ::testing::Values("",              // empty
                                           "10",            // bare number: the unit is required
                                           "10x",           // unknown unit
                                           "10 s",          // space before the unit
                                           "10S",           // units are lower case
                                           "250us",         // finer than milliseconds
                                           "-1s",           // negative
                                           "-0ms",          // negative zero is still a sign
                                           "+1s",           // no sign at all
                                           "1.5s",          // fractions are not accepted
                                           "s",             // unit without a number
                                           "ms10",          // unit before the number
                                           "1s2",           // trailing garbage
                                           "2145600001ms",  // past the cap
                                           "597h",          // past the cap
                                           "9223372036854775807ms",  // int64 in ms
                                           "9223372036854775808ms",  // past int64 in ms
                                           "9223372036854776s",  // one second past the int64 limit
                                           "2562047788016h",     // one hour past the int64 limit
                                           "99999999999999999999999h"));

TEST(ParseDuration, OverflowIsReportedAsTooLarge) {
  auto parsed = parse_duration("9223372036854775807s");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("too large"), std::string::npos);
}

TEST(FormatDuration, PicksTheLargestWholeUnit) {
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(10s), "10s");
  EXPECT_EQ(format_duration(2min), "2m");
  EXPECT_EQ(format_duration(596h), "596h");
  EXPECT_EQ(format_duration(90s), "90s");
}

TEST(FormatDuration, ZeroIsZeroMilliseconds) { EXPECT_EQ(format_duration(0ms), "0ms"); }

TEST(FormatDuration, FractionsOfASecondShowOneDecimal) {
  EXPECT_EQ(format_duration(1500ms), "1.5s");
}

TEST(FormatDuration, WholeUnitsParseBackToTheSameDuration) {
  for (milliseconds d :
       {milliseconds(1), milliseconds(999), milliseconds(1000), milliseconds(59s),
        milliseconds(60s), milliseconds(3min), milliseconds(1h), milliseconds(25h)}) {
    EXPECT_EQ(parse_ok(format_duration(d)), d) << format_duration(d);
  }
}

// Deadlines saturate at the clock's ends instead of wrapping (signed overflow is undefined).
TEST(DeadlineAfter, SaturatesInsteadOfWrapping) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(deadline_after(now, 5s), now + 5s);
  EXPECT_EQ(deadline_after(now, -5s), now - 5s);
  EXPECT_EQ(deadline_after(now, milliseconds::max()), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, std::chrono::hours(2562048)), Clock::time_point::max());
  EXPECT_EQ(deadline_after(Clock::time_point::max() - 1s, 2s), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, milliseconds::min()), Clock::time_point::min());
  EXPECT_EQ(deadline_after(Clock::time_point::min() + 1s, -2s), Clock::time_point::min());
  EXPECT_EQ(deadline_after(now, kMaxDuration), now + kMaxDuration);
}

}  // namespace
}  // namespace fencelock::detail
