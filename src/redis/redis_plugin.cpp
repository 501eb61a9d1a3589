// redis:// and redlock:// in the backend registry (core/backend_registry.h).
#include "core/backend_registry.h"
#include "core/uri.h"
#include "redis/redis_backend.h"

namespace fencelock::detail {

namespace {

constexpr std::uint16_t kRedisPort = 6379;

Result<std::unique_ptr<Backend>> connect_redis(std::string_view uri, const ClientOptions& options,
                                               bool check_only) {
  auto parsed = parse_uri(uri, kRedisPort);
  if (!parsed.ok()) return parsed.status();
  return make_redis_backend(*parsed, options, check_only);
}

}  // namespace

const BackendPlugin& redis_backend_plugin() {
  static const BackendPlugin plugin{
      .family = "redis",
      .schemes = {"redis", "redlock"},
      .default_port = kRedisPort,
      .uri_forms = {"redis://[user:pass@]HOST:PORT[/DB]", "redlock://H1:P1,H2:P2,H3:P3"},
      .connect = connect_redis,
  };
  return plugin;
}

}  // namespace fencelock::detail
