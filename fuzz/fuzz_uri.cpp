// Backend URIs of every scheme, as a user or a config file writes them: the one URI parser
// (core/uri.h: redis://, redlock://, etcd://, etcds://, memory://), the Redis connection specs
// read from it (redis/connection.h), the etcd options (etcd/etcd_options.h) and the PostgreSQL
// splitter (postgres/postgres_uri.h).
// Properties: no crash; percent-decoding inverts percent-encoding; a parsed URI's redact() never
// depends on the password and parses back to the same hosts; no message or description shows
// the password: each reads the same with another password in its place.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/uri.h"
#include "etcd/etcd_options.h"
#include "fuzz_check.h"
#include "postgres/postgres_uri.h"
#include "redis/connection.h"
#include "redis/redis_options.h"

namespace fencelock::detail {
namespace {

// The password's text as written: after the first ':' of the part before the last '@' that
// follows "://" (both parsers' rule). nullopt when there is none.
std::optional<std::string_view> raw_password(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view rest = uri.substr(sep + 3);
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view userinfo = rest.substr(0, at);
  const auto colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return userinfo.substr(colon + 1);
}

// `uri` with its password replaced by `other`: a parse that does not depend on the password
// reads both the same (the split at the last '@' comes before anything else is read).
std::string with_password(std::string_view uri, std::string_view other) {
  const auto password = raw_password(uri);
  if (!password) return std::string(uri);
  const std::size_t begin = static_cast<std::size_t>(password->data() - uri.data());
  return std::string(uri.substr(0, begin)) + std::string(other) +
         std::string(uri.substr(begin + password->size()));
}

bool about_the_password(const Status& status) {
  return status.message().find("the password") != std::string::npos;
}

void check_percent_coding(std::string_view text) {
  auto decoded = percent_decode(text, "the fuzz input");
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.code() == Code::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(decoded->size() <= text.size());
  const std::string encoded = percent_encode(*decoded);
  for (char c : encoded) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(u > 0x20 && u < 0x7f);
  }
  auto again = percent_decode(encoded, "the fuzz input");
  FUZZ_CHECK(again.ok() && *again == *decoded);
}

void check_redis_specs(const ParsedUri& uri) {
  auto specs = redis::connect_specs(uri, milliseconds(1000));
  if (!specs.ok()) {
    FUZZ_CHECK(specs.code() == Code::kInvalidArgument && !uri.path.empty());
    return;
  }
  FUZZ_CHECK(specs->size() == uri.endpoints.size());
  for (std::size_t i = 0; i < specs->size(); ++i) {
    FUZZ_CHECK((*specs)[i].db >= 0);
    FUZZ_CHECK((*specs)[i].endpoint == uri.endpoints[i]);
    FUZZ_CHECK((*specs)[i].password == uri.password);
  }
}

void check_parsed(std::string_view text, const ParsedUri& uri) {
  FUZZ_CHECK(!uri.scheme.empty());
  FUZZ_CHECK(uri.endpoints.size() <= kMaxHosts);
  for (const Endpoint& endpoint : uri.endpoints) {
    FUZZ_CHECK(!endpoint.host.empty() && endpoint.port != 0);
  }
  FUZZ_CHECK(uri.has_password || uri.password.empty());
  const std::string redacted = redact(uri);
  ParsedUri without = uri;
  without.password = "another password";
  without.has_password = !uri.has_password;
  FUZZ_CHECK(redact(without) == redacted);
  auto other = parse_uri(with_password(text, "Other%20pw"), 6379);
  FUZZ_CHECK(other.ok() && redact(*other) == redacted);
  // The redacted form is a URI again, with the same hosts (a user with ':' or '%' in it is
  // printed as decoded, so it does not read back the same).
  if (uri.user.find_first_of(":%") == std::string::npos) {
    auto again = parse_uri(redacted, 1);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->scheme == uri.scheme && again->user == uri.user && !again->has_password);
    FUZZ_CHECK(again->endpoints == uri.endpoints && again->path == uri.path);
  }
  if (uri.scheme == "redis" || uri.scheme == "redlock") check_redis_specs(uri);
}

void check_postgres(std::string_view text) {
  auto split = postgres::split_postgres_uri(text);
  if (!split.ok()) {
    FUZZ_CHECK(split.code() == Code::kInvalidArgument);
    if (about_the_password(split.status())) return;
    auto other = postgres::split_postgres_uri(with_password(text, "Other%20pw"));
    FUZZ_CHECK(!other.ok() && other.status().message() == split.status().message());
    return;
  }
  FUZZ_CHECK(split->mode == "lease" || split->mode == "advisory");
  FUZZ_CHECK(split->pool >= 1 && split->pool <= 1000);
  FUZZ_CHECK(split->conninfo.starts_with(text.substr(0, text.find("://") + 3)));
  auto other = postgres::split_postgres_uri(with_password(text, "Other%20pw"));
  FUZZ_CHECK(other.ok() && other->description == split->description);
  FUZZ_CHECK(other->mode == split->mode && other->pool == split->pool);
}

}  // namespace
}  // namespace fencelock::detail

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // connect_specs() falls back on these: the properties are about the URI alone.
  unsetenv("FENCELOCK_REDIS_PASSWORD");
  unsetenv("FENCELOCK_REDIS_USER");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fencelock::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_percent_coding(text);
  auto parsed = parse_uri(text, 6379);
  if (parsed.ok()) {
    check_parsed(text, *parsed);
    // The Redis backends' and the fence's one reading of the query options.
    auto options = redis::parse_redis_options(*parsed);
    FUZZ_CHECK(options.ok() || options.status().code() == fencelock::Code::kInvalidArgument);
    if (options.ok()) {
      FUZZ_CHECK(options->renew_batch >= 1 && options->renew_batch <= redis::kMaxRenewBatch);
    }
    // The etcd backends' reading: a namespace it accepts ends with '/' within the bound, and a
    // client certificate comes with its key.
    auto etcd_options = etcd::parse_etcd_options(*parsed);
    FUZZ_CHECK(etcd_options.ok() ||
               etcd_options.status().code() == fencelock::Code::kInvalidArgument);
    if (etcd_options.ok()) {
      const std::string& ns = etcd_options->key_namespace;
      FUZZ_CHECK(ns.empty() || (ns.ends_with('/') && ns.size() <= etcd::kMaxNamespaceBytes));
      FUZZ_CHECK(etcd_options->cert.empty() == etcd_options->key.empty());
      FUZZ_CHECK(parsed->scheme == "etcds" || etcd_options->cacert.empty());
    }
  } else {
    FUZZ_CHECK(parsed.code() == fencelock::Code::kInvalidArgument);
    if (!about_the_password(parsed.status())) {
      auto other = parse_uri(with_password(text, "Other%20pw"), 6379);
      FUZZ_CHECK(!other.ok() && other.status().message() == parsed.status().message());
    }
  }
  check_postgres(text);
  return 0;
}
