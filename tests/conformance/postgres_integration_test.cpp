// PostgreSQL lease mode against a real PostgreSQL 15 server: credentials, missing database and
// privileges, server down and restarted, schema management. The backend-neutral guarantees are
// in conformance_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mutex.h"
#include "fencelock/client.h"
#include "fencelock/log.h"
#include "fencelock/migrate.h"
#include "support/delay_proxy.h"
#include "support/etcd_cluster.h"  // make_test_certificates()
#include "support/postgres_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

LockKey key(std::string_view name) { return *LockKey::make(name); }

std::string base_uri(const PostgresServer& server, const std::string& user,
                     const std::string& password, const std::string& database = "fencelock") {
  return "postgres://" + user + ":" + password + "@127.0.0.1:" + std::to_string(server.port()) +
         "/" + database + "?mode=lease";
}

class PostgresLease : public ::testing::Test {
 protected:
  void SetUp() override { server_ = PostgresServer::start(); }
  std::string uri() const { return server_->uri() + "?mode=lease"; }
  std::unique_ptr<PostgresServer> server_;
};

// PostgreSQL over TLS: a server with ssl=on and a CA made by the test; the Client connects with
// sslmode=verify-full (certificate chain and host name checked by libpq) and its sessions are
// encrypted; a client that trusts another CA is refused with a clear error, as is verify-full
// against a server without TLS.
TEST(PostgresTls, VerifyFullConnectsWithTheRightCaAndRefusesAWrongOne) {
  auto server = PostgresServer::start();
  const std::string certs = make_temp_dir("fencelock-pg-tls-");
  const EtcdTls tls = make_test_certificates(certs);
  const std::string other_certs = make_temp_dir("fencelock-pg-tls-other-");
  const EtcdTls other = make_test_certificates(other_certs);
  const std::string plain_uri = server->uri() + "?sslmode=verify-full&sslrootcert=" + tls.ca;
  auto before = Client::connect(plain_uri);
  EXPECT_FALSE(before.ok()) << "verify-full against a server without TLS was accepted";

  // The server reads its key and certificate as its own OS user, the key private to it.
  struct stat data {};
  ASSERT_EQ(::stat(server->data_directory().c_str(), &data), 0);
  for (const auto& [from, to] : {std::pair{tls.server_cert, std::string("/server.crt")},
                                 std::pair{tls.server_key, std::string("/server.key")}}) {
    const std::string target = server->data_directory() + to;
    std::filesystem::copy_file(from, target);
    ASSERT_EQ(::chown(target.c_str(), data.st_uid, data.st_gid), 0) << target;
    ASSERT_EQ(::chmod(target.c_str(), 0600), 0) << target;
  }
  server->sql("ALTER SYSTEM SET ssl = on");
  server->sql("SELECT pg_reload_conf()");
  ASSERT_TRUE(eventually([&] { return server->sql("SHOW ssl") == "on"; }, 10s));

  for (const std::string mode : {"advisory", "lease"}) {
    auto client = Client::connect(fmt::format("{}&mode={}", plain_uri, mode));
    ASSERT_TRUE(client.ok()) << mode << ": " << client.status().to_string();
    auto lease = client->acquire(key("tls-" + mode), {.ttl = 5s});
    ASSERT_TRUE(lease.ok()) << mode << ": " << lease.status().to_string();
    EXPECT_EQ(server->sql("SELECT count(*) FILTER (WHERE NOT s.ssl) || ' of ' || count(*) FROM "
                          "pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = "
                          "'fencelock'"),
              server->sql("SELECT '0 of ' || count(*) FROM pg_stat_activity WHERE usename = "
                          "'fencelock'"))
        << mode << ": a session of the Client is not encrypted";
    EXPECT_TRUE(lease->release().ok());
  }
  auto wrong_ca = Client::connect(server->uri() + "?sslmode=verify-full&sslrootcert=" + other.ca);
  ASSERT_FALSE(wrong_ca.ok()) << "a certificate from another CA was accepted";
  EXPECT_NE(wrong_ca.status().message().find("certificate"), std::string::npos)
      << wrong_ca.status().to_string();
  EXPECT_EQ(wrong_ca.status().message().find(server->options().password), std::string::npos);
  remove_tree(certs);
  remove_tree(other_certs);
}

// A token is handed out only once the commit that drew it is durable. The server runs as many
// are configured, with synchronous_commit = off (and a WAL writer that flushes only every 10 s):
// a crash then loses the last commits and the token sequence goes back, so tokens repeat unless
// the library forces durable commits on its own sessions. Both modes.
TEST(PostgresDurability, TokensNeverRepeatAfterACrashOfAServerWithAsynchronousCommit) {
  auto server = PostgresServer::start(
      {.extra_settings = {"synchronous_commit=off", "wal_writer_delay=10000ms"}});
  for (const std::string mode : {"advisory", "lease"}) {
    std::uint64_t highest = 0;
    {
      auto client = Client::connect(server->uri() + "?mode=" + mode);
      ASSERT_TRUE(client.ok()) << mode << ": " << client.status().to_string();
      for (int i = 0; i < 40; ++i) {
        auto lease = client->acquire(key("durable-" + mode), {.ttl = 5s});
        ASSERT_TRUE(lease.ok()) << mode << ": " << lease.status().to_string();
        highest = std::max(highest, lease->token().value());
        ASSERT_TRUE(lease->release().ok());
      }
      // The server crashes while the Client still holds its sessions.
      server->crash();
    }
    server->start_again();
    auto client = Client::connect(server->uri() + "?mode=" + mode);
    ASSERT_TRUE(client.ok()) << mode << ": " << client.status().to_string();
    auto after = client->acquire(key("durable-" + mode), {.ttl = 5s});
    ASSERT_TRUE(after.ok()) << mode << ": " << after.status().to_string();
    EXPECT_GT(after->token().value(), highest) << mode << ": a token repeated after the crash";
  }
}

// Failover to a streaming standby, in both modes. The standby is made to lag (the primary's WAL
// sender stopped); then the primary crashes and the standby is promoted. With synchronous
// replication (synchronous_standby_names = '*') no grant completes while the standby lags, so every
// token the new primary hands out is above every granted one. With asynchronous replication the
// lagging standby lacks the last grants and hands out a token that was already granted (what
// docs/PROTOCOLS.md warns of: fencelock requires synchronous replication for failover).
TEST(PostgresFailover, TokensStayAboveEveryGrantOnlyWithASynchronousStandby) {
  for (const bool synchronous : {true, false}) {
    for (const std::string mode : {"lease", "advisory"}) {
      SCOPED_TRACE(
          fmt::format("{} standby, mode={}", synchronous ? "synchronous" : "asynchronous", mode));
      auto primary = PostgresServer::start();
      auto standby = PostgresServer::start_standby(*primary);
      if (synchronous) {
        primary->sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        primary->sql("SELECT pg_reload_conf()");
      }
      const std::string state = synchronous ? "sync" : "async";
      const auto until = std::chrono::steady_clock::now() + 30s;
      while (primary->sql("SELECT sync_state FROM pg_stat_replication") != state &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(10ms);
      }
      ASSERT_EQ(primary->sql("SELECT sync_state FROM pg_stat_replication"), state);

      std::uint64_t highest_granted = 0;
      {
        // An asynchronous standby is refused at connect, naming the way to accept it; accepted,
        // connect warns. A synchronous one needs nothing.
        const std::string uri = primary->uri() + "?mode=" + mode;
        auto refused = Client::connect(uri, {.io_timeout = 1s});
        if (synchronous) {
          EXPECT_TRUE(refused.ok()) << refused.status().to_string();
        } else {
          EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.status().to_string();
          EXPECT_NE(refused.status().message().find("allow_async_standby=true"), std::string::npos)
              << refused.status().message();
        }
        std::vector<std::string> warnings;
        fencelock::detail::Mutex warnings_mu;
        set_log_sink(
            [&](LogLevel, std::string_view message) {
              fencelock::detail::MutexLock lock(warnings_mu);
              warnings.emplace_back(message);
            },
            LogLevel::kWarning);
        auto client = Client::connect(uri + (synchronous ? "" : "&allow_async_standby=true"),
                                      {.io_timeout = 1s});
        set_log_sink({});
        ASSERT_TRUE(client.ok()) << client.status().to_string();
        const bool warned = std::any_of(warnings.begin(), warnings.end(), [](const auto& w) {
          return w.find("asynchronously") != std::string::npos;
        });
        EXPECT_EQ(warned, !synchronous) << ::testing::PrintToString(warnings);
        if (!synchronous) {
          EXPECT_NE(client->describe().find("allow_async_standby=true"), std::string::npos)
              << client->describe();
        }
        const LockKey name = *LockKey::make("failover");
        auto grant = [&] {
          auto lease = client->acquire(name, {.ttl = 5s});
          if (lease.ok()) {
            highest_granted = std::max(highest_granted, lease->token().value());
            EXPECT_TRUE(lease->release().ok());
          }
          return lease.code();
        };
        for (int i = 0; i < 3; ++i) ASSERT_EQ(grant(), Code::kOk);
        // The primary's WAL sender stops: nothing more reaches the standby (a stopped receiver
        // would still find the WAL in its socket buffer when it resumes).
        const std::string sender = primary->sql("SELECT pid FROM pg_stat_replication");
        ASSERT_FALSE(sender.empty());
        ASSERT_EQ(::kill(static_cast<pid_t>(std::stol(sender)), SIGSTOP), 0);
        // More than a sequence's 32 pre-logged values, so that a lagging standby's sequence is
        // behind what was granted (asynchronous); a synchronous primary grants nothing now in
        // lease mode. Advisory grants write no WAL to wait for (their count is unlogged, under an
        // epoch the standby already has): they go on, and the promoted standby raises the epoch.
        int granted_while_lagging = 0;
        for (int i = 0; i < (synchronous ? 2 : 40); ++i)
          granted_while_lagging += grant() == Code::kOk;
        const bool waits = synchronous && mode == "lease";
        EXPECT_EQ(granted_while_lagging, waits ? 0 : (synchronous ? 2 : 40));
        primary->crash();  // its postmaster SIGKILLs the stopped sender after 5 s
      }
      standby->promote();
      auto after = Client::connect(standby->uri() + "?mode=" + mode);
      ASSERT_TRUE(after.ok()) << after.status().to_string();
      auto lease = after->acquire(*LockKey::make("failover"), {.ttl = 5s});
      ASSERT_TRUE(lease.ok()) << lease.status().to_string();
      if (synchronous || mode == "advisory") {
        // Advisory mode, asynchronous: above too here, since no epoch was raised while the
        // standby lagged (one raised then and lost with the primary would repeat tokens:
        // docs/PROTOCOLS.md still asks for a synchronous standby).
        EXPECT_GT(lease->token().value(), highest_granted)
            << "a token at or below one already granted after a failover";
      } else {
        EXPECT_LE(lease->token().value(), highest_granted)
            << "the asynchronous standby was expected to lag (did the WAL receiver stop?)";
      }
    }
  }
}

// Renewal matches the grant (name and owner), not the name: when a lease's row is deleted behind
// its back and the same Client is granted the name again, one renewal batch holds both grants.
// Before, the new grant's row renewed the lost one too, which then never learned it was lost.
TEST_F(PostgresLease, ARenewalOfANewGrantDoesNotKeepALostGrantOfTheSameNameAlive) {
  auto client = Client::connect(uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  const LockKey name = *LockKey::make("renew-by-owner");
  auto old_grant = client->acquire(name, {.ttl = 3s});
  ASSERT_TRUE(old_grant.ok()) << old_grant.status().to_string();
  server_->sql("DELETE FROM fencelock_leases WHERE name = 'renew-by-owner'");
  auto new_grant = client->acquire(name, {.ttl = 3s});
  ASSERT_TRUE(new_grant.ok()) << new_grant.status().to_string();
  EXPECT_GT(new_grant->token(), old_grant->token());
  // Within its TTL the old grant must be found lost, while the new one is renewed.
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while (!old_grant->is_lost() && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(old_grant->is_lost()) << "a grant whose row is gone was renewed by another's row";
  EXPECT_FALSE(new_grant->is_lost());
}

// Tokens in grant order when a key's row is deleted (an admin's DELETE, the torture admin-delete
// fault) or expires early (the server's clock stepped forward) while first grants race. A trigger
// holds the first INSERT of the key (A) between the evaluation of its VALUES and its conflict
// check, where a gate the test holds keeps it; B is granted meanwhile, then B's row is deleted
// (or expired) and the gate opens. When the token was drawn in VALUES (before the row existed
// and was locked), A was granted the token it drew before B's: 2 below B's, after B's grant had
// completed (failed before lease_acquire.sql inserted an expired placeholder and drew every token
// under the row's lock).
struct RacedFirstGrants {
  std::uint64_t first = 0;   // B: granted while A was held
  std::uint64_t second = 0;  // A: granted after B's row was deleted or expired
  std::uint64_t table = 0;   // the holder's token by the table, after both
};

RacedFirstGrants race_first_grants(PostgresServer& server, const std::string& uri,
                                   const std::string& name, const std::string& fault) {
  RacedFirstGrants out;
  auto a = Client::connect(uri, {.io_timeout = 20s});
  auto b = Client::connect(uri, {.io_timeout = 20s});
  if (!a.ok() || !b.ok()) {
    ADD_FAILURE() << "connect: " << a.status().to_string() << " / " << b.status().to_string();
    return out;
  }
  // The gate: advisory lock (33, 2), held by the test's own session. The trigger holds only the
  // INSERT whose transaction wins the try-lock (33, 1), i.e. A's (B's try fails while A waits).
  server.sql(fmt::format(
      "CREATE OR REPLACE FUNCTION hold_first_insert() RETURNS trigger LANGUAGE plpgsql AS $f$ "
      "BEGIN IF NEW.name = '{0}' AND pg_try_advisory_xact_lock(33, 1) THEN "
      "PERFORM pg_advisory_xact_lock_shared(33, 2); END IF; RETURN NEW; END $f$; "
      "DROP TRIGGER IF EXISTS hold_first_insert ON fencelock_leases; "
      "CREATE TRIGGER hold_first_insert BEFORE INSERT ON fencelock_leases FOR EACH ROW "
      "EXECUTE FUNCTION hold_first_insert()",
      name));
  PGconn* gate = PQconnectdb(server.uri().c_str());
  PGresult* locked = PQexec(gate, "SELECT pg_advisory_lock(33, 2)");
  EXPECT_EQ(PQresultStatus(locked), PGRES_TUPLES_OK) << PQerrorMessage(gate);
  PQclear(locked);
  auto held = std::async(std::launch::async,
                         [&] { return a->acquire(*LockKey::make(name), {.ttl = 30s}); });
  EXPECT_TRUE(eventually(
      [&] {
        return server.sql(
                   "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                   "classid = 33 AND objid = 2 AND NOT granted") == "1";
      },
      20s))
      << "A's insert never reached the gate";
  auto granted = b->acquire(*LockKey::make(name), {.ttl = 30s});
  EXPECT_TRUE(granted.ok()) << "B, while A was held: " << granted.status().to_string();
  if (fault == "delete") {
    server.sql(fmt::format("DELETE FROM fencelock_leases WHERE name = '{}'", name));
  } else {  // the server's clock stepped forward past B's expiry
    server.sql(
        fmt::format("UPDATE fencelock_leases SET expires_at = clock_timestamp() - "
                    "interval '1 second' WHERE name = '{}'",
                    name));
  }
  PGresult* opened = PQexec(gate, "SELECT pg_advisory_unlock(33, 2)");
  PQclear(opened);
  PQfinish(gate);
  auto later = held.get();
  server.sql("DROP TRIGGER hold_first_insert ON fencelock_leases");
  EXPECT_TRUE(later.ok()) << "A, after B's row was " << fault
                          << "d: " << later.status().to_string();
  if (!granted.ok() || !later.ok()) return out;
  out.first = granted->token().value();
  out.second = later->token().value();
  out.table = std::stoull(
      server.sql(fmt::format("SELECT token FROM fencelock_leases WHERE name = '{}'", name)));
  return out;
}

TEST_F(PostgresLease, TokensFollowGrantOrderWhenARowIsDeletedOrExpiresEarlyDuringAFirstGrant) {
  ASSERT_TRUE(Client::connect(uri()).ok());  // creates the schema
  for (const std::string fault : {"delete", "expire"}) {
    const RacedFirstGrants raced = race_first_grants(*server_, uri(), "raced-" + fault, fault);
    EXPECT_GT(raced.second, raced.first)
        << fault << ": a grant completed after another got a smaller token";
    EXPECT_EQ(raced.table, raced.second) << fault << ": the table names another holder";
  }
}

// A key whose row is deleted right after each insert (here a trigger; in life a cleanup script
// in a loop) ends the try after a few inserts with an error that says so, instead of inserting
// rows until the call's deadline or forever.
TEST_F(PostgresLease, ARowDeletedAfterEveryInsertEndsTheTryWithAnErrorThatSaysSo) {
  auto client = Client::connect(uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  server_->sql(
      "CREATE FUNCTION delete_new_row() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN "
      "DELETE FROM fencelock_leases WHERE name = NEW.name; RETURN NULL; END $f$; "
      "CREATE TRIGGER delete_new_row AFTER INSERT ON fencelock_leases FOR EACH ROW "
      "WHEN (NEW.name = 'deleted-always') EXECUTE FUNCTION delete_new_row()");
  auto refused = client->acquire(key("deleted-always"), {.ttl = 5s});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), Code::kUnavailable) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("deleted again"), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ(server_->sql("SELECT count(*) FROM fencelock_leases WHERE name = 'deleted-always'"),
            "0");
  server_->sql("DROP TRIGGER delete_new_row ON fencelock_leases");
  auto granted = client->acquire(key("deleted-always"), {.ttl = 5s});
  EXPECT_TRUE(granted.ok()) << granted.status().to_string();
}

// A late acquire: the proxy holds the acquire statement past the Client's io_timeout, the Client
// gives up and releases the attempt, and only then does the statement reach the server and run.
// Before, it granted the key to an attempt nobody tracked (an orphan held for the whole TTL:
// the next acquisition was refused); now the release recorded the run and the late run takes
// nothing, whether the key's row existed (a takeover) or not (a first grant).
TEST_F(PostgresLease, AnAcquireThatRunsAfterItsAttemptWasReleasedTakesNothing) {
  auto proxy = DelayProxy::start(server_->port());
  const PostgresServerOptions& o = server_->options();
  auto slow = Client::connect(fmt::format("postgres://{}:{}@127.0.0.1:{}/{}?mode=lease", o.user,
                                          o.password, proxy->port(), o.database),
                              {.io_timeout = 300ms});
  auto direct = Client::connect(uri());
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  ASSERT_TRUE(direct->acquire(key("late-takeover"), {.ttl = 5s})->release().ok());  // a row
  // The text of lease_acquire.sql only (lease_release_unknown.sql goes on after NULL).
  proxy->delay("VALUES ($1, '', 0, 'epoch', NULL)\n", 1500ms);
  int late = 0;
  for (const std::string name : {"late-takeover", "late-first"}) {
    auto given_up = slow->acquire(key(name), {.ttl = 30s});
    ASSERT_FALSE(given_up.ok()) << name << ": the proxy did not hold the acquire";
    EXPECT_NE(given_up.status().message().find("outcome unknown: this attempt was released"),
              std::string::npos)
        << given_up.status().to_string();
    ASSERT_TRUE(proxy->wait_answered_late(++late, 20s)) << name << ": never ran late";
    auto next = direct->acquire(key(name), {.ttl = 5s});
    EXPECT_TRUE(next.ok()) << name
                           << ": a late acquire left the key held: " << next.status().to_string();
  }
}

// Advisory mode keeps the session of a try that timed out (it may hold other leases' locks), but
// only once the try's cancel can no longer reach the server. Before, a cancel that came late cut
// the next statement on that session short: here a wait in the server's queue, which failed at
// once ("canceling statement due to user request") instead of waiting its time.
TEST_F(PostgresLease, ALateCancelOfATimedOutTryCutsNoLaterStatementShort) {
  auto proxy = DelayProxy::start(server_->port());
  const PostgresServerOptions& o = server_->options();
  auto slow = Client::connect(fmt::format("postgres://{}:{}@127.0.0.1:{}/{}?mode=advisory&pool=1",
                                          o.user, o.password, proxy->port(), o.database),
                              {.io_timeout = 500ms});
  auto direct = Client::connect(server_->uri() + "?mode=advisory");
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  auto holder = direct->acquire(key("late-cancel/held"), {.ttl = 30s});
  ASSERT_TRUE(holder.ok()) << holder.status().to_string();
  // The slow client's one session is open, so that the try below runs a statement on it.
  ASSERT_TRUE(slow->acquire(key("late-cancel/warm"), {.ttl = 30s})->release().ok());
  // The try's Bind message, which names its prepared statement (prepared on the session by the
  // acquisition above; the wait's statement is not prepared).
  proxy->delay(std::string("fencelock_try\0", 14), 800ms);
  auto tried = std::async(std::launch::async,
                          [&] { return slow->acquire(key("late-cancel/try"), {.ttl = 30s}); });
  ASSERT_TRUE(proxy->wait_held(1, 20s)) << "the try never reached the proxy";
  // The cancel request the timed-out try sends next (length 16, code 80877102) comes late.
  proxy->delay(std::string("\x00\x00\x00\x10\x04\xd2\x16\x2e", 8), 2s);
  auto given_up = tried.get();
  ASSERT_FALSE(given_up.ok()) << "the proxy did not hold the try";
  auto waited = slow->acquire(key("late-cancel/held"), {.ttl = 30s, .wait = 4s});
  EXPECT_EQ(waited.code(), Code::kLocked)
      << "the wait ended before its time: " << waited.status().to_string();
  EXPECT_GE(proxy->held(), 2) << "the timed-out try sent no cancel";
}

// A lease table made by a version before `released` (lease_release_unknown.sql) gets the column
// from the next Client that may alter it, and works on.
TEST_F(PostgresLease, ATableOfAnOlderVersionGetsTheReleasedColumnAtConnect) {
  ASSERT_TRUE(Client::connect(uri()).ok());  // creates the schema
  server_->sql("ALTER TABLE fencelock_leases DROP COLUMN released");
  auto client = Client::connect(uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_EQ(server_->sql("SELECT count(*) FROM pg_attribute WHERE attrelid = "
                         "'fencelock_leases'::regclass AND attname = 'released' AND "
                         "NOT attisdropped"),
            "1");
  auto lease = client->acquire(key("upgraded"), {.ttl = 5s});
  EXPECT_TRUE(lease.ok()) << lease.status().to_string();
}

// A lock name that is not UTF-8 is refused by both modes before anything is sent, naming the
// byte (before: "internal: PostgreSQL error 22021 ... this is a bug", exit 70; in a SQL_ASCII
// database lease mode granted it and lost it at its first renewal, whose JSON batch could not
// carry the name).
TEST_F(PostgresLease, ANameThatIsNotUtf8IsAnInvalidArgumentInBothModes) {
  const std::string bad = "bad-\xff-key";
  for (const std::string mode : {"lease", "advisory"}) {
    auto client = Client::connect(server_->uri() + "?mode=" + mode);
    ASSERT_TRUE(client.ok()) << mode << ": " << client.status().to_string();
    auto refused = client->acquire(key(bad), {.ttl = 5s});
    EXPECT_EQ(refused.code(), Code::kInvalidArgument)
        << mode << ": " << refused.status().to_string();
    EXPECT_NE(refused.status().message().find("byte 4 (0xff)"), std::string::npos)
        << refused.status().to_string();
    EXPECT_EQ(client->inspect(key(bad)).code(), Code::kInvalidArgument) << mode;
    EXPECT_EQ(client->list("bad-\xfe").code(), Code::kInvalidArgument) << mode;
    EXPECT_TRUE(client->acquire(key("caf\xc3\xa9"), {.ttl = 5s}).ok()) << mode;
  }
}

// A token sequence with CACHE > 1 would give tokens out of grant order across sessions.
TEST_F(PostgresLease, ATokenSequenceWithACacheIsRefusedAtConnect) {
  ASSERT_TRUE(Client::connect(uri()).ok());  // creates the schema
  server_->sql("ALTER SEQUENCE fencelock_tokens CACHE 20");
  auto refused = Client::connect(uri());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("CACHE 20"), std::string::npos)
      << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("ALTER SEQUENCE fencelock_tokens CACHE 1"),
            std::string::npos)
      << refused.status().to_string();
  server_->sql("ALTER SEQUENCE fencelock_tokens CACHE 1");
  EXPECT_TRUE(Client::connect(uri()).ok());
}

TEST_F(PostgresLease, WrongPasswordIsUnauthenticatedAndNeverEchoed) {
  auto client = Client::connect(base_uri(*server_, "fencelock", "wrong-pw-123"));
  ASSERT_EQ(client.code(), Code::kUnauthenticated) << client.status().to_string();
  EXPECT_EQ(client.status().message().find("wrong-pw-123"), std::string::npos);
}

// A raw '?', '/' or '@' in the password: the connection works and neither describe() nor an
// error shows any of it. Before, '?' cut the URI there (describe() showed
// "postgres://app:topsecret?mode=...") and libpq's errors quoted pieces of the password.
TEST_F(PostgresLease, APasswordWithUriDelimitersConnectsAndIsNeverShown) {
  server_->sql("CREATE ROLE tricky LOGIN PASSWORD 'top?se/cr@t2'");
  server_->sql("GRANT ALL ON DATABASE fencelock TO tricky");
  server_->sql("GRANT ALL ON SCHEMA public TO tricky");
  auto client = Client::connect(base_uri(*server_, "tricky", "top?se/cr@t2"));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_EQ(client->describe(), "postgres://tricky@127.0.0.1:" + std::to_string(server_->port()) +
                                    "/fencelock?mode=lease");
  auto lease = client->acquire(*LockKey::make("tricky"), {.ttl = 2s});
  EXPECT_TRUE(lease.ok()) << lease.status().to_string();
  for (const std::string wrong : {"top?se/cr@t3", "hun%ter", "cret@x", "a:b?c"}) {
    auto refused = Client::connect(base_uri(*server_, "tricky", wrong));
    EXPECT_FALSE(refused.ok()) << wrong;
    for (const std::string piece : {"top", "se/cr", "t3", "hun", "ter", "cret", "b?c"}) {
      if (wrong.find(piece) == std::string::npos) continue;
      EXPECT_EQ(refused.status().message().find(piece), std::string::npos)
          << wrong << ": " << refused.status().message();
    }
  }
}

TEST_F(PostgresLease, UnknownDatabaseIsAnInvalidArgumentNamingIt) {
  auto client = Client::connect(base_uri(*server_, "fencelock", "fencelock-test-pw", "no_such_db"));
  ASSERT_EQ(client.code(), Code::kInvalidArgument) << client.status().to_string();
  EXPECT_NE(client.status().message().find("no_such_db"), std::string::npos);
}

TEST_F(PostgresLease, ServerDownIsUnavailable) {
  server_->stop();
  auto client = Client::connect(uri());
  EXPECT_EQ(client.code(), Code::kUnavailable) << client.status().to_string();
}

TEST_F(PostgresLease, TtlBelowOneSecondIsRejectedAndNothingIsHeld) {
  auto client = Client::connect(uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(key("short"), {.ttl = 500ms});
  ASSERT_EQ(lease.code(), Code::kInvalidArgument);
  EXPECT_NE(lease.status().message().find("minimum"), std::string::npos)
      << lease.status().message();
  EXPECT_EQ(server_->sql("SELECT count(*) FROM fencelock_leases"), "0");
}

// A role that may not run DDL gets a message pointing to `fencelock migrate`; after a privileged
// migrate and DML grants it works.
TEST_F(PostgresLease, MissingDdlRightsPointToMigrateWhichCreatesTheSchemaOnce) {
  server_->sql("CREATE ROLE limited LOGIN PASSWORD 'limited-pw'");
  server_->sql("GRANT CONNECT ON DATABASE fencelock TO limited");
  server_->sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
  std::string limited = base_uri(*server_, "limited", "limited-pw");
  auto denied = Client::connect(limited);
  ASSERT_EQ(denied.code(), Code::kPermissionDenied) << denied.status().to_string();
  EXPECT_NE(denied.status().message().find("fencelock migrate"), std::string::npos);

  auto ran = migrate(uri());
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  EXPECT_FALSE(ran->empty());
  auto again = migrate(uri());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "migrate is not idempotent";

  server_->sql("GRANT SELECT, INSERT, UPDATE, DELETE ON fencelock_leases TO limited");
  server_->sql("GRANT USAGE ON SEQUENCE fencelock_tokens TO limited");
  auto allowed = Client::connect(limited);
  ASSERT_TRUE(allowed.ok()) << allowed.status().to_string();
  EXPECT_TRUE(allowed->acquire(key("limited"), {.ttl = 5s}).ok());

  // A lease table of an older version (no `released` column): a role that may not alter it is
  // refused in lease mode with what to do (the table's owner runs migrate), and advisory mode,
  // which does not use the lease table, connects; migrate adds the column once.
  server_->sql("ALTER TABLE fencelock_leases DROP COLUMN released");
  server_->sql("GRANT SELECT, UPDATE ON fencelock_advisory_holders TO limited");
  auto old_table = Client::connect(limited);
  ASSERT_EQ(old_table.code(), Code::kPermissionDenied) << old_table.status().to_string();
  EXPECT_NE(old_table.status().message().find("lacks the column \"released\""), std::string::npos)
      << old_table.status().to_string();
  EXPECT_NE(old_table.status().message().find("fencelock migrate"), std::string::npos);
  auto advisory =
      Client::connect(base_uri(*server_, "limited", "limited-pw")
                          .substr(0, base_uri(*server_, "limited", "limited-pw").find('?')) +
                      "?mode=advisory");
  EXPECT_TRUE(advisory.ok()) << "advisory mode needs no lease-table column: "
                             << advisory.status().to_string();
  auto upgraded = migrate(uri());
  ASSERT_TRUE(upgraded.ok()) << upgraded.status().to_string();
  ASSERT_EQ(upgraded->size(), 1u);
  EXPECT_NE(upgraded->front().find("ADD COLUMN IF NOT EXISTS released"), std::string::npos);
  auto after = Client::connect(limited);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->acquire(key("limited-after-upgrade"), {.ttl = 5s}).ok());
}

// CREATE ... IF NOT EXISTS accepts an object someone else made first, whose owner could then
// rewrite tokens at will. migrate refuses to build on such an object, naming it and its owner;
// objects of the migrating role itself (or of a superuser) are fine. migrate also installs the
// fence (PostgresFence), so that one run sets up everything.
TEST_F(PostgresLease, MigrateRefusesObjectsOwnedByAnotherRoleAndInstallsTheFence) {
  server_->sql("CREATE ROLE mallory LOGIN PASSWORD 'mallory-pw'");
  server_->sql("GRANT CREATE ON SCHEMA public TO mallory");
  server_->sql(
      "SET ROLE mallory; CREATE TABLE fencelock_fences (resource text PRIMARY KEY, token "
      "numeric(20, 0) NOT NULL); RESET ROLE");
  auto refused = migrate(uri());
  ASSERT_EQ(refused.code(), Code::kPermissionDenied) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("table fencelock_fences"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("\"mallory\""), std::string::npos)
      << refused.status().message();

  server_->sql("DROP TABLE fencelock_fences");
  auto ran = migrate(uri());
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  EXPECT_EQ(server_->sql("SELECT string_agg(DISTINCT pg_get_userbyid(proowner), ',') FROM "
                         "pg_proc WHERE proname = 'fencelock_fence'"),
            "fencelock");
  auto again = migrate(uri());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->empty()) << "migrate is not idempotent";
}

// The server decides expiry by its own clock: a row whose expires_at passed is free even if the
// client that wrote it thinks otherwise.
TEST_F(PostgresLease, ExpiryIsDecidedByTheServerClock) {
  auto a = Client::connect(uri());
  auto b = Client::connect(uri());
  ASSERT_TRUE(a.ok() && b.ok());
  auto held = a->acquire(key("server-clock"), {.ttl = 30s});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(b->acquire(key("server-clock"), {.ttl = 5s}).code(), Code::kLocked);
  server_->sql("UPDATE fencelock_leases SET expires_at = clock_timestamp() - interval '1 second'");
  auto taken = b->acquire(key("server-clock"), {.ttl = 5s});
  ASSERT_TRUE(taken.ok()) << taken.status().to_string();
  EXPECT_GT(taken->token(), held->token());
}

// A restart in the middle of a run: the Client reconnects, and no lease is reported as held when
// the table says otherwise.
TEST_F(PostgresLease, AServerRestartIsSurvivedWithoutFalseHolders) {
  auto client = Client::connect(uri(), {.io_timeout = 500ms});
  ASSERT_TRUE(client.ok());
  auto lease = client->acquire(key("restart"), {.ttl = 3s});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(client->metrics().reconnects, 0u) << "first connections are not reconnects";
  server_->restart();
  // Reconnects (after backoff) and serves new acquisitions.
  std::optional<Result<Lease>> next;
  auto until = Clock::now() + 10s;
  do {
    next.emplace(client->acquire(key("after-restart"), {.ttl = 5s}));
  } while (!next->ok() && Clock::now() < until && (std::this_thread::sleep_for(50ms), true));
  ASSERT_TRUE(next->ok()) << next->status().to_string();
  EXPECT_GE(client->metrics().reconnects, 1u);
  // The old lease is either still renewed (the row survived) or reported lost; never held
  // without its row.
  auto until_renewed = Clock::now() + 5s;
  while (!lease->is_lost() && lease->valid_until() < Clock::now() + 1s &&
         Clock::now() < until_renewed) {
    std::this_thread::sleep_for(20ms);
  }
  if (!lease->is_lost()) {
    auto holder = client->inspect(key("restart"));
    ASSERT_TRUE(holder.ok() && holder->has_value())
        << "a lease is reported held but its row is gone";
    EXPECT_EQ((*holder)->owner_prefix, lease->owner().short_hex());
  }
}

}  // namespace
}  // namespace fencelock::testing
