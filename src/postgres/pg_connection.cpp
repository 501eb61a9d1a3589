#include "postgres/pg_connection.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include "core/mutex.h"

namespace fencelock::detail::postgres {
namespace {

int millis_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
}

// Waits until the socket is readable (or writable). False on deadline.
bool wait_socket(PGconn* c, bool for_write, Clock::time_point deadline) {
  pollfd pfd{PQsocket(c), static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  while (true) {
    int n = poll(&pfd, 1, millis_until(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string first_line(const char* text) {
  std::string s = text != nullptr ? text : "";
  auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

Status connect_error(PGconn* c) {
  std::string msg = first_line(PQerrorMessage(c));
  // libpq quotes pieces of what it could not parse: never the password (split off and
  // percent-encoded by split_postgres_uri, so it cannot be read as another part), and should it
  // ever appear, it is cut out here.
  if (const char* password = PQpass(c); password != nullptr && *password != '\0') {
    for (auto at = msg.find(password); at != std::string::npos; at = msg.find(password, at))
      msg.replace(at, std::strlen(password), "***");
  }
  auto has = [&](std::string_view t) { return msg.find(t) != std::string::npos; };
  if (has("password authentication failed") || has("no password supplied") ||
      has("authentication failed")) {
    return Status(
        Code::kUnauthenticated,
        fmt::format("PostgreSQL refused the credentials ({}); check the user and password "
                    "in the URI, PGPASSWORD or ~/.pgpass",
                    msg));
  }
  if (has("database") && has("does not exist")) {
    return Status(Code::kInvalidArgument,
                  fmt::format("PostgreSQL: {}; check the database in the URI", msg));
  }
  if (has("invalid") || has("unrecognized") || has("missing")) {
    return Status(Code::kInvalidArgument, fmt::format("malformed PostgreSQL URI: {}", msg));
  }
  return Status(Code::kUnavailable, fmt::format("cannot connect to PostgreSQL: {}", msg));
}

}  // namespace

Result<ConnPtr> open_connection(const std::string& conninfo, Clock::time_point deadline) {
  ConnPtr c(PQconnectStart(conninfo.c_str()));
  if (!c) return Status(Code::kInternal, "out of memory allocating a PostgreSQL connection");
  if (PQstatus(c.get()) == CONNECTION_BAD) return connect_error(c.get());
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) return connect_error(c.get());
    if (!wait_socket(c.get(), state == PGRES_POLLING_WRITING, deadline)) {
      return Status(Code::kUnavailable, "cannot connect to PostgreSQL: timed out");
    }
    state = PQconnectPoll(c.get());
  }
  PQsetnonblocking(c.get(), 1);
  // A token is handed out only once the commit that drew it is durable: with the server's
  // synchronous_commit = off, a crash loses recent commits and a sequence goes back (tokens would
  // repeat); with `local`, a failover to a synchronous standby may lack them. Raise either to
  // `on` for this session; remote_write and remote_apply are kept.
  bool broken = false;
  auto durable = execute(c.get(),
                         "SELECT set_config('synchronous_commit', 'on', false) "
                         "WHERE current_setting('synchronous_commit') IN ('off', 'local')",
                         {}, deadline, broken);
  if (!durable.ok()) {
    return Status(durable.code(), "setting synchronous_commit = on for durable tokens: " +
                                      durable.status().message());
  }
  return c;
}

Status status_from_result(const PGresult* r) {
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  std::string code = state != nullptr ? state : "";
  std::string msg = first_line(PQresultErrorMessage(r));
  if (code == "42501") {
    return Status(Code::kPermissionDenied,
                  fmt::format("PostgreSQL: {}; ask an administrator to run `fencelock migrate "
                              "--backend URI`, or grant the privilege",
                              msg));
  }
  if (code.starts_with("28")) return Status(Code::kUnauthenticated, "PostgreSQL: " + msg);
  if (code == "57014") return Status(Code::kDeadlineExceeded, "PostgreSQL: " + msg);  // cancelled
  if (code == "55P03") return Status(Code::kLocked, "PostgreSQL: " + msg);  // lock_timeout
  if (code.starts_with("08") || code.starts_with("57") || code.starts_with("53")) {
    return Status(Code::kUnavailable, "PostgreSQL: " + msg);
  }
  return Status(Code::kInternal, fmt::format("PostgreSQL error {}: {}", code, msg));
}

namespace {

// Asks the server to cancel the statement running on `c` (thread-safe, as libpq documents).
void cancel_on_server(PGcancel* cancel) {
  char err[256];
  PQcancel(cancel, err, sizeof err);
}

struct CancelDeleter {
  void operator()(PGcancel* c) const { PQfreeCancel(c); }
};

}  // namespace

Result<ResultPtr> execute(PGconn* c, const std::string& sql, const std::vector<std::string>& params,
                          Clock::time_point deadline, bool& broken, bool multi,
                          std::stop_token stop) {
  broken = true;  // until proven otherwise
  std::unique_ptr<PGcancel, CancelDeleter> cancel(PQgetCancel(c));
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
  if (stop.stop_possible() && cancel) {
    on_stop.emplace(stop, std::function<void()>([&] { cancel_on_server(cancel.get()); }));
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  int sent = multi ? PQsendQuery(c, sql.c_str())
                   : PQsendQueryParams(c, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                       values.data(), nullptr, nullptr, 0);
  if (sent == 0) return Status(Code::kUnavailable, "PostgreSQL: " + first_line(PQerrorMessage(c)));
  int flushed;
  while ((flushed = PQflush(c)) == 1) {
    if (!wait_socket(c, true, deadline)) break;
  }
  ResultPtr last;
  bool timed_out = flushed != 0;
  while (!timed_out) {
    while (PQisBusy(c)) {
      if (!wait_socket(c, false, deadline)) {
        timed_out = true;
        break;
      }
      if (PQconsumeInput(c) == 0) {
        return Status(Code::kUnavailable,
                      "lost the PostgreSQL connection: " + first_line(PQerrorMessage(c)));
      }
    }
    if (timed_out) break;
    PGresult* r = PQgetResult(c);
    if (r == nullptr) break;
    last.reset(r);
  }
  if (timed_out) {
    if (cancel) cancel_on_server(cancel.get());  // the statement must not go on after we gave up
    return Status(Code::kDeadlineExceeded,
                  "PostgreSQL did not answer in time (statement cancelled)");
  }
  if (!last) return Status(Code::kInternal, "PostgreSQL returned no result");
  auto st = PQresultStatus(last.get());
  if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
    broken = PQstatus(c) != CONNECTION_OK;
    Status error = status_from_result(last.get());
    if (stop.stop_requested() && error.code() == Code::kDeadlineExceeded) {
      return Status(Code::kCancelled, "acquisition cancelled");
    }
    return error;
  }
  broken = PQstatus(c) != CONNECTION_OK;
  return last;
}

bool recover_after_timeout(PGconn* c, Clock::time_point deadline) {
  int flushed;
  while ((flushed = PQflush(c)) == 1) {
    if (!wait_socket(c, true, deadline)) return false;
  }
  if (flushed != 0) return false;
  while (PQstatus(c) == CONNECTION_OK) {
    while (PQisBusy(c)) {
      if (!wait_socket(c, false, deadline) || PQconsumeInput(c) == 0) return false;
    }
    ResultPtr r(PQgetResult(c));
    if (!r) break;
  }
  return PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE;
}

Result<ConnPtr> PgPool::checkout(Clock::time_point deadline) {
  {
    MutexLock lock(mu_);
    while (true) {
      if (!idle_.empty()) {
        ConnPtr c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      if (Status refused = backoff_.refusal(Clock::now()); !refused.ok()) return refused;
      if (open_ < max_) break;
      // Every connection is busy: wait for one (the pool is bounded on purpose).
      if (!returned_.wait_until(lock, deadline, [&]() FENCELOCK_REQUIRES(mu_) {
            return !idle_.empty() || open_ < max_;
          })) {
        return Status(Code::kDeadlineExceeded,
                      fmt::format("all {} pooled PostgreSQL connections stayed busy", max_));
      }
    }
    open_++;
  }
  auto opened = open_connection(conninfo_, std::min(deadline, Clock::now() + connect_timeout_));
  MutexLock lock(mu_);
  if (opened.ok()) {
    backoff_.connected();
    reconnects_.connected();
    return opened;
  }
  open_--;
  returned_.notify_one();
  if (backoff_.failed(opened.status(), Clock::now())) reconnects_.failed();
  return opened;
}

void PgPool::checkin(ConnPtr c, bool healthy) {
  MutexLock lock(mu_);
  if (healthy && PQstatus(c.get()) == CONNECTION_OK) {
    idle_.push_back(std::move(c));
  } else {
    // A broken connection usually means the server went away: the idle ones would fail the
    // same way, so drop them too and let the next call reconnect.
    reconnects_.failed();
    open_ -= 1 + idle_.size();
    idle_.clear();
  }
  returned_.notify_one();
}

Result<ResultPtr> run(PgPool& pool, const std::string& sql, const std::vector<std::string>& params,
                      Clock::time_point deadline, bool multi) {
  auto c = pool.checkout(deadline);
  if (!c.ok()) return c.status();
  bool broken = false;
  auto result = execute(c->get(), sql, params, deadline, broken, multi);
  pool.checkin(std::move(*c), !broken);
  return result;
}

}  // namespace fencelock::detail::postgres
