// Specification of the value types of include/fencelock/types.h and status.h (the contract in
// docs/PROTOCOLS.md): lock keys are 1..512 non-NUL bytes, owner ids are 128 random bits, tokens are
// ordered, and the types cannot be mixed up.
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/token_text.h"
#include "fencelock/fence.h"
#include "fencelock/fmt.h"
#include "fencelock/status.h"
#include "fencelock/types.h"
#include "unit/printers.h"

namespace fencelock {
namespace {

using ::testing::MatchesRegex;

// --- distinct types do not mix (STYLE.md principle 2) -----------------------------------------

static_assert(!std::is_constructible_v<LockKey, std::string>,
              "a LockKey is built only through LockKey::make, which validates it");
static_assert(!std::is_constructible_v<LockKey, const char*>);
static_assert(!std::is_convertible_v<std::string, LockKey>);
static_assert(!std::is_convertible_v<OwnerId, LockKey>, "an owner id is not a key");
static_assert(!std::is_convertible_v<LockKey, OwnerId>, "a key is not an owner id");
static_assert(!std::is_constructible_v<OwnerId, std::string>);
static_assert(!std::is_default_constructible_v<OwnerId>, "owner ids come from random()/from_hex()");
static_assert(!std::is_convertible_v<std::uint64_t, FencingToken>, "tokens are built explicitly");
static_assert(!std::is_convertible_v<FencingToken, std::uint64_t>);
static_assert(!std::is_convertible_v<int, Status>);

// --- LockKey -----------------------------------------------------------------------------------

TEST(LockKey, AcceptsOneByte) {
  auto key = LockKey::make("k");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->str(), "k");
}

TEST(LockKey, AcceptsExactly512Bytes) {
  std::string name(LockKey::kMaxBytes, 'a');
  auto key = LockKey::make(name);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(key->str(), name);
}

TEST(LockKey, AcceptsAnyNonNulBytes) {
  for (const std::string& name :
       {std::string("{tag}"), std::string("}{"), std::string("jobs:*"), std::string("line\nbreak"),
        std::string("caf\xC3\xA9 \xE2\x9C\x93"), std::string("\x01\x7f\xff"), std::string(" "),
        std::string("a/b\\c")}) {
    auto key = LockKey::make(name);
    ASSERT_TRUE(key.ok()) << key.status().to_string();
    EXPECT_EQ(key->str(), name);
  }
}

TEST(LockKey, AcceptsEveryByteValueExceptNul) {
  std::string all;
  for (int b = 1; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto key = LockKey::make(all);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->str(), all);
}

TEST(LockKey, RejectsEmpty) { EXPECT_EQ(LockKey::make("").code(), Code::kInvalidArgument); }

TEST(LockKey, Rejects513Bytes) {
  EXPECT_EQ(LockKey::make(std::string(513, 'a')).code(), Code::kInvalidArgument);
}

TEST(LockKey, Rejects10Kilobytes) {
  EXPECT_EQ(LockKey::make(std::string(std::size_t{10} * 1024, 'a')).code(), Code::kInvalidArgument);
}

TEST(LockKey, RejectsAnEmbeddedNul) {
  EXPECT_EQ(LockKey::make(std::string("a\0b", 3)).code(), Code::kInvalidArgument);
  EXPECT_EQ(LockKey::make(std::string("\0", 1)).code(), Code::kInvalidArgument);
  EXPECT_EQ(LockKey::make(std::string("ab\0", 3)).code(), Code::kInvalidArgument);
}

TEST(LockKey, EqualNamesMakeEqualKeysAndKeysAreOrdered) {
  EXPECT_EQ(*LockKey::make("a"), *LockKey::make("a"));
  EXPECT_NE(*LockKey::make("a"), *LockKey::make("b"));
  EXPECT_LT(*LockKey::make("a"), *LockKey::make("b"));
}

// --- OwnerId -----------------------------------------------------------------------------------

TEST(OwnerId, RandomIs32LowerCaseHexDigits) {
  EXPECT_THAT(OwnerId::random().hex(), MatchesRegex("[0-9a-f]{32}"));
}

TEST(OwnerId, ThousandRandomDrawsAreAllDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(OwnerId::random().hex());
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(OwnerId, FromHexRoundTrips) {
  OwnerId id = OwnerId::random();
  auto back = OwnerId::from_hex(id.hex());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, id);
  EXPECT_EQ(back->hex(), id.hex());
}

TEST(OwnerId, FromHexKeepsTheExactDigits) {
  const std::string hex = "0123456789abcdeffedcba9876543210";
  auto id = OwnerId::from_hex(hex);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->hex(), hex);
}

TEST(OwnerId, FromHexRejectsWrongLengthUpperCaseAndNonHex) {
  EXPECT_EQ(OwnerId::from_hex("").code(), Code::kInvalidArgument);
  EXPECT_EQ(OwnerId::from_hex(std::string(31, 'a')).code(), Code::kInvalidArgument);
  EXPECT_EQ(OwnerId::from_hex(std::string(33, 'a')).code(), Code::kInvalidArgument);
  EXPECT_EQ(OwnerId::from_hex(std::string(32, 'A')).code(), Code::kInvalidArgument);
  EXPECT_EQ(OwnerId::from_hex(std::string(31, 'a') + "g").code(), Code::kInvalidArgument);
}

TEST(OwnerId, ShortHexIsTheFirstEightDigits) {
  OwnerId id = OwnerId::random();
  EXPECT_EQ(id.short_hex().size(), 8u);
  EXPECT_EQ(id.short_hex(), id.hex().substr(0, 8));
}

// --- FencingToken ------------------------------------------------------------------------------

// A token prints as its decimal value with iostreams and {fmt} (fencelock/fmt.h), the whole
// uint64 range included; a Status formats as to_string().
TEST(FencingToken, PrintsAndFormatsAsItsDecimalValue) {
  std::ostringstream out;
  out << FencingToken(42) << ' ' << FencingToken(UINT64_MAX);
  EXPECT_EQ(out.str(), "42 18446744073709551615");
  EXPECT_EQ(fmt::format("{}", FencingToken(7)), "7");
  EXPECT_EQ(fmt::format("{:>4}|{:x}", FencingToken(7), FencingToken(255)), "   7|ff");
  EXPECT_EQ(fmt::format("{}", Status(Code::kLocked, "held")), "locked: held");
}

TEST(FencingToken, OrdersByValue) {
  constexpr FencingToken one(1), two(2);
  static_assert(one < two);
  EXPECT_LT(one, two);
  EXPECT_GT(two, one);
  EXPECT_EQ(FencingToken(7), FencingToken(7));
  EXPECT_NE(FencingToken(7), FencingToken(8));
  EXPECT_LT(FencingToken(1), FencingToken(UINT64_MAX));
  EXPECT_EQ(FencingToken(42).value(), 42u);
}

// --- Status and Result -------------------------------------------------------------------------

TEST(Status, DefaultIsOk) {
  Status st;
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(st.code(), Code::kOk);
  EXPECT_EQ(st.to_string(), "ok");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(Status, ToStringIsCodeNameThenMessage) {
  EXPECT_EQ(Status(Code::kLocked, "key 'jobs' is held by another owner").to_string(),
            "locked: key 'jobs' is held by another owner");
  EXPECT_EQ(Status(Code::kUnavailable, "").to_string(), "unavailable");
}

TEST(Status, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (Code c : {Code::kOk, Code::kLocked, Code::kUnavailable, Code::kDeadlineExceeded,
                 Code::kCancelled, Code::kInvalidArgument, Code::kUnauthenticated,
                 Code::kPermissionDenied, Code::kInternal, Code::kFenced, Code::kAborted}) {
    EXPECT_NE(code_name(c), "unknown");
    names.insert(code_name(c));
  }
  EXPECT_EQ(names.size(), 11u);
  EXPECT_EQ(code_name(Code::kAborted), "aborted");
  EXPECT_EQ(code_name(Code::kLocked), "locked");
  EXPECT_EQ(code_name(Code::kInvalidArgument), "invalid argument");
}

// One rule for tokens as text (core/token_text.h), the same as src/redis/scripts/tokens.lua.
TEST(CanonicalToken, AcceptsEveryUint64InCanonicalFormAndNothingElse) {
  using detail::parse_canonical_token;
  EXPECT_EQ(parse_canonical_token("0"), 0u);
  EXPECT_EQ(parse_canonical_token("9"), 9u);
  EXPECT_EQ(parse_canonical_token("10"), 10u);
  EXPECT_EQ(parse_canonical_token("9007199254740993"), 9007199254740993ULL);
  EXPECT_EQ(parse_canonical_token("18446744073709551615"), 18446744073709551615ULL);
  for (const char* bad :
       {"", "00", "07", "00000000000000000007", "-1", "+1", " 1", "1 ", "1e3", "abc", "12abc",
        "18446744073709551616", "99999999999999999999", "100000000000000000000", "0x10"}) {
    EXPECT_FALSE(parse_canonical_token(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(Result, HoldsAValue) {
  Result<int> r = 5;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 5);
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(r.code(), Code::kOk);
  EXPECT_TRUE(r.status().ok());
}

TEST(Result, HoldsAnError) {
  Result<int> r = Status(Code::kCancelled, "stopped");
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.code(), Code::kCancelled);
  EXPECT_EQ(r.status().message(), "stopped");
}

// A Result built from an OK Status holds neither a value nor an error: it was ok() == false with
// code() == kOk in release builds. It is kInternal now, as absl::StatusOr makes it.
TEST(Result, BuiltFromAnOkStatusIsAnInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.code(), Code::kInternal);
  EXPECT_FALSE(r.status().ok());
  EXPECT_NE(r.status().message().find("OK Status"), std::string::npos) << r.status().message();
}

TEST(Result, MovesItsValueOut) {
  Result<std::string> r = std::string("payload");
  EXPECT_EQ(r->size(), 7u);
  std::string taken = std::move(r).value();
  EXPECT_EQ(taken, "payload");
}

// The redis-plus-plus bug (a key passed where the value belongs) must not compile: a fence's key
// is a ResourceKey, which neither a string nor a string_view converts to implicitly, nor it to
// them, so RedisFence::set(value, key, token) and etcd_fenced_put(lease, value, key) are errors.
template <typename Key, typename Value, typename Token>
constexpr bool kCanSet = requires(RedisFence& fence, Key key, Value value, Token token) {
  fence.set(key, value, token);
};

TEST(ResourceKey, AKeyAndAValueCannotBeSwappedInAFenceCall) {
  static_assert(!std::is_convertible_v<std::string_view, ResourceKey>);
  static_assert(!std::is_convertible_v<std::string, ResourceKey>);
  static_assert(!std::is_convertible_v<ResourceKey, std::string_view>);
  static_assert(kCanSet<ResourceKey, std::string_view, FencingToken>);
  static_assert(kCanSet<ResourceKey, std::string_view, Fencing>);
  static_assert(!kCanSet<std::string_view, ResourceKey, FencingToken>);
  static_assert(!kCanSet<std::string_view, ResourceKey, Fencing>);
  static_assert(!std::is_invocable_v<decltype(&etcd_fenced_put), const Lease&, std::string_view,
                                     ResourceKey>);
  EXPECT_EQ(ResourceKey("accounts/42").str(), "accounts/42");
  EXPECT_NE(ResourceKey("a"), ResourceKey("b"));
}

}  // namespace
}  // namespace fencelock
