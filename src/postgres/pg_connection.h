// libpq connections for the PostgreSQL backends.
//
// Concurrency mechanism (one for the driver): blocking use of libpq's asynchronous API. Each
// call sends its statement, then waits for the socket with poll() under the call's deadline; a
// call that runs out of time is cancelled on the server (PQcancel) and its connection dropped.
// Connections are pooled (bounded); the listener (pg_listener.h) has its own.
//
// Thread-safety: PgPool is safe to use from many threads; a connection is used by one thread at
// a time (checked out of the pool).
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/reconnects.h"

namespace fencelock::detail::postgres {

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// Opens a connection (libpq URI or conninfo), bounded by `deadline`. kUnavailable when the
// server cannot be reached, kUnauthenticated for rejected credentials, kInvalidArgument for an
// unknown database or a malformed conninfo. Messages never contain the password.
Result<ConnPtr> open_connection(const std::string& conninfo, Clock::time_point deadline);

// Runs one statement with text parameters (`multi` sends a parameterless script instead) and
// returns its last result. On a deadline the statement is cancelled and kDeadlineExceeded
// returned; the connection must then be dropped (`broken` is set) unless
// recover_after_timeout() brings it back.
// `stop` cancels the statement on the server too (kCancelled unless it completed first).
Result<ResultPtr> execute(PGconn* c, const std::string& sql, const std::vector<std::string>& params,
                          Clock::time_point deadline, bool& broken, bool multi = false,
                          std::stop_token stop = {});

// Maps a failed statement's SQLSTATE to a Status (42501 -> kPermissionDenied, ...).
Status status_from_result(const PGresult* r);

// After execute() gave up on a statement (kDeadlineExceeded: it already asked the server to
// cancel it), reads what is left of the statement's results until `deadline`. True if the
// connection is then idle and usable again (no transaction open), so that a session holding
// locks need not be closed.
bool recover_after_timeout(PGconn* c, Clock::time_point deadline);

// A bounded pool of connections to one server.
class PgPool {
 public:
  PgPool(std::string conninfo, std::size_t max_connections, milliseconds connect_timeout)
      : conninfo_(std::move(conninfo)), max_(max_connections), connect_timeout_(connect_timeout) {}

  // An idle connection, a new one while fewer than max exist, or (waiting until `deadline`)
  // the next one returned. In reconnect backoff it fails at once with the last error.
  Result<ConnPtr> checkout(Clock::time_point deadline);
  // Returns a connection; `healthy` false drops it (and frees its slot).
  void checkin(ConnPtr c, bool healthy);

  const std::string& conninfo() const { return conninfo_; }
  // Connections opened again after a failure (ReconnectCounter).
  std::uint64_t reconnects() const { return reconnects_.count(); }

 private:
  const std::string conninfo_;
  const std::size_t max_;
  const milliseconds connect_timeout_;
  ReconnectCounter reconnects_;
  Mutex mu_;
  std::condition_variable_any returned_;
  std::vector<ConnPtr> idle_ FENCELOCK_GUARDED_BY(mu_);
  std::size_t open_ FENCELOCK_GUARDED_BY(mu_) = 0;  // idle + checked out + being opened
  ReconnectBackoff backoff_ FENCELOCK_GUARDED_BY(mu_);
};

// Runs a statement on a pooled connection (checkout, execute, checkin).
Result<ResultPtr> run(PgPool& pool, const std::string& sql, const std::vector<std::string>& params,
                      Clock::time_point deadline, bool multi = false);

}  // namespace fencelock::detail::postgres
