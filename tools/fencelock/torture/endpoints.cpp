#include "torture/endpoints.h"

#include <charconv>

namespace fencelock::torture {

namespace {

int default_port(const std::string& scheme) {
  if (scheme == "redis" || scheme == "redlock") return 6379;
  if (scheme == "etcd" || scheme == "etcds") return 2379;
  if (scheme == "postgres" || scheme == "postgresql") return 5432;
  return 0;
}

Status bad(const std::string& why) {
  return Status(Code::kInvalidArgument, "network faults need a proxiable URI: " + why);
}

}  // namespace

Result<SplitUri> split_uri(const std::string& uri) {
  const auto sep = uri.find("://");
  if (sep == std::string::npos) return bad("expected SCHEME://HOST:PORT,...");
  const std::string scheme = uri.substr(0, sep);
  const int port_default = default_port(scheme);
  if (port_default == 0) return bad("scheme '" + scheme + "://' has no servers to proxy");
  SplitUri out;
  std::size_t hosts_begin = sep + 3;
  const std::size_t hosts_limit = uri.find_first_of("/?", hosts_begin);
  const std::size_t at =
      uri.rfind('@', hosts_limit == std::string::npos ? uri.size() : hosts_limit);
  if (at != std::string::npos && at >= hosts_begin) hosts_begin = at + 1;
  const std::size_t hosts_end = uri.find_first_of("/?", hosts_begin);
  out.head = uri.substr(0, hosts_begin);
  out.tail = hosts_end == std::string::npos ? "" : uri.substr(hosts_end);
  const std::string list = uri.substr(
      hosts_begin, hosts_end == std::string::npos ? std::string::npos : hosts_end - hosts_begin);
  for (std::size_t start = 0; start <= list.size();) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) return bad("empty host");
    if (item.front() == '[') return bad("IPv6 hosts are not supported by the fault proxy");
    HostPort hp{item, static_cast<std::uint16_t>(port_default)};
    if (auto colon = item.find(':'); colon != std::string::npos) {
      hp.host = item.substr(0, colon);
      unsigned port = 0;
      auto [end, ec] = std::from_chars(item.data() + colon + 1, item.data() + item.size(), port);
      if (ec != std::errc() || end != item.data() + item.size() || port == 0 || port > 65535)
        return bad("bad port in '" + item + "'");
      hp.port = static_cast<std::uint16_t>(port);
    }
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
