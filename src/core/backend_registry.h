// The backend registry: which URI schemes this build of fencelock serves, and who serves them.
//
// Each backend (src/redis, src/postgres, src/etcd, src/memory) is its own CMake target and
// describes itself in one BackendPlugin; the build lists the enabled ones (FENCELOCK_WITH_REDIS,
// FENCELOCK_WITH_POSTGRES, FENCELOCK_WITH_ETCD; memory:// always) in a generated file that this
// registry reads on first use. The core and the tools never name a scheme: Client::connect,
// migrate(), the URI error messages, the torture endpoints, the probes and the bench labels all
// ask here. docs/DEVELOPING.md ("Adding a backend") says what a new one touches.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "fencelock/options.h"
#include "fencelock/status.h"

namespace fencelock::detail {

struct BackendPlugin {
  // The backend's name: what tools key their backend-specific parts on ("redis", "postgres",
  // "etcd", "memory"): the torture's admin-delete, the server probe's protocol, bench labels.
  std::string_view family;
  // The schemes it serves, lower-case, the preferred one first ("redis", "redlock").
  std::vector<std::string_view> schemes;
  // Whether a scheme must be typed in lower case (libpq refuses POSTGRES://); otherwise the
  // scheme is case-insensitive as RFC 3986 says.
  bool lowercase_only = false;
  // The port of a host named without one; 0 for a backend without servers (memory://).
  std::uint16_t default_port = 0;
  // The URI forms, for help and error texts: "redis://[user:pass@]HOST:PORT[/DB]".
  std::vector<std::string_view> uri_forms;
  // Connects (or, with check_only, validates the URI and returns a null backend, connecting to
  // nothing). The URI is as the caller typed it; the backend parses it.
  Result<std::unique_ptr<Backend>> (*connect)(std::string_view uri, const ClientOptions& options,
                                              bool check_only) = nullptr;
  // Creates what the backend needs on its server (idempotent) and returns the statements run;
  // null for a backend with nothing to create (migrate() then only checks the URI).
  Result<std::vector<std::string>> (*migrate)(std::string_view uri,
                                              const ClientOptions& options) = nullptr;
};

// Every backend of this build, in registration order (built-ins first).
std::vector<const BackendPlugin*> backend_plugins();

// The backend serving the scheme of `uri` ("SCHEME://..." as typed), or null: no "://", an
// unknown scheme, or a lowercase_only scheme typed otherwise.
const BackendPlugin* find_backend_plugin(std::string_view uri);

// The backend of `uri`, or the error Client::connect gives: the URI parser's for a URI without
// a scheme or with a malformed one, else unknown_scheme() naming the scheme as typed.
Result<const BackendPlugin*> backend_for_uri(std::string_view uri);

// Whether `scheme` (lower case) names a registered backend.
bool known_scheme(std::string_view scheme);

// kInvalidArgument "unknown backend scheme 'SCHEME://' (use redis://, ...)": the one message for
// it, listing the schemes of this build.
Status unknown_scheme(std::string_view scheme);

// Registers another backend (tests, programs embedding their own). Its schemes must be new
// (kInvalidArgument otherwise) and lower case. The plugin must outlive every Client.
Status register_backend_plugin(const BackendPlugin& plugin);

// The built-in backends this build was configured with (generated: builtin_backends.cpp).
std::vector<const BackendPlugin*> builtin_backend_plugins();

// "redis://, redlock://, ... or memory://": every registered scheme, for messages.
std::string scheme_list();

}  // namespace fencelock::detail
