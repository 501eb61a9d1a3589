#include "fencelock/migrate.h"

#include "core/uri.h"
#include "postgres/postgres_backend.h"

namespace fencelock {

Result<std::vector<std::string>> migrate(std::string_view uri, const ClientOptions& options) {
  if (uri.starts_with("postgres://") || uri.starts_with("postgresql://")) {
    return detail::migrate_postgres(std::string(uri), options);
  }
  auto parsed = detail::parse_uri(uri, 6379);
  if (!parsed.ok()) return parsed.status();
  const std::string& scheme = parsed->scheme;
  if (!detail::known_scheme(scheme)) return detail::unknown_scheme(scheme);
  return std::vector<std::string>{};  // no other backend has a schema
}

}  // namespace fencelock
