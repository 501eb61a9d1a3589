// The resource-side guards of fencelock/fence.h against real servers: the Redis script, the
// PostgreSQL function and the etcd is-still-holder Txn (FenceGate, in process, is
// tests/unit/fence_gate_test.cpp). Every
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
#include "fencelock/postgres_fence.h"
#include "support/etcd_cluster.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;

FencingToken T(std::uint64_t v) { return FencingToken(v); }

TEST(RedisFence, WritesOnlyWithTheNewestTokenAndComparesEveryUint64Exactly) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("account"), "100", T(5)).ok());
  Status stale = fence->set(ResourceKey("account"), "666", T(4));
  EXPECT_EQ(stale.code(), Code::kFenced);
  EXPECT_EQ(stale.message(), "rejected: stale token 4 < 5");
  EXPECT_EQ(fence->peek(ResourceKey("account"))->value_or("missing"), "100");
  EXPECT_TRUE(fence->set(ResourceKey("account"), "101", T(5)).ok());
  EXPECT_EQ(fence->peek(ResourceKey("account"))->value_or("missing"), "101");
  EXPECT_EQ(*fence->highest(ResourceKey("account")), T(5));
  EXPECT_EQ(*fence->highest(ResourceKey("other")), T(0));

  // 2^53 + 1 and 2^53 are the same double: the script must compare digits, not numbers.
  ASSERT_TRUE(fence->set(ResourceKey("big"), "a", T(9007199254740993ULL)).ok());
  EXPECT_EQ(fence->set(ResourceKey("big"), "b", T(9007199254740992ULL)).code(), Code::kFenced);
  EXPECT_TRUE(fence->set(ResourceKey("big"), "c", T(18446744073709551615ULL)).ok());
  EXPECT_EQ(fence->set(ResourceKey("big"), "d", T(18446744073709551614ULL)).code(), Code::kFenced);
  EXPECT_EQ(fence->peek(ResourceKey("big"))->value_or("missing"), "c");

  EXPECT_EQ(RedisFence::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").code(),
            Code::kInvalidArgument);
  EXPECT_NE(RedisFence::script().find("KEYS[2]"), std::string_view::npos);
}

// One URI, one answer: the fence reads the database number as the backend does (std::stoi took
// "2abc" as 2 and "-1" as -1, which the backend refuses).
TEST(RedisFence, TheDatabaseNumberIsReadAsTheBackendReadsIt) {
  auto server = RedisServer::start();
  for (const char* db : {"2abc", "-1", "x", "99999999999"}) {
    const std::string uri = server->uri() + "/" + db;
    auto fence = RedisFence::connect(uri);
    EXPECT_EQ(fence.code(), Code::kInvalidArgument) << uri;
    EXPECT_EQ(Client::connect(uri).code(), Code::kInvalidArgument) << uri;
  }
  auto fence = RedisFence::connect(server->uri() + "/3");
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("db-check"), "1", T(1)).ok());
  EXPECT_EQ(server->command({"EVAL", "redis.call('SELECT', 3) return redis.call('GET', KEYS[1])",
                             "1", "fencelock:fence:db-check"}),
            "1");
  EXPECT_EQ(server->command({"EXISTS", "fencelock:fence:db-check"}), "0") << "written to db 0";
}

TEST(RedisFence, AKilledServerIsUnavailableAndTheNextCallReconnects) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri(), {.connect_timeout = 300ms, .io_timeout = 300ms});
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("k"), "1", T(1)).ok());
  server->restart();
  // The old connection is gone: the first call may fail, never with kFenced or kInternal.
  Status first = fence->set(ResourceKey("k"), "2", T(2));
  if (!first.ok()) {
    EXPECT_EQ(first.code(), Code::kUnavailable) << first.to_string();
    EXPECT_TRUE(fence->set(ResourceKey("k"), "2", T(2)).ok());
  }
  EXPECT_EQ(fence->peek(ResourceKey("k"))->value_or("missing"), "2");
}

// The lost update a write-only fence allows: A (token 1) reads 10, A's lock expires, B (token 2)
// reads 10, A writes 11, B writes 11: one increment lost. With get(key, token) B's read admits
// token 2, so A's write is refused and B's increment is the only one.
TEST(RedisFence, AFencedReadRefusesTheOlderHoldersWriteSoNoIncrementIsLost) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("counter"), "10", T(1)).ok());

  auto a_read = fence->get(ResourceKey("counter"), T(1));
  ASSERT_TRUE(a_read.ok()) << a_read.status().to_string();
  EXPECT_EQ(a_read->value_or("missing"), "10");
  auto b_read = fence->get(ResourceKey("counter"), T(2));
  ASSERT_TRUE(b_read.ok()) << b_read.status().to_string();
  EXPECT_EQ(b_read->value_or("missing"), "10");
  EXPECT_EQ(*fence->highest(ResourceKey("counter")), T(2)) << "the read must admit its token";
  Status a_write = fence->set(ResourceKey("counter"), "11", T(1));
  EXPECT_EQ(a_write.code(), Code::kFenced) << a_write.to_string();
  EXPECT_EQ(a_write.message(), "rejected: stale token 1 < 2");
  EXPECT_TRUE(fence->set(ResourceKey("counter"), "11", T(2)).ok());
  EXPECT_EQ(fence->peek(ResourceKey("counter"))->value_or("missing"), "11");

  // A stale read is refused too, and a read of a missing key is admitted with no value.
  auto stale = fence->get(ResourceKey("counter"), T(1));
  EXPECT_EQ(stale.code(), Code::kFenced) << stale.status().to_string();
  auto missing = fence->get(ResourceKey("nothing-here"), T(7));
  ASSERT_TRUE(missing.ok()) << missing.status().to_string();
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(*fence->highest(ResourceKey("nothing-here")), T(7));
  EXPECT_NE(RedisFence::read_script().find("KEYS[2]"), std::string_view::npos);
}

// Every script compares tokens by one rule (src/redis/scripts/tokens.lua): canonical decimal
// strings only. A length comparison alone let a zero-padded stale token beat a newer one.
TEST(RedisFence, TheScriptsAcceptOnlyCanonicalDecimalTokens) {
  auto server = RedisServer::start();
  const std::string script(RedisFence::script()), read_script(RedisFence::read_script());
  auto eval = [&](const std::string& src, const std::string& key, const std::string& token) {
    std::vector<std::string> args = {"EVAL", src, "2", key, "fencelock:fence:" + key, token};
    if (&src == &script) args.push_back("v" + token);
    return server->command(args);
  };
  ASSERT_EQ(eval(script, "r", "9"), "1\n9");
  for (const std::string& bad :
       {std::string("00000000000000000007"), std::string("07"), std::string("-1"),
        std::string("abc"), std::string(""), std::string(" 9"), std::string("9 "),
        std::string("+10"), std::string("1e3"), std::string("18446744073709551616"),
        std::string("100000000000000000000"), std::string("99999999999999999999")}) {
    for (const std::string* src : {&script, &read_script}) {
      const std::string reply = eval(*src, "r", bad);
      EXPECT_NE(reply.find("not a canonical decimal token"), std::string::npos)
          << "token '" << bad << "': " << reply;
    }
  }
  EXPECT_EQ(server->command({"GET", "fencelock:fence:r"}), "9") << "nothing may change";
  EXPECT_EQ(server->command({"GET", "r"}), "v9");
  // The edges: 9 < 10 (lengths differ), 2^53 < 2^53 + 1 (the same double), uint64's maximum.
  EXPECT_EQ(eval(script, "r", "10"), "1\n10");
  EXPECT_EQ(eval(script, "r", "9"), "0\n10");
  EXPECT_EQ(eval(script, "r", "9007199254740993"), "1\n9007199254740993");
  EXPECT_EQ(eval(read_script, "r", "9007199254740992"), "0\n9007199254740993");
  EXPECT_EQ(eval(script, "r", "18446744073709551615"), "1\n18446744073709551615");
  EXPECT_EQ(eval(script, "r", "18446744073709551614"), "0\n18446744073709551615");
  EXPECT_EQ(eval(script, "zero", "0"), "1\n0");
}

// A fence record that is not a canonical token (written by someone else) is kInternal from every
// call, never an exception and never a write.
TEST(RedisFence, AMalformedFenceRecordIsAnInternalErrorAndNothingIsWritten) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  for (const char* record : {"abc", "-1", "007", "18446744073709551616"}) {
    server->command({"SET", "fencelock:fence:acct", record});
    server->command({"SET", "acct", "before"});
    Status wrote = fence->set(ResourceKey("acct"), "after", T(5));
    EXPECT_EQ(wrote.code(), Code::kInternal) << record << ": " << wrote.to_string();
    EXPECT_EQ(fence->get(ResourceKey("acct"), T(5)).code(), Code::kInternal) << record;
    EXPECT_EQ(fence->highest(ResourceKey("acct")).code(), Code::kInternal) << record;
    EXPECT_EQ(server->command({"GET", "acct"}), "before") << record;
    EXPECT_EQ(server->command({"GET", "fencelock:fence:acct"}), record);
  }
}

// fencelock's own keys are not data: "fencelock:fence:acct" is acct's fence record and
// "fencelock:{K}:fence" a lock's counter; writing either would reset it (a token-5 write after
// token 10 was accepted).
TEST(RedisFence, RefusesDataKeysInFencelocksOwnNamespace) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("acct"), "1", T(10)).ok());
  for (const char* key : {"fencelock:fence:acct", "fencelock:{jobs}:fence", "fencelock:x"}) {
    EXPECT_EQ(fence->set(ResourceKey(key), "0", T(1)).code(), Code::kInvalidArgument) << key;
    EXPECT_EQ(fence->get(ResourceKey(key), T(1)).code(), Code::kInvalidArgument) << key;
    EXPECT_EQ(fence->peek(ResourceKey(key)).code(), Code::kInvalidArgument) << key;
    const std::string reply = server->command({"EVAL", std::string(RedisFence::script()), "2", key,
                                               std::string("fencelock:fence:") + key, "1", "0"});
    EXPECT_NE(reply.find("namespace"), std::string::npos) << key << ": " << reply;
  }
  EXPECT_EQ(server->command({"GET", "fencelock:fence:acct"}), "10");
  // A program issuing its own EVAL cannot point the script at another record key.
  const std::string forged = server->command(
      {"EVAL", std::string(RedisFence::script()), "2", "acct", "fencelock:fence:other", "5", "x"});
  EXPECT_NE(forged.find("not the record key passed as KEYS[2]"), std::string::npos) << forged;
  EXPECT_EQ(server->command({"GET", "acct"}), "1");
  EXPECT_EQ(fence->set(ResourceKey("acct"), "stale", T(5)).code(), Code::kFenced);
  EXPECT_EQ(fence->set(ResourceKey(""), "x", T(11)).code(), Code::kInvalidArgument);
}

// SCRIPT FLUSH (or a restarted server behind an old connection) empties the script cache: the
// fence falls back to EVAL, which loads the script again.
TEST(RedisFence, KeepsWorkingAfterScriptFlush) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  ASSERT_TRUE(fence->set(ResourceKey("k"), "1", T(1)).ok());
  ASSERT_EQ(server->command({"SCRIPT", "FLUSH"}), "OK");
  Status after = fence->set(ResourceKey("k"), "2", T(2));
  EXPECT_TRUE(after.ok()) << after.to_string();
  ASSERT_EQ(server->command({"SCRIPT", "FLUSH"}), "OK");
  auto read = fence->get(ResourceKey("k"), T(2));
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->value_or("missing"), "2");
  EXPECT_EQ(fence->set(ResourceKey("k"), "3", T(1)).code(), Code::kFenced);
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

// In a thread: `begin` (BEGIN ...), check(resource, token), ROLLBACK on `conn`; the check's
// outcome lands in `outcome` once the returned thread is joined.
std::jthread check_in_thread(PgConn& conn, std::string begin, std::string resource,
                             FencingToken token, std::optional<Status>& outcome) {
  return std::jthread(
      [&conn, &outcome, begin = std::move(begin), resource = std::move(resource), token] {
        PGresult* r = PQexec(conn.get(), begin.c_str());
        PQclear(r);
        outcome = PostgresFence::check(conn.get(), resource, token);
        r = PQexec(conn.get(), "ROLLBACK");
        PQclear(r);
      });
}

// True once a session of `server` waits for a lock (the fence row), within about 5 s.
bool a_session_waits_for_a_lock(PostgresServer& server) {
  return eventually(
      [&] {
        return server.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") ==
               "1";
      },
      5s, 10ms);
}

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
  {
    std::jthread waiter = check_in_thread(b, "BEGIN", "accounts/1", T(6), older);
    EXPECT_TRUE(a_session_waits_for_a_lock(*server)) << "the older holder did not wait";
    a.exec("COMMIT");
  }
  ASSERT_TRUE(older.has_value());
  EXPECT_EQ(older->code(), Code::kFenced) << older->to_string();
  EXPECT_EQ(older->message(), "rejected: stale token 6 < 7");
  EXPECT_EQ(server->sql("SELECT balance FROM accounts WHERE id = 1"), "150");

  // Equal and newer tokens pass; uint64 beyond bigint compares exactly.
  b.exec("BEGIN");
  EXPECT_TRUE(PostgresFence::check(b.get(), "accounts/1", T(7)).ok());
  EXPECT_TRUE(PostgresFence::check(b.get(), "accounts/1", T(18446744073709551615ULL)).ok());
  b.exec("COMMIT");
  b.exec("BEGIN");
  EXPECT_EQ(PostgresFence::check(b.get(), "accounts/1", T(18446744073709551614ULL)).code(),
            Code::kFenced);
  b.exec("ROLLBACK");
}

// The fence's privileges: a writer needs EXECUTE on fencelock_fence and nothing on the table, so it
// cannot lower a token behind the fence's back (before: every writer needed UPDATE on
// fencelock_fences, and `UPDATE fencelock_fences SET token = 0` reset another application's
// fence). The function runs as its owner with search_path pinned: a writer's temporary table of
// the same name (pg_temp comes first in a caller's search_path) does not stand in for the real one.
TEST(PostgresFence, WritersNeedOnlyExecuteAndCannotLowerOrShadowTheFence) {
  auto server = PostgresServer::start();
  PgConn owner(server->uri());
  ASSERT_EQ(PQstatus(owner.get()), CONNECTION_OK) << PQerrorMessage(owner.get());
  ASSERT_TRUE(PostgresFence::install(owner.get()).ok());
  server->sql("CREATE ROLE writer LOGIN PASSWORD 'writer-pw'");
  server->sql("GRANT CONNECT, TEMPORARY ON DATABASE fencelock TO writer");
  PgConn writer(fmt::format("postgres://writer:writer-pw@127.0.0.1:{}/fencelock", server->port()));
  ASSERT_EQ(PQstatus(writer.get()), CONNECTION_OK) << PQerrorMessage(writer.get());

  // No EXECUTE yet: refused, saying what to grant.
  writer.exec("BEGIN");
  Status denied = PostgresFence::check(writer.get(), "accounts/1", T(10));
  EXPECT_EQ(denied.code(), Code::kPermissionDenied) << denied.to_string();
  EXPECT_NE(denied.message().find("GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric)"),
            std::string::npos)
      << denied.message();
  writer.exec("ROLLBACK");
  writer.exec("BEGIN");
  Status named = PostgresFence::check(writer.get(), "accounts/1", Fencing{T(10), "lock k"});
  EXPECT_EQ(named.code(), Code::kPermissionDenied) << named.to_string();
  EXPECT_NE(named.message().find("fencelock_fence(text, numeric, text)"), std::string::npos)
      << named.message();
  writer.exec("ROLLBACK");

  owner.exec("GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric) TO writer");
  writer.exec("BEGIN");
  ASSERT_TRUE(PostgresFence::check(writer.get(), "accounts/1", T(10)).ok());
  writer.exec("COMMIT");

  // The table is the owner's alone.
  for (const char* attack :
       {"UPDATE fencelock_fences SET token = 0", "DELETE FROM fencelock_fences",
        "INSERT INTO fencelock_fences VALUES ('accounts/2', 1)",
        "SELECT token FROM fencelock_fences"}) {
    PGresult* r = PQexec(writer.get(), attack);
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    EXPECT_STREQ(state != nullptr ? state : "ok", "42501") << attack;
    PQclear(r);
  }
  EXPECT_EQ(server->sql("SELECT token FROM fencelock_fences WHERE resource = 'accounts/1'"), "10");

  // A temporary table named like the fence's, empty: the check still sees the real fence.
  writer.exec(
      "CREATE TEMP TABLE fencelock_fences (resource text PRIMARY KEY, token numeric(20, 0))");
  writer.exec("BEGIN");
  Status shadowed = PostgresFence::check(writer.get(), "accounts/1", T(5));
  EXPECT_EQ(shadowed.code(), Code::kFenced) << shadowed.to_string();
  writer.exec("ROLLBACK");
  EXPECT_EQ(server->sql("SELECT count(*) FILTER (WHERE prosecdef AND proconfig::text LIKE "
                        "'%search_path=pg_catalog%') || '/' || count(*) FROM pg_proc "
                        "WHERE proname = 'fencelock_fence'"),
            "2/2")
      << "both forms (named and bare tokens)";
}

// In autocommit the fence row is unlocked when the statement ends: A check(5), B check(6), B
// writes, A writes, and the row ends as A's stale write. check() refuses to run there.
TEST(PostgresFence, RefusesToCheckOutsideATransaction) {
  auto server = PostgresServer::start();
  PgConn a(server->uri());
  ASSERT_EQ(PQstatus(a.get()), CONNECTION_OK) << PQerrorMessage(a.get());
  ASSERT_TRUE(PostgresFence::install(a.get()).ok());
  Status outside = PostgresFence::check(a.get(), "accounts/1", T(5));
  EXPECT_EQ(outside.code(), Code::kInvalidArgument) << outside.to_string();
  EXPECT_NE(outside.message().find("BEGIN"), std::string::npos) << outside.message();
  EXPECT_EQ(server->sql("SELECT count(*) FROM fencelock_fences"), "0") << "nothing may run";

  a.exec("BEGIN");
  PGresult* failed = PQexec(a.get(), "SELECT 1/0");
  PQclear(failed);
  Status in_error = PostgresFence::check(a.get(), "accounts/1", T(5));
  EXPECT_EQ(in_error.code(), Code::kInvalidArgument) << in_error.to_string();
  EXPECT_NE(in_error.message().find("ROLLBACK"), std::string::npos) << in_error.message();
  a.exec("ROLLBACK");
  a.exec("BEGIN");
  EXPECT_TRUE(PostgresFence::check(a.get(), "accounts/1", T(5)).ok());
  a.exec("COMMIT");
}

// Under REPEATABLE READ the newer holder that waited for the older holder's commit cannot update
// the fence row in its snapshot: SQLSTATE 40001, a retryable kAborted (not kInternal). The retry
// in a new transaction passes.
TEST(PostgresFence, ASerializationFailureUnderRepeatableReadIsAbortedAndTheRetryPasses) {
  auto server = PostgresServer::start();
  PgConn a(server->uri()), b(server->uri());
  ASSERT_TRUE(PostgresFence::install(a.get()).ok());
  a.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  ASSERT_TRUE(PostgresFence::check(a.get(), "res", T(5)).ok());
  std::optional<Status> newer;
  {
    std::jthread waiter =
        check_in_thread(b, "BEGIN ISOLATION LEVEL REPEATABLE READ", "res", T(6), newer);
    EXPECT_TRUE(a_session_waits_for_a_lock(*server)) << "the newer holder did not wait";
    a.exec("COMMIT");
  }
  ASSERT_TRUE(newer.has_value());
  EXPECT_EQ(newer->code(), Code::kAborted) << newer->to_string();
  EXPECT_NE(newer->message().find("40001"), std::string::npos) << newer->message();
  b.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
  EXPECT_TRUE(PostgresFence::check(b.get(), "res", T(6)).ok());
  b.exec("COMMIT");
  EXPECT_EQ(server->sql("SELECT token FROM fencelock_fences WHERE resource = 'res'"), "6");
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
  ASSERT_TRUE(etcd_fenced_put(*old_lease, ResourceKey("resource"), "from-first").ok());

  detail::ClientAccess::core(*first).renewer().pause_renewals_for_testing(true);  // the pause
  auto new_lease = second->acquire(key, {.ttl = 5s, .wait = 20s});
  ASSERT_TRUE(new_lease.ok()) << new_lease.status().to_string();
  EXPECT_TRUE(old_lease->is_lost());
  EXPECT_GT(new_lease->token(), old_lease->token());

  Status stale = etcd_fenced_put(*old_lease, ResourceKey("resource"), "from-first-after-pause");
  EXPECT_EQ(stale.code(), Code::kFenced) << stale.to_string();
  EXPECT_EQ(stale.message(), fmt::format("rejected: stale token {} < {}",
                                         old_lease->token().value(), new_lease->token().value()));
  ASSERT_TRUE(etcd_fenced_put(*new_lease, ResourceKey("resource"), "from-second").ok());
  EXPECT_EQ(cluster->etcdctl({"get", "resource", "--print-value-only"}), "from-second\n");
  detail::ClientAccess::core(*first).renewer().pause_renewals_for_testing(false);

  auto memory = Client::connect("memory://");
  auto other = memory->acquire(key);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(etcd_fenced_put(*other, ResourceKey("resource"), "x").code(), Code::kInvalidArgument);
}

// fence.h promises kInvalidArgument for a released lease (it was kFenced, "its lock key is
// gone", as if a newer holder had taken over), and nothing written.
TEST(EtcdFence, AReleasedLeaseIsAnInvalidArgumentAndWritesNothing) {
  auto cluster = EtcdCluster::start(1);
  auto client = Client::connect(cluster->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make("jobs"));
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  ASSERT_TRUE(lease->release().ok());
  Status released = etcd_fenced_put(*lease, ResourceKey("report"), "after release");
  EXPECT_EQ(released.code(), Code::kInvalidArgument) << released.to_string();
  EXPECT_NE(released.message().find("released"), std::string::npos) << released.message();
  EXPECT_EQ(cluster->etcdctl({"get", "report", "--print-value-only"}), "");
}

// A data key under the lock's own prefix NAME/ joins the lock's line as a key no session owns
// (with a revision below every later waiter's: it would hold the lock until deleted); with
// namespace=PREFIX/ every lock lives under PREFIX/. Both are refused, nothing written.
TEST(EtcdFence, ADataKeyWhereLocksLiveIsRefusedAndNothingIsWritten) {
  auto cluster = EtcdCluster::start(1);
  auto client = Client::connect(cluster->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make("jobs"));
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  for (const char* key : {"jobs/", "jobs/1a2b", "jobs/report"}) {
    Status refused = etcd_fenced_put(*lease, ResourceKey(key), "x");
    EXPECT_EQ(refused.code(), Code::kInvalidArgument) << key << ": " << refused.to_string();
  }
  EXPECT_EQ(cluster->etcdctl({"get", "jobs/", "--prefix", "--keys-only"}).find("jobs/1a2b"),
            std::string::npos);
  EXPECT_EQ(cluster->etcdctl({"get", "jobs/report", "--print-value-only"}), "");
  EXPECT_TRUE(etcd_fenced_put(*lease, ResourceKey("jobs-report"), "ok").ok());
  EXPECT_TRUE(etcd_fenced_put(*lease, ResourceKey("jobs"), "ok").ok());

  auto spaced = Client::connect(cluster->uri() + "&namespace=locks/");
  ASSERT_TRUE(spaced.ok()) << spaced.status().to_string();
  auto in_ns = spaced->acquire(*LockKey::make("jobs"));
  ASSERT_TRUE(in_ns.ok()) << in_ns.status().to_string();
  for (const char* key : {"locks/other", "locks/jobs/x", "locks/"}) {
    Status refused = etcd_fenced_put(*in_ns, ResourceKey(key), "x");
    EXPECT_EQ(refused.code(), Code::kInvalidArgument) << key << ": " << refused.to_string();
    EXPECT_NE(refused.message().find("locks/"), std::string::npos) << refused.message();
  }
  EXPECT_EQ(cluster->etcdctl({"get", "locks/other", "--print-value-only"}), "");
  EXPECT_TRUE(etcd_fenced_put(*in_ns, ResourceKey("data/jobs"), "ok").ok());
}

}  // namespace
}  // namespace fencelock::testing
