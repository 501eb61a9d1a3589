#include "postgres/postgres_uri.h"

#include <charconv>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <libpq-fe.h>

#include "core/uri.h"

namespace fencelock::detail::postgres {

namespace {

// The value of parameter `name` in a query string ("?a=1&b=2"), if present.
std::optional<std::string_view> query_value(std::string_view query, std::string_view name) {
  if (query.starts_with('?')) query.remove_prefix(1);
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    }
  }
  return std::nullopt;
}

int number_or(std::optional<std::string_view> value, int otherwise) {
  int n = 0;
  if (!value) return otherwise;
  auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), n);
  return ec == std::errc() && end == value->data() + value->size() ? n : otherwise;
}

// The keepalive parameters (postgres_uri.h) that the query string `kept` lacks, as "&name=value"
// pieces (the first with '?' when `kept` is empty).
std::string missing_keepalives(std::string_view kept) {
  if (query_value(kept, "keepalives") == "0") return "";
  const int idle = number_or(query_value(kept, "keepalives_idle"), kKeepalivesIdleSeconds);
  const int interval =
      number_or(query_value(kept, "keepalives_interval"), kKeepalivesIntervalSeconds);
  const int count = number_or(query_value(kept, "keepalives_count"), kKeepalivesCount);
  const std::pair<std::string_view, long long> defaults[] = {
      {"keepalives_idle", kKeepalivesIdleSeconds},
      {"keepalives_interval", kKeepalivesIntervalSeconds},
      {"keepalives_count", kKeepalivesCount},
      {"tcp_user_timeout", (idle + static_cast<long long>(interval) * count) * 1000}};
  std::string out;
  for (const auto& [name, value] : defaults) {
    if (query_value(kept, name)) continue;
    out += fmt::format("{}{}={}", kept.empty() && out.empty() ? "?" : "&", name, value);
  }
  return out;
}

// Parameters of a libpq URI's query whose values are secrets.
bool secret_parameter(std::string_view name) { return name == "password" || name == "sslpassword"; }

// libpq's parse of the URI, run here on a copy without secrets (no password in the user
// information, "***" for the value of every secret parameter): libpq quotes the whole URI in
// some of its errors ('end of string reached when looking for matching "]"', 'invalid
// percent-encoded token'), and what it quotes must not hold a password. The secrets themselves
// cannot make the real URI malformed: the password goes back percent-encoded, and a value is
// any text up to the next '&'.
Status check_with_libpq(const std::string& without_secrets, bool had_secrets) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(without_secrets.c_str(), &error);
  if (parsed != nullptr) {
    PQconninfoFree(parsed);
    return Status::Ok();
  }
  std::string why = error != nullptr ? error : "libpq could not parse it";
  PQfreemem(error);
  // A raw '&' in a secret's value cuts the value there, and libpq would quote the rest as a
  // parameter of its own: with secrets in the query, its text is not shown.
  if (had_secrets) {
    return Status(Code::kInvalidArgument,
                  "malformed backend URI: libpq cannot parse its query (not shown: it holds a "
                  "password); in a password write '&' as %26, '=' as %3D, '%' as %25");
  }
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  return Status(Code::kInvalidArgument, fmt::format("malformed backend URI: {}", why));
}

}  // namespace

Result<PostgresUri> split_postgres_uri(std::string_view uri) {
  PostgresUri out;
  auto bad = [](std::string_view why) {
    return Status(Code::kInvalidArgument, fmt::format("malformed backend URI: {}", why));
  };
  if (!uri.starts_with("postgres://") && !uri.starts_with("postgresql://")) {
    return bad("expected postgres://user:password@host:port/database?mode=lease");
  }
  // Credentials first, split at the last '@' (as core/uri.h does): a password may hold '?', '/'
  // or '@', which libpq would otherwise read as the query, the database or the host, and then
  // quote pieces of in its errors. They go back to libpq percent-encoded, and never into the
  // description.
  const std::size_t scheme_end = uri.find("://") + 3;
  std::string_view rest = uri.substr(scheme_end);
  std::string userinfo;  // "user" or "user:password", percent-encoded, with no '@'
  std::string shown_user;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view raw = rest.substr(0, at);
    // An '@' in a query value ("...?password=a@b") would make the end of that value the host:
    // libpq then quotes it ("could not translate host name"). A query inside what would be the
    // credentials means that; either way one of the two must be percent-encoded.
    if (const auto q = raw.find('?');
        q != std::string_view::npos && raw.find('=', q) != std::string_view::npos) {
      return bad(
          "an '@' after the query began: write an '@' in a query value as %40 (or a '?' "
          "in the password as %3F)");
    }
    rest = rest.substr(at + 1);
    auto colon = raw.find(':');
    auto user = percent_decode(raw.substr(0, colon), "the user name");
    if (!user.ok()) return user.status();
    if (user->find('\0') != std::string::npos) return bad("the user name holds a NUL byte (%00)");
    userinfo = percent_encode(*user);
    shown_user = userinfo;
    if (colon != std::string_view::npos) {
      auto password = percent_decode(raw.substr(colon + 1), "the password");
      if (!password.ok()) {
        return bad("bad %-escape in the password (write a '%' in it as %25)");
      }
      if (password->find('\0') != std::string::npos) {
        return bad("the password holds a NUL byte (%00), which PostgreSQL cannot take");
      }
      userinfo += ":" + percent_encode(*password);
    }
  }
  const std::string prefix = std::string(uri.substr(0, scheme_end)) +
                             (userinfo.empty() && shown_user.empty() ? "" : userinfo + "@");
  std::string_view base = rest;
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    base = rest.substr(0, q);
    query = rest.substr(q + 1);
  }
  if (Status st = check_host_count(base.substr(0, base.find('/'))); !st.ok()) return st;
  std::string kept;
  std::string kept_shown;  // `kept` with the values of secret parameters masked
  bool had_secrets = false;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = pair.find('=');
    std::string_view name = pair.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    // libpq decodes parameter names too: "pass%77ord" is the password.
    auto decoded_name = percent_decode(name, "the name of a query parameter");
    if (!decoded_name.ok()) return decoded_name.status();
    if (secret_parameter(*decoded_name)) {
      had_secrets = true;
      // Checked here, and never quoted: libpq's own errors about a value quote it.
      auto decoded = percent_decode(value, "a secret");
      if (!decoded.ok()) {
        return bad(fmt::format("bad %-escape in the value of {} (write a '%' in it as %25)",
                               *decoded_name));
      }
      if (decoded->find('\0') != std::string::npos)
        return bad(fmt::format("the value of {} holds a NUL byte (%00)", *decoded_name));
      if (value.find('=') != std::string_view::npos)
        return bad(fmt::format("write an '=' in the value of {} as %3D", *decoded_name));
    }
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
      kept_shown +=
          (kept_shown.empty() ? "?" : "&") +
          (secret_parameter(*decoded_name) ? std::string(name) + "=***" : std::string(pair));
    }
  }
  const std::string shown_prefix =
      std::string(uri.substr(0, scheme_end)) + (shown_user.empty() ? "" : shown_user + "@");
  if (Status st = check_with_libpq(shown_prefix + std::string(base) + kept_shown, had_secrets);
      !st.ok())
    return st;
  out.conninfo = prefix + std::string(base) + kept + missing_keepalives(kept);
  // Description: the user without the password.
  out.description = std::string(uri.substr(0, scheme_end)) +
                    (shown_user.empty() ? "" : shown_user + "@") + std::string(base) +
                    "?mode=" + out.mode;
  if (out.allow_async_standby) out.description += "&allow_async_standby=true";
  return out;
}

}  // namespace fencelock::detail::postgres
