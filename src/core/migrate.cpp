#include "fencelock/migrate.h"

#include "core/uri.h"
#include "etcd/etcd_backend.h"
#include "postgres/postgres_backend.h"
#include "redis/redis_backend.h"

namespace fencelock {

Result<std::vector<std::string>> migrate(std::string_view uri, const ClientOptions& options) {
  if (uri.starts_with("postgres://") || uri.starts_with("postgresql://")) {
    return detail::migrate_postgres(std::string(uri), options);
  }
  auto parsed = detail::parse_uri(uri, 6379);
  if (!parsed.ok()) return parsed.status();
  const std::string& scheme = parsed->scheme;
  // As Client::connect() takes them: libpq's schemes only in lowercase (POSTGRES:// was taken
  // for a backend without a schema, and migrate said all was in place).
  const std::string_view typed = uri.substr(0, uri.find("://"));
  if (!detail::known_scheme(scheme) || scheme == "postgres" || scheme == "postgresql")
    return detail::unknown_scheme(typed);
  // No other backend has a schema; the URI is still checked as connect() would, so that a
  // mistake in it is found here too.
  if (scheme == "redis" || scheme == "redlock") {
    auto checked = detail::make_redis_backend(*parsed, options, /*check_only=*/true);
    if (!checked.ok()) return checked.status();
  } else if (scheme == "etcd" || scheme == "etcds") {
    auto checked = detail::make_etcd_backend(uri, options, /*check_only=*/true);
    if (!checked.ok()) return checked.status();
  }
  return std::vector<std::string>{};
}

}  // namespace fencelock
