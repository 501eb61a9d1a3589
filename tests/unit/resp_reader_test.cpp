// RespReader: hiredis's RESP parser fed bytes, no I/O. What a server sends is parsed as hiredis
// parses it, in any split; and no reply may make the reader allocate more than kMaxReplyBytes:
// a 13-byte array header announcing 2^31 - 1 elements, a negative count, a bulk string announced
// as 2 GiB, or many small items are refused before anything is allocated for them, with an
// error that says what the server sent, and the stream stays failed.
#include "redis/resp_reader.h"

#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

namespace fencelock::detail::redis {
namespace {

Reply parse_one(RespReader& reader, std::string_view bytes) {
  EXPECT_TRUE(reader.feed(bytes).ok());
  auto reply = reader.next();
  EXPECT_TRUE(reply.ok()) << reply.status().to_string();
  return reply.ok() ? std::move(*reply) : Reply();
}

TEST(RespReader, ParsesEveryReplyTypeAsHiredisDoes) {
  RespReader reader;
  Reply r = parse_one(reader, "*5\r\n+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 5u);
  EXPECT_EQ(r->element[0]->type, REDIS_REPLY_STATUS);
  EXPECT_EQ(std::string(r->element[0]->str, r->element[0]->len), "OK");
  EXPECT_EQ(r->element[1]->type, REDIS_REPLY_ERROR);
  EXPECT_EQ(std::string(r->element[1]->str, r->element[1]->len), "ERR no");
  EXPECT_EQ(r->element[2]->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ(r->element[2]->integer, 42);
  EXPECT_EQ(r->element[3]->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(r->element[3]->str, r->element[3]->len), "abc");
  EXPECT_EQ(r->element[4]->type, REDIS_REPLY_NIL);
  Reply empty = parse_one(reader, "*0\r\n");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(empty->elements, 0u);
  Reply nil_array = parse_one(reader, "*-1\r\n");
  ASSERT_TRUE(nil_array);
  EXPECT_EQ(nil_array->type, REDIS_REPLY_NIL);
}

TEST(RespReader, AReplySplitAnywhereComesOutWhole) {
  const std::string bytes = "*2\r\n*2\r\n:1\r\n$5\r\nhello\r\n+PONG\r\n:7\r\n";
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    RespReader reader;
    ASSERT_TRUE(reader.feed(std::string_view(bytes).substr(0, cut)).ok());
    auto early = reader.next();
    ASSERT_TRUE(early.ok());
    ASSERT_TRUE(reader.feed(std::string_view(bytes).substr(cut)).ok());
    Reply first = std::move(*early);
    if (!first) {
      auto later = reader.next();
      ASSERT_TRUE(later.ok());
      first = std::move(*later);
    }
    ASSERT_TRUE(first) << "cut at " << cut;
    ASSERT_EQ(first->elements, 2u);
    EXPECT_EQ(std::string(first->element[0]->element[1]->str), "hello");
    EXPECT_EQ(std::string(first->element[1]->str), "PONG");
    auto second = reader.next();
    ASSERT_TRUE(second.ok() && *second) << "cut at " << cut;
    EXPECT_EQ((*second)->integer, 7);
    auto none = reader.next();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(*none);
  }
}

TEST(RespReader, AnArrayHeaderOf2To31ElementsIsRefusedNotReserved) {
  RespReader reader;
  ASSERT_TRUE(reader.feed("*2147483647\r\n").ok());
  auto reply = reader.next();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), Code::kUnavailable);
  EXPECT_NE(reply.status().message().find("an array of 2147483647"), std::string::npos)
      << reply.status().message();
  // The stream stays failed: nothing after it is taken for a reply.
  EXPECT_FALSE(reader.feed("+OK\r\n").ok());
  EXPECT_FALSE(reader.next().ok());
}

TEST(RespReader, ANestedArrayOverTheBudgetIsRefused) {
  RespReader reader;
  // Each inner header alone is within budget; together they are not.
  const std::size_t each = kMaxReplyBytes / sizeof(redisReply*) / 4;
  std::string bytes = "*8\r\n";
  for (int i = 0; i < 8; ++i) bytes += fmt::format("*{}\r\n", each);
  ASSERT_TRUE(reader.feed(bytes).ok());
  auto reply = reader.next();
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("refuses"), std::string::npos)
      << reply.status().message();
}

TEST(RespReader, ANegativeCountOtherThanMinusOneIsRefused) {
  RespReader reader;
  ASSERT_TRUE(reader.feed("*-5\r\n").ok());
  auto reply = reader.next();
  ASSERT_FALSE(reply.ok());  // hiredis 0.14.1 says "Multi-bulk length out of range" itself
  EXPECT_EQ(reply.status().code(), Code::kUnavailable);
  EXPECT_FALSE(reader.next().ok());
}

TEST(RespReader, ABulkStringThatWouldPassTheBudgetFailsOnceItsBytesDo) {
  RespReader reader;
  ASSERT_TRUE(reader.feed("$2147483647\r\n").ok());
  auto waiting = reader.next();
  ASSERT_TRUE(waiting.ok());
  EXPECT_FALSE(*waiting);  // it waits for the bytes, which arrive as the server sends them
  const std::string mib(std::size_t{1} << 20, 'x');
  Status fed = Status::Ok();
  std::size_t sent = 0;
  while (fed.ok() && sent <= kMaxReplyBytes) {
    fed = reader.feed(mib);
    sent += mib.size();
  }
  ASSERT_FALSE(fed.ok());
  EXPECT_LE(reader.buffered(), kMaxReplyBytes);
  EXPECT_NE(fed.message().find("more than 64 MiB"), std::string::npos) << fed.message();
}

TEST(RespReader, TheBudgetIsPerReplyNotPerStream) {
  RespReader reader;
  // 96 replies of 1 MiB each: more than the budget together, each well within it.
  const std::string payload(std::size_t{1} << 20, 'y');
  const std::string one = fmt::format("${}\r\n{}\r\n", payload.size(), payload);
  for (int i = 0; i < 96; ++i) {
    ASSERT_TRUE(reader.feed(one).ok()) << i;
    auto reply = reader.next();
    ASSERT_TRUE(reply.ok() && *reply) << i;
    EXPECT_EQ((*reply)->len, payload.size());
  }
}

TEST(RespReader, AProtocolErrorIsReportedWithHiredisWords) {
  RespReader reader;
  ASSERT_TRUE(reader.feed("?what\r\n").ok());
  auto reply = reader.next();
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("broke the protocol"), std::string::npos)
      << reply.status().message();
}

}  // namespace
}  // namespace fencelock::detail::redis
