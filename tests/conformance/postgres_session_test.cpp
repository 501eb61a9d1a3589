// What the server's configuration can do to fencelock's PostgreSQL sessions, against a real
// PostgreSQL 15 server, both modes: role settings that would end a session or a statement early
// (each pinned off on fencelock's own sessions), TCP keepalives on every session (libpq's and
// the server's side), a release on a pooled connection that died in a server restart, and short
// advisory waits that must answer kLocked, never "cannot connect". Poolers in front of the server
// are in postgres_pooler_test.cpp.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "postgres/advisory_key.h"
#include "postgres/pg_connection.h"
#include "postgres/postgres_uri.h"
#include "support/postgres_server.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace pg = detail::postgres;

LockKey key(std::string_view name) { return *LockKey::make(name); }

const char* const kModes[] = {"advisory", "lease"};

class PostgresSession : public ::testing::Test {
 protected:
  void SetUp() override { server_ = PostgresServer::start(); }
  std::string uri(const std::string& mode, const std::string& extra = "") const {
    return server_->uri() + "?mode=" + mode + extra;
  }
  Client connect(const std::string& mode, ClientOptions options = {}) {
    auto client = Client::connect(uri(mode), options);
    if (!client.ok()) throw std::runtime_error(client.status().to_string());
    return std::move(*client);
  }
  // A role setting, as an administrator would make it: every new session of the test role
  // starts with it.
  void set_for_role(const std::string& setting, const std::string& value) {
    server_->sql(fmt::format("ALTER ROLE fencelock SET {} = '{}'", setting, value));
  }
  // An open transaction that holds the row lock a fencelock statement for `name` must take
  // (advisory mode: the holder note; lease mode: the lease row). ROLLBACK by end().
  struct RowBlocker {
    pg::ConnPtr conn;
    void end() {
      if (!conn) return;
      bool broken = false;
      (void)pg::execute(conn.get(), "ROLLBACK", {}, Clock::now() + 10s, broken);
      conn.reset();
    }
    ~RowBlocker() { end(); }
  };
  RowBlocker block_row(const std::string& mode, std::string_view name) {
    auto conn = pg::open_connection(server_->superuser_uri(), Clock::now() + 10s);
    if (!conn.ok()) throw std::runtime_error(conn.status().to_string());
    const std::string sql =
        mode == "advisory"
            ? fmt::format(
                  "BEGIN; INSERT INTO fencelock_advisory_holders (key, name, owner, token, "
                  "ttl_ms, pid) VALUES ({}, 'blocker', 'blocker', 0, 0, 0)",
                  pg::advisory_key(name))
            : fmt::format(
                  "BEGIN; INSERT INTO fencelock_leases (name, owner, token, expires_at) VALUES "
                  "('{}', 'blocker', 0, 'epoch') ON CONFLICT (name) DO UPDATE SET owner = "
                  "'blocker'",
                  name);
    bool broken = false;
    auto r = pg::execute(conn->get(), sql, {}, Clock::now() + 10s, broken, true);
    if (!r.ok()) throw std::runtime_error(r.status().to_string());
    return RowBlocker{std::move(*conn)};
  }
  long long sessions_waiting_for_a_lock() {
    return std::stoll(server_->sql(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND usename = "
        "'fencelock'"));
  }
  // Holds while `condition` stays true for `span` (checked every 20 ms): false at the first
  // moment it does not.
  static bool holds_for(std::chrono::milliseconds span, const std::function<bool()>& condition) {
    for (auto until = Clock::now() + span; Clock::now() < until;) {
      if (!condition()) return false;
      std::this_thread::sleep_for(20ms);
    }
    return condition();
  }
  std::unique_ptr<PostgresServer> server_;
};

// idle_session_timeout on the role (PostgreSQL 14+) ends a session idle that long. An advisory
// holder's session is idle between health checks (ttl/3): before, the server ended it after
// 300 ms, freeing the lock, and a second client was granted while the first still held. In
// lease mode the same setting ended every idle pooled connection and the LISTEN connection, so
// renewals failed on dead connections. fencelock's sessions pin it to 0.
TEST_F(PostgresSession, IdleSessionTimeoutOfTheRoleDoesNotEndAHoldersSession) {
  set_for_role("idle_session_timeout", "300ms");
  for (const std::string mode : kModes) {
    Client holder = connect(mode), other = connect(mode);
    auto lease = holder.acquire(key("idle-" + mode), {.ttl = 3s});
    ASSERT_TRUE(lease.ok()) << mode << ": " << lease.status().to_string();
    // Two health checks / renewals, each after an idle second, and six idle timeouts.
    EXPECT_TRUE(holds_for(2s, [&] { return !lease->is_lost(); }))
        << mode << ": the holder lost its lock to the role's idle_session_timeout";
    auto second = other.acquire(key("idle-" + mode), {.ttl = 3s});
    EXPECT_EQ(second.code(), Code::kLocked)
        << mode
        << ": a second client was granted while the first held: " << second.status().to_string();
    EXPECT_EQ(holder.metrics().reconnects, 0u) << mode << ": sessions were ended under it";
  }
}

// statement_timeout on the role cancels any statement running longer, a blocking advisory wait
// in PostgreSQL's queue included: before, a 10 s wait ended at 0.3 s. In lease mode it cut short
// an acquisition waiting on a row lock. fencelock's sessions pin it to 0 (their calls are
// bounded by their own deadlines and cancelled by the client).
TEST_F(PostgresSession, StatementTimeoutOfTheRoleDoesNotCutAWaitShort) {
  set_for_role("statement_timeout", "300ms");
  {
    Client holder = connect("advisory"), waiter = connect("advisory");
    auto held = holder.acquire(key("waited"), {.ttl = 5s});
    ASSERT_TRUE(held.ok()) << held.status().to_string();
    std::atomic<bool> done{false};
    std::optional<Result<Lease>> got;
    std::jthread wait([&] {
      got.emplace(waiter.acquire(key("waited"), {.ttl = 5s, .wait = 10s}));
      done = true;
    });
    ASSERT_TRUE(eventually([&] { return done || sessions_waiting_for_a_lock() == 1; }));
    // Three statement timeouts long, the waiter stays in the queue.
    EXPECT_TRUE(holds_for(1s, [&] { return !done.load(); }))
        << "the wait ended early: " << (got ? got->status().to_string() : "");
    ASSERT_TRUE(held->release().ok());
    wait.join();
    EXPECT_TRUE(got->ok()) << got->status().to_string();
  }
  {
    Client client = connect("lease", {.io_timeout = 10s});
    RowBlocker blocker = block_row("lease", "row-waited");
    std::atomic<bool> done{false};
    std::optional<Result<Lease>> got;
    std::jthread acquire([&] {
      got.emplace(client.acquire(key("row-waited"), {.ttl = 5s}));
      done = true;
    });
    ASSERT_TRUE(eventually([&] { return done || sessions_waiting_for_a_lock() == 1; }));
    EXPECT_TRUE(holds_for(1s, [&] { return !done.load(); }))
        << "the acquisition ended early: " << (got ? got->status().to_string() : "");
    blocker.end();
    acquire.join();
    EXPECT_TRUE(got->ok()) << got->status().to_string();
  }
}

// lock_timeout on the role fails a statement that waits longer for any lock: before, a try
// that waited on a row lock of the holders table (or the lease row) for 100 ms answered
// kLocked ("canceling statement due to lock timeout") though nobody held the key. Pinned to 0;
// an advisory wait sets its own lock_timeout for its transaction (SET LOCAL).
TEST_F(PostgresSession, LockTimeoutOfTheRoleDoesNotMakeAFreeKeyLookHeld) {
  set_for_role("lock_timeout", "100ms");
  for (const std::string mode : kModes) {
    Client client = connect(mode, {.io_timeout = 10s});
    RowBlocker blocker = block_row(mode, "row-" + mode);
    std::atomic<bool> done{false};
    std::optional<Result<Lease>> got;
    std::jthread acquire([&] {
      got.emplace(client.acquire(key("row-" + mode), {.ttl = 5s}));
      done = true;
    });
    // (Before, the try could end before it was seen waiting.)
    ASSERT_TRUE(eventually([&] { return done || sessions_waiting_for_a_lock() == 1; })) << mode;
    EXPECT_TRUE(holds_for(500ms, [&] { return !done.load(); }))
        << mode << ": the try ended early: " << (got ? got->status().to_string() : "");
    blocker.end();
    acquire.join();
    EXPECT_TRUE(got->ok()) << mode << ": " << got->status().to_string();
  }
}

// The settings fencelock pins on each of its sessions, read back with SHOW on a session opened
// the way every pool opens one, for a role that sets each of them short.
// idle_in_transaction_session_timeout cannot end one of fencelock's sessions today (none stays
// idle inside a transaction), so this is its test: it is pinned too, so a later statement
// cannot come to depend on the role. transaction_timeout (PostgreSQL 17) does not exist in 15:
// it is pinned only where the server has it, and the session opens without an error here.
TEST_F(PostgresSession, EverySettingThatCanEndASessionOrStatementEarlyIsPinnedOff) {
  const std::map<std::string, std::string> short_values = {
      {"idle_session_timeout", "1s"},
      {"statement_timeout", "5s"},
      {"idle_in_transaction_session_timeout", "1s"},
      {"lock_timeout", "1s"}};
  for (const auto& [setting, value] : short_values) set_for_role(setting, value);
  EXPECT_EQ(server_->sql_as_user("SHOW idle_in_transaction_session_timeout"), "1s");
  auto split = pg::split_postgres_uri(uri("advisory"));
  ASSERT_TRUE(split.ok());
  auto conn = pg::open_connection(split->conninfo, Clock::now() + 10s);
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  for (const auto& [setting, value] : short_values) {
    bool broken = false;
    auto shown = pg::execute(conn->get(), "SHOW " + setting, {}, Clock::now() + 10s, broken);
    ASSERT_TRUE(shown.ok()) << setting << ": " << shown.status().to_string();
    EXPECT_EQ(std::string(PQgetvalue(shown->get(), 0, 0)), "0") << setting;
  }
}

// TCP keepalives on every session, so that a holder cut off by a partition (or a dead host)
// loses its session, and its advisory locks, within a bound instead of the kernel's two hours:
// libpq's keepalives on the client's socket (keepalives_idle=5, keepalives_interval=2,
// keepalives_count=3, tcp_user_timeout=11000 ms unless the URI says otherwise) and the same
// values for the server's side of the connection (tcp_keepalives_idle/interval/count,
// tcp_user_timeout), unless the URI's `options` sets them.
TEST_F(PostgresSession, KeepalivesAreOnAtBothEndsAndTheUrisOwnValuesWin) {
  struct Case {
    std::string extra;
    int client_idle;
    std::string server_idle;
  };
  for (const Case& c : {Case{"", 5, "5"}, Case{"&keepalives_idle=7&tcp_user_timeout=20000", 7, "7"},
                        Case{"&options=-c%20tcp_keepalives_idle%3D9", 5, "9"}}) {
    auto split = pg::split_postgres_uri(uri("advisory", c.extra));
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    auto conn = pg::open_connection(split->conninfo, Clock::now() + 10s);
    ASSERT_TRUE(conn.ok()) << c.extra << ": " << conn.status().to_string();
    const int fd = PQsocket(conn->get());
    int on = 0, idle = 0, interval = 0, count = 0;
    unsigned user_timeout = 0;
    socklen_t size = sizeof(int);
    ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &size), 0);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &size), 0);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, &size), 0);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, &size), 0);
    size = sizeof user_timeout;
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, &size), 0);
    EXPECT_EQ(on, 1) << c.extra;
    EXPECT_EQ(idle, c.client_idle) << c.extra;
    EXPECT_EQ(interval, 2) << c.extra;
    EXPECT_EQ(count, 3) << c.extra;
    EXPECT_EQ(user_timeout, c.extra.find("tcp_user_timeout") != std::string::npos ? 20000u : 11000u)
        << c.extra;
    bool broken = false;
    auto shown = pg::execute(conn->get(),
                             "SELECT current_setting('tcp_keepalives_idle') || ' ' || "
                             "current_setting('tcp_keepalives_interval') || ' ' || "
                             "current_setting('tcp_keepalives_count') || ' ' || "
                             "current_setting('tcp_user_timeout')",
                             {}, Clock::now() + 10s, broken);
    ASSERT_TRUE(shown.ok()) << shown.status().to_string();
    EXPECT_EQ(
        std::string(PQgetvalue(shown->get(), 0, 0)),
        fmt::format("{} 2 3 {}", c.server_idle,
                    c.extra.find("tcp_user_timeout") != std::string::npos ? "20000" : "11000"))
        << c.extra;
  }
}

// Lease mode: a release right after a server restart ran on a pooled connection that died with
// the server, failed, and the lock stayed held for its whole TTL. It is retried on a fresh
// connection within the release's deadline, so the next client is granted at once.
TEST_F(PostgresSession, AReleaseAfterAServerRestartFreesTheLeaseAtOnce) {
  Client holder = connect("lease");
  auto lease = holder.acquire(key("restarted"), {.ttl = 30s, .renew = false});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  server_->restart();
  Status released = lease->release();
  EXPECT_TRUE(released.ok()) << released.to_string();
  Client other = connect("lease");
  auto next = other.acquire(key("restarted"), {.ttl = 5s});
  EXPECT_TRUE(next.ok()) << "the lease stayed held after its release: "
                         << next.status().to_string();
  // The first acquisition after a restart works too (its dead connection is replaced).
  server_->restart();
  auto after = holder.acquire(key("after-restart"), {.ttl = 5s});
  EXPECT_TRUE(after.ok()) << after.status().to_string();
}

// A short advisory wait (0-40 ms, 41 of them) on a held key is kLocked. Before, each failed wait
// closed its session (it may hold what the wait got) and the next wait opened a new one under its
// own deadline: a connection (with SCRAM) takes longer than a few milliseconds, so about a third of
// such waits answered kUnavailable "cannot connect to PostgreSQL: timed out". Connecting is
// bounded by connect_timeout, not by the wait; the wait then asks the server once.
TEST_F(PostgresSession, AShortAdvisoryWaitOnAHeldKeyIsLockedNotUnavailable) {
  Client holder = connect("advisory"), waiter = connect("advisory");
  auto held = holder.acquire(key("short-waits"), {.ttl = 10s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  std::map<std::string, int> outcomes;
  for (int i = 0; i <= 40; ++i) {
    auto got =
        waiter.acquire(key("short-waits"), {.ttl = 5s, .wait = std::chrono::milliseconds(i)});
    outcomes[std::string(code_name(got.code()))] += 1;
    if (!got.ok() && got.code() != Code::kLocked) {
      ADD_FAILURE() << "wait " << i << " ms: " << got.status().to_string();
    }
  }
  EXPECT_EQ(outcomes["locked"], 41) << "some waits did not answer kLocked";
}

}  // namespace
}  // namespace fencelock::testing
