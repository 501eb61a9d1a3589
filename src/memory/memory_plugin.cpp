// memory:// in the backend registry (core/backend_registry.h).
#include "core/backend_registry.h"
#include "core/uri.h"
#include "memory/memory_backend.h"

namespace fencelock::detail {

namespace {

Result<std::unique_ptr<Backend>> connect_memory(std::string_view uri,
                                                const ClientOptions& /*options*/, bool check_only) {
  auto parsed = parse_uri(uri, /*default_port=*/1);  // a name has no port: any will do
  if (!parsed.ok()) return parsed.status();
  auto backend = make_memory_backend(*parsed);
  if (!backend.ok() || !check_only) return backend;
  return std::unique_ptr<Backend>();
}

}  // namespace

const BackendPlugin& memory_backend_plugin() {
  static const BackendPlugin plugin{
      .family = "memory",
      .schemes = {"memory"},
      .default_port = 0,
      .uri_forms = {"memory://[NAME]"},
      .connect = connect_memory,
  };
  return plugin;
}

}  // namespace fencelock::detail
