#include "core/fence_issuer.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/uri.h"

namespace fencelock::detail {

namespace {

constexpr std::size_t kShownIssuerBytes = 512;

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The Redis database number as the backend reads it (redis/connection.h: a whole number >= 0),
// printed without leading zeros; the path as given when it is none (the backend refused it).
std::string database_of(std::string_view path) {
  if (path.empty()) return "0";
  int db = 0;
  auto [end, ec] = std::from_chars(path.data(), path.data() + path.size(), db);
  if (ec != std::errc() || end != path.data() + path.size() || db < 0) return std::string(path);
  return std::to_string(db);
}

}  // namespace

std::string escape_issuer_part(std::string_view part) {
  std::string out;
  out.reserve(part.size());
  for (char c : part) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte > ' ' && byte <= '~' && byte != '%') {
      out.push_back(c);
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

std::string make_issuer(std::string_view identity, std::string_view lock_name) {
  std::string out(identity);
  out.push_back(' ');
  out += escape_issuer_part(lock_name);
  return out;
}

std::string issuer_identity_of_uri(std::string_view uri) {
  auto parsed = parse_uri(uri, 6379);
  if (!parsed.ok()) return {};
  const ParsedUri& u = *parsed;
  if (u.scheme == "memory") {
    const std::string name = u.endpoints.empty() ? "default" : u.endpoints.front().host;
    return fmt::format("memory://{}?pid={}", escape_issuer_part(name), getpid());
  }
  if (u.scheme != "redis" && u.scheme != "redlock") return {};
  std::vector<std::string> hosts;
  hosts.reserve(u.endpoints.size());
  for (const Endpoint& endpoint : u.endpoints) {
    hosts.push_back(escape_issuer_part(endpoint_text({lower(endpoint.host), endpoint.port})));
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return fmt::format("{}://{}/{}", u.scheme, fmt::join(hosts, ","),
                     escape_issuer_part(database_of(u.path)));
}

Status check_issuer(std::string_view issuer, std::string_view guard) {
  if (issuer.size() > Fencing::kMaxIssuerBytes) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: the issuer is {} bytes long, more than the {} an issuer may "
                              "have (use Lease::fencing())",
                              guard, issuer.size(), Fencing::kMaxIssuerBytes));
  }
  for (char c : issuer) {
    if (c < ' ' || c > '~') {
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: the issuer holds a byte outside printable ASCII (0x{:02x}); "
                                "an issuer is what Lease::fencing() returns, or empty",
                                guard, static_cast<unsigned char>(c)));
    }
  }
  return Status::Ok();
}

FenceVerdict judge_fencing(const Fencing& presented, const Fencing& recorded) {
  if (!recorded.issuer.empty() && recorded.issuer != presented.issuer) {
    return FenceVerdict::kOtherLock;
  }
  return presented.token < recorded.token ? FenceVerdict::kStale : FenceVerdict::kAdmit;
}

std::string shown_issuer(std::string_view issuer) {
  if (issuer.empty()) return "no lock (a bare token)";
  if (issuer.size() <= kShownIssuerBytes) return fmt::format("'{}'", issuer);
  return fmt::format("'{}...'", issuer.substr(0, kShownIssuerBytes));
}

}  // namespace fencelock::detail
