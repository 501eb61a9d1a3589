#include "backend_choice.h"

#include <cstdlib>

#include <fmt/format.h>

namespace fencelock::cli {

BackendChoice choose_backend(std::string_view option) {
  if (!option.empty()) return {std::string(option), BackendChoice::Source::kOption};
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
      return fmt::format("{}; check the user and password in the backend URI{}", text,
                         from_env ? fmt::format(" ({})", kBackendEnv) : "");
    case Code::kInternal:
      return text + "; this is a bug or an unexpected server reply: please report it";
    default:
      return text;
  }
}

std::string explain_connect_failure(const Status& status, const BackendChoice& backend) {
  if (status.code() != Code::kInvalidArgument) return explain_failure(status, backend);
  return fmt::format(
      "{}{}; backend URIs look like redis://[user:pass@]HOST:PORT or "
      "redlock://H1:P1,H2:P2,H3:P3",
      status.to_string(),
      backend.source == BackendChoice::Source::kEnvironment
          ? fmt::format(" (URI from {})", kBackendEnv)
          : "");
}

}  // namespace fencelock::cli
