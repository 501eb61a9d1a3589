// Redis replies to fencelock's scripts: any bytes a server (or a proxy) sends, parsed by the
// connection's reader (redis/resp_reader.h: hiredis 0.14's parser under a budget per reply),
// then read by redis/script_replies.h and, for error replies, by status_from_error_reply
// (redis/connection.h).
// Properties: no crash and no allocation past the reply budget (a header such as *2147483647
// is refused, not reserved: libFuzzer's memory limit would report it); only the exact shapes the
// scripts return count as answers: a grant is an array of two integers with a counter >= 1, a
// renewal gives exactly one vote per lease of its batch, a release and a round-2 confirmation are
// integers, a SCAN page is a text cursor and text keys; an error reply is never OK.
#include <hiredis/hiredis.h>

#include <cstdint>
#include <string_view>

#include "core/token_text.h"
#include "fuzz_check.h"
#include "redis/connection.h"
#include "redis/resp_reader.h"
#include "redis/script_replies.h"

namespace fencelock::detail::redis {
namespace {

void check_acquire(const redisReply& reply) {
  const auto answer = interpret_acquire_reply(reply);
  if (!answer) return;
  FUZZ_CHECK(reply.type == REDIS_REPLY_ARRAY);
  FUZZ_CHECK(reply.element[0]->type == REDIS_REPLY_INTEGER);
  if (answer->granted) {
    FUZZ_CHECK(reply.elements == 3 && reply.element[0]->integer == 1);
    FUZZ_CHECK(reply.element[1]->type == REDIS_REPLY_STRING);
    FUZZ_CHECK(answer->counter >= 1);
    FUZZ_CHECK(parse_canonical_token(std::string_view(reply.element[1]->str,
                                                      reply.element[1]->len)) == answer->counter);
    FUZZ_CHECK(reply.element[2]->type == REDIS_REPLY_INTEGER && answer->ahead_ms >= 0);
  } else {
    FUZZ_CHECK(reply.elements == 2 && reply.element[0]->integer == 0);
    FUZZ_CHECK(reply.element[1]->type == REDIS_REPLY_INTEGER);
  }
}

void check_renew(const redisReply& reply) {
  const std::size_t sizes[] = {0, 1, 3, reply.elements, reply.elements + 2};
  for (std::size_t leases : sizes) {
    const auto votes = interpret_renew_reply(reply, leases);
    FUZZ_CHECK(votes.size() == leases);
    for (std::size_t i = 0; i < votes.size(); ++i) {
      if (votes[i] == RenewVote::kNoAnswer) continue;
      FUZZ_CHECK(reply.type == REDIS_REPLY_ARRAY && i < reply.elements);
      FUZZ_CHECK(reply.element[i]->type == REDIS_REPLY_INTEGER);
      FUZZ_CHECK(reply.element[i]->integer == (votes[i] == RenewVote::kConfirmed ? 1 : 0));
    }
  }
}

void check_reply(const redisReply& reply) {
  check_acquire(reply);
  check_renew(reply);
  if (release_answered(reply) || raise_fence_confirmed(reply)) {
    FUZZ_CHECK(reply.type == REDIS_REPLY_INTEGER);
  }
  if (const auto holder = interpret_inspect_reply(reply)) {
    FUZZ_CHECK(reply.type == REDIS_REPLY_ARRAY && reply.elements == 3);
    FUZZ_CHECK(holder->pttl == reply.element[1]->integer);
  }
  if (const auto page = interpret_scan_reply(reply)) {
    FUZZ_CHECK(reply.type == REDIS_REPLY_ARRAY && reply.elements == 2);
    FUZZ_CHECK(page->cursor == reply_text(reply.element[0]));
    FUZZ_CHECK(page->keys.size() == reply.element[1]->elements);
    for (std::size_t i = 0; i < page->keys.size(); ++i) {
      FUZZ_CHECK(page->keys[i] == reply_text(reply.element[1]->element[i]));
    }
  }
  (void)reply_text(&reply);
  if (reply.type == REDIS_REPLY_ERROR) {
    const Status status =
        status_from_error_reply(std::string_view(reply.str, reply.len), "127.0.0.1:6379");
    FUZZ_CHECK(!status.ok());
  }
  // Nested replies are read the same way (a script's reply can be any element of a pipeline).
  if (reply.type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < reply.elements; ++i) check_reply(*reply.element[i]);
  }
}

}  // namespace
}  // namespace fencelock::detail::redis

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fencelock::detail::redis::RespReader;
  RespReader reader;
  if (!reader.feed(std::string_view(reinterpret_cast<const char*>(data), size)).ok()) return 0;
  for (;;) {
    auto reply = reader.next();
    if (!reply.ok() || !*reply) break;
    fencelock::detail::redis::check_reply(**reply);
  }
  return 0;
}
