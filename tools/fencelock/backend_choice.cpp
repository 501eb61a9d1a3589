#include "backend_choice.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "core/backend_registry.h"
#include "core/uri.h"
#include "reporter.h"

namespace fencelock::cli {

bool uri_has_password(std::string_view uri) {
  // The one URI parser (core/uri.h); a URI it cannot parse is left to the backend's error.
  auto parsed = detail::parse_uri(uri, 0);
  return parsed.ok() && (parsed->has_password || parsed->query.count("password") > 0);
}

BackendChoice choose_backend(std::string_view option, bool json) {
  if (!option.empty()) {
    if (uri_has_password(option)) {
      const std::string message =
          "warning: the password in --backend is visible to every local user (the process's "
          "command line); pass the URI in FENCELOCK_BACKEND, or the password in "
          "FENCELOCK_REDIS_PASSWORD, FENCELOCK_ETCD_PASSWORD, PGPASSWORD or ~/.pgpass";
      std::fputs((json ? json_line({{"warning", "password_in_argv"}, {"message", message}})
                       : "fencelock: " + message)
                     .append("\n")
                     .c_str(),
                 stderr);
    }
    return {std::string(option), BackendChoice::Source::kOption};
  }
  const char* env = std::getenv(std::string(kBackendEnv).c_str());
  if (env != nullptr && *env != '\0') return {env, BackendChoice::Source::kEnvironment};
  return {std::string(kDefaultBackend), BackendChoice::Source::kDefault};
}

std::string explain_failure(const Status& status, const BackendChoice& backend) {
  std::string text = status.to_string();
  const bool from_env = backend.source == BackendChoice::Source::kEnvironment;
  switch (status.code()) {
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
      if (backend.source == BackendChoice::Source::kDefault) {
        return fmt::format(
            "{}; no backend was given, so fencelock tried the default {}: choose one with "
            "--backend URI or {}=URI",
            text, kDefaultBackend, kBackendEnv);
      }
      return fmt::format("{}; check that the backend{} is running and reachable, then retry", text,
                         from_env ? fmt::format(" in {}", kBackendEnv) : "");
    case Code::kUnauthenticated:
    case Code::kPermissionDenied:
      // The library's message already says what to check (once); only where the URI came from
      // is the CLI's to add.
      return from_env ? fmt::format("{} (the backend URI came from {})", text, kBackendEnv) : text;
    case Code::kInternal:
      return text + "; this is a bug or an unexpected server reply: please report it";
    default:
      return text;
  }
}

std::string explain_connect_failure(const Status& status, const BackendChoice& backend) {
  if (status.code() != Code::kInvalidArgument) return explain_failure(status, backend);
  const std::string where = backend.source == BackendChoice::Source::kEnvironment
                                ? fmt::format(" (URI from {})", kBackendEnv)
                                : "";
  // The shape of every URI only where the scheme is missing: a known scheme's own error already
  // says what is wrong with it, and an unknown one lists the schemes.
  if (backend.uri.find("://") != std::string::npos) return status.to_string() + where;
  return fmt::format("{}{}; backend URIs look like {}", status.to_string(), where,
                     backend_uri_forms());
}

std::string backend_uri_forms() {
  std::vector<std::string_view> forms;
  for (const detail::BackendPlugin* plugin : detail::backend_plugins()) {
    forms.insert(forms.end(), plugin->uri_forms.begin(), plugin->uri_forms.end());
  }
  std::string out;
  for (std::size_t i = 0; i < forms.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == forms.size() ? " or " : ", ");
    out += forms[i];
  }
  return out;
}

}  // namespace fencelock::cli
