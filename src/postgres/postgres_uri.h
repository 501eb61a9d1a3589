// Splitting fencelock's own parameters off a libpq URI (pure: no I/O).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::detail::postgres {

struct PostgresUri {
  std::string conninfo;  // what libpq gets: the URI without fencelock's parameters
  std::string mode = "advisory";
  std::size_t pool = 8;
  // allow_async_standby=true: accept a server that streams to standbys asynchronously (a
  // failover to one can repeat tokens); refused otherwise.
  bool allow_async_standby = false;
  std::string description;  // the URI without password, for messages
};

// kInvalidArgument for an unknown mode, a bad pool size, allow_async_standby other than
// true/false, or a URI that is not postgres://...
Result<PostgresUri> split_postgres_uri(std::string_view uri);

}  // namespace fencelock::detail::postgres
