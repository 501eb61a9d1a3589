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
#include <cstdint>
#include <future>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
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

// What open_connection() does to a new session before handing it out, in one statement
// (sql/session_setup.sql, one round trip).
struct SessionSetup {
  // Pin what fencelock's calls depend on, whatever the server, database, role or PGOPTIONS set:
  // statement_timeout, lock_timeout, idle_in_transaction_session_timeout and
  // idle_session_timeout (transaction_timeout too where the server has it) to 0, since every call
  // is bounded by its own deadline and cancelled by the client; synchronous_commit to on where
  // it is off or local (durable tokens); and the server's side of TCP keepalives
  // (tcp_keepalives_idle/interval/count, tcp_user_timeout) to libpq's values, unless the URI's
  // `options` sets them. False through a pooler that does not keep sessions: a session setting
  // would land on a server connection that other clients share.
  bool pin = true;
  // When not empty: marks the session (the custom setting fencelock.session), and refuses
  // (session_not_kept()) a session that already had a mark: a pooler handed on a server session
  // another connection used.
  std::string mark;
};

// Opens a connection (libpq URI or conninfo), bounded by `deadline`, and sets it up. kUnavailable
// when the server cannot be reached, kUnauthenticated for rejected credentials,
// kInvalidArgument for an unknown database, a malformed conninfo or a marked session handed on.
// Messages never contain the password.
Result<ConnPtr> open_connection(const std::string& conninfo, Clock::time_point deadline,
                                const SessionSetup& setup = {});

// Marks the session on `c` with `mark` (as SessionSetup::mark) and returns the mark it had
// before ("" for none), in one statement.
Result<std::string> mark_session(PGconn* c, const std::string& mark, Clock::time_point deadline);
// Whether the session `c`'s statements run in has `mark` (one statement).
Result<bool> has_mark(PGconn* c, const std::string& mark, Clock::time_point deadline);
// kInvalidArgument: `what` happened, so the connection does not keep one server session of its
// own; says what to do (connect directly or through session pooling, or use mode=lease).
Status session_not_kept(std::string_view what);

// Runs one statement with text parameters (`multi` sends a parameterless script instead) and
// returns its last result. On a deadline the statement is cancelled and kDeadlineExceeded
// returned; the connection must then be dropped (`broken` is set) unless
// recover_after_timeout() brings it back, given `cancel_done` (set on a deadline).
// `stop` cancels the statement on the server too (kCancelled unless it completed first); a
// connection whose statement a stop cancelled is `broken` whatever the outcome, since the
// cancel may reach the server late, and cut the next statement short.
Result<ResultPtr> execute(PGconn* c, const std::string& sql, const std::vector<std::string>& params,
                          Clock::time_point deadline, bool& broken, bool multi = false,
                          std::stop_token stop = {},
                          std::shared_future<void>* cancel_done = nullptr);

// A statement a connection prepares on first use (execute_prepared): its name on the server,
// its text, and its bit in the connection's `prepared` mask (slot < 32, one per statement).
struct PreparedStatement {
  std::string name;
  std::string sql;
  unsigned slot;
};

// As execute() for a statement with parameters, run as the prepared statement `ps`: prepared on
// the connection first unless `prepared` (the connection's mask, kept by its owner) has its
// bit, which it then sets. Parsed and planned once per connection instead of per call.
Result<ResultPtr> execute_prepared(PGconn* c, std::uint32_t& prepared, const PreparedStatement& ps,
                                   const std::vector<std::string>& params,
                                   Clock::time_point deadline, bool& broken,
                                   std::shared_future<void>* cancel_done = nullptr);

// Maps a failed statement's SQLSTATE to a Status (42501 -> kPermissionDenied, ...).
Status status_from_result(const PGresult* r);

// After execute() gave up on a statement (kDeadlineExceeded: it already asked the server to
// cancel it), waits until that cancel can no longer arrive (`cancel_done`, from execute()), then
// reads what is left of the statement's results, all until `deadline`. True if the connection
// is then idle and usable again (no transaction open), so that a session holding locks need
// not be closed.
bool recover_after_timeout(PGconn* c, const std::shared_future<void>& cancel_done,
                           Clock::time_point deadline);

// A bounded pool of connections to one server.
class PgPool {
 public:
  PgPool(std::string conninfo, std::size_t max_connections, milliseconds connect_timeout,
         SessionSetup setup = {})
      : conninfo_(std::move(conninfo)),
        max_(max_connections),
        connect_timeout_(connect_timeout),
        setup_(std::move(setup)) {}

  // An idle connection, a new one while fewer than max exist, or (waiting until `deadline`)
  // the next one returned. In reconnect backoff it fails at once with the last error.
  // `reused` (if given) tells whether the connection waited idle in the pool.
  Result<ConnPtr> checkout(Clock::time_point deadline, bool* reused = nullptr);
  // Returns a connection; `healthy` false drops it (and frees its slot), and the idle ones too.
  // Notifications it received (a pooler can deliver another client's) are dropped.
  void checkin(ConnPtr c, bool healthy);

  const std::string& conninfo() const { return conninfo_; }
  // Connections opened again after a failure (ReconnectCounter).
  std::uint64_t reconnects() const { return reconnects_.count(); }

 private:
  const std::string conninfo_;
  const std::size_t max_;
  const milliseconds connect_timeout_;
  const SessionSetup setup_;
  ReconnectCounter reconnects_;
  Mutex mu_;
  std::condition_variable_any returned_;
  std::vector<ConnPtr> idle_ FENCELOCK_GUARDED_BY(mu_);
  std::size_t open_ FENCELOCK_GUARDED_BY(mu_) = 0;  // idle + checked out + being opened
  ReconnectBackoff backoff_ FENCELOCK_GUARDED_BY(mu_);
};

enum class Retry {
  kNever,
  // A statement that may run twice (idempotent: a compare-and-release, a renewal, a read): when
  // it fails on a connection that waited idle in the pool and turns out dead (its server
  // session ended in a restart, a pg_terminate_backend, a pooler's idle timeout), it runs once
  // more on a fresh connection within the same deadline.
  kOnDeadConnection,
};

// Lock names and list prefixes are PostgreSQL `text`: valid UTF-8 only. kInvalidArgument naming
// the first byte that is not, before anything is sent (the server's refusal read as an internal
// error, and a SQL_ASCII database stored such a name but could not match it again on renewal).
Status check_name(std::string_view name);

// Runs a statement on a pooled connection (checkout, execute, checkin).
Result<ResultPtr> run(PgPool& pool, const std::string& sql, const std::vector<std::string>& params,
                      Clock::time_point deadline, bool multi = false, Retry retry = Retry::kNever);

}  // namespace fencelock::detail::postgres
