#include "fencelock/migrate.h"

#include "core/backend_registry.h"

namespace fencelock {

Result<std::vector<std::string>> migrate(std::string_view uri, const ClientOptions& options) {
  auto plugin = detail::backend_for_uri(uri);
  if (!plugin.ok()) return plugin.status();
  if ((*plugin)->migrate != nullptr) return (*plugin)->migrate(uri, options);
  // A backend without a schema: the URI is still checked as connect() would, so that a mistake
  // in it is found here too.
  auto checked = (*plugin)->connect(uri, options, /*check_only=*/true);
  if (!checked.ok()) return checked.status();
  return std::vector<std::string>{};
}

}  // namespace fencelock
