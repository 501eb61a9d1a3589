// Specification of how the Redis backends read their scripts' replies (src/redis/script_replies.h):
// only the exact shapes src/redis/scripts/*.lua return count as answers. Replies are built by
// hiredis' reader from RESP bytes, as a connection builds them (fuzz/fuzz_redis_replies.cpp
// feeds the same functions arbitrary bytes; its seed corpus holds the "Before:" cases).
#include "redis/script_replies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string_view>

namespace fencelock::detail::redis {
namespace {

using ::testing::ElementsAre;

struct ReplyFree {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using OwnedReply = std::unique_ptr<redisReply, ReplyFree>;

// The one reply `resp` holds (RESP2 bytes).
OwnedReply read_reply(std::string_view resp) {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(),
                                                                  &redisReaderFree);
  EXPECT_EQ(redisReaderFeed(reader.get(), resp.data(), resp.size()), REDIS_OK);
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &reply), REDIS_OK);
  EXPECT_NE(reply, nullptr) << resp;
  return OwnedReply(static_cast<redisReply*>(reply));
}

TEST(AcquireReply, AGrantIsOneTheCounterAsTextAndHowFarItRanAheadOfTheClock) {
  auto answer =
      interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$19\r\n1883555027150176256\r\n:0\r\n"));
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->granted);
  EXPECT_EQ(answer->counter, 1883555027150176256u);
  EXPECT_EQ(answer->ahead_ms, 0);
  // The whole uint64 range, exactly (a Lua number would round it).
  auto top =
      interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$20\r\n18446744073709551615\r\n:1500\r\n"));
  ASSERT_TRUE(top.has_value());
  EXPECT_EQ(top->counter, 18446744073709551615u);
  EXPECT_EQ(top->ahead_ms, 1500);
}

TEST(AcquireReply, ARefusalIsZeroAndTheRetryTime) {
  auto answer = interpret_acquire_reply(*read_reply("*2\r\n:0\r\n:1500\r\n"));
  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(answer->granted);
  EXPECT_EQ(answer->retry_ms, 1500);
  auto no_ttl = interpret_acquire_reply(*read_reply("*2\r\n:0\r\n:-1\r\n"));
  ASSERT_TRUE(no_ttl.has_value());
  EXPECT_EQ(no_ttl->retry_ms, -1);
}

// Before: the elements' types were not checked, so a string counter read as 0 and became a
// fencing token of 0, and a negative one wrapped to a huge token. Now the counter is text (Lua
// numbers are doubles: an integer reply would be rounded above 2^53) and must be a canonical
// token of at least 1.
TEST(AcquireReply, AGrantWithoutACanonicalCounterOfOneOrMoreIsNoAnswer) {
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n:42\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$1\r\n0\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$2\r\n-5\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$3\r\n042\r\n:0\r\n")));
  EXPECT_FALSE(
      interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$20\r\n18446744073709551616\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$2\r\n42\r\n:-1\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n$2\r\n42\r\n$1\r\n0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n$1\r\n1\r\n$1\r\n7\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:1\r\n*0\r\n:0\r\n")));
  // The shape of the script before clock-seeded counters: {1, integer}.
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*2\r\n:1\r\n:42\r\n")));
}

TEST(AcquireReply, EveryOtherShapeIsNoAnswer) {
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*2\r\n:2\r\n:7\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*3\r\n:0\r\n:7\r\n:7\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*4\r\n:1\r\n$1\r\n7\r\n:0\r\n:0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*2\r\n:0\r\n$1\r\n7\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*0\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("*-1\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply(":1\r\n")));
  EXPECT_FALSE(interpret_acquire_reply(*read_reply("+OK\r\n")));
}

TEST(RenewReply, OneVotePerLeaseInTheBatchsOrder) {
  EXPECT_THAT(interpret_renew_reply(*read_reply("*3\r\n:1\r\n:0\r\n:1\r\n"), 3),
              ElementsAre(RenewVote::kConfirmed, RenewVote::kRejected, RenewVote::kConfirmed));
}

// Before: extra elements were counted for the leases of the next batch of the round, so a reply
// with too many ones confirmed leases that this batch never renewed.
TEST(RenewReply, ElementsPastTheBatchAreIgnored) {
  EXPECT_THAT(interpret_renew_reply(*read_reply("*3\r\n:1\r\n:1\r\n:1\r\n"), 2),
              ElementsAre(RenewVote::kConfirmed, RenewVote::kConfirmed));
}

TEST(RenewReply, MissingOrMisshapenElementsAreNoAnswer) {
  EXPECT_THAT(interpret_renew_reply(*read_reply("*4\r\n:1\r\n$1\r\n1\r\n:2\r\n$-1\r\n"), 5),
              ElementsAre(RenewVote::kConfirmed, RenewVote::kNoAnswer, RenewVote::kNoAnswer,
                          RenewVote::kNoAnswer, RenewVote::kNoAnswer));
  EXPECT_THAT(interpret_renew_reply(*read_reply(":1\r\n"), 2),
              ElementsAre(RenewVote::kNoAnswer, RenewVote::kNoAnswer));
  EXPECT_THAT(interpret_renew_reply(*read_reply("*0\r\n"), 1), ElementsAre(RenewVote::kNoAnswer));
  EXPECT_TRUE(interpret_renew_reply(*read_reply("*1\r\n:1\r\n"), 0).empty());
}

TEST(ReleaseReply, ZeroOrOneIsAnAnswer) {
  EXPECT_TRUE(release_answered(*read_reply(":1\r\n")));
  EXPECT_TRUE(release_answered(*read_reply(":0\r\n")));
  EXPECT_FALSE(release_answered(*read_reply(":2\r\n")));
  EXPECT_FALSE(release_answered(*read_reply("$1\r\n1\r\n")));
  EXPECT_FALSE(release_answered(*read_reply("$-1\r\n")));
  EXPECT_FALSE(release_answered(*read_reply("*1\r\n:1\r\n")));
}

TEST(RaiseFenceReply, OnlyTheIntegerOneConfirms) {
  EXPECT_TRUE(raise_fence_confirmed(*read_reply(":1\r\n")));
  EXPECT_FALSE(raise_fence_confirmed(*read_reply(":0\r\n")));
  EXPECT_FALSE(raise_fence_confirmed(*read_reply("+1\r\n")));
  EXPECT_FALSE(raise_fence_confirmed(*read_reply("*1\r\n:1\r\n")));
}

TEST(InspectReply, TheHolderTheTimeLeftTheTokenAndTheMetadata) {
  auto holder = interpret_inspect_reply(
      *read_reply("*3\r\n$5\r\nowner\r\n:1999\r\n$22\r\n7 {\"host\":\"a\",\"pid\":7}\r\n"));
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->owner, "owner");
  EXPECT_EQ(holder->pttl, 1999);
  EXPECT_EQ(holder->token, 7u);
  EXPECT_EQ(holder->metadata, "{\"host\":\"a\",\"pid\":7}");
}

TEST(InspectReply, AForeignHolderHasNoTokenAndNoMetadata) {
  auto holder = interpret_inspect_reply(*read_reply("*3\r\n$3\r\nabc\r\n:-1\r\n$0\r\n\r\n"));
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->token, 0u);
  EXPECT_EQ(holder->metadata, "");
  auto not_a_token =
      interpret_inspect_reply(*read_reply("*3\r\n$3\r\nabc\r\n:5\r\n$4\r\n07 x\r\n"));
  ASSERT_TRUE(not_a_token.has_value());
  EXPECT_EQ(not_a_token->token, 0u);
  EXPECT_EQ(not_a_token->metadata, "x");
}

TEST(InspectReply, AFreeLockAndEveryOtherShapeIsNoHolder) {
  EXPECT_FALSE(interpret_inspect_reply(*read_reply("$-1\r\n")));
  EXPECT_FALSE(interpret_inspect_reply(*read_reply("*3\r\n:1\r\n:5\r\n$1\r\nx\r\n")));
  EXPECT_FALSE(interpret_inspect_reply(*read_reply("*3\r\n$1\r\no\r\n$1\r\n5\r\n$1\r\nx\r\n")));
  EXPECT_FALSE(interpret_inspect_reply(*read_reply("*2\r\n$1\r\no\r\n:5\r\n")));
}

TEST(ScanReply, TheCursorAndThePagesKeys) {
  // The keys view the reply's strings: it must outlive them.
  const OwnedReply reply = read_reply("*2\r\n$2\r\n17\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n");
  const auto page = interpret_scan_reply(*reply);
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->cursor, "17");
  EXPECT_THAT(page->keys, ElementsAre("a", "bc"));
  const auto last = interpret_scan_reply(*read_reply("*2\r\n$1\r\n0\r\n*0\r\n"));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->cursor, "0");
  EXPECT_TRUE(last->keys.empty());
}

// Before, a page of another shape was read as an empty page or as a cursor of "" (a key that is
// an integer, a cursor that is nil): now the instance did not answer.
TEST(ScanReply, EveryOtherShapeIsNoAnswer) {
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*2\r\n:0\r\n*0\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*2\r\n$-1\r\n*0\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*2\r\n$1\r\n0\r\n:3\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*2\r\n$1\r\n0\r\n*1\r\n:3\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*2\r\n$1\r\n0\r\n*1\r\n*0\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("*1\r\n$1\r\n0\r\n")));
  EXPECT_FALSE(interpret_scan_reply(*read_reply("-ERR no\r\n")));
}

TEST(ReplyText, TheTextOfStringStatusAndErrorRepliesAndEmptyForOthers) {
  EXPECT_EQ(reply_text(read_reply("$3\r\nabc\r\n").get()), "abc");
  EXPECT_EQ(reply_text(read_reply("+OK\r\n").get()), "OK");
  EXPECT_EQ(reply_text(read_reply("-NOSCRIPT x\r\n").get()), "NOSCRIPT x");
  EXPECT_EQ(reply_text(read_reply(":5\r\n").get()), "");
  EXPECT_EQ(reply_text(read_reply("$-1\r\n").get()), "");
  EXPECT_EQ(reply_text(nullptr), "");
}

}  // namespace
}  // namespace fencelock::detail::redis
