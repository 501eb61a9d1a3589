#include "redis/script_replies.h"

#include <string_view>

#include "core/token_text.h"

namespace fencelock::detail::redis {
namespace {

bool is_integer(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_INTEGER; }

// A bulk or status string (inspect.lua's values are bulk strings; a status reply is accepted as
// hiredis gives both the same fields).
bool is_text(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

// The reply's elements, or none when it is not an array (hiredis leaves `element` null for an
// empty array).
bool is_array_of(const redisReply& r, std::size_t n) {
  return r.type == REDIS_REPLY_ARRAY && r.elements == n && (n == 0 || r.element != nullptr);
}

}  // namespace

std::string_view reply_text(const redisReply* reply) {
  return reply == nullptr || reply->str == nullptr ? std::string_view()
                                                   : std::string_view(reply->str, reply->len);
}

std::optional<AcquireReply> interpret_acquire_reply(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.element == nullptr || reply.elements < 2 ||
      !is_integer(reply.element[0])) {
    return std::nullopt;
  }
  const long long flag = reply.element[0]->integer;
  if (flag == 1) {
    if (!is_array_of(reply, 3) || reply.element[1] == nullptr ||
        reply.element[1]->type != REDIS_REPLY_STRING || !is_integer(reply.element[2]) ||
        reply.element[2]->integer < 0) {
      return std::nullopt;
    }
    const auto counter = parse_canonical_token(reply_text(reply.element[1]));
    if (!counter || *counter == 0) return std::nullopt;
    return AcquireReply{
        .granted = true, .counter = *counter, .ahead_ms = reply.element[2]->integer};
  }
  if (flag != 0 || !is_array_of(reply, 2) || !is_integer(reply.element[1])) return std::nullopt;
  return AcquireReply{.granted = false, .retry_ms = reply.element[1]->integer};
}

std::vector<RenewVote> interpret_renew_reply(const redisReply& reply, std::size_t leases) {
  std::vector<RenewVote> votes(leases, RenewVote::kNoAnswer);
  if (reply.type != REDIS_REPLY_ARRAY || reply.element == nullptr) return votes;
  for (std::size_t i = 0; i < leases && i < reply.elements; ++i) {
    const redisReply* vote = reply.element[i];
    if (!is_integer(vote)) continue;
    if (vote->integer == 1) votes[i] = RenewVote::kConfirmed;
    if (vote->integer == 0) votes[i] = RenewVote::kRejected;
  }
  return votes;
}

bool release_answered(const redisReply& reply) {
  return reply.type == REDIS_REPLY_INTEGER && (reply.integer == 0 || reply.integer == 1);
}

bool raise_fence_confirmed(const redisReply& reply) {
  return reply.type == REDIS_REPLY_INTEGER && reply.integer == 1;
}

std::optional<InspectReply> interpret_inspect_reply(const redisReply& reply) {
  if (!is_array_of(reply, 3) || !is_text(reply.element[0]) || !is_integer(reply.element[1]) ||
      !is_text(reply.element[2])) {
    return std::nullopt;
  }
  InspectReply out;
  out.owner = std::string(reply_text(reply.element[0]));
  out.pttl = reply.element[1]->integer;
  const std::string_view info = reply_text(reply.element[2]);
  const auto space = info.find(' ');
  out.token = parse_canonical_token(info.substr(0, space)).value_or(0);
  if (space != std::string_view::npos) out.metadata = std::string(info.substr(space + 1));
  return out;
}

std::optional<ScanReply> interpret_scan_reply(const redisReply& reply) {
  if (!is_array_of(reply, 2) || !is_text(reply.element[0])) return std::nullopt;
  const redisReply& page = *reply.element[1];
  if (page.type != REDIS_REPLY_ARRAY || (page.elements > 0 && page.element == nullptr)) {
    return std::nullopt;
  }
  ScanReply out{std::string(reply_text(reply.element[0])), {}};
  out.keys.reserve(page.elements);
  for (std::size_t i = 0; i < page.elements; ++i) {
    if (!is_text(page.element[i])) return std::nullopt;
    out.keys.push_back(reply_text(page.element[i]));
  }
  return out;
}

}  // namespace fencelock::detail::redis
