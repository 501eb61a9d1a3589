// What fence records hold (fencelock/fence.h), against real servers: only canonical uint64
// tokens (PostgreSQL's function accepted NaN, -5, 1.5 and numbers above 2^64 - 1), and the lock
// that issued them, so that a resource fenced by one lock refuses the tokens of another (after
// one write with an etcd token, every Redis-locked writer was refused, "stale token 4 < 60");
// records from before issuers keep working; `fencelock migrate` upgrades an installed fence and
// keeps its records.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "fencelock/fence.h"
#include "fencelock/migrate.h"
#include "fencelock/postgres_fence.h"
#include "redis_scripts.h"
#include "support/etcd_cluster.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

FencingToken T(std::uint64_t v) { return FencingToken(v); }

// fence_schema.sql as it was released first (numeric tokens unchecked, no issuer): the fence a
// migration finds installed.
constexpr const char* kFirstFenceSchema = R"sql(DO $install$
DECLARE
  s text := current_schema();
BEGIN
  IF s IS NULL THEN
    RAISE EXCEPTION 'no schema to create the fence in: search_path names no existing schema';
  END IF;
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I.fencelock_fences ('
                 'resource text PRIMARY KEY, token numeric(20, 0) NOT NULL)', s);
  EXECUTE format('REVOKE ALL ON TABLE %I.fencelock_fences FROM PUBLIC', s);
  EXECUTE format($create$
    CREATE OR REPLACE FUNCTION %1$I.fencelock_fence(p_resource text, p_token numeric)
    RETURNS numeric LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp AS $body$
    DECLARE
      highest numeric;
    BEGIN
      INSERT INTO %1$I.fencelock_fences AS f (resource, token) VALUES (p_resource, p_token)
      ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
      RETURNING f.token INTO highest;
      IF highest IS NULL THEN
        SELECT f.token INTO highest FROM %1$I.fencelock_fences f WHERE f.resource = p_resource;
        RAISE EXCEPTION 'rejected: stale token %% < %%', p_token, highest USING ERRCODE = 'FL001';
      END IF;
      RETURN highest;
    END
    $body$ $create$, s);
  EXECUTE format('REVOKE ALL ON FUNCTION %I.fencelock_fence(text, numeric) FROM PUBLIC', s);
END
$install$;)sql";

class PgConn {
 public:
  explicit PgConn(const std::string& uri) : conn_(PQconnectdb(uri.c_str())) {}
  ~PgConn() { PQfinish(conn_); }
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;
  PGconn* get() const { return conn_; }
  // Runs `sql`; "" when it succeeded, else its SQLSTATE.
  std::string state_of(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    const ExecStatusType status = PQresultStatus(r);
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    std::string out = (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
                          ? ""
                          : (state != nullptr ? state : "?");
    PQclear(r);
    return out;
  }
  void exec(const std::string& sql) {
    ASSERT_EQ(state_of(sql), "") << sql << ": " << PQerrorMessage(conn_);
  }
  // BEGIN; check(resource, fencing); COMMIT (or ROLLBACK when refused).
  Status fenced(std::string_view resource, const Fencing& fencing) {
    (void)state_of("BEGIN");
    Status st = fencing.issuer.empty() ? PostgresFence::check(conn_, resource, fencing.token)
                                       : PostgresFence::check(conn_, resource, fencing);
    (void)state_of(st.ok() ? "COMMIT" : "ROLLBACK");
    return st;
  }

 private:
  PGconn* conn_;
};

TEST(PostgresFence, OnlyCanonicalUint64TokensAreAcceptedAndNothingElseIsRecorded) {
  auto server = PostgresServer::start();
  PgConn conn(server->uri());
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  ASSERT_TRUE(PostgresFence::install(conn.get()).ok());
  for (const char* bad : {"'NaN'", "'Infinity'", "'-Infinity'", "99999999999999999999",
                          "18446744073709551616", "-5", "-0.5", "1.5", "2.0", "NULL"}) {
    for (const char* form : {"SELECT fencelock_fence('r', {}::numeric)",
                             "SELECT fencelock_fence('r', {}::numeric, 'lock k')"}) {
      conn.exec("BEGIN");
      EXPECT_EQ(conn.state_of(fmt::format(fmt::runtime(form), bad)), "FL002")
          << fmt::format(fmt::runtime(form), bad);
      conn.exec("ROLLBACK");
    }
  }
  EXPECT_EQ(server->sql("SELECT count(*) FROM fencelock_fences"), "0") << "nothing recorded";
  // The edges pass, and an issuer that is not printable ASCII is the C++ kInvalidArgument.
  EXPECT_TRUE(conn.fenced("r", Fencing{T(0), ""}).ok());
  EXPECT_TRUE(conn.fenced("r", Fencing{T(18446744073709551615ULL), ""}).ok());
  conn.exec("BEGIN");
  Status bad_issuer = PostgresFence::check(conn.get(), "s", Fencing{T(1), "a\nb"});
  EXPECT_EQ(bad_issuer.code(), Code::kInvalidArgument) << bad_issuer.to_string();
  conn.exec("ROLLBACK");
  EXPECT_EQ(server->sql("SELECT resource || ' ' || token FROM fencelock_fences"),
            "r 18446744073709551615");
}

// A fence installed by the first version, with records it corrupted: migrate replaces the
// functions and keeps every record; the good one still fences, a corrupted one is refused with
// the repair in the message (before, NaN refused every token forever as "stale").
TEST(PostgresFence, MigrateUpgradesAnInstalledFenceAndRefusesTheRecordsTheOldOneCorrupted) {
  auto server = PostgresServer::start();
  PgConn conn(server->uri());
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  conn.exec(kFirstFenceSchema);
  for (const char* row : {"'acct', 7", "'nan', 'NaN'", "'negative', -5",
                          "'huge', "
                          "99999999999999999999"}) {
    conn.exec("BEGIN");
    conn.exec(fmt::format("SELECT fencelock_fence({})", row));  // the old function took them all
    conn.exec("COMMIT");
  }
  server->sql("CREATE ROLE writer");
  conn.exec("GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric) TO writer");

  auto ran = migrate(server->uri());
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  EXPECT_NE(std::find(ran->begin(), ran->end(), std::string(PostgresFence::schema_sql())),
            ran->end())
      << "migrate must upgrade the installed fence";
  EXPECT_EQ(server->sql("SELECT token || '|' || issuer FROM fencelock_fences "
                        "WHERE resource = 'acct'"),
            "7|");
  EXPECT_EQ(server->sql("SELECT count(*) FROM fencelock_fences"), "4") << "records kept";
  EXPECT_EQ(server->sql("SELECT has_function_privilege('writer', "
                        "'fencelock_fence(text, numeric)', 'EXECUTE')"),
            "t")
      << "the grants on the old function are kept";

  EXPECT_EQ(conn.fenced("acct", Fencing{T(6), ""}).message(), "rejected: stale token 6 < 7");
  EXPECT_TRUE(conn.fenced("acct", Fencing{T(8), ""}).ok());
  for (const char* corrupted : {"nan", "negative", "huge"}) {
    Status refused = conn.fenced(corrupted, Fencing{T(5), ""});
    EXPECT_EQ(refused.code(), Code::kInternal) << corrupted << ": " << refused.to_string();
    EXPECT_NE(refused.message().find("UPDATE fencelock_fences SET token"), std::string::npos)
        << refused.message();
  }
  conn.exec("BEGIN");
  EXPECT_EQ(conn.state_of("SELECT fencelock_fence('acct', 'NaN')"), "FL002");
  conn.exec("ROLLBACK");
  EXPECT_EQ(conn.state_of("UPDATE fencelock_fences SET token = 'NaN' WHERE resource = 'acct'"),
            "23514")
      << "the owner's own writes hold tokens too (CHECK ... NOT VALID)";
  // The owner's repair, then the resource is fenced again.
  server->sql("UPDATE fencelock_fences SET token = 40 WHERE resource = 'nan'");
  EXPECT_EQ(conn.fenced("nan", Fencing{T(39), ""}).message(), "rejected: stale token 39 < 40");
  EXPECT_TRUE(conn.fenced("nan", Fencing{T(41), ""}).ok());

  auto again = migrate(server->uri());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->empty()) << "an upgraded fence is current: nothing to do";
}

TEST(PostgresFence, ATokenOfAnotherLockIsRefusedNamingBothUntilTheOwnerAdoptsTheResource) {
  auto server = PostgresServer::start();
  PgConn conn(server->uri());
  ASSERT_TRUE(PostgresFence::install(conn.get()).ok());
  const Fencing etcd{T(60), "etcd:cluster=1a jobs"};
  const Fencing redis{T(4), "redis://127.0.0.1:6379/0 jobs"};
  ASSERT_TRUE(conn.fenced("res", etcd).ok());
  for (const Fencing& other : {redis, Fencing{T(1000), redis.issuer}}) {
    Status refused = conn.fenced("res", other);
    EXPECT_EQ(refused.code(), Code::kFenced) << refused.to_string();
    EXPECT_NE(refused.message().find("'" + etcd.issuer + "'"), std::string::npos)
        << refused.message();
    EXPECT_NE(refused.message().find("'" + redis.issuer + "'"), std::string::npos)
        << refused.message();
  }
  Status bare = conn.fenced("res", Fencing{T(1000), ""});
  EXPECT_EQ(bare.code(), Code::kFenced) << bare.to_string();
  EXPECT_NE(bare.message().find("names no lock"), std::string::npos) << bare.message();
  EXPECT_EQ(server->sql("SELECT token || '|' || issuer FROM fencelock_fences"),
            "60|" + etcd.issuer);

  // The migration, as the fence's owner: the resource now belongs to the Redis lock.
  conn.exec(
      fmt::format("UPDATE fencelock_fences SET token = 4, issuer = '{}' "
                  "WHERE resource = 'res'",
                  redis.issuer));
  EXPECT_TRUE(conn.fenced("res", Fencing{T(5), redis.issuer}).ok());
  EXPECT_EQ(conn.fenced("res", Fencing{T(61), etcd.issuer}).code(), Code::kFenced);

  // An unnamed record (bare tokens) compares tokens, then is named by the first named token.
  ASSERT_TRUE(conn.fenced("legacy", Fencing{T(5), ""}).ok());
  EXPECT_EQ(conn.fenced("legacy", Fencing{T(4), redis.issuer}).message(),
            "rejected: stale token 4 < 5");
  EXPECT_TRUE(conn.fenced("legacy", Fencing{T(6), redis.issuer}).ok());
  EXPECT_EQ(server->sql("SELECT issuer FROM fencelock_fences WHERE resource = 'legacy'"),
            redis.issuer);
  EXPECT_EQ(conn.fenced("legacy", Fencing{T(7), ""}).code(), Code::kFenced);
}

// The issue's case: an etcd-locked writer and a Redis-locked writer on one RedisFence key.
TEST(RedisFence, ATokenOfAnotherLockIsRefusedNamingBothUntilAnAdministratorAdoptsTheKey) {
  auto redis_server = RedisServer::start();
  auto cluster = EtcdCluster::start(1);
  auto fence = RedisFence::connect(redis_server->uri());
  auto redis_locks = Client::connect(redis_server->uri());
  auto etcd_locks = Client::connect(cluster->uri());
  ASSERT_TRUE(fence.ok() && redis_locks.ok() && etcd_locks.ok());
  const auto key = *LockKey::make("jobs");
  auto by_etcd = etcd_locks->acquire(key);
  auto by_redis = redis_locks->acquire(key);
  ASSERT_TRUE(by_etcd.ok() && by_redis.ok());
  const Fencing e = by_etcd->fencing(), r = by_redis->fencing();
  ASSERT_NE(e.issuer, r.issuer);

  const ResourceKey data("report");
  ASSERT_TRUE(fence->set(data, "from etcd", e).ok());
  for (const Fencing& other : {r, Fencing{T(e.token.value() + 1000), r.issuer}}) {
    Status refused = fence->set(data, "from redis", other);
    EXPECT_EQ(refused.code(), Code::kFenced) << refused.to_string();
    EXPECT_NE(refused.message().find("'" + e.issuer + "'"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("'" + r.issuer + "'"), std::string::npos) << refused.message();
    EXPECT_EQ(fence->get(data, other).code(), Code::kFenced);
  }
  EXPECT_EQ(fence->set(data, "bare", T(e.token.value() + 1000)).code(), Code::kFenced);
  EXPECT_EQ(fence->peek(data)->value_or("missing"), "from etcd");
  EXPECT_EQ(*fence->record(data), e);
  EXPECT_EQ(redis_server->command({"GET", "fencelock:fence:report"}),
            std::to_string(e.token.value()) + " " + e.issuer);

  // The administrator moves the key to the Redis lock: its writers pass, etcd's are refused.
  ASSERT_TRUE(fence->adopt(data, r).ok());
  EXPECT_TRUE(fence->set(data, "from redis", r).ok());
  EXPECT_EQ(fence->set(data, "from etcd again", e).code(), Code::kFenced);
  EXPECT_EQ(fence->peek(data)->value_or("missing"), "from redis");
  // reset(): no record, so the next token of any lock is admitted and names the record.
  ASSERT_TRUE(fence->reset(data).ok());
  EXPECT_EQ(*fence->record(data), (Fencing{T(0), ""}));
  EXPECT_TRUE(fence->set(data, "etcd after reset", e).ok());
  EXPECT_EQ(fence->set(data, "x", r).code(), Code::kFenced);
  EXPECT_EQ(fence->adopt(ResourceKey("fencelock:x"), r).code(), Code::kInvalidArgument);
  EXPECT_EQ(fence->set(data, "x", Fencing{T(1), "a\nb"}).code(), Code::kInvalidArgument);
}

// A record written before issuers (a bare "<token>") is unnamed: named tokens compare with it,
// and the first that passes names it. Programs that issue their own EVAL (RedisFence::script())
// without an issuer present a bare token.
TEST(RedisFence, ARecordFromBeforeIssuersIsNamedByTheFirstNamedTokenThatPasses) {
  auto server = RedisServer::start();
  auto fence = RedisFence::connect(server->uri());
  ASSERT_TRUE(fence.ok()) << fence.status().to_string();
  server->command({"SET", "fencelock:fence:acct", "5"});
  const std::string issuer = "redis://127.0.0.1:1/0 acct-lock";
  EXPECT_EQ(fence->set(ResourceKey("acct"), "4", Fencing{T(4), issuer}).message(),
            "rejected: stale token 4 < 5");
  EXPECT_TRUE(fence->set(ResourceKey("acct"), "6", Fencing{T(6), issuer}).ok());
  EXPECT_EQ(server->command({"GET", "fencelock:fence:acct"}), "6 " + issuer);
  EXPECT_EQ(fence->set(ResourceKey("acct"), "7", T(7)).code(), Code::kFenced);
  const std::string reply = server->command(
      {"EVAL", std::string(RedisFence::script()), "2", "acct", "fencelock:fence:acct", "8", "x"});
  EXPECT_EQ(reply, "2\n6\n" + issuer) << "a bare EVAL against a named record";
  EXPECT_EQ(server->command({"GET", "acct"}), "6");
  // A client of the version before issuers runs this script (tokens.lua is unchanged): it reads
  // a named record as a malformed token and writes nothing.
  const std::string before_issuers = std::string(detail::lua::tokens) + R"lua(
local token, highest = fencelock_fence_start(KEYS, ARGV)
if fencelock_token_less(token, highest) then
  return {0, highest}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
)lua";
  EXPECT_NE(server
                ->command({"EVAL", before_issuers, "2", "acct", "fencelock:fence:acct", "100",
                           "old client"})
                .find("not a canonical decimal token"),
            std::string::npos);
  EXPECT_EQ(server->command({"GET", "acct"}), "6");
  // A fenced read names an unnamed record too.
  server->command({"SET", "fencelock:fence:other", "3"});
  ASSERT_TRUE(fence->get(ResourceKey("other"), Fencing{T(3), issuer}).ok());
  EXPECT_EQ(server->command({"GET", "fencelock:fence:other"}), "3 " + issuer);
  for (const char* record : {"5 ", "5 a\x01", "x y"}) {
    server->command({"SET", "fencelock:fence:bad", record});
    EXPECT_EQ(fence->set(ResourceKey("bad"), "v", Fencing{T(9), issuer}).code(), Code::kInternal)
        << record;
    EXPECT_EQ(fence->record(ResourceKey("bad")).code(), Code::kInternal) << record;
  }
}

// What counts as the same lock (docs/PROTOCOLS.md, "Fences"): every Client of one backend
// cluster names a lock alike, however its URI lists the hosts; two keys, two modes or two
// backends are two issuers.
TEST(Fencing, EveryClientOfOneClusterNamesALockAlikeAndTwoLocksDiffer) {
  auto a = RedisServer::start(), b = RedisServer::start(), c = RedisServer::start();
  auto issuer_of = [](const std::string& uri, std::string_view name) {
    auto client = Client::connect(uri);
    EXPECT_TRUE(client.ok()) << uri << ": " << client.status().to_string();
    if (!client.ok()) return std::string();
    auto lease = client->acquire(*LockKey::make(name));
    EXPECT_TRUE(lease.ok()) << uri << ": " << lease.status().to_string();
    return lease.ok() ? lease->fencing().issuer : std::string();
  };
  const std::string port_a = std::to_string(a->port()), port_b = std::to_string(b->port()),
                    port_c = std::to_string(c->port());
  EXPECT_EQ(issuer_of(a->uri(), "k"), "redis://127.0.0.1:" + port_a + "/0 k");
  EXPECT_EQ(issuer_of(a->uri() + "/0", "k"), issuer_of(a->uri(), "k"));
  EXPECT_NE(issuer_of(a->uri(), "k"), issuer_of(a->uri(), "j"));
  const std::string one =
      fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", port_a, port_b, port_c);
  const std::string two =
      fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", port_c, port_a, port_b);
  EXPECT_EQ(issuer_of(one, "k"), issuer_of(two, "k"));
  EXPECT_NE(issuer_of(one, "k"), issuer_of(a->uri(), "k"));

  auto pg = PostgresServer::start();
  const std::string advisory = issuer_of(pg->uri(), "k");
  EXPECT_EQ(advisory.rfind("postgres:system=", 0), 0u) << advisory;
  EXPECT_NE(advisory.find("/fencelock/public?mode=advisory k"), std::string::npos) << advisory;
  EXPECT_EQ(issuer_of(pg->uri() + "?pool=2", "k"), advisory);
  EXPECT_NE(issuer_of(pg->uri() + "?mode=lease", "k"), advisory);
  // Without EXECUTE on pg_control_system(), the hosts and ports as the URI writes them.
  pg->sql("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_control_system() FROM PUBLIC");
  EXPECT_EQ(issuer_of(pg->uri(), "k"),
            fmt::format("postgres://127.0.0.1:{}/fencelock/public?mode=advisory k", pg->port()));

  auto cluster = EtcdCluster::start(1);
  const std::string etcd = issuer_of(cluster->uri(), "ns/k");
  EXPECT_EQ(etcd.rfind("etcd:cluster=", 0), 0u) << etcd;
  EXPECT_EQ(issuer_of(cluster->uri() + "&namespace=ns/", "k"), etcd) << "the same etcd keys";
}

}  // namespace
}  // namespace fencelock::testing
