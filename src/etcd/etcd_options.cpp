#include "etcd/etcd_options.h"

#include <fmt/format.h>

namespace fencelock::detail::etcd {

Result<EtcdOptions> parse_etcd_options(const ParsedUri& uri) {
  EtcdOptions options;
  const bool tls = uri.scheme == "etcds";
  for (const auto& [name, value] : uri.query) {
    if (name == "allow_stale_leader_revoke") {
      if (value != "true" && value != "false") {
        return Status(Code::kInvalidArgument,
                      fmt::format("malformed backend URI: allow_stale_leader_revoke must be true "
                                  "or false, got '{}'",
                                  value));
      }
      options.allow_stale_leader_revoke = value == "true";
    } else if (name == "namespace") {
      // Like etcd's own namespace idea: lock NAME is then the keys PREFIX/NAME/<lease hex>,
      // which `etcdctl lock PREFIX/NAME` shares.
      if (value.empty() || !value.ends_with('/') || value.find('\0') != std::string::npos ||
          value.size() > kMaxNamespaceBytes) {
        return Status(Code::kInvalidArgument,
                      fmt::format("malformed backend URI: namespace must end with '/', be at most "
                                  "{} bytes and hold no NUL (e.g. namespace=locks/)",
                                  kMaxNamespaceBytes));
      }
      options.key_namespace = value;
    } else if (tls && (name == "cacert" || name == "cert" || name == "key")) {
      if (value.empty()) {
        return Status(Code::kInvalidArgument,
                      fmt::format("etcds:// {0}= needs the path of a PEM file ({0}=PATH)", name));
      }
      (name == "cacert" ? options.cacert : name == "cert" ? options.cert : options.key) = value;
    } else if (!tls) {
      return Status(Code::kInvalidArgument,
                    "etcd:// takes only the options namespace and allow_stale_leader_revoke "
                    "(TLS options cacert, cert, key need etcds://)");
    } else {
      return Status(Code::kInvalidArgument,
                    fmt::format("etcds:// has no option '{}' (use cacert, cert, key, "
                                "namespace, allow_stale_leader_revoke)",
                                name));
    }
  }
  if (options.cert.empty() != options.key.empty()) {
    return Status(Code::kInvalidArgument,
                  "etcds:// client certificate needs both cert=PATH and key=PATH");
  }
  return options;
}

std::string describe_etcd_options(const EtcdOptions& options) {
  std::string shown;
  if (!options.key_namespace.empty()) shown += "namespace=" + percent_encode(options.key_namespace);
  if (options.allow_stale_leader_revoke) {
    shown += (shown.empty() ? "" : "&") + std::string("allow_stale_leader_revoke=true");
  }
  return shown;
}

}  // namespace fencelock::detail::etcd
