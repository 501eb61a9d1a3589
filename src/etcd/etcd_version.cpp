#include "etcd/etcd_version.h"

#include <charconv>

namespace fencelock::detail::etcd {

std::optional<ServerVersion> parse_server_version(std::string_view text) {
  ServerVersion out;
  int* parts[] = {&out.major, &out.minor, &out.patch};
  const char* at = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      if (at == end || *at != '.') return std::nullopt;
      ++at;
    }
    auto [next, error] = std::from_chars(at, end, *parts[i]);
    if (error != std::errc() || *parts[i] < 0) return std::nullopt;
    at = next;
  }
  if (at != end && *at != '-' && *at != '+') return std::nullopt;
  return out;
}

bool revokes_live_leases_after_a_leader_stall(const ServerVersion& v) {
  if (v.major != 3) return v.major < 3;
  if (v.minor < 4) return true;
  if (v.minor == 4) return v.patch < 31;
  if (v.minor == 5) return v.patch < 13;
  return false;
}

}  // namespace fencelock::detail::etcd
