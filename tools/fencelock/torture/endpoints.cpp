#include "torture/endpoints.h"

#include "core/backend_registry.h"
#include "core/uri.h"

namespace fencelock::torture {

namespace {

// The registry's: 0 for an unknown scheme and for a backend without servers (memory://).
int default_port(const std::string& uri) {
  const detail::BackendPlugin* plugin = detail::find_backend_plugin(uri);
  return plugin == nullptr ? 0 : plugin->default_port;
}

Status bad(const std::string& why) {
  return Status(Code::kInvalidArgument, "network faults need a proxiable URI: " + why);
}

}  // namespace

Result<SplitUri> split_uri(const std::string& uri) {
  const auto sep = uri.find("://");
  if (sep == std::string::npos) return bad("expected SCHEME://HOST:PORT,...");
  const std::string scheme = uri.substr(0, sep);
  const int port_default = default_port(uri);
  if (port_default == 0) return bad("scheme '" + scheme + "://' has no servers to proxy");
  // The one URI parser (core/uri.h) decides what the hosts are; its errors never contain the
  // credentials, which it splits off at the last '@' (a password may hold '/', '?' or '@').
  auto parsed = detail::parse_uri(uri, static_cast<std::uint16_t>(port_default));
  if (!parsed.ok()) return bad(parsed.status().message());
  SplitUri out;
  std::size_t hosts_begin = sep + 3;
  if (const auto at = uri.rfind('@'); at != std::string::npos && at >= hosts_begin)
    hosts_begin = at + 1;
  const std::size_t hosts_end = uri.find_first_of("/?", hosts_begin);
  out.head = uri.substr(0, hosts_begin);
  out.tail = hosts_end == std::string::npos ? "" : uri.substr(hosts_end);
  if (parsed->endpoints.empty()) return bad("no host");
  for (const auto& endpoint : parsed->endpoints) {
    if (endpoint.host.find(':') != std::string::npos)
      return bad("IPv6 hosts are not supported by the fault proxy");
    HostPort hp{endpoint.host, endpoint.port};
    if (hp.host == "localhost") hp.host = "127.0.0.1";
    out.hosts.push_back(hp);
  }
  return out;
}

std::string join_uri(const SplitUri& uri) {
  std::string out = uri.head;
  for (std::size_t i = 0; i < uri.hosts.size(); ++i) {
    out += (i == 0 ? "" : ",") + uri.hosts[i].host + ":" + std::to_string(uri.hosts[i].port);
  }
  return out + uri.tail;
}

}  // namespace fencelock::torture
