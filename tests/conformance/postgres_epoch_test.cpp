// PostgreSQL advisory mode's epoch tokens (docs/PROTOCOLS.md, advisory "Tokens"): the count
// lives in an UNLOGGED table, so that no grant waits for a WAL flush, and the epoch above it is
// raised durably whenever a crash or a promotion emptied that table. Against a real PostgreSQL 15:
// a crash of one backend (the postmaster resets unlogged relations without restarting), a database
// made by an earlier version, a count near its end, concurrent raises.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fencelock/client.h"
#include "support/postgres_server.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kEpochUnit = std::uint64_t{1} << 40;

LockKey key(std::string_view name) { return *LockKey::make(name); }

class PostgresEpoch : public ::testing::Test {
 protected:
  void SetUp() override { server_ = PostgresServer::start(); }
  std::string uri() const { return server_->uri() + "?mode=advisory"; }
  Client connect() {
    auto client = Client::connect(uri(), {.io_timeout = 2s});
    if (!client.ok()) throw std::runtime_error(client.status().to_string());
    return std::move(*client);
  }
  // One grant and release of `name`; its token.
  std::uint64_t grant(Client& client, std::string_view name) {
    auto lease = client.acquire(key(name), {.ttl = 5s});
    if (!lease.ok()) throw std::runtime_error(lease.status().to_string());
    const std::uint64_t token = lease->token().value();
    EXPECT_TRUE(lease->release().ok());
    return token;
  }
  std::uint64_t epoch() {
    return std::stoull(server_->sql("SELECT epoch FROM fencelock_advisory_epoch WHERE id = 1"));
  }

  std::unique_ptr<PostgresServer> server_;
};

// A new database: the count and the holders table are unlogged, the first token is of epoch 1,
// and grants in steady state write no WAL record that must be flushed: on a server with the
// default durability (fsync, synchronous_commit on), pg_stat_wal's syncs stay few while 200
// grants go by (before, each grant flushed: 200 or more).
TEST_F(PostgresEpoch, GrantsDrawFromAnUnloggedSequenceUnderADurableEpoch) {
  server_ = PostgresServer::start({.extra_settings = {"fsync=on", "synchronous_commit=on"}});
  ASSERT_EQ(server_->sql("SHOW fsync"), "on");
  Client client = connect();
  const std::uint64_t first = grant(client, "epoch/new");
  EXPECT_EQ(first / kEpochUnit, 1U) << first;
  EXPECT_EQ(epoch(), 1U);
  EXPECT_EQ(server_->sql("SELECT string_agg(relpersistence::text, ',' ORDER BY relname) FROM "
                         "pg_class WHERE relname IN ('fencelock_advisory_live', "
                         "'fencelock_advisory_holders', 'fencelock_advisory_epoch')"),
            "p,u,u");  // epoch logged; holders, live count unlogged
  server_->sql("SELECT pg_stat_reset_shared('wal')");
  std::uint64_t last = first;
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t token = grant(client, "epoch/new");
    ASSERT_GT(token, last);
    last = token;
  }
  // The WAL writer flushes on its own timer (every 200 ms by default): a handful, not 200.
  EXPECT_LT(std::stoi(server_->sql("SELECT wal_sync FROM pg_stat_wal")), 50);
}

// A backend killed with SIGKILL makes the postmaster end every session and reinitialize without
// restarting (pg_postmaster_start_time() stays), emptying unlogged tables: the next grant
// raises the epoch, and its token is above every token before.
TEST_F(PostgresEpoch, ABackendCrashResetsTheCountAndTheNextTokenIsOfANewEpoch) {
  Client client = connect();
  std::uint64_t highest = 0;
  for (int i = 0; i < 20; ++i) highest = std::max(highest, grant(client, "epoch/crash"));
  const std::string started = server_->sql("SELECT pg_postmaster_start_time()");
  const std::string victim = server_->sql(
      "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND "
      "application_name <> 'fencelock-test-psql' LIMIT 1");
  ASSERT_FALSE(victim.empty());
  ASSERT_EQ(::kill(static_cast<pid_t>(std::stol(victim)), SIGKILL), 0);
  // The reinitialization empties the count until a client raises the epoch.
  ASSERT_TRUE(eventually(
      [&] {
        try {
          return server_->sql("SELECT count(*) FROM fencelock_advisory_live") == "0";
        } catch (const std::exception&) {
          return false;  // still recovering
        }
      },
      30s))
      << server_->log_tail();
  EXPECT_EQ(server_->sql("SELECT pg_postmaster_start_time()"), started);
  std::uint64_t after = 0;
  ASSERT_TRUE(eventually(
      [&] {
        try {
          after = grant(client, "epoch/crash");
          return true;
        } catch (const std::exception&) {
          return false;  // the Client's sessions were ended: it reconnects
        }
      },
      30s));
  EXPECT_GT(after, highest) << "a token went back after the crash";
  EXPECT_EQ(after / kEpochUnit, highest / kEpochUnit + 1) << after << " after " << highest;
}

// A database made by an earlier version: a logged token sequence that already handed out
// tokens, a logged holders table, no epoch tables. The first Client makes the epoch tables and
// the holders table unlogged; its first token is above every earlier one.
TEST_F(PostgresEpoch, ADatabaseOfAnEarlierVersionIsUpgradedAndTokensKeepGrowing) {
  server_->sql(
      "CREATE SEQUENCE fencelock_advisory_tokens; "
      "CREATE TABLE fencelock_advisory_holders (key bigint PRIMARY KEY, name text NOT NULL, "
      "owner text NOT NULL, token bigint NOT NULL, ttl_ms bigint NOT NULL, holder jsonb, pid "
      "integer NOT NULL); "
      "CREATE SEQUENCE fencelock_tokens; "
      "CREATE TABLE fencelock_leases (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT "
      "NULL, expires_at timestamptz NOT NULL, holder jsonb, released jsonb); "
      "SELECT setval('fencelock_advisory_tokens', 123456); "
      "ALTER TABLE fencelock_advisory_holders OWNER TO " +
      server_->options().user + "; ALTER SEQUENCE fencelock_advisory_tokens OWNER TO " +
      server_->options().user + "; ALTER TABLE fencelock_leases OWNER TO " +
      server_->options().user + "; ALTER SEQUENCE fencelock_tokens OWNER TO " +
      server_->options().user);
  Client client = connect();
  const std::uint64_t token = grant(client, "epoch/upgraded");
  EXPECT_GT(token, 123456U);
  EXPECT_EQ(token / kEpochUnit, 1U) << token;
  EXPECT_EQ(server_->sql("SELECT string_agg(relpersistence::text, ',' ORDER BY relname) FROM "
                         "pg_class WHERE relname IN ('fencelock_advisory_live', "
                         "'fencelock_advisory_holders')"),
            "u,u");
}

// A count near the end of its epoch's range (within 2^32 of 2^40) is no longer valid: the next
// grant raises the epoch rather than let the count run into the next epoch's tokens.
TEST_F(PostgresEpoch, ACountNearTheEndOfItsRangeMovesToTheNextEpoch) {
  Client client = connect();
  const std::uint64_t first = grant(client, "epoch/end");
  ASSERT_EQ(first / kEpochUnit, 1U);
  const std::uint64_t limit = kEpochUnit - (std::uint64_t{1} << 32);  // the count's end
  server_->sql("UPDATE fencelock_advisory_live SET count = " + std::to_string(limit - 1));
  const std::uint64_t last_of_epoch = grant(client, "epoch/end");  // the last valid count
  EXPECT_EQ(last_of_epoch, kEpochUnit + limit);
  const std::uint64_t next = grant(client, "epoch/end");
  EXPECT_EQ(next, 2 * kEpochUnit + 1) << "the count ran on past its limit";
  EXPECT_EQ(epoch(), 2U);
}

// Clients that find the sequence without an epoch at once raise it without setting it back:
// every token of every client is unique, and none is of an epoch above the noted one.
TEST_F(PostgresEpoch, ConcurrentRaisesNeverSetTheSequenceBack) {
  constexpr int kClients = 6, kGrants = 30;
  std::vector<Client> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect());
  for (int round = 0; round < 3; ++round) {
    server_->sql("DELETE FROM fencelock_advisory_live");  // as after a crash
    std::vector<std::vector<std::uint64_t>> tokens(kClients);
    {
      std::vector<std::jthread> threads;
      for (int i = 0; i < kClients; ++i) {
        threads.emplace_back([&, i] {
          for (int g = 0; g < kGrants; ++g) {
            tokens[i].push_back(grant(clients[i], "epoch/race/" + std::to_string(i)));
          }
        });
      }
    }
    std::set<std::uint64_t> all;
    for (const auto& per_client : tokens) {
      for (std::size_t g = 1; g < per_client.size(); ++g) {
        EXPECT_GT(per_client[g], per_client[g - 1]) << "a client's tokens went back";
      }
      all.insert(per_client.begin(), per_client.end());
    }
    EXPECT_EQ(all.size(), std::size_t{kClients * kGrants}) << "a token was handed out twice";
    EXPECT_LE(*all.rbegin() / kEpochUnit, epoch()) << "a token above the durable epoch";
  }
}

// The count row vanishes (deleted by hand) between a try's check of it and its draw: the try
// was granted but got no token. The lock must be given back, not left on a pooled session
// without a holder (before, the try answered "held by another session" and kept it).
TEST_F(PostgresEpoch, ATryGrantedAfterTheCountVanishedGivesTheLockBack) {
  Client client = connect();
  (void)grant(client, "epoch/vanish");
  std::jthread deleter(
      [&] { server_->sql("DELETE FROM fencelock_advisory_live; SELECT pg_sleep(0.5)"); });
  ASSERT_TRUE(eventually([&] {
    return server_->sql(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query "
               "LIKE 'DELETE FROM fencelock_advisory_live%'") == "1";
  }));
  auto lease = client.acquire(key("epoch/vanish"), {.ttl = 5s});
  EXPECT_EQ(lease.code(), Code::kUnavailable) << lease.status().to_string();
  deleter.join();
  Client other = connect();
  auto after = other.acquire(key("epoch/vanish"), {.ttl = 5s, .wait = 2s});
  EXPECT_TRUE(after.ok()) << "the lock stayed held: " << after.status().to_string();
}

// A raise whose commit cannot reach a synchronous standby (synchronous_standby_names names one
// that never connects) times out; PostgreSQL then makes the raised epoch visible although no
// standby has it. No count may be made of it: grants must keep failing rather than hand out
// tokens of an epoch a promoted standby would raise to again. Before, the raise's second step ran
// in the same script after the cancel, and from then on every grant succeeded without a standby.
TEST_F(PostgresEpoch, ARaiseThatNoSynchronousStandbyConfirmedMakesNoCount) {
  {
    Client client = connect();
    (void)grant(client, "epoch/standby");  // the schema and epoch 1 exist
  }
  server_->sql("ALTER SYSTEM SET synchronous_standby_names = 'ghost'");
  server_->crash();  // empties the count
  server_->start_again();
  ASSERT_EQ(server_->sql("SELECT count(*) FROM fencelock_advisory_live"), "0");
  auto client = Client::connect(uri(), {.io_timeout = 1s});
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  for (int i = 0; i < 2; ++i) {
    auto lease = client->acquire(key("epoch/standby"), {.ttl = 5s});
    EXPECT_FALSE(lease.ok()) << "granted token " << lease->token().value()
                             << " under an epoch no standby confirmed";
    EXPECT_EQ(server_->sql("SELECT count(*) FROM fencelock_advisory_live"), "0");
  }
  // The standby requirement lifted: the next raise is confirmed, and grants go on above.
  server_->sql("ALTER SYSTEM RESET synchronous_standby_names");
  server_->sql("SELECT pg_reload_conf()");
  std::optional<Result<Lease>> after;
  ASSERT_TRUE(eventually([&] {
    after.emplace(client->acquire(key("epoch/standby"), {.ttl = 5s}));
    return after->ok();
  })) << after->status().to_string();
  EXPECT_GE((*after)->token().value() / kEpochUnit, 2U);
}

}  // namespace
}  // namespace fencelock::testing
