// The resource-side guards of fencelock/fence.h: FenceGate in process, the Redis script, the
// PostgreSQL function, and the etcd is-still-holder Txn, each against a real server. Every
// refusal must be Code::kFenced with "rejected: stale token N < M".
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/client_core.h"
#include "fencelock/client.h"
#include "fencelock/fence.h"
#include "support/etcd_cluster.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;

FencingToken T(std::uint64_t v) { return FencingToken(v); }

TEST(FenceGate, AdmitsEqualOrNewerTokensAndRefusesOlderOnesWithTheirNumbers) {
  FenceGate gate;
  EXPECT_EQ(gate.highest(), T(0));
  EXPECT_TRUE(gate.admit(T(5)).ok());
  EXPECT_TRUE(gate.admit(T(5)).ok());  // the same holder writes again
  Status stale = gate.admit(T(4));
  EXPECT_EQ(stale.code(), Code::kFenced);
  EXPECT_EQ(stale.message(), "rejected: stale token 4 < 5");
  EXPECT_EQ(stale.to_string(), "fenced: rejected: stale token 4 < 5");
  EXPECT_TRUE(gate.admit(T(9)).ok());
  EXPECT_EQ(gate.highest(), T(9));
  bool wrote = false;
  EXPECT_EQ(gate.run(T(8), [&] { wrote = true; }).code(), Code::kFenced);
  EXPECT_FALSE(wrote);
  EXPECT_TRUE(gate.run(T(10), [&] { wrote = true; }).ok());
  EXPECT_TRUE(wrote);
}

// Writes that run under the gate happen in token order, whatever the threads' interleaving.
TEST(FenceGate, WritesUnderTheGateNeverGoBackwardsAcrossThreads) {
  FenceGate gate;
  std::vector<std::uint64_t> written;  // appended only under the gate
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < 500; ++i) {
        const std::uint64_t token = i * 4 + static_cast<std::uint64_t>(t);
        (void)gate.run(T(token), [&] { written.push_back(token); });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_FALSE(written.empty());
  EXPECT_TRUE(std::is_sorted(written.begin(), written.end()));
  EXPECT_EQ(gate.highest(), T(written.back()));
}

TEST(RedisFence, WritesOnlyWithTheNewestTokenAndComparesEveryUint64Exactly) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set("account", "100", T(5)).ok());
  Status stale = fence->set("account", "666", T(4));
  EXPECT_EQ(stale.code(), Code::kFenced);
  EXPECT_EQ(stale.message(), "rejected: stale token 4 < 5");
  EXPECT_EQ(fence->get("account")->value_or("missing"), "100");
  EXPECT_TRUE(fence->set("account", "101", T(5)).ok());
  EXPECT_EQ(fence->get("account")->value_or("missing"), "101");
  EXPECT_EQ(*fence->highest("account"), T(5));
  EXPECT_EQ(*fence->highest("other"), T(0));

  // 2^53 + 1 and 2^53 are the same double: the script must compare digits, not numbers.
  ASSERT_TRUE(fence->set("big", "a", T(9007199254740993ULL)).ok());
  EXPECT_EQ(fence->set("big", "b", T(9007199254740992ULL)).code(), Code::kFenced);
  EXPECT_TRUE(fence->set("big", "c", T(18446744073709551615ULL)).ok());
  EXPECT_EQ(fence->set("big", "d", T(18446744073709551614ULL)).code(), Code::kFenced);
  EXPECT_EQ(fence->get("big")->value_or("missing"), "c");

  EXPECT_EQ(RedisFence::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").code(),
            Code::kInvalidArgument);
  EXPECT_NE(RedisFence::script().find("KEYS[2]"), std::string_view::npos);
}

TEST(RedisFence, AKilledServerIsUnavailableAndTheNextCallReconnects) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri(), {.connect_timeout = 300ms, .io_timeout = 300ms});
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set("k", "1", T(1)).ok());
  server->restart();
  // The old connection is gone: the first call may fail, never with kFenced or kInternal.
  Status first = fence->set("k", "2", T(2));
  if (!first.ok()) {
    EXPECT_EQ(first.code(), Code::kUnavailable) << first.to_string();
    EXPECT_TRUE(fence->set("k", "2", T(2)).ok());
  }
  EXPECT_EQ(fence->get("k")->value_or("missing"), "2");
}

class PgConn {
 public:
  explicit PgConn(const std::string& uri) : conn_(PQconnectdb(uri.c_str())) {}
  ~PgConn() { PQfinish(conn_); }
  PGconn* get() const { return conn_; }
  void exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    ExecStatusType status = PQresultStatus(r);
    PQclear(r);
    ASSERT_TRUE(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
        << sql << ": " << PQerrorMessage(conn_);
  }

 private:
  PGconn* conn_;
};

TEST(PostgresFence, AStaleTokenAbortsTheTransactionAndANewerOneCommitsWithItsWrite) {
  auto server = PostgresServer::start();
  PgConn a(server->uri()), b(server->uri());
  ASSERT_EQ(PQstatus(a.get()), CONNECTION_OK) << PQerrorMessage(a.get());
  ASSERT_TRUE(PostgresFence::install(a.get()).ok());
  ASSERT_TRUE(PostgresFence::install(a.get()).ok());  // idempotent
  a.exec("CREATE TABLE accounts (id int PRIMARY KEY, balance int)");
  a.exec("INSERT INTO accounts VALUES (1, 100)");

  a.exec("BEGIN");
  ASSERT_TRUE(PostgresFence::check(a.get(), "accounts/1", T(7)).ok());
  a.exec("UPDATE accounts SET balance = 150 WHERE id = 1");
  // A concurrent older holder waits for the fence row, then is refused once 7 commits.
  std::optional<Status> older;
  std::thread waiter([&] {
    PGresult* r = PQexec(b.get(), "BEGIN");
    PQclear(r);
    older = PostgresFence::check(b.get(), "accounts/1", T(6));
    r = PQexec(b.get(), "ROLLBACK");
    PQclear(r);
  });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 500; ++i) {
      if (server->sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") ==
          "1")
        return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }()) << "the older holder did not wait for the fence row";
  a.exec("COMMIT");
  waiter.join();
  ASSERT_TRUE(older.has_value());
  EXPECT_EQ(older->code(), Code::kFenced) << older->to_string();
  EXPECT_EQ(older->message(), "rejected: stale token 6 < 7");
  EXPECT_EQ(server->sql("SELECT balance FROM accounts WHERE id = 1"), "150");

  // Equal and newer tokens pass; uint64 beyond bigint compares exactly.
  b.exec("BEGIN");
  EXPECT_TRUE(PostgresFence::check(b.get(), "accounts/1", T(7)).ok());
  EXPECT_TRUE(PostgresFence::check(b.get(), "accounts/1", T(18446744073709551615ULL)).ok());
  b.exec("COMMIT");
  EXPECT_EQ(PostgresFence::check(b.get(), "accounts/1", T(18446744073709551614ULL)).code(),
            Code::kFenced);
}

// DESIGN 3.3 / issue: a holder paused past its TTL loses the lease, the next holder's token is
// larger, and a fenced write with the old token is refused by etcd (Txn compare).
TEST(EtcdFence, APausedHolderPastItsTtlIsRefusedByTheTxnAndTheNextHolderWrites) {
  auto cluster = EtcdCluster::start(1);
  auto first = Client::connect(cluster->uri());
  auto second = Client::connect(cluster->uri());
  ASSERT_TRUE(first.ok() && second.ok());
  const auto key = *LockKey::make("fenced");
  auto old_lease = first->acquire(key, {.ttl = 2s});
  ASSERT_TRUE(old_lease.ok()) << old_lease.status().to_string();
  ASSERT_TRUE(etcd_fenced_put(*old_lease, "resource", "from-first").ok());

  detail::ClientAccess::core(*first).renewer().pause_renewals_for_testing(true);  // the pause
  auto new_lease = second->acquire(key, {.ttl = 5s, .wait = 20s});
  ASSERT_TRUE(new_lease.ok()) << new_lease.status().to_string();
  EXPECT_TRUE(old_lease->is_lost());
  EXPECT_GT(new_lease->token(), old_lease->token());

  Status stale = etcd_fenced_put(*old_lease, "resource", "from-first-after-pause");
  EXPECT_EQ(stale.code(), Code::kFenced) << stale.to_string();
  EXPECT_EQ(stale.message(), fmt::format("rejected: stale token {} < {}",
                                         old_lease->token().value(), new_lease->token().value()));
  ASSERT_TRUE(etcd_fenced_put(*new_lease, "resource", "from-second").ok());
  EXPECT_EQ(cluster->etcdctl({"get", "resource", "--print-value-only"}), "from-second\n");
  detail::ClientAccess::core(*first).renewer().pause_renewals_for_testing(false);

  auto memory = Client::connect("memory://");
  auto other = memory->acquire(key);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(etcd_fenced_put(*other, "resource", "x").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace fencelock::testing
