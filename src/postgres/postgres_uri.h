// Splitting fencelock's own parameters off a libpq URI (pure: no I/O).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::detail::postgres {

// TCP keepalives added to every URI that does not set them (libpq's keepalives_idle,
// keepalives_interval, keepalives_count; seconds) and tcp_user_timeout (ms; by default
// idle + interval x count, in effect after the URI's own values). pg_connection.h pins the
// server's side of each session to the same values (tcp_keepalives_*, tcp_user_timeout), so a
// peer that vanished without a word (a partition, a dead host) ends the session after about
// 5 + 2 x 3 = 11 s of silence, at both ends. keepalives=0 in the URI turns all of it off.
inline constexpr int kKeepalivesIdleSeconds = 5;
inline constexpr int kKeepalivesIntervalSeconds = 2;
inline constexpr int kKeepalivesCount = 3;

struct PostgresUri {
  // What libpq gets: the URI without fencelock's parameters, with the keepalives it lacked.
  std::string conninfo;
  std::string mode = "advisory";
  std::size_t pool = 8;
  // allow_async_standby=true: accept a server that streams to standbys asynchronously (a
  // failover to one can repeat tokens); refused otherwise.
  bool allow_async_standby = false;
  std::string description;  // the URI without password, for messages
  // Backend::issuer_identity(), filled in once connected (postgres_backend.cpp).
  std::string issuer_identity;
};

// kInvalidArgument for an unknown mode, a bad pool size, allow_async_standby other than
// true/false, or a URI that is not postgres://...
Result<PostgresUri> split_postgres_uri(std::string_view uri);

}  // namespace fencelock::detail::postgres
