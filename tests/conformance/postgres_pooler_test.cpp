// PostgreSQL behind a connection pooler: a real PgBouncer (Debian's pgbouncer, started by
// tests/support/pgbouncer.h) in front of a real PostgreSQL 15 server.
//
// In transaction pooling a client connection's consecutive transactions run on whichever
// server connection is free, and one server connection serves many clients in turn: a
// session-level advisory lock stays on a server connection that other clients then use, and
// advisory locks stack per session. Before, two Clients both held one advisory lock in 10 of 10
// tries. Advisory mode is refused there (at connect, and on every session by the mark each
// statement compares); lease mode keeps working (without LISTEN, which cannot work there
// either). Session pooling keeps a server connection per client: the control case.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fencelock/client.h"
#include "postgres/advisory_backend.h"
#include "postgres/postgres_uri.h"
#include "support/pgbouncer.h"
#include "support/postgres_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

LockKey key(std::string_view name) { return *LockKey::make(name); }

class PostgresPooler : public ::testing::Test {
 protected:
  void SetUp() override { server_ = PostgresServer::start(); }
  // Creates the schema directly (a Client through transaction pooling in advisory mode is
  // refused before it would).
  void create_schema() {
    auto direct = Client::connect(server_->uri() + "?mode=advisory");
    ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  }
  std::unique_ptr<PostgresServer> server_;
};

// Advisory mode through transaction pooling is refused at connect, with an error that says what
// to do; with PgBouncer's default (the most recently used server connection first) and with
// server_round_robin, whose order the check must not depend on.
TEST_F(PostgresPooler, AdvisoryModeIsRefusedThroughTransactionPooling) {
  for (const std::vector<std::string>& settings :
       {std::vector<std::string>{}, std::vector<std::string>{"server_round_robin = 1"}}) {
    auto bouncer =
        PgBouncer::start(*server_, {.pool_mode = "transaction", .extra_settings = settings});
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto client = Client::connect(bouncer->uri() + "?mode=advisory");
      ASSERT_FALSE(client.ok()) << "advisory mode was accepted through transaction pooling"
                                << (settings.empty() ? "" : " with " + settings[0]);
      EXPECT_EQ(client.code(), Code::kInvalidArgument) << client.status().to_string();
      EXPECT_NE(client.status().message().find("mode=lease"), std::string::npos)
          << client.status().to_string();
      EXPECT_NE(client.status().message().find("directly"), std::string::npos)
          << client.status().to_string();
      EXPECT_EQ(client.status().message().find(server_->options().password), std::string::npos);
    }
  }
}

// Past the connect check (backends made directly, as if it had been fooled), no statement takes
// or frees a lock outside its own marked server session: two backends through transaction
// pooling never both hold one key. Before, the second try ran on the server connection that
// held the first's lock, and the lock stacked: two holders in 10 of 10 tries.
TEST_F(PostgresPooler, NoTwoHoldersThroughTransactionPoolingEvenPastTheConnectCheck) {
  create_schema();
  auto bouncer = PgBouncer::start(*server_, {.pool_mode = "transaction"});
  auto split = detail::postgres::split_postgres_uri(bouncer->uri() + "?mode=advisory");
  ASSERT_TRUE(split.ok());
  auto a = detail::postgres::make_advisory_backend(*split, {});
  auto b = detail::postgres::make_advisory_backend(*split, {});
  int first_granted = 0;
  for (int i = 0; i < 10; ++i) {
    const LockKey k = key("pooled-" + std::to_string(i));
    const OwnerId owner_a = OwnerId::random(), owner_b = OwnerId::random();
    const std::string metadata = "{}";
    auto got_a = a->try_acquire({k, owner_a, 5s, metadata}, Clock::now() + 5s);
    auto got_b = b->try_acquire({k, owner_b, 5s, metadata}, Clock::now() + 5s);
    EXPECT_FALSE(got_a.grant && got_b.grant) << "two holders of " << k.str();
    for (const auto* got : {&got_a, &got_b}) {
      if (!got->grant) {
        EXPECT_TRUE(got->status.code() == Code::kInvalidArgument ||
                    got->status.code() == Code::kLocked)
            << got->status.to_string();
      }
    }
    first_granted += got_a.grant ? 1 : 0;
    (void)a->release(k, owner_a, Clock::now() + 5s);
    (void)b->release(k, owner_b, Clock::now() + 5s);
  }
  // (A grant is possible while the first backend's session happens to keep its server
  // connection; what matters is that the second is then refused.)
  RecordProperty("first_backend_granted", first_granted);
}

// Session pooling keeps one server connection per client connection: advisory mode works,
// and excludes.
// The pooler hands the server connections of a Client that left to the next one, reset with
// DISCARD ALL (its marks and locks gone): a Client connects and leaves first.
TEST_F(PostgresPooler, AdvisoryModeWorksThroughSessionPooling) {
  auto bouncer = PgBouncer::start(*server_, {.pool_mode = "session"});
  {
    auto first = Client::connect(bouncer->uri() + "?mode=advisory");
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    auto lease = first->acquire(key("session-pooled"), {.ttl = 5s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  }
  auto a = Client::connect(bouncer->uri() + "?mode=advisory");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = Client::connect(bouncer->uri() + "?mode=advisory");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto held = a->acquire(key("session-pooled"), {.ttl = 5s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(b->acquire(key("session-pooled"), {.ttl = 5s}).code(), Code::kLocked);
  std::optional<Result<Lease>> next;
  std::jthread waiter(
      [&] { next.emplace(b->acquire(key("session-pooled"), {.ttl = 5s, .wait = 20s})); });
  ASSERT_TRUE(eventually([&] {
    return server_->sql(
               "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT "
               "granted") == "1";
  }));
  ASSERT_TRUE(held->release().ok());
  waiter.join();
  ASSERT_TRUE(next->ok()) << next->status().to_string();
  EXPECT_GT((*next)->token(), held->token());
}

// Lease mode needs no session: it works through transaction pooling, excludes, and a waiter is
// granted after the release. It does not LISTEN there (a LISTEN would stay on a server
// connection that serves other clients, who would get the notifications), nor leave session
// settings on the shared server connections; waiters try again every 200 ms instead.
TEST_F(PostgresPooler, LeaseModeWorksThroughTransactionPoolingWithoutListen) {
  server_->sql("ALTER ROLE fencelock SET statement_timeout = '7s'");
  auto bouncer = PgBouncer::start(*server_, {.pool_mode = "transaction"});
  auto a = Client::connect(bouncer->uri() + "?mode=lease");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = Client::connect(bouncer->uri() + "?mode=lease");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto held = a->acquire(key("lease-pooled"), {.ttl = 10s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(b->acquire(key("lease-pooled"), {.ttl = 5s}).code(), Code::kLocked);
  std::optional<Result<Lease>> next;
  Clock::time_point granted_at{};
  std::jthread waiter([&] {
    next.emplace(b->acquire(key("lease-pooled"), {.ttl = 5s, .wait = 20s}));
    granted_at = Clock::now();
  });
  // Before, the waiter's first watch sent LISTEN, on whichever server connection was free,
  // which then served other clients: another client of the pooler that sends a notification
  // gets it back, as a stray message. Tried ten times while the waiter waits.
  auto psql = find_executable("psql");
  ASSERT_TRUE(psql);
  const auto through_pooler = [&](const std::string& statement) {
    return run_command({*psql, "-X", "-w", "-At", "-d", bouncer->uri(), "-c", statement},
                       {"PGSSLMODE=disable", "PGOPTIONS"}, "", 30s);
  };
  for (int i = 0; i < 10; ++i) {
    RunResult stray = through_pooler("SELECT pg_notify('fencelock_release', 'probe')");
    ASSERT_EQ(stray.exit_code, 0) << stray.stderr_text;
    ASSERT_EQ(stray.stdout_text.find("Asynchronous notification"), std::string::npos)
        << "a server connection of the pooler LISTENs for a fencelock Client: "
        << stray.stdout_text;
  }
  const Clock::time_point released_at = Clock::now();
  ASSERT_TRUE(held->release().ok());
  waiter.join();
  ASSERT_TRUE(next->ok()) << next->status().to_string();
  EXPECT_GT((*next)->token(), held->token());
  RecordProperty(
      "grant_after_release_ms",
      static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(granted_at - released_at).count()));
  // The role's statement_timeout is still what another client of the pooler gets: fencelock
  // set nothing on the shared server connections.
  RunResult shown = through_pooler("SHOW statement_timeout");
  EXPECT_EQ(shown.stdout_text, "7s\n") << shown.stderr_text;
}

// Through transaction pooling no session setting of fencelock's stays with its statements, so
// the durable commit of a token cannot be a session setting there: lease_acquire.sql raises
// synchronous_commit for its own transaction. The server runs with synchronous_commit = off and
// a WAL writer that flushes every 10 s, and crashes after 40 grants; tokens never repeat.
TEST(PostgresPoolerDurability, LeaseTokensNeverRepeatAfterACrashThroughTransactionPooling) {
  auto server = PostgresServer::start(
      {.extra_settings = {"synchronous_commit=off", "wal_writer_delay=10000ms"}});
  auto bouncer = PgBouncer::start(
      *server, {.pool_mode = "transaction", .extra_settings = {"server_login_retry = 1"}});
  std::uint64_t highest = 0;
  {
    auto client = Client::connect(bouncer->uri() + "?mode=lease");
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    for (int i = 0; i < 40; ++i) {
      auto lease = client->acquire(key("durable-pooled"), {.ttl = 5s});
      ASSERT_TRUE(lease.ok()) << lease.status().to_string();
      highest = std::max(highest, lease->token().value());
      ASSERT_TRUE(lease->release().ok());
    }
    server->crash();
  }
  server->start_again();
  std::optional<Result<Lease>> after;
  std::optional<Client> client;
  ASSERT_TRUE(eventually(
      [&] {
        if (!client) {
          auto connected = Client::connect(bouncer->uri() + "?mode=lease");
          if (!connected.ok()) return false;
          client.emplace(std::move(*connected));
        }
        after.emplace(client->acquire(key("durable-pooled"), {.ttl = 5s}));
        return after->ok();
      },
      30s, 50ms))
      << (after ? after->status().to_string() : "no connection through the pooler");
  EXPECT_GT((*after)->token().value(), highest) << "a token was granted twice";
}

// The same holds for renewals and releases: a renewal the holder counts on (its valid_until
// moved) that a crash takes back would let the lease expire on the server before the holder's
// validity ends, and another client be granted it while the holder still writes; a lost release
// keeps a freed lock for its TTL. lease_renew.sql and lease_release.sql raise synchronous_commit
// for their own transaction as lease_acquire.sql does.
TEST(PostgresPoolerDurability, RenewalsAndReleasesSurviveACrashThroughTransactionPooling) {
  auto server = PostgresServer::start(
      {.extra_settings = {"synchronous_commit=off", "wal_writer_delay=10000ms"}});
  auto bouncer = PgBouncer::start(
      *server, {.pool_mode = "transaction", .extra_settings = {"server_login_retry = 1"}});
  auto client = Client::connect(bouncer->uri() + "?mode=lease");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto held = client->acquire(key("renewed-pooled"), {.ttl = 3s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  auto freed = client->acquire(key("released-pooled"), {.ttl = 60s});
  ASSERT_TRUE(freed.ok()) << freed.status().to_string();
  ASSERT_TRUE(freed->release().ok());
  const auto granted_until = held->valid_until();
  ASSERT_TRUE(eventually([&] { return held->valid_until() > granted_until + 500ms; }, 10s, 5ms))
      << "no renewal";
  const std::string expiry =
      "SELECT expires_at FROM fencelock_leases WHERE name = 'renewed-pooled'";
  const std::string renewed = server->sql(expiry);
  ASSERT_FALSE(renewed.empty());
  server->crash();
  server->start_again();
  // A later renewal may have committed between the read and the crash: at least the one seen.
  EXPECT_EQ(server->sql("SELECT (" + expiry + ") >= '" + renewed + "'::timestamptz"), "t")
      << "the renewal to " << renewed << " was lost in the crash: now " << server->sql(expiry);
  EXPECT_EQ(server->sql("SELECT owner FROM fencelock_leases WHERE name = 'released-pooled'"), "")
      << "the release was lost in the crash";
}

}  // namespace
}  // namespace fencelock::testing
