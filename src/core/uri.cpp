#include "core/uri.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace fencelock::detail {
namespace {

Status bad(std::string_view what) {
  return Status(Code::kInvalidArgument, fmt::format("malformed backend URI: {}", what));
}

// A piece of the URI quoted in an error, cut to a readable length.
std::string clip(std::string_view text) {
  constexpr std::size_t kShown = 64;
  if (text.size() <= kShown) return std::string(text);
  return fmt::format("{}... ({} bytes)", text.substr(0, kShown), text.size());
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> percent_decode(std::string_view in, std::string_view part) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return bad(fmt::format("bad %-escape in {}", part));
    int hi = hex_value(in[i + 1]);
    int lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return bad(fmt::format("bad %-escape in {}", part));
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::string percent_encode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

namespace {

Result<Endpoint> parse_endpoint(std::string_view text, std::uint16_t default_port) {
  Endpoint ep;
  std::string_view port_text;
  if (text.empty()) return bad("empty host in the host list");
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos)
      return bad(fmt::format("unclosed '[' in host '{}'", clip(text)));
    ep.host = std::string(text.substr(1, close - 1));
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return bad(fmt::format("unexpected text after ']' in '{}'", clip(text)));
      port_text = rest.substr(1);
      if (port_text.empty()) return bad(fmt::format("empty port in '{}'", clip(text)));
    }
  } else {
    auto colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty()) return bad(fmt::format("empty port in '{}'", clip(text)));
      text = text.substr(0, colon);
    }
    ep.host = std::string(text);
    if (ep.host.find(':') != std::string::npos) {
      return bad(fmt::format("IPv6 address '{}' needs brackets, e.g. [::1]:6379", clip(text)));
    }
  }
  if (ep.host.empty()) return bad("empty host in the host list");
  // A bracket inside a host ("[[::1]") would print as a host that does not parse back.
  if (ep.host.find_first_of("[]") != std::string::npos) {
    return bad(fmt::format("'[' or ']' inside host '{}'", clip(text)));
  }
  if (port_text.empty()) {
    ep.port = default_port;
    return ep;
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
      value > 65535) {
    return bad(fmt::format("port '{}' is not a number in 1..65535", clip(port_text)));
  }
  ep.port = static_cast<std::uint16_t>(value);
  return ep;
}

Status parse_query(std::string_view text, ParsedUri& out) {
  while (!text.empty()) {
    auto amp = text.find('&');
    std::string_view pair = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view{} : text.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto name = percent_decode(pair.substr(0, eq), "a query parameter");
    if (!name.ok()) return name.status();
    std::string value;
    if (eq != std::string_view::npos) {
      auto decoded = percent_decode(pair.substr(eq + 1), "a query parameter");
      if (!decoded.ok()) return decoded.status();
      value = *decoded;
    }
    out.query[*name] = value;
  }
  return Status::Ok();
}

}  // namespace

std::string endpoint_text(const Endpoint& endpoint) {
  const bool v6 = endpoint.host.find(':') != std::string::npos;
  return v6 ? fmt::format("[{}]:{}", endpoint.host, endpoint.port)
            : fmt::format("{}:{}", endpoint.host, endpoint.port);
}

Status check_host_count(std::string_view host_list) {
  if (host_list.empty()) return Status::Ok();
  const auto hosts =
      static_cast<std::size_t>(std::count(host_list.begin(), host_list.end(), ',')) + 1;
  if (hosts <= kMaxHosts) return Status::Ok();
  return bad(
      fmt::format("{} hosts in the host list, at most {} are allowed (a Redlock has 3 or 5 "
                  "instances, an etcd cluster 3, 5 or 7 members)",
                  hosts, kMaxHosts));
}

Result<std::string> scheme_of(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return bad("expected SCHEME://..., e.g. redis://127.0.0.1:6379");
  }
  std::string scheme;
  for (char c : uri.substr(0, sep)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return bad("scheme has characters other than letters, digits, '+', '-', '.'");
    }
    scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return scheme;
}

Result<ParsedUri> parse_uri(std::string_view uri, std::uint16_t default_port) {
  ParsedUri out;
  auto scheme = scheme_of(uri);
  if (!scheme.ok()) return scheme.status();
  out.scheme = std::move(*scheme);
  const auto sep = uri.find("://");
  std::string_view rest = uri.substr(sep + 3);

  // Credentials first, split at the last '@': a password may hold unescaped '/', '?' or '@',
  // and must never be read as a host (whose text would then appear in an error message).
  // (An '@' inside a query value must be percent-encoded.)
  auto at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    auto user = percent_decode(userinfo.substr(0, colon), "the user name");
    if (!user.ok()) return user.status();
    out.user = *user;
    if (colon != std::string_view::npos) {
      auto pass = percent_decode(userinfo.substr(colon + 1), "the password");
      if (!pass.ok()) return pass.status();
      out.password = *pass;
      out.has_password = true;
    }
  }
  auto query_at = rest.find('?');
  if (query_at != std::string_view::npos) {
    Status st = parse_query(rest.substr(query_at + 1), out);
    if (!st.ok()) return st;
    rest = rest.substr(0, query_at);
  }
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) out.path = std::string(rest.substr(slash + 1));
  if (Status st = check_host_count(authority); !st.ok()) return st;
  while (!authority.empty()) {
    auto comma = authority.find(',');
    auto ep = parse_endpoint(authority.substr(0, comma), default_port);
    if (!ep.ok()) return ep.status();
    out.endpoints.push_back(*ep);
    if (comma == std::string_view::npos) break;
    authority = authority.substr(comma + 1);
    if (authority.empty()) return bad("trailing ',' in the host list");
  }
  return out;
}

std::string redact(const ParsedUri& uri) {
  std::string out = uri.scheme + "://";
  if (!uri.user.empty()) out += uri.user + "@";
  for (std::size_t i = 0; i < uri.endpoints.size(); ++i) {
    if (i > 0) out += ',';
    out += endpoint_text(uri.endpoints[i]);
  }
  if (!uri.path.empty()) out += "/" + uri.path;
  return out;
}

}  // namespace fencelock::detail
