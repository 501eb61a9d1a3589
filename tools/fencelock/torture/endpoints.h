// Splitting a backend URI into its host list and the rest, so that `fencelock torture` can point
// its workers at fault proxies instead of the servers. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fencelock/status.h"

namespace fencelock::torture {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

struct SplitUri {
  std::string head;  // "scheme://" plus any "user:pass@"
  std::vector<HostPort> hosts;
  std::string tail;  // "/path?query" or ""
};

// redis://, redlock://, etcd://, etcds://, postgres:// and postgresql:// URIs with IPv4 or
// named hosts (default ports 6379, 2379, 5432). kInvalidArgument otherwise (e.g. memory://,
// bracketed IPv6, a libpq key=value string).
Result<SplitUri> split_uri(const std::string& uri);
std::string join_uri(const SplitUri& uri);

}  // namespace fencelock::torture
