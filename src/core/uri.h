// Parsing of backend URIs (pure: no I/O). Grammar, per docs/PROTOCOLS.md:
//   redis://[user:pass@]host[:port][/db]
//   redlock://[user:pass@]h1[:p1],h2[:p2],...[/db]
//   memory://[name]
// Hosts may be bracketed IPv6 literals ("[::1]:6379"). User and password are percent-decoded.
// Error messages never contain the password.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fencelock/status.h"

namespace fencelock::detail {

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct ParsedUri {
  std::string scheme;  // lower case
  std::string user;
  std::string password;
  bool has_password = false;
  std::vector<Endpoint> endpoints;
  std::string path;  // after the first '/', without it; e.g. "2" for a Redis db
  std::map<std::string, std::string> query;
};

// At most this many hosts in one URI (more is kInvalidArgument): every host costs a connection
// and a share of each call, and a list this long is a mistake, not a deployment.
inline constexpr std::size_t kMaxHosts = 64;
// kInvalidArgument when the comma-separated `host_list` names more than kMaxHosts hosts.
Status check_host_count(std::string_view host_list);

// "host:port", or "[v6 host]:port": the one text of an endpoint (messages, gRPC targets).
std::string endpoint_text(const Endpoint& endpoint);

// The scheme of "SCHEME://...", lower-cased; kInvalidArgument (the message parse_uri gives) for
// a URI without one or with characters no scheme has (RFC 3986: letters, digits, + - .).
Result<std::string> scheme_of(std::string_view uri);

// `default_port` fills in endpoints without a port. kInvalidArgument on any malformed part.
Result<ParsedUri> parse_uri(std::string_view uri, std::uint16_t default_port);

// RFC 3986 percent-decoding of one URI part; kInvalidArgument "bad %-escape in PART" (never the
// text itself) on a '%' without two hex digits.
Result<std::string> percent_decode(std::string_view in, std::string_view part);
// Every byte but the unreserved ones (letters, digits, - . _ ~) as %XX.
std::string percent_encode(std::string_view in);

// "redlock://user@h1:1,h2:2/3": the URI as safe to print (password dropped).
std::string redact(const ParsedUri& uri);

}  // namespace fencelock::detail
