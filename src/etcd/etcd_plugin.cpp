// etcd:// and etcds:// in the backend registry (core/backend_registry.h).
#include "core/backend_registry.h"
#include "etcd/etcd_backend.h"

namespace fencelock::detail {

namespace {

Result<std::unique_ptr<Backend>> connect_etcd(std::string_view uri, const ClientOptions& options,
                                              bool check_only) {
  return make_etcd_backend(uri, options, check_only);
}

}  // namespace

const BackendPlugin& etcd_backend_plugin() {
  static const BackendPlugin plugin{
      .family = "etcd",
      .schemes = {"etcd", "etcds"},
      .default_port = 2379,
      .uri_forms = {"etcd://H1:P1,H2:P2,H3:P3 (etcds:// with TLS)"},
      .connect = connect_etcd,
  };
  return plugin;
}

}  // namespace fencelock::detail
