// Key layout on Redis (DESIGN.md 3.1). The hash tag {K} keeps a lock's keys in one cluster slot.
#pragma once

#include <string>
#include <string_view>

namespace fencelock::detail::redis {

inline std::string lock_key(std::string_view key) { return "fencelock:{" + std::string(key) + "}"; }
inline std::string fence_key(std::string_view key) { return lock_key(key) + ":fence"; }
inline std::string holder_key(std::string_view key) { return lock_key(key) + ":holder"; }
inline std::string queue_key(std::string_view key) { return lock_key(key) + ":queue"; }
inline std::string queue_expiry_key(std::string_view key) { return lock_key(key) + ":queue_exp"; }
inline std::string queue_wake_key(std::string_view key) { return lock_key(key) + ":queue_wake"; }
// One per Client: where the release script wakes that Client's waiters.
inline std::string wake_channel(std::string_view client_id) {
  return "fencelock:wake:" + std::string(client_id);
}

// The lock name inside a lock key, or empty when `redis_key` is not a lock key.
inline std::string key_from_lock_key(std::string_view redis_key) {
  constexpr std::string_view kPrefix = "fencelock:{";
  if (redis_key.size() <= kPrefix.size() + 1 || redis_key.substr(0, kPrefix.size()) != kPrefix ||
      redis_key.back() != '}') {
    return {};
  }
  return std::string(redis_key.substr(kPrefix.size(), redis_key.size() - kPrefix.size() - 1));
}

// Escapes glob characters so that `prefix` matches literally in SCAN MATCH.
inline std::string glob_escape(std::string_view prefix) {
  std::string out;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace fencelock::detail::redis
