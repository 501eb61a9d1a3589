// Which backend a command talks to (--backend, then $FENCELOCK_BACKEND, then the default) and how
// to explain a failure to reach it.
//
// Thread-safety: plain functions and values.
#pragma once

#include <string>
#include <string_view>

#include "fencelock/client.h"
#include "fencelock/status.h"

namespace fencelock::cli {

inline constexpr std::string_view kDefaultBackend = "redis://127.0.0.1:6379";
inline constexpr std::string_view kBackendEnv = "FENCELOCK_BACKEND";

struct BackendChoice {
  enum class Source { kOption, kEnvironment, kDefault };
  std::string uri;  // may hold a password: never print it (print Client::describe() instead)
  Source source = Source::kDefault;
};

// `option` is the value of --backend, empty when not given. An empty $FENCELOCK_BACKEND counts as
// unset. A password in --backend (user:pass@, or password= in the query) is visible to every
// local user in /proc/PID/cmdline: warned once on stderr ("fencelock: warning: ...", or with
// `json` {"warning":"password_in_argv","message":...}).
BackendChoice choose_backend(std::string_view option, bool json = false);

// Whether `uri` carries a password: "scheme://user:password@..." or a password= query parameter.
bool uri_has_password(std::string_view uri);

// The status's text plus what to do about it, as one line without the "fencelock: " prefix, e.g.
// "unavailable: ...; no backend was given, so fencelock tried the default ...".
std::string explain_failure(const Status& status, const BackendChoice& backend);

// explain_failure() for Client::connect(): a malformed URI also gets the URI forms.
std::string explain_connect_failure(const Status& status, const BackendChoice& backend);

// The URI form of every backend of this build (the backend registry), "A, B or C".
std::string backend_uri_forms();

}  // namespace fencelock::cli
