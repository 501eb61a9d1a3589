// The PostgreSQL advisory key mapping (src/postgres/advisory_key.h): canonical decimal int64
// names are used as is, every other name is the first 8 bytes of its SHA-256 as a signed
// big-endian bigint. Expected values were computed with Python's hashlib and struct '>q'.
#include "postgres/advisory_key.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace fencelock::detail::postgres {
namespace {

std::string hex(const std::array<std::uint8_t, 32>& digest) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto b : digest) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

TEST(Sha256, MatchesTheFipsTestVectors) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IsRightAroundThePaddingBoundary) {
  EXPECT_EQ(hex(sha256(std::string(55, 'x'))),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(hex(sha256(std::string(56, 'x'))),
            "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(hex(sha256(std::string(63, 'x'))),
            "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  EXPECT_EQ(hex(sha256(std::string(64, 'x'))),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(hex(sha256(std::string(65, 'x'))),
            "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9");
}

TEST(AdvisoryKey, CanonicalDecimalInt64NamesAreUsedAsIs) {
  EXPECT_EQ(advisory_key("12345"), 12345);
  EXPECT_EQ(advisory_key("0"), 0);
  EXPECT_EQ(advisory_key("-7"), -7);
  EXPECT_EQ(advisory_key("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(advisory_key("-9223372036854775808"), std::numeric_limits<std::int64_t>::min());
}

TEST(AdvisoryKey, OtherNamesAreTheFirstEightBytesOfTheirSha256Signed) {
  EXPECT_EQ(advisory_key("jobs/nightly"), -7836533424575595787LL);
  EXPECT_EQ(advisory_key("12345a"), 2140511662358537241LL);
  // Non-canonical spellings of numbers are names, so "007" and "7" never collide.
  EXPECT_EQ(advisory_key("007"), 7106483370208201996LL);
  EXPECT_EQ(advisory_key("-0"), -1334769264506957123LL);
  EXPECT_EQ(advisory_key("+5"), 278873215304611275LL);
  EXPECT_EQ(advisory_key("9223372036854775808"), -4196621543906624989LL);  // out of range
}

}  // namespace
}  // namespace fencelock::detail::postgres
