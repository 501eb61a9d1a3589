#include "postgres/postgres_backend.h"

#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fence_issuer.h"
#include "core/log_internal.h"
#include "core/quorum.h"
#include "postgres/advisory_backend.h"
#include "postgres/pg_connection.h"
#include "postgres/pg_listener.h"
#include "postgres/postgres_uri.h"
#include "postgres_sql.h"

namespace fencelock::detail {
namespace postgres {
namespace {

std::int64_t to_int(const PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}

// Creates the tables and sequences unless they exist. A concurrent creator can make CREATE ... IF
// NOT EXISTS fail with a unique violation on the catalog: one retry settles it.
Result<std::vector<std::string>> ensure_tables(PgPool& pool, milliseconds timeout) {
  std::vector<std::string> ran;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto exists = run(pool, std::string(sql::catalog_tables), {}, Clock::now() + timeout);
    if (!exists.ok()) return exists.status();
    if (std::string_view(PQgetvalue(exists->get(), 0, 0)) == "t") return ran;
    auto created = run(pool, std::string(sql::schema), {}, Clock::now() + timeout, /*multi=*/true);
    if (created.ok()) {
      ran.emplace_back(sql::schema);
      return ran;
    }
    if (created.code() == Code::kPermissionDenied) {
      return Status(
          Code::kPermissionDenied,
          "cannot create fencelock's tables and sequences: "
          "permission denied; ask an administrator to run `fencelock migrate --backend URI` "
          "once (or grant CREATE on the schema)");
    }
    if (attempt == 1) return created.status();
  }
  return ran;
}

// Adds `released` to a lease table that lacks it. Only lease mode and migrate need it: advisory
// mode never reads the lease table, and connects whatever its columns.
Result<std::vector<std::string>> ensure_released_column(PgPool& pool, milliseconds timeout) {
  std::vector<std::string> ran;
  auto has = run(pool, std::string(sql::catalog_released_column), {}, Clock::now() + timeout);
  if (!has.ok()) return has.status();
  if (std::string_view(PQgetvalue(has->get(), 0, 0)) == "t") return ran;
  auto added = run(pool, std::string(sql::add_released_column), {}, Clock::now() + timeout);
  if (added.code() == Code::kPermissionDenied) {
    return Status(Code::kPermissionDenied,
                  "table fencelock_leases lacks the column \"released\" that this version of "
                  "fencelock needs (an older version made the table), and this role may not add "
                  "it: ask the table's owner to run `fencelock migrate --backend URI` once (or `" +
                      std::string(sql::add_released_column) + "`)");
  }
  if (!added.ok()) return added.status();
  ran.emplace_back(sql::add_released_column);
  return ran;
}

// Advisory mode's epoch tokens (advisory_epoch.sql): the epoch table, the unlogged count, and
// the holders table unlogged, so that no grant waits for a WAL flush. Without the two tables no
// token can be drawn: kPermissionDenied names migrate. Where this role may create them but not
// make the holders table (of an earlier version) unlogged, every grant still waits for a flush:
// safe, slower, and said in a warning.
Result<std::vector<std::string>> ensure_advisory_epoch(PgPool& pool, milliseconds timeout) {
  std::vector<std::string> ran;
  auto state = run(pool, std::string(sql::catalog_advisory_epoch), {}, Clock::now() + timeout);
  if (!state.ok()) return state.status();
  if (std::string_view(PQgetvalue(state->get(), 0, 0)) != "t") {
    // A concurrent creator can make CREATE ... IF NOT EXISTS fail with a unique violation on the
    // catalog: once more settles it.
    auto made = run(pool, std::string(sql::advisory_epoch), {}, Clock::now() + timeout,
                    /*multi=*/true);
    if (!made.ok() && made.code() != Code::kPermissionDenied) {
      made = run(pool, std::string(sql::advisory_epoch), {}, Clock::now() + timeout,
                 /*multi=*/true);
    }
    if (made.code() == Code::kPermissionDenied) {
      return Status(Code::kPermissionDenied,
                    "this version of fencelock draws advisory tokens under an epoch kept in the "
                    "tables fencelock_advisory_epoch and fencelock_advisory_live, which do not "
                    "exist, and this role may not create them: ask the owner of fencelock's tables "
                    "to run `fencelock migrate --backend URI` once");
    }
    if (!made.ok()) return made.status();
    ran.emplace_back(sql::advisory_epoch);
  }
  if (std::string_view(PQgetvalue(state->get(), 0, 1)) != "p") return ran;  // holders unlogged
  const std::string unlog = "ALTER TABLE fencelock_advisory_holders SET UNLOGGED";
  auto altered = run(pool, unlog, {}, Clock::now() + timeout);
  if (altered.ok()) {
    ran.emplace_back(unlog);
  } else if (altered.code() == Code::kPermissionDenied) {
    detail::log(LogLevel::kWarning,
                "fencelock_advisory_holders is logged and this role may not make it UNLOGGED: "
                "every advisory grant waits for a WAL flush (safe, slower); ask its owner to run "
                "`fencelock migrate --backend URI` once");
  } else {
    return altered.status();
  }
  return ran;
}

// Creates the schema unless it exists; for lease mode the `released` column, for advisory mode
// the epoch tokens (migrate: both).
Result<std::vector<std::string>> ensure_schema(PgPool& pool, milliseconds timeout, bool lease_mode,
                                               bool advisory_mode) {
  auto ran = ensure_tables(pool, timeout);
  if (!ran.ok()) return ran;
  if (lease_mode) {
    auto added = ensure_released_column(pool, timeout);
    if (!added.ok()) return added.status();
    ran->insert(ran->end(), added->begin(), added->end());
  }
  if (advisory_mode) {
    auto added = ensure_advisory_epoch(pool, timeout);
    if (!added.ok()) return added.status();
    ran->insert(ran->end(), added->begin(), added->end());
  }
  return ran;
}

// A token sequence with CACHE > 1 hands each session a block of values: tokens drawn by
// different sessions then do not follow grant order (a later grant can get a smaller token).
// fencelock creates its sequences with CACHE 1; one made or altered otherwise is refused.
Status check_token_sequences(PgPool& pool, milliseconds timeout) {
  auto r = run(pool, std::string(sql::catalog_token_caches), {}, Clock::now() + timeout);
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) == 0) return Status::Ok();
  const std::string name = PQgetvalue(r->get(), 0, 0);
  return Status(Code::kInvalidArgument,
                fmt::format("sequence {} has CACHE {}: each session would draw tokens from its own "
                            "block, so tokens would not follow grant order; run `ALTER SEQUENCE "
                            "{} CACHE 1` (fencelock creates it so)",
                            name, PQgetvalue(r->get(), 0, 1), name));
}

// A primary that streams to standbys while synchronous_standby_names is empty replicates
// asynchronously: a failover to one of them can lose the newest grants and repeat tokens
// (docs/PROTOCOLS.md). Refused unless `allow` (then a warning). pg_stat_replication also lists
// logical replication, which a role without pg_read_all_stats cannot tell apart: such a server
// needs the option too.
Status check_asynchronous_standbys(PgPool& pool, milliseconds timeout, bool allow) {
  auto r = run(pool, std::string(sql::catalog_standbys), {}, Clock::now() + timeout);
  if (!r.ok() || PQntuples(r->get()) != 1) return Status::Ok();
  const std::string senders = PQgetvalue(r->get(), 0, 0);
  const std::string names = PQgetvalue(r->get(), 0, 1);
  if (senders == "0" || !names.empty()) return Status::Ok();
  const std::string risk = fmt::format(
      "the PostgreSQL server replicates to {} standby(s) asynchronously "
      "(synchronous_standby_names is empty): a failover to one can lose the newest grants and "
      "repeat fencing tokens",
      senders);
  if (!allow) {
    return Status(Code::kInvalidArgument,
                  risk +
                      "; set synchronous_standby_names, or accept the risk with the URI "
                      "option allow_async_standby=true (also needed when the senders are "
                      "logical replication)");
  }
  detail::log(LogLevel::kWarning, "{} (accepted: allow_async_standby=true)", risk);
  return Status::Ok();
}

// Whether each connection keeps one server session of its own, as a direct connection (or a
// pooler in session mode) does, or statements of one connection may run in different server
// sessions and one server session may serve several connections, as behind a pooler in
// transaction or statement mode (PgBouncer's pool_mode=transaction). Asked of the server, not
// of a pooler's product: connection A marks its session, B marks its own (a pooler that hands
// out one server session to both shows B A's mark), then B and A each check that their
// session still has their mark (a pooler that moved them to another server session shows a
// different one or none). Two connections are needed: alone, a pooler would hand a connection
// the same idle server session every time. Four round trips and one more connection, at connect.
Result<bool> keeps_sessions(PgPool& pool, Clock::time_point deadline) {
  auto a = pool.checkout(deadline);
  if (!a.ok()) return a.status();
  auto b = open_connection(pool.conninfo(), deadline, SessionSetup{.pin = false});
  if (!b.ok()) {
    pool.checkin(std::move(*a), true);
    return b.status();
  }
  const std::string mark_a = OwnerId::random().hex(), mark_b = OwnerId::random().hex();
  bool kept = true;
  Status failed = Status::Ok();
  auto note = [&](const auto& result, auto&& is_kept) {
    if (!result.ok()) {
      failed = result.status();
    } else if (!is_kept(*result)) {
      kept = false;
    }
  };
  auto unmarked = [](const std::string& previous) { return previous.empty(); };
  auto yes = [](bool has) { return has; };
  note(mark_session(a->get(), mark_a, deadline), unmarked);
  if (failed.ok()) note(mark_session(b->get(), mark_b, deadline), unmarked);
  if (failed.ok()) note(has_mark(b->get(), mark_b, deadline), yes);
  if (failed.ok()) note(has_mark(a->get(), mark_a, deadline), yes);
  pool.checkin(std::move(*a), failed.ok());
  if (!failed.ok()) return failed;
  return kept;
}

// How long at least a late run of an acquire released with its outcome unknown is refused (the
// attempt's TTL if longer), as the tombstones of Redis (docs/PROTOCOLS.md, "Late attempts").
constexpr milliseconds kMinReleasedLife(60'000);

// Runs of lease_acquire.sql that may each find the key's row missing and insert it before a try
// gives up: one is normal (the key's first grant), more mean someone deletes rows meanwhile.
constexpr int kPlaceholderRuns = 4;

// Through a pooler that does not keep sessions, lease-mode waiters cannot LISTEN: they try
// again this often (and at the holder's expiry).
constexpr milliseconds kPollWithoutListen(200);

class LeaseBackend final : public Backend, public ReleaseEvents {
 public:
  // `sessions_kept` false (keeps_sessions()): no session settings (they would land on server
  // connections other clients share), no LISTEN; waiters poll every kPollWithoutListen.
  LeaseBackend(PostgresUri uri, ClientOptions options, bool sessions_kept)
      : uri_(std::move(uri)),
        options_(options),
        sessions_kept_(sessions_kept),
        pool_(uri_.conninfo, uri_.pool, options.connect_timeout,
              SessionSetup{.pin = sessions_kept}),
        listener_(uri_.conninfo, options.connect_timeout, sessions_kept) {}

  // Lease mode keeps time on the server with millisecond resolution over a network: a TTL
  // under a second would be mostly round trips.
  milliseconds min_ttl() const override { return milliseconds(1000); }
  Status check_name(std::string_view name) const override { return postgres::check_name(name); }

  TryResult try_acquire(const GrantRequest& req, Clock::time_point until) override {
    Result<ResultPtr> r = Status(Code::kInternal, "not run");
    Clock::time_point validity;
    int placeholders = 0;  // runs that found no row and inserted one (lease_acquire.sql)
    for (int attempt = 0;; ++attempt) {
      const Clock::time_point sent = Clock::now();
      validity = validity_deadline(sent, req.ttl, options_.drift_factor);
      const Clock::time_point deadline = std::min({sent + options_.io_timeout, validity, until});
      // Names this run, so that a late run of it can be refused (release_unknown) without
      // refusing the runs after it, which carry the same owner id.
      const std::string run_id = OwnerId::random().hex();
      r = run(
          pool_, std::string(sql::lease_acquire),
          {req.key.str(), req.owner.hex(), std::to_string(req.ttl.count()), req.metadata, run_id},
          deadline);
      if (r.ok()) {
        // Token 0: the key had no row and now has an expired one; the grant, with a token drawn
        // under that row's lock, is the next run's. A row deleted again each time (an admin
        // script in a loop) ends the try after a few runs.
        if (PQgetisnull(r->get(), 0, 0) || to_int(r->get(), 0, 0) != 0) break;
        if (++placeholders >= kPlaceholderRuns) {
          return TryResult{Status(Code::kUnavailable,
                                  "the lease row of this key was deleted again after each of " +
                                      std::to_string(kPlaceholderRuns) +
                                      " inserts; is a script deleting fencelock_leases rows?"),
                           std::nullopt, milliseconds(0)};
        }
        --attempt;  // not a failed run
        continue;
      }
      // An error reply rolled the statement back. Anything else (no answer in time, a lost
      // connection, a cancelled wait) is ambiguous: the statement may have run, or may still run
      // late: release by owner id and refuse a late run of it (lease_release_unknown.sql).
      const bool unknown = r.code() == Code::kDeadlineExceeded || r.code() == Code::kUnavailable ||
                           r.code() == Code::kCancelled;
      if (!unknown) return TryResult{r.status(), std::nullopt, milliseconds(0)};
      Status freed = release_unknown(req, run_id, Clock::now() + options_.io_timeout);
      // A connection that died with its server session (a restart) fails once: with what it
      // may have taken released, the try runs again on a fresh connection.
      if (attempt == 0 && r.code() == Code::kUnavailable && freed.ok() && Clock::now() < deadline) {
        continue;
      }
      return TryResult{
          Status(r.code(),
                 r.status().message() +
                     (freed.ok()
                          ? "; outcome unknown: this attempt was released, and a late "
                            "run of it takes nothing"
                          : "; outcome unknown, and releasing it failed too (" + freed.message() +
                                "): the key may stay held until its TTL ends")),
          std::nullopt, milliseconds(0)};
    }
    const PGresult* res = r->get();
    if (!PQgetisnull(res, 0, 0)) {
      if (Clock::now() >= validity) {
        (void)release(req.key, req.owner, Clock::now() + options_.io_timeout);
        return TryResult{
            Status(Code::kDeadlineExceeded, "acquiring took longer than the lease's validity"),
            std::nullopt, milliseconds(0)};
      }
      auto token = static_cast<std::uint64_t>(to_int(res, 0, 0));
      return TryResult{Status::Ok(), Grant{FencingToken(token), validity}, milliseconds(0)};
    }
    auto left = milliseconds(std::max<std::int64_t>(to_int(res, 0, 1), 0));
    if (!sessions_kept_) left = std::min(left, kPollWithoutListen);
    return TryResult{Status(Code::kLocked, "key is held by another owner"), std::nullopt, left};
  }

  // Through a pooler that keeps no sessions there is no LISTEN: waiters then wake on their
  // timers alone (every kPollWithoutListen).
  ReleaseEvents* release_events() override { return sessions_kept_ ? this : nullptr; }
  std::unique_ptr<ReleaseWatch> watch(const LockKey& key, const OwnerId&,
                                      Clock::time_point deadline) override {
    return listener_.watch(key.str(), deadline);
  }

  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point deadline) override {
    std::vector<RenewOutcome> out(items.size());
    if (items.empty()) return out;
    nlohmann::json batch = nlohmann::json::array();
    milliseconds shortest = items[0].ttl;
    for (const auto& item : items) {
      batch.push_back(
          {{"name", item.key->str()}, {"owner", item.owner->hex()}, {"ttl", item.ttl.count()}});
      shortest = std::min(shortest, item.ttl);
    }
    const Clock::time_point sent = Clock::now();
    auto r = run(pool_, std::string(sql::lease_renew),
                 {batch.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)},
                 std::min({sent + options_.io_timeout,
                           validity_deadline(sent, shortest, options_.drift_factor), deadline}),
                 false, Retry::kOnDeadConnection);
    if (!r.ok()) return out;  // all unknown: retried, and lost at their validity if it persists
    std::set<std::pair<std::string, std::string>> renewed;  // (name, owner)
    for (int row = 0; row < PQntuples(r->get()); ++row)
      renewed.emplace(PQgetvalue(r->get(), row, 0), PQgetvalue(r->get(), row, 1));
    Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < items.size(); ++i) {
      Clock::time_point valid = validity_deadline(sent, items[i].ttl, options_.drift_factor);
      const bool was_renewed = renewed.contains({items[i].key->str(), items[i].owner->hex()});
      if (was_renewed && now < valid) {
        out[i] = {RenewOutcome::kRenewed, valid};
      } else if (!was_renewed) {
        out[i] = {RenewOutcome::kRejected, {}};
      }
    }
    return out;
  }

  Status release(const LockKey& key, const OwnerId& owner, Clock::time_point deadline) override {
    // Idempotent (compare owner, mark expired): after a restart the first try meets a dead
    // connection and the release runs again on a fresh one, instead of leaving the lock held
    // for its whole TTL.
    auto r = run(pool_, std::string(sql::lease_release), {key.str(), owner.hex()}, deadline, false,
                 Retry::kOnDeadConnection);
    return r.status();
  }

  // Releases an attempt whose acquire run `run_id` may have run or may still run late: frees the
  // key if the attempt holds it and records the run for max(ttl, kMinReleasedLife), so that a
  // late execution of it grants nothing.
  Status release_unknown(const GrantRequest& req, const std::string& run_id,
                         Clock::time_point deadline) {
    const auto life = std::max(req.ttl, kMinReleasedLife);
    auto r = run(pool_, std::string(sql::lease_release_unknown),
                 {req.key.str(), req.owner.hex(), std::to_string(life.count()), run_id}, deadline,
                 false, Retry::kOnDeadConnection);
    return r.status();
  }

  Result<std::optional<HolderRow>> inspect(const LockKey& key,
                                           Clock::time_point deadline) override {
    auto found = query_holders(key.str(), true, deadline);
    if (!found.ok()) return found.status();
    if (found->empty()) return std::optional<HolderRow>();
    return std::optional<HolderRow>(std::move(found->front()));
  }

  // One statement within the list's deadline (or io_timeout, whichever comes first).
  Result<std::vector<HolderRow>> list(std::string_view prefix, const ListBounds& bounds) override {
    auto rows = query_holders(std::string(prefix), false, bounds.deadline);
    if (rows.ok() && rows->size() > bounds.max_locks) {
      return too_many_locks(bounds.max_locks, prefix);
    }
    return rows;
  }

  std::string describe() const override { return uri_.description; }
  std::string issuer_identity() const override { return uri_.issuer_identity; }
  std::uint64_t reconnects() const override { return pool_.reconnects(); }

 private:
  Result<std::vector<HolderRow>> query_holders(
      const std::string& name, bool exact, Clock::time_point deadline = Clock::time_point::max()) {
    auto r = run(pool_, std::string(sql::lease_inspect), {name, exact ? "true" : "false"},
                 std::min(deadline, Clock::now() + options_.io_timeout), false,
                 Retry::kOnDeadConnection);
    if (!r.ok()) return r.status();
    std::vector<HolderRow> out;
    for (int row = 0; row < PQntuples(r->get()); ++row) {
      const PGresult* res = r->get();
      out.push_back(HolderRow{
          PQgetvalue(res, row, 0), std::string(PQgetvalue(res, row, 1)).substr(0, 8),
          FencingToken(static_cast<std::uint64_t>(to_int(res, row, 2))),
          milliseconds(std::max<std::int64_t>(to_int(res, row, 3), 0)), PQgetvalue(res, row, 4)});
    }
    return out;
  }

  const PostgresUri uri_;
  const ClientOptions options_;
  const bool sessions_kept_;
  PgPool pool_;
  PgListener listener_;
};

// Backend::issuer_identity(): the tokens of a mode come from one sequence in the schema
// fencelock uses (the first of search_path) in one database of one cluster. The cluster is its
// system identifier, which a physical standby shares (so a failover keeps the issuer) and which
// needs EXECUTE on pg_control_system() (PUBLIC has it by default); without it, the URI's hosts
// and ports as written.
Result<std::string> issuer_identity(PgPool& pool, const PostgresUri& uri, milliseconds timeout) {
  auto where = run(pool, std::string(sql::catalog_place), {}, Clock::now() + timeout);
  if (!where.ok()) return where.status();
  const std::string place =
      fmt::format("{}/{}?mode={}", escape_issuer_part(PQgetvalue(where->get(), 0, 1)),
                  escape_issuer_part(PQgetvalue(where->get(), 0, 2)), uri.mode);
  if (std::string_view(PQgetvalue(where->get(), 0, 0)) == "t") {
    auto system = run(pool, std::string(sql::catalog_system), {}, Clock::now() + timeout);
    if (!system.ok()) return system.status();
    return fmt::format("postgres:system={}/{}", PQgetvalue(system->get(), 0, 0), place);
  }
  std::string hosts, ports;
  PQconninfoOption* parsed = PQconninfoParse(uri.conninfo.c_str(), nullptr);
  for (PQconninfoOption* o = parsed; o != nullptr && o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    if (std::string_view(o->keyword) == "host") hosts = o->val;
    if (std::string_view(o->keyword) == "port") ports = o->val;
  }
  PQconninfoFree(parsed);
  return fmt::format("postgres://{}:{}/{}", escape_issuer_part(hosts), escape_issuer_part(ports),
                     place);
}

}  // namespace
}  // namespace postgres

Result<std::unique_ptr<Backend>> make_postgres_backend(const std::string& uri,
                                                       const ClientOptions& options) {
  auto split = postgres::split_postgres_uri(uri);
  if (!split.ok()) return split.status();
  // Connect now, so that bad credentials, a missing database or missing rights are reported by
  // connect(), and create the schema on first use.
  // Without session settings: through a pooler they would stay on a shared server connection.
  postgres::PgPool setup(split->conninfo, 1, options.connect_timeout,
                         postgres::SessionSetup{.pin = false});
  auto kept =
      postgres::keeps_sessions(setup, Clock::now() + options.connect_timeout + options.io_timeout);
  if (!kept.ok()) return kept.status();
  if (!*kept && split->mode == "advisory") {
    return postgres::session_not_kept(
        "two connections' statements ran in one server session, or one connection's in two");
  }
  if (!*kept) {
    detail::log(LogLevel::kInfo,
                "{}: the connection does not keep a server session of its own (a pooler in "
                "transaction mode?): lease mode works, but waiters cannot LISTEN for releases and "
                "try again every {} ms, and fencelock cannot pin session settings",
                split->description, postgres::kPollWithoutListen.count());
  }
  auto schema = postgres::ensure_schema(setup, options.connect_timeout + options.io_timeout,
                                        split->mode == "lease", split->mode == "advisory");
  if (!schema.ok()) return schema.status();
  if (Status cached = postgres::check_token_sequences(setup, options.io_timeout); !cached.ok()) {
    return cached;
  }
  if (Status async = postgres::check_asynchronous_standbys(setup, options.io_timeout,
                                                           split->allow_async_standby);
      !async.ok()) {
    return async;
  }
  auto identity = postgres::issuer_identity(setup, *split, options.io_timeout);
  if (!identity.ok()) return identity.status();
  split->issuer_identity = std::move(*identity);
  if (split->mode == "advisory") return postgres::make_advisory_backend(*split, options);
  return std::unique_ptr<Backend>(std::make_unique<postgres::LeaseBackend>(*split, options, *kept));
}

Result<std::vector<std::string>> migrate_postgres(const std::string& uri,
                                                  const ClientOptions& options) {
  auto split = postgres::split_postgres_uri(uri);
  if (!split.ok()) return split.status();
  postgres::PgPool pool(split->conninfo, 1, options.connect_timeout);
  const milliseconds timeout = options.connect_timeout + options.io_timeout;
  // CREATE ... IF NOT EXISTS accepts an object that someone else created first, and its owner
  // could then rewrite tokens at will: every fencelock object that already exists must belong to
  // the migrating role (or one it holds) or to a superuser.
  auto foreign = postgres::run(pool, std::string(postgres::sql::catalog_foreign_objects), {},
                               Clock::now() + timeout);
  if (!foreign.ok()) return foreign.status();
  if (PQntuples(foreign->get()) > 0) {
    const PGresult* r = foreign->get();
    return Status(Code::kPermissionDenied,
                  fmt::format("{} {} already exists and belongs to role \"{}\", which is no "
                              "superuser and which \"{}\" (running migrate) is no member of: its "
                              "owner can rewrite tokens at will. If that role is trusted, run "
                              "migrate as it; otherwise DROP the object and migrate again",
                              PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2),
                              PQgetvalue(r, 0, 3)));
  }
  auto ran = postgres::ensure_schema(pool, timeout, /*lease_mode=*/true, /*advisory_mode=*/true);
  if (!ran.ok()) return ran.status();
  // The fence (PostgresFence) too, so that one migrate sets up everything, and upgrades a fence
  // of an older version (the COMMENT that fence_schema.sql sets): the file keeps every record.
  auto fenced =
      postgres::run(pool, std::string(postgres::sql::catalog_fence), {}, Clock::now() + timeout);
  if (!fenced.ok()) return fenced.status();
  if (std::string_view(PQgetvalue(fenced->get(), 0, 0)) != "t") {
    auto created = postgres::run(pool, std::string(postgres::sql::fence_schema), {},
                                 Clock::now() + timeout, /*multi=*/true);
    if (!created.ok()) return created.status();
    ran->emplace_back(postgres::sql::fence_schema);
  }
  return ran;
}

}  // namespace fencelock::detail
