// Key layout on Redis (docs/PROTOCOLS.md). The hash tag {K} keeps a lock's keys in one cluster
// slot.
#pragma once

#include <string>
#include <string_view>

namespace fencelock::detail::redis {

// The hash tag of a lock name: the name itself, so that keys stay readable and interoperable,
// except that a name starting with '}' would close the tag at once (Redis Cluster then hashes
// each whole key, scattering one lock's keys over several slots), so it is written after a '{';
// and a name starting with '{' gets one too, so that the mapping stays one to one.
inline std::string hash_tag(std::string_view key) {
  const bool escaped = !key.empty() && (key.front() == '{' || key.front() == '}');
  return escaped ? "{" + std::string(key) : std::string(key);
}
inline std::string lock_key(std::string_view key) { return "fencelock:{" + hash_tag(key) + "}"; }
inline std::string fence_key(std::string_view key) { return lock_key(key) + ":fence"; }
inline std::string holder_key(std::string_view key) { return lock_key(key) + ":holder"; }
inline std::string queue_key(std::string_view key) { return lock_key(key) + ":queue"; }
inline std::string queue_expiry_key(std::string_view key) { return lock_key(key) + ":queue_exp"; }
inline std::string queue_wake_key(std::string_view key) { return lock_key(key) + ":queue_wake"; }
// Marks one attempt's lock value as released (release.lua, acquire.lua): docs/PROTOCOLS.md,
// "Late attempts".
inline std::string tombstone_key(std::string_view key, std::string_view value) {
  return lock_key(key) + ":dead:" + std::string(value);
}
// One per Client: where the release script wakes that Client's waiters.
inline std::string wake_channel(std::string_view client_id) {
  return "fencelock:wake:" + std::string(client_id);
}

// The lock name inside a lock key, or empty when `redis_key` is not a lock key (lock_key's
// inverse).
inline std::string key_from_lock_key(std::string_view redis_key) {
  constexpr std::string_view kPrefix = "fencelock:{";
  if (redis_key.size() <= kPrefix.size() + 1 || redis_key.substr(0, kPrefix.size()) != kPrefix ||
      redis_key.back() != '}') {
    return {};
  }
  std::string_view tag = redis_key.substr(kPrefix.size(), redis_key.size() - kPrefix.size() - 1);
  if (tag.front() == '{') {
    tag.remove_prefix(1);
    if (tag.empty() || (tag.front() != '{' && tag.front() != '}')) return {};  // not hash_tag()'s
  }
  return std::string(tag);
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
