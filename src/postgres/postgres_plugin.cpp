// postgres:// and postgresql:// in the backend registry (core/backend_registry.h).
#include "core/backend_registry.h"
#include "postgres/postgres_backend.h"
#include "postgres/postgres_uri.h"

namespace fencelock::detail {

namespace {

Result<std::unique_ptr<Backend>> connect_postgres(std::string_view uri,
                                                  const ClientOptions& options, bool check_only) {
  if (check_only) {
    auto split = postgres::split_postgres_uri(uri);
    if (!split.ok()) return split.status();
    return std::unique_ptr<Backend>();
  }
  return make_postgres_backend(std::string(uri), options);  // libpq parses its own URIs
}

Result<std::vector<std::string>> migrate(std::string_view uri, const ClientOptions& options) {
  return migrate_postgres(std::string(uri), options);
}

}  // namespace

const BackendPlugin& postgres_backend_plugin() {
  static const BackendPlugin plugin{
      .family = "postgres",
      .schemes = {"postgres", "postgresql"},
      .lowercase_only = true,  // as libpq takes them
      .default_port = 5432,
      .uri_forms = {"postgres://USER:PASS@HOST:PORT/DB[?mode=lease]"},
      .connect = connect_postgres,
      .migrate = migrate,
  };
  return plugin;
}

}  // namespace fencelock::detail
