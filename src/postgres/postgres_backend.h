// postgres:// and postgresql:// backends (docs/PROTOCOLS.md, "PostgreSQL").
//
// The URI is a libpq connection URI (sslmode, passwords from PGPASSWORD or ~/.pgpass, several
// hosts, ...) plus fencelock's own query parameters, which are removed before libpq sees it:
//   mode=advisory | lease   session advisory locks (the default; advisory_backend.h), or the
//                           lease table with server-clock expiry
//   pool=N                  bounded connection pool size (default 8)
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"
#include "fencelock/options.h"

namespace fencelock::detail {

Result<std::unique_ptr<Backend>> make_postgres_backend(const std::string& uri,
                                                       const ClientOptions& options);

// Creates the lease-mode schema (idempotent) and returns the statements it ran.
Result<std::vector<std::string>> migrate_postgres(const std::string& uri,
                                                  const ClientOptions& options);

}  // namespace fencelock::detail
