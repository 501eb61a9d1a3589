#include "postgres/postgres_uri.h"

#include <charconv>

#include <fmt/format.h>

namespace fencelock::detail::postgres {

Result<PostgresUri> split_postgres_uri(std::string_view uri) {
  PostgresUri out;
  auto bad = [](std::string_view why) {
    return Status(Code::kInvalidArgument, fmt::format("malformed backend URI: {}", why));
  };
  if (!uri.starts_with("postgres://") && !uri.starts_with("postgresql://")) {
    return bad("expected postgres://user:password@host:port/database?mode=lease");
  }
  std::string_view base = uri;
  std::string_view query;
  if (auto q = uri.find('?'); q != std::string_view::npos) {
    base = uri.substr(0, q);
    query = uri.substr(q + 1);
  }
  std::string kept;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = pair.find('=');
    std::string_view name = pair.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (name == "mode") {
      if (value != "lease" && value != "advisory") {
        return bad(fmt::format("mode '{}' is not 'lease' or 'advisory'", value));
      }
      out.mode = std::string(value);
    } else if (name == "pool") {
      std::size_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n == 0 || n > 1000) {
        return bad(fmt::format("pool '{}' is not a number in 1..1000", value));
      }
      out.pool = n;
    } else if (name == "allow_async_standby") {
      if (value != "true" && value != "false") {
        return bad(fmt::format("allow_async_standby must be true or false, got '{}'", value));
      }
      out.allow_async_standby = value == "true";
    } else if (!pair.empty()) {
      kept += (kept.empty() ? "?" : "&") + std::string(pair);
    }
  }
  out.conninfo = std::string(base) + kept;
  // Description: drop "user:password@" down to "user@".
  std::string shown(base);
  auto scheme_end = shown.find("://") + 3;
  auto at = shown.rfind('@');
  if (at != std::string::npos && at > scheme_end) {
    auto colon = shown.find(':', scheme_end);
    if (colon != std::string::npos && colon < at) shown.erase(colon, at - colon);
  }
  out.description = shown + "?mode=" + out.mode;
  if (out.allow_async_standby) out.description += "&allow_async_standby=true";
  return out;
}

}  // namespace fencelock::detail::postgres
