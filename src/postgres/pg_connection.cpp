#include "postgres/pg_connection.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mutex.h"
#include "core/thread_name.h"
#include "core/utf8.h"
#include "postgres_sql.h"

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

namespace {

// The settings that can end a session or a statement early, pinned off (SessionSetup::pin).
// transaction_timeout exists from PostgreSQL 17 on; session_setup.sql skips what the server lacks.
constexpr std::string_view kPinnedOff[] = {"statement_timeout", "lock_timeout",
                                           "idle_in_transaction_session_timeout",
                                           "idle_session_timeout", "transaction_timeout"};

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// The settings SessionSetup::pin sets: kPinnedOff, and the server's side of the keepalives from
// libpq's values in effect on `c` (the URI's, else those postgres_uri.h adds), except any that
// the URI's `options` sets for the server itself, and none when the URI turned keepalives off.
nlohmann::json pinned_settings(PGconn* c) {
  nlohmann::json out = nlohmann::json::object();
  for (std::string_view name : kPinnedOff) out[std::string(name)] = "0";
  std::map<std::string, std::string, std::less<>> libpq;
  PQconninfoOption* options = PQconninfo(c);
  for (const PQconninfoOption* o = options; o != nullptr && o->keyword != nullptr; ++o) {
    if (o->val != nullptr) libpq[o->keyword] = o->val;
  }
  PQconninfoFree(options);
  if (libpq["keepalives"] == "0") return out;
  const std::string server_options = libpq["options"];
  for (const auto& [client, server] :
       {std::pair<std::string, std::string>{"keepalives_idle", "tcp_keepalives_idle"},
        {"keepalives_interval", "tcp_keepalives_interval"},
        {"keepalives_count", "tcp_keepalives_count"},
        {"tcp_user_timeout", "tcp_user_timeout"}}) {
    const std::string& value = libpq[client];
    if (!all_digits(value) || server_options.find(server) != std::string::npos) continue;
    out[server] = value;
  }
  return out;
}

// sql/session_setup.sql: the mark the session had before ("" for none).
Result<std::string> setup_session(PGconn* c, const nlohmann::json& pinned, bool durable,
                                  const std::string& mark, Clock::time_point deadline) {
  bool broken = false;
  auto r = execute(c, std::string(sql::session_setup),
                   {pinned.dump(), durable ? "true" : "false", mark}, deadline, broken);
  if (!r.ok()) return r.status();
  return std::string(PQgetvalue(r->get(), 0, 0));
}

}  // namespace

Result<ConnPtr> open_connection(const std::string& conninfo, Clock::time_point deadline,
                                const SessionSetup& setup) {
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
  if (!setup.pin && setup.mark.empty()) return c;
  // A token is handed out only once the commit that drew it is durable: with the server's
  // synchronous_commit = off, a crash loses recent commits and a sequence goes back (tokens would
  // repeat); with `local`, a failover to a synchronous standby may lack them. Raise either to
  // `on` for this session; remote_write and remote_apply are kept.
  auto previous =
      setup_session(c.get(), setup.pin ? pinned_settings(c.get()) : nlohmann::json::object(),
                    setup.pin, setup.mark, deadline);
  if (!previous.ok()) {
    return Status(previous.code(),
                  "setting up the PostgreSQL session (timeouts off, synchronous_commit = on, "
                  "keepalives): " +
                      previous.status().message());
  }
  if (!setup.mark.empty() && !previous->empty()) {
    return session_not_kept(
        "a new connection was served by a server session that another "
        "connection had used");
  }
  return c;
}

Result<std::string> mark_session(PGconn* c, const std::string& mark, Clock::time_point deadline) {
  return setup_session(c, nlohmann::json::object(), false, mark, deadline);
}

Result<bool> has_mark(PGconn* c, const std::string& mark, Clock::time_point deadline) {
  bool broken = false;
  auto r = execute(c, "SELECT current_setting('fencelock.session', true) IS NOT DISTINCT FROM $1",
                   {mark}, deadline, broken);
  if (!r.ok()) return r.status();
  return std::string_view(PQgetvalue(r->get(), 0, 0)) == "t";
}

Status session_not_kept(std::string_view what) {
  return Status(
      Code::kInvalidArgument,
      fmt::format("the PostgreSQL connection does not keep a server session of its own ({}): a "
                  "connection pooler in transaction or statement mode (such as PgBouncer with "
                  "pool_mode=transaction) is in between. Advisory locks belong to a session, so "
                  "two clients could both hold one: connect to PostgreSQL directly or through a "
                  "pooler in session mode, or use mode=lease",
                  what));
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

// Cancel requests in flight on threads of their own (at most kMaxCancelling at once).
std::atomic<int> cancelling{0};
constexpr int kMaxCancelling = 8;

// Asks the server to cancel the statement running on the connection `cancel` was made for,
// without waiting: PQcancel waits until the server closes the cancel connection, which a
// stopped server never does (a release blocked 628 s), so it runs on a detached thread that
// owns `cancel`. Past kMaxCancelling requests already waiting (a server that stopped answering
// everyone) the request is dropped: the caller closes the statement's connection anyway, and
// the server ends the session's statement and its locks once it notices the close.
// The future is ready once no cancel of this request can reach the server any more: PQcancel
// returned (the server has signalled the session's process, or refused), or nothing was sent.
// Until then the connection must not run another statement: a late cancel would cut it short.
std::shared_future<void> cancel_on_server(PGcancel* cancel) {
  std::promise<void> done;
  std::shared_future<void> finished = done.get_future().share();
  if (cancel == nullptr) {
    done.set_value();
    return finished;
  }
  if (cancelling.fetch_add(1) >= kMaxCancelling) {
    cancelling.fetch_sub(1);
    PQfreeCancel(cancel);
    done.set_value();
    return finished;
  }
  auto shared = std::make_shared<std::promise<void>>(std::move(done));
  try {
    std::thread([cancel, shared] {
      name_this_thread("fl-pg-cancel");
      char err[256];
      PQcancel(cancel, err, sizeof err);
      PQfreeCancel(cancel);
      cancelling.fetch_sub(1);
      shared->set_value();
    }).detach();
  } catch (const std::system_error&) {  // no thread to be had
    cancelling.fetch_sub(1);
    PQfreeCancel(cancel);
    shared->set_value();
  }
  return finished;
}

}  // namespace

namespace {

// What execute() sends: a statement with parameters, a parameterless script, a prepared
// statement's execution, or a statement to prepare.
struct Send {
  enum class Kind { kParams, kScript, kPrepared, kPrepare } kind;
  const std::string& sql;             // the text, or for kPrepared the statement's name
  const std::string* name = nullptr;  // kPrepare: the name to prepare it under
};

Result<ResultPtr> execute_sent(PGconn* c, const Send& what, const std::vector<std::string>& params,
                               Clock::time_point deadline, bool& broken, std::stop_token stop,
                               std::shared_future<void>* cancel_done);

}  // namespace

Result<ResultPtr> execute(PGconn* c, const std::string& sql, const std::vector<std::string>& params,
                          Clock::time_point deadline, bool& broken, bool multi,
                          std::stop_token stop, std::shared_future<void>* cancel_done) {
  return execute_sent(c, Send{multi ? Send::Kind::kScript : Send::Kind::kParams, sql}, params,
                      deadline, broken, std::move(stop), cancel_done);
}

Result<ResultPtr> execute_prepared(PGconn* c, std::uint32_t& prepared, const PreparedStatement& ps,
                                   const std::vector<std::string>& params,
                                   Clock::time_point deadline, bool& broken,
                                   std::shared_future<void>* cancel_done) {
  const std::uint32_t bit = 1U << ps.slot;
  if ((prepared & bit) == 0) {
    auto made = execute_sent(c, Send{Send::Kind::kPrepare, ps.sql, &ps.name}, params, deadline,
                             broken, {}, cancel_done);
    if (!made.ok() && !broken && PQtransactionStatus(c) == PQTRANS_IDLE) {
      // An earlier prepare that timed out may have completed after all (its connection was
      // brought back by recover_after_timeout): drop it and prepare again, once.
      const std::string drop = fmt::format("DEALLOCATE {}", ps.name);
      auto dropped =
          execute_sent(c, Send{Send::Kind::kScript, drop}, {}, deadline, broken, {}, nullptr);
      if (!dropped.ok()) return made;
      made = execute_sent(c, Send{Send::Kind::kPrepare, ps.sql, &ps.name}, params, deadline, broken,
                          {}, cancel_done);
    }
    if (!made.ok()) return made;
    prepared |= bit;
  }
  return execute_sent(c, Send{Send::Kind::kPrepared, ps.name}, params, deadline, broken, {},
                      cancel_done);
}

namespace {

Result<ResultPtr> execute_sent(PGconn* c, const Send& what, const std::vector<std::string>& params,
                               Clock::time_point deadline, bool& broken, std::stop_token stop,
                               std::shared_future<void>* cancel_done) {
  broken = true;  // until proven otherwise
  // Handed to cancel_on_server at most once (by a stop, or at the deadline), else freed here.
  std::atomic<PGcancel*> cancel(PQgetCancel(c));
  const bool had_cancel = cancel.load() != nullptr;
  const auto free_unused = [&] { PQfreeCancel(cancel.exchange(nullptr)); };
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
  if (stop.stop_possible() && cancel.load() != nullptr) {
    on_stop.emplace(
        stop, std::function<void()>([&] { (void)cancel_on_server(cancel.exchange(nullptr)); }));
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  const int n = static_cast<int>(values.size());
  int sent = 0;
  switch (what.kind) {
    case Send::Kind::kScript:
      sent = PQsendQuery(c, what.sql.c_str());
      break;
    case Send::Kind::kParams:
      sent = PQsendQueryParams(c, what.sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0);
      break;
    case Send::Kind::kPrepared:
      sent = PQsendQueryPrepared(c, what.sql.c_str(), n, values.data(), nullptr, nullptr, 0);
      break;
    case Send::Kind::kPrepare:
      sent = PQsendPrepare(c, what.name->c_str(), what.sql.c_str(), n, nullptr);
      break;
  }
  if (sent == 0) {
    on_stop.reset();
    free_unused();
    return Status(Code::kUnavailable, "PostgreSQL: " + first_line(PQerrorMessage(c)));
  }
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
        on_stop.reset();
        free_unused();
        return Status(Code::kUnavailable,
                      "lost the PostgreSQL connection: " + first_line(PQerrorMessage(c)));
      }
    }
    if (timed_out) break;
    PGresult* r = PQgetResult(c);
    if (r == nullptr) break;
    last.reset(r);
  }
  on_stop.reset();  // no cancel from here on but the one below
  // A cancel handed off by the stop may reach the server after this statement ended, and would
  // then cancel whatever runs next on this connection: it is never used again.
  const bool stop_cancelled = had_cancel && cancel.load() == nullptr;
  if (timed_out) {
    // The statement must not go on after we gave up (the caller also closes the connection).
    std::shared_future<void> sent_cancel = cancel_on_server(cancel.exchange(nullptr));
    if (cancel_done != nullptr) *cancel_done = std::move(sent_cancel);
    return Status(Code::kDeadlineExceeded,
                  "PostgreSQL did not answer in time (asked the server to cancel the statement)");
  }
  free_unused();
  if (!last) return Status(Code::kInternal, "PostgreSQL returned no result");
  auto st = PQresultStatus(last.get());
  if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
    broken = stop_cancelled || PQstatus(c) != CONNECTION_OK;
    Status error = status_from_result(last.get());
    if (stop.stop_requested() && error.code() == Code::kDeadlineExceeded) {
      return Status(Code::kCancelled, "acquisition cancelled");
    }
    return error;
  }
  broken = stop_cancelled || PQstatus(c) != CONNECTION_OK;
  return last;
}

}  // namespace

bool recover_after_timeout(PGconn* c, const std::shared_future<void>& cancel_done,
                           Clock::time_point deadline) {
  if (cancel_done.valid() && cancel_done.wait_until(deadline) != std::future_status::ready) {
    return false;  // its cancel may still come, and would cut the next statement short
  }
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

Result<ConnPtr> PgPool::checkout(Clock::time_point deadline, bool* reused) {
  if (reused != nullptr) *reused = false;
  {
    MutexLock lock(mu_);
    while (true) {
      if (!idle_.empty()) {
        ConnPtr c = std::move(idle_.back());
        idle_.pop_back();
        if (reused != nullptr) *reused = true;
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
  auto opened =
      open_connection(conninfo_, std::min(deadline, Clock::now() + connect_timeout_), setup_);
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
  while (PGnotify* note = PQnotifies(c.get())) PQfreemem(note);
  MutexLock lock(mu_);
  // A script that failed inside its BEGIN block leaves the connection in a failed transaction,
  // which would refuse every later statement: not kept.
  if (healthy && PQstatus(c.get()) == CONNECTION_OK &&
      PQtransactionStatus(c.get()) == PQTRANS_IDLE) {
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

Status check_name(std::string_view name) {
  const std::size_t bad = first_invalid_utf8(name);
  if (bad == std::string_view::npos) return Status::Ok();
  return Status(Code::kInvalidArgument,
                fmt::format("PostgreSQL lock names are text and must be valid UTF-8; byte {} "
                            "(0x{:02x}) is not",
                            bad, static_cast<unsigned char>(name[bad])));
}

Result<ResultPtr> run(PgPool& pool, const std::string& sql, const std::vector<std::string>& params,
                      Clock::time_point deadline, bool multi, Retry retry) {
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    auto c = pool.checkout(deadline, &reused);
    if (!c.ok()) return c.status();
    bool broken = false;
    auto result = execute(c->get(), sql, params, deadline, broken, multi);
    pool.checkin(std::move(*c), !broken);
    // A connection that sat idle may have died with its server session; the checkin above
    // dropped the other idle ones too, so the retry opens a fresh connection.
    const bool dead_idle = reused && broken && result.code() == Code::kUnavailable;
    if (retry == Retry::kOnDeadConnection && attempt == 0 && dead_idle && Clock::now() < deadline) {
      continue;
    }
    return result;
  }
}

}  // namespace fencelock::detail::postgres
