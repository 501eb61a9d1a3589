#include "postgres/advisory_backend.h"

#include <algorithm>
#include <future>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log_internal.h"
#include "core/mutex.h"
#include "core/quorum.h"
#include "core/saturate.h"
#include "postgres/advisory_key.h"
#include "postgres/session_pool.h"
#include "postgres_sql.h"

namespace fencelock::detail::postgres {
namespace {

// The health check of a holding session: alive, and still the one its mark names.
constexpr std::string_view kStillMarked =
    "SELECT current_setting('fencelock.session', true) IS NOT DISTINCT FROM $1";

std::int64_t to_int(const PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}

class AdvisoryBackend final : public Backend, public ServerQueue {
 public:
  AdvisoryBackend(PostgresUri uri, ClientOptions options, milliseconds wait_turn)
      : uri_(std::move(uri)),
        options_(options),
        wait_turn_(std::clamp(wait_turn, milliseconds(1), kMaxDuration)),
        sessions_(uri_.conninfo, uri_.pool, options.connect_timeout) {}

  // The TTL only paces health checks here; below a second they would be mostly round trips.
  milliseconds min_ttl() const override { return milliseconds(1000); }
  bool supports_shared() const override { return true; }
  Status check_name(std::string_view name) const override { return postgres::check_name(name); }

  // Waits happen in PostgreSQL's lock queue: no tries to repeat, no release events needed.
  ServerQueue* server_queue() override { return this; }

  Result<Grant> acquire_queued(const AcquireCall& call) override {
    const std::int64_t key = advisory_key(call.key.str());
    if (call.wait <= milliseconds(0)) return try_once(call, key);
    return wait_in_queue(call, key);
  }

  TryResult try_acquire(const GrantRequest& req, Clock::time_point deadline) override {
    AcquireCall call{req.key,         req.owner,    req.ttl, req.metadata,
                     milliseconds(0), Clock::now(), {},      options_.io_timeout};
    auto grant = try_once(call, advisory_key(req.key.str()), deadline);
    if (grant.ok()) return TryResult{Status::Ok(), *grant, milliseconds(0)};
    return TryResult{grant.status(), std::nullopt, milliseconds(0)};
  }

  // Each session's health check gets io_timeout: one that times out closes its session (every
  // advisory lock on it goes), so it must not be cut short by a round that is nearly over. A
  // session whose turn comes after `deadline` is not checked (kUnknown: no answer now is of use
  // to its leases, and the watchdog declares them lost).
  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point deadline) override {
    std::vector<RenewOutcome> out(items.size());
    std::map<Session*, std::vector<std::size_t>> by_session;
    std::map<Session*, std::shared_ptr<Session>> sessions;
    {
      MutexLock lock(mu_);
      for (std::size_t i = 0; i < items.size(); ++i) {
        auto it = held_.find(items[i].owner->hex());
        if (it == held_.end()) {
          out[i] = {RenewOutcome::kRejected, {}};
          continue;
        }
        by_session[it->second.session.get()].push_back(i);
        sessions[it->second.session.get()] = it->second.session;
      }
    }
    for (auto& [raw, indices] : by_session) {
      const std::shared_ptr<Session>& session = sessions[raw];
      const Clock::time_point sent = Clock::now();
      if (sent >= deadline) continue;  // kUnknown, nothing sent
      const Clock::time_point until = sent + options_.io_timeout;
      Status ready = sessions_.checkout_this(session, until);
      RenewOutcome::Kind kind = RenewOutcome::kUnknown;
      if (ready.code() == Code::kUnavailable) {
        kind = RenewOutcome::kRejected;  // the session died: its locks are gone
      } else if (ready.ok()) {
        // The health check: the session is alive, and still the marked one (a pooler that
        // moved the connection to another server session has left its locks behind).
        bool broken = false;
        auto r =
            execute(session->conn.get(), std::string(kStillMarked), {session->mark}, until, broken);
        const bool kept = r.ok() && std::string_view(PQgetvalue(r->get(), 0, 0)) == "t";
        if (r.ok() && !kept) log_not_kept();
        finish(session, broken || !kept);
        kind = kept ? RenewOutcome::kRenewed : RenewOutcome::kRejected;
      }
      for (std::size_t i : indices) {
        out[i] = {kind, validity_deadline(sent, items[i].ttl, options_.drift_factor)};
      }
    }
    return out;
  }

  Status release(const LockKey&, const OwnerId& owner, Clock::time_point deadline) override {
    Holding holding;
    {
      MutexLock lock(mu_);
      auto it = held_.find(owner.hex());
      if (it == held_.end()) return Status::Ok();  // never granted, or already released
      holding = it->second;
      held_.erase(it);
    }
    // The holding session may be busy (a try or health check on it): the release waits for it
    // ahead of any try (SessionPool::checkout_this). Past the deadline the
    // unlock is left with the session, run when it is next checked in: never forgotten, but not
    // done yet, and the caller is told so (an OK release leaves the key free for the next
    // acquisition; before, it returned OK).
    Clock::time_point until = deadline;
    for (;; until = Clock::now() + options_.io_timeout) {
      Status ready = sessions_.checkout_this(holding.session, until);
      if (ready.code() == Code::kUnavailable) return freed_with_session(holding, owner, deadline);
      if (ready.ok()) break;
      if (sessions_.defer_unlock(holding.session, holding.key, holding.shared)) {
        if (sessions_.closed(holding.session)) return freed_with_session(holding, owner, deadline);
        return Status(Code::kDeadlineExceeded,
                      "the PostgreSQL session holding the advisory lock stayed busy past the "
                      "release's deadline: the unlock runs as soon as its statement ends, and "
                      "the lock is held until then");
      }
    }
    const bool unlocked = unlock_grant(holding.session, holding.key, holding.shared, until);
    // A failed unlock leaves the lock on a session nobody tracks: close it, which frees it, but
    // only once the server ends that session (a stopped or cut-off server keeps it): not OK.
    finish(holding.session, !unlocked);
    if (unlocked) return Status::Ok();
    return freed_with_session(holding, owner, deadline);
  }

  Result<std::optional<HolderRow>> inspect(const LockKey& key,
                                           Clock::time_point deadline) override {
    auto found = query_holders(key.str(), true, deadline);
    if (!found.ok()) return found.status();
    if (!found->empty()) return std::optional<HolderRow>(std::move(found->front()));
    // Held by a session that is not a fencelock client (psql, another library)?
    auto r = run_any(std::min(deadline, Clock::now() + options_.io_timeout),
                     std::string(sql::advisory_foreign), {std::to_string(advisory_key(key.str()))});
    if (!r.ok()) return r.status();
    if (PQntuples(r->get()) == 0) return std::optional<HolderRow>();
    const PGresult* res = r->get();
    nlohmann::json meta = {{"pid", to_int(res, 0, 0)},
                           {"application_name", PQgetvalue(res, 0, 1)},
                           {"client", PQgetvalue(res, 0, 2)},
                           {"advisory_key", advisory_key(key.str())}};
    return std::optional<HolderRow>(
        HolderRow{key.str(), "", std::nullopt, milliseconds(0),
                  meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), true});
  }

  // The noted holders under `prefix`; without a prefix also every advisory lock on a bigint key
  // that no fencelock client noted (psql's pg_advisory_lock(N)), named "pg_advisory_lock(N)":
  // its name is not known (a key is a hash of a name), so no prefix can select it.
  Result<std::vector<HolderRow>> list(std::string_view prefix, const ListBounds& bounds) override {
    auto rows = query_holders(std::string(prefix), false, bounds.deadline);
    if (rows.ok() && rows->size() > bounds.max_locks) {
      return too_many_locks(bounds.max_locks, prefix);
    }
    if (!rows.ok() || !prefix.empty()) return rows;
    auto r = run_any(std::min(bounds.deadline, Clock::now() + options_.io_timeout),
                     std::string(sql::advisory_foreign_all), {});
    if (!r.ok()) return r.status();
    if (rows->size() + static_cast<std::size_t>(PQntuples(r->get())) > bounds.max_locks) {
      return too_many_locks(bounds.max_locks, prefix);
    }
    const PGresult* res = r->get();
    for (int row = 0; row < PQntuples(res); ++row) {
      const std::string advisory = PQgetvalue(res, row, 0);
      nlohmann::json meta = {{"pid", to_int(res, row, 1)},
                             {"application_name", PQgetvalue(res, row, 2)},
                             {"client", PQgetvalue(res, row, 3)},
                             {"advisory_key", std::stoll(advisory)},
                             {"foreign", true}};
      rows->push_back(HolderRow{
          fmt::format("pg_advisory_lock({})", advisory), "", std::nullopt, milliseconds(0),
          meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), true});
    }
    return rows;
  }

  std::string describe() const override { return uri_.description; }
  std::string issuer_identity() const override { return uri_.issuer_identity; }
  std::uint64_t reconnects() const override { return sessions_.reconnects(); }

 private:
  struct Holding {
    std::shared_ptr<Session> session;
    std::int64_t key = 0;
    bool shared = false;
  };

  // The session that held the lock was closed by this Client (a statement on it got no answer,
  // or could not be brought back: lost() fired). The server frees the lock when it ends that
  // session: at once when its server process runs and reads the close, later when it is stopped
  // or cut off. OK only when the server shows the lock gone (asked on another session, within
  // the release's deadline: a destructor's release_timeout bounds this too).
  Status freed_with_session(const Holding& holding, const OwnerId& owner,
                            Clock::time_point deadline) {
    auto r = run_any(
        deadline,
        "SELECT EXISTS (SELECT 1 FROM fencelock_advisory_holders h JOIN pg_locks l ON "
        "l.locktype = 'advisory' AND l.granted AND l.pid = h.pid AND l.objsubid = 1 AND "
        "l.classid = ((h.key >> 32) & 4294967295)::oid AND l.objid = (h.key & 4294967295)::oid "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "WHERE h.key = $1::bigint AND h.owner = $2)",
        {std::to_string(holding.key), owner.hex()});
    if (r.ok() && std::string_view(PQgetvalue(r->get(), 0, 0)) == "f") return Status::Ok();
    return Status(
        Code::kDeadlineExceeded,
        r.ok() ? "the PostgreSQL session holding the advisory lock was closed (its server did not "
                 "answer), and the server still holds the lock for it: it is freed when the "
                 "server ends that session (at once once its server process runs again, else "
                 "when its TCP keepalives give up, about 11 s by default)"
               : "the PostgreSQL session holding the advisory lock was closed (its server did not "
                 "answer), and whether the server has freed the lock yet could not be checked (" +
                     r.status().message() + ")");
  }

  // The shared (reader) variant of a statement: the _shared advisory functions.
  static std::string for_mode(std::string_view sql, bool shared) {
    std::string out(sql);
    if (!shared) return out;
    for (std::string_view fn :
         {"pg_try_advisory_lock(", "pg_advisory_lock(", "pg_advisory_unlock("}) {
      std::string shared_fn = std::string(fn.substr(0, fn.size() - 1)) + "_shared(";
      for (auto at = out.find(fn); at != std::string::npos;
           at = out.find(fn, at + shared_fn.size())) {
        out.replace(at, fn.size(), shared_fn);
      }
    }
    return out;
  }

  // The statements of every grant and release, prepared once per session (execute_prepared).
  static const PreparedStatement& try_statement(bool shared) {
    static const PreparedStatement kTry[2] = {
        {"fencelock_try", for_mode(sql::advisory_try, false), 0},
        {"fencelock_try_shared", for_mode(sql::advisory_try, true), 1}};
    return kTry[shared ? 1 : 0];
  }
  static const PreparedStatement& unlock_statement(bool shared) {
    static constexpr std::string_view kUnlock =
        "SELECT pg_advisory_unlock($1::bigint) WHERE current_setting('fencelock.session', true) "
        "= $2";
    static const PreparedStatement kStatements[2] = {
        {"fencelock_unlock", for_mode(kUnlock, false), 2},
        {"fencelock_unlock_shared", for_mode(kUnlock, true), 3}};
    return kStatements[shared ? 1 : 0];
  }

  // Checks the session in, first running the unlocks that releases left with it.
  void finish(const std::shared_ptr<Session>& session, bool broken) {
    for (;;) {
      auto pending = sessions_.checkin(session, broken);
      if (pending.empty()) return;
      for (const auto& [key, shared] : pending) {
        if (!unlock_grant(session, key, shared, Clock::now() + options_.io_timeout)) {
          broken = true;  // closing the session frees what could not be unlocked
          break;
        }
      }
    }
  }

  // Unlocks a granted lock on the checked-out `session`: one pg_advisory_unlock, one round trip
  // (a session holds a granted key once: kNotKey keeps tries off sessions that hold it). False if
  // it failed (or ran in a server session without the mark): the session must then be closed.
  // Notes the key as no longer held.
  bool unlock_grant(const std::shared_ptr<Session>& session, std::int64_t key, bool shared,
                    Clock::time_point deadline) {
    bool broken = false;
    auto r = execute_prepared(session->conn.get(), session->prepared, unlock_statement(shared),
                              {std::to_string(key), session->mark}, deadline, broken);
    if (!r.ok() || broken) return false;
    if (PQntuples(r->get()) != 1) {
      log_not_kept();
      return false;
    }
    sessions_.note_held(session, key, false);
    return true;
  }

  // After a failed try, whose statement may or may not have taken `key`: unlocks it on the
  // checked-out `session` as often as it holds it (advisory locks stack per
  // session); only what pg_locks shows it holding, so no "you don't own a lock" warnings. False
  // if that failed: the session must then be closed. Notes the key as no longer held.
  bool unlock_fully(const std::shared_ptr<Session>& session, std::int64_t key, bool shared) {
    const std::string unlock = for_mode(
        fmt::format("SELECT count(pg_advisory_unlock({0})), current_setting('fencelock.session', "
                    "true) IS NOT DISTINCT FROM '{2}' FROM pg_locks WHERE locktype = "
                    "'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1 AND "
                    "classid = (({0}::bigint >> 32) & 4294967295)::oid AND objid = ({0}::bigint "
                    "& 4294967295)::oid AND mode = '{1}' AND current_setting('fencelock.session', "
                    "true) = '{2}'",
                    key, shared ? "ShareLock" : "ExclusiveLock", session->mark),
        shared);
    // pg_locks shows a stacked lock once: repeat until nothing is left (a session holds a key at
    // most twice: kNotKey keeps tries off sessions that hold it).
    for (int round = 0; round < 4; ++round) {
      bool broken = false;
      auto r = execute(session->conn.get(), unlock, {}, Clock::now() + options_.io_timeout, broken);
      if (!r.ok() || broken) return false;
      if (std::string_view(PQgetvalue(r->get(), 0, 1)) != "t") {
        log_not_kept();
        return false;
      }
      if (std::string_view(PQgetvalue(r->get(), 0, 0)) == "0") {
        sessions_.note_held(session, key, false);
        return true;
      }
    }
    return false;
  }

  Grant remember(const AcquireCall& call, const std::shared_ptr<Session>& session, std::int64_t key,
                 std::uint64_t token, Clock::time_point sent) {
    sessions_.note_held(session, key, true);
    MutexLock lock(mu_);
    held_[call.owner.hex()] = Holding{session, key, call.shared};
    Grant grant{FencingToken(token), validity_deadline(sent, call.ttl, options_.drift_factor)};
    grant.gone = session->gone.get_token();  // the session's close ends the lock: lost() at once
    return grant;
  }

  static std::vector<std::string> note_params(const AcquireCall& call, std::int64_t key,
                                              const Session& session) {
    return {std::to_string(key), call.key.str(), call.owner.hex(), std::to_string(call.ttl.count()),
            call.metadata,       session.mark};
  }

  // A statement ran in a server session without its session's mark: the connection does not
  // keep its session (a pooler moved it). The session is closed; this says why.
  void log_not_kept() const {
    detail::log(LogLevel::kWarning, "{}: {}", uri_.description,
                session_not_kept("a statement ran in a server session that is not its "
                                 "connection's own")
                    .message());
  }

  // Raises the token epoch on the checked-out `session`, after a statement found no valid count:
  // advisory_epoch_raise.sql, then, only if that commit came back in time and without a warning
  // (a commit whose wait for a synchronous standby was cancelled, by our own deadline or by
  // anyone's pg_cancel_backend, is visible all the same, and its epoch may be missing on the
  // standby), advisory_epoch_live.sql with exactly the epoch it returned. Both are autocommitted
  // and touch no advisory lock, so the session keeps what it holds. `broken`: the session must
  // be closed. kPermissionDenied names the grants.
  Status raise_epoch(const std::shared_ptr<Session>& session, Clock::time_point deadline,
                     bool& broken) {
    PGconn* c = session->conn.get();
    struct Warnings {
      int count = 0;
      std::string first;
    } warnings;
    PQnoticeReceiver previous = PQsetNoticeReceiver(
        c,
        [](void* arg, const PGresult* notice) {
          auto* w = static_cast<Warnings*>(arg);
          const char* severity = PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
          if (severity == nullptr || std::string_view(severity) != "WARNING") return;
          if (w->count++ == 0) {
            const char* text = PQresultErrorField(notice, PG_DIAG_MESSAGE_PRIMARY);
            w->first = text != nullptr ? text : "";
          }
        },
        &warnings);
    std::shared_future<void> cancel_done;
    auto raised = execute(c, std::string(sql::advisory_epoch_raise), {}, deadline, broken,
                          /*multi=*/false, {}, &cancel_done);
    if (broken && raised.code() == Code::kDeadlineExceeded) {
      // The session may hold other leases' locks: bring it back rather than close it.
      broken = !recover_after_timeout(c, cancel_done, Clock::now() + options_.io_timeout);
    }
    (void)PQsetNoticeReceiver(c, previous, nullptr);
    if (!raised.ok()) {
      if (raised.code() == Code::kPermissionDenied) {
        return Status(Code::kPermissionDenied,
                      fmt::format("cannot raise the advisory token epoch ({}): the role needs "
                                  "SELECT, INSERT, UPDATE on fencelock_advisory_epoch and "
                                  "fencelock_advisory_live; ask the owner to grant them "
                                  "(`fencelock migrate` prints the grants)",
                                  raised.status().message()));
      }
      return Status(raised.code(),
                    "raising the advisory token epoch: " + raised.status().message() +
                        " (no count was made of it: the next grant raises again)");
    }
    if (warnings.count > 0) {
      return Status(Code::kUnavailable,
                    fmt::format("the raise of the advisory token epoch was not confirmed ({}): a "
                                "synchronous standby may lack it, so no token is drawn from it; "
                                "the next grant raises again",
                                warnings.first));
    }
    if (PQntuples(raised->get()) == 0) return Status::Ok();  // a valid count appeared meanwhile
    const std::string epoch = PQgetvalue(raised->get(), 0, 0);
    auto live = execute(c, std::string(sql::advisory_epoch_live), {epoch}, deadline, broken);
    if (!live.ok()) return live.status();
    detail::log(LogLevel::kInfo, "{}: raised the advisory token epoch to {}", uri_.description,
                epoch);
    return Status::Ok();
  }

  // One try, its checkout and statement ending by the earlier of io_timeout and `until` (the
  // recovery after an ambiguous statement may take io_timeout more: it must leave nothing held).
  Result<Grant> try_once(const AcquireCall& call, std::int64_t key,
                         Clock::time_point until = Clock::time_point::max()) {
    const Clock::time_point sent = Clock::now();
    const Clock::time_point bound = std::min(sent + options_.io_timeout, until);
    auto session = sessions_.checkout(SessionPool::Need::kNotKey, key, bound);
    if (!session.ok()) return session.status();
    bool broken = false;
    std::shared_future<void> cancel_done;
    auto r =
        execute_prepared((*session)->conn.get(), (*session)->prepared, try_statement(call.shared),
                         note_params(call, key, **session), bound, broken, &cancel_done);
    // No valid count (none yet, or a crash or promotion emptied the unlogged table): nothing
    // was tried. Raise it and try again; a concurrent bump may take a turn more.
    for (int bump = 0; r.ok() && bump < 3 && PQnfields(r->get()) == 4 &&
                       std::string_view(PQgetvalue(r->get(), 0, 1)) == "t" &&
                       std::string_view(PQgetvalue(r->get(), 0, 2)) != "t";
         ++bump) {
      auto raised = raise_epoch(*session, bound, broken);
      if (!raised.ok()) {
        finish(*session, broken);
        return raised;
      }
      r = execute_prepared((*session)->conn.get(), (*session)->prepared, try_statement(call.shared),
                           note_params(call, key, **session), bound, broken, &cancel_done);
    }
    if (!r.ok()) {
      // Ambiguous: the statement may have taken the lock before it failed (a session-level lock
      // outlives its statement). The session may hold other leases' locks, so it is kept when
      // it can be brought back and the key unlocked on it; closed (freeing everything) if not.
      bool recovered = !broken;
      if (broken && r.code() == Code::kDeadlineExceeded) {
        recovered = recover_after_timeout((*session)->conn.get(), cancel_done,
                                          Clock::now() + options_.io_timeout);
      }
      recovered = recovered && unlock_fully(*session, key, call.shared);
      finish(*session, !recovered);
      return r.status();
    }
    if (std::string_view(PQgetvalue(r->get(), 0, 1)) != "t") {
      finish(*session, /*broken=*/true);  // nothing was tried; the session cannot be trusted
      return session_not_kept(
          "a statement ran in a server session that is not its connection's own");
    }
    if (std::string_view(PQgetvalue(r->get(), 0, 2)) != "t") {
      finish(*session, broken);
      return Status(Code::kUnavailable,
                    "the advisory token count still had no valid epoch after raising it");
    }
    if (PQgetisnull(r->get(), 0, 0) && std::string_view(PQgetvalue(r->get(), 0, 3)) == "t") {
      // Granted, but the count row was gone by the time the token was drawn (deleted by hand):
      // the lock must not stay on the pooled session without a holder.
      const bool unlocked = !broken && unlock_fully(*session, key, call.shared);
      finish(*session, !unlocked);
      return Status(Code::kUnavailable,
                    "the advisory token count (fencelock_advisory_live) vanished during the grant; "
                    "the lock was given back");
    }
    if (PQgetisnull(r->get(), 0, 0)) {
      finish(*session, broken);
      return Status(Code::kLocked, fmt::format("advisory lock {} is held by another session", key));
    }
    Grant grant =
        remember(call, *session, key, static_cast<std::uint64_t>(to_int(r->get(), 0, 0)), sent);
    finish(*session, broken);
    return grant;
  }

  // Waits in PostgreSQL's own queue: FIFO, woken by the server at the holder's release.
  Result<Grant> wait_in_queue(const AcquireCall& call, std::int64_t key) {
    auto session = sessions_.checkout(SessionPool::Need::kEmpty, key, call.deadline);
    if (!session.ok()) {
      if (session.code() != Code::kDeadlineExceeded) return session.status();
      return Status(Code::kLocked,
                    fmt::format("every pooled PostgreSQL session stayed busy for the whole "
                                "wait (pool={}); raise pool= or the wait",
                                uri_.pool));
    }
    PGconn* c = (*session)->conn.get();
    // lock_timeout is a 32-bit count of milliseconds: a longer wait (an AcquireOptions::wait
    // above kMaxDuration) waits in turns of wait_turn_ (kMaxDuration), queueing again after each.
    const auto left = std::clamp<std::int64_t>(
        std::chrono::ceil<milliseconds>(call.deadline - Clock::now()).count(), 1,
        wait_turn_.count());
    // The try first, only to learn whether the key was held (MetricsSnapshot::contended_grants);
    // the InitPlan with the blocking call runs only when the try failed, in the same round trip.
    // A try never jumps the queue: PostgreSQL refuses it while others wait for the lock.
    // SET LOCAL: a multi-statement query is one implicit transaction, so the lock_timeout ends
    // with it and never stays on the pooled session (where it would cut later statements short).
    // NULL when the statement ran in a server session without the session's mark (nothing is
    // tried there).
    std::string wait_sql =
        for_mode(fmt::format("SET LOCAL lock_timeout = {0}; SELECT CASE WHEN current_setting("
                             "'fencelock.session', true) IS DISTINCT FROM '{2}' THEN NULL WHEN "
                             "pg_try_advisory_lock({1}) THEN false ELSE (SELECT true FROM "
                             "pg_advisory_lock({1})) END",
                             left, key, (*session)->mark),
                 call.shared);
    bool broken = false;
    auto waited =
        execute(c, wait_sql, {}, deadline_after(call.deadline, options_.io_timeout), broken,
                /*multi=*/true, call.stop);
    if (!waited.ok()) {
      // PostgreSQL can grant the lock at the moment lock_timeout or a cancel hits: the statement
      // fails and the session-level lock stays. The session was empty before the wait, so
      // closing it frees exactly what the failed wait may hold.
      finish(*session, /*broken=*/true);
      if (call.stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
      if (waited.code() == Code::kLocked) {
        if (Clock::now() < call.deadline && left == wait_turn_.count()) {
          return wait_in_queue(call, key);  // a turn of a longer wait ran out
        }
        return Status(Code::kLocked,
                      fmt::format("advisory lock {} is still held after the wait", key));
      }
      return waited.status();
    }
    if (call.stop.stop_requested()) {
      // Stopped as the lock came: a cancel may be on its way to this connection, and would cut
      // the next statement short; closing the session releases the lock it just got.
      finish(*session, /*broken=*/true);
      return Status(Code::kCancelled, "acquisition cancelled");
    }
    if (PQgetisnull(waited->get(), 0, 0)) {
      finish(*session, /*broken=*/true);
      return session_not_kept(
          "a statement ran in a server session that is not its connection's own");
    }
    const Clock::time_point sent = Clock::now();
    auto noted = execute(c, std::string(sql::advisory_note), note_params(call, key, **session),
                         sent + options_.io_timeout, broken);
    // No valid token epoch: nothing drawn; raise it (the session keeps the lock) and note again.
    for (int bump = 0; noted.ok() && bump < 3 && PQgetisnull(noted->get(), 0, 0) &&
                       std::string_view(PQgetvalue(noted->get(), 0, 1)) != "t";
         ++bump) {
      auto raised = raise_epoch(*session, sent + options_.io_timeout, broken);
      if (!raised.ok()) {
        finish(*session, true);  // closing the session releases the lock it just got
        return raised;
      }
      noted = execute(c, std::string(sql::advisory_note), note_params(call, key, **session),
                      sent + options_.io_timeout, broken);
    }
    if (noted.ok() && PQgetisnull(noted->get(), 0, 0)) {
      finish(*session, true);
      if (std::string_view(PQgetvalue(noted->get(), 0, 1)) != "t") {
        return Status(Code::kUnavailable,
                      "the advisory token count still had no valid epoch after raising it");
      }
      return session_not_kept(
          "a statement ran in a server session that is not its connection's own");
    }
    if (!noted.ok() || call.stop.stop_requested()) {
      finish(*session, true);  // closing the session releases the lock it just got
      return call.stop.stop_requested() ? Status(Code::kCancelled, "acquisition cancelled")
                                        : noted.status();
    }
    Grant grant =
        remember(call, *session, key, static_cast<std::uint64_t>(to_int(noted->get(), 0, 0)), sent);
    grant.contended = PQntuples(waited->get()) == 1 && PQgetvalue(waited->get(), 0, 0)[0] == 't';
    finish(*session, broken);
    return grant;
  }

  Result<ResultPtr> run_any(const std::string& sql, const std::vector<std::string>& params) {
    return run_any(Clock::now() + options_.io_timeout, sql, params);
  }
  Result<ResultPtr> run_any(Clock::time_point deadline, const std::string& sql,
                            const std::vector<std::string>& params) {
    if (Clock::now() >= deadline) return Status(Code::kDeadlineExceeded, "no time left");
    auto session = sessions_.checkout(SessionPool::Need::kAny, 0, deadline);
    if (!session.ok()) return session.status();
    bool broken = false;
    auto r = execute((*session)->conn.get(), sql, params, deadline, broken);
    finish(*session, broken);
    return r;
  }

  Result<std::vector<HolderRow>> query_holders(
      const std::string& name, bool exact, Clock::time_point deadline = Clock::time_point::max()) {
    auto r = run_any(std::min(deadline, Clock::now() + options_.io_timeout),
                     std::string(sql::advisory_inspect), {name, exact ? "true" : "false"});
    if (!r.ok()) return r.status();
    std::vector<HolderRow> out;
    const PGresult* res = r->get();
    out.reserve(static_cast<std::size_t>(PQntuples(res)));
    for (int row = 0; row < PQntuples(res); ++row) {
      // The lock lives as long as its session; the noted ttl_ms is the holder's renewal
      // interval basis, not an expiry.
      out.push_back(HolderRow{PQgetvalue(res, row, 0),
                              std::string(PQgetvalue(res, row, 1)).substr(0, 8),
                              FencingToken(static_cast<std::uint64_t>(to_int(res, row, 2))),
                              milliseconds(0), PQgetvalue(res, row, 4), true});
    }
    return out;
  }

  const PostgresUri uri_;
  const ClientOptions options_;
  const milliseconds wait_turn_;  // the longest lock_timeout of one turn of a wait
  SessionPool sessions_;
  Mutex mu_;
  std::map<std::string, Holding> held_
      FENCELOCK_GUARDED_BY(mu_);  // owner id -> where its lock lives
};

}  // namespace

std::unique_ptr<Backend> make_advisory_backend(const PostgresUri& uri, const ClientOptions& options,
                                               milliseconds wait_turn) {
  return std::make_unique<AdvisoryBackend>(uri, options, wait_turn);
}

}  // namespace fencelock::detail::postgres
