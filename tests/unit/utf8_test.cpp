// first_invalid_utf8 (core/utf8.h): the check PostgreSQL lock names pass before they are sent,
// which must accept what PostgreSQL's UTF8 encoding accepts and refuse what it refuses.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/utf8.h"

namespace fencelock::detail {
namespace {

constexpr auto kValid = std::string_view::npos;

TEST(Utf8, AsciiAndWellFormedSequencesOfEveryLengthAreValid) {
  EXPECT_EQ(first_invalid_utf8(""), kValid);
  EXPECT_EQ(first_invalid_utf8("jobs/nightly-1"), kValid);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9"), kValid);            // U+00E9
  EXPECT_EQ(first_invalid_utf8("\xe2\x82\xac"), kValid);           // U+20AC
  EXPECT_EQ(first_invalid_utf8("\xed\x9f\xbf"), kValid);           // U+D7FF, below surrogates
  EXPECT_EQ(first_invalid_utf8("\xf0\x9f\x94\x92 lock"), kValid);  // U+1F512
  EXPECT_EQ(first_invalid_utf8("\xf4\x8f\xbf\xbf"), kValid);       // U+10FFFF
}

TEST(Utf8, TheOffsetOfTheFirstBadSequenceIsReported) {
  EXPECT_EQ(first_invalid_utf8("bad-\xff-key"), 4u);
  EXPECT_EQ(first_invalid_utf8("a\xfe"), 1u);
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);              // a lone continuation byte
  EXPECT_EQ(first_invalid_utf8("ok\xc3"), 2u);            // cut short at the end
  EXPECT_EQ(first_invalid_utf8("\xc3(x"), 0u);            // a continuation byte missing
  EXPECT_EQ(first_invalid_utf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xe0\x80\xaf"), 0u);      // overlong, three bytes
  EXPECT_EQ(first_invalid_utf8("\xf0\x80\x80\xaf"), 0u);  // overlong, four bytes
  EXPECT_EQ(first_invalid_utf8("x\xed\xa0\x80"), 1u);     // U+D800, a surrogate
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xf5\x80\x80\x80"), 0u);  // no such lead byte
}

}  // namespace
}  // namespace fencelock::detail
