// The CLI against a real PostgreSQL server: psql's advisory lock on 12345 and `fencelock run
// 12345` exclude each other (both ways), and `fencelock migrate` creates the schema once.
#include <gtest/gtest.h>

#include "cli_harness.h"
#include "support/postgres_server.h"

namespace fencelock::testing {
namespace {

class CliPostgres : public ::testing::Test {
 protected:
  void SetUp() override { server_ = PostgresServer::start(); }
  std::unique_ptr<PostgresServer> server_;
};

TEST_F(CliPostgres, PsqlAdvisoryLockMakesRunExit75AndRunMakesPsqlTryFail) {
  std::string backend = server_->uri();  // advisory mode is the default
  ChildProcess psql =
      ChildProcess::spawn({"psql", "-X", "-q", server_->uri(), "-c",
                           "SELECT pg_advisory_lock(12345)", "-c", "SELECT pg_sleep(60)"});
  ASSERT_TRUE(eventually([&] {
    return server_->sql(
               "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = "
               "12345") == "1";
  }));
  RunResult refused = run_cli({"run", "--backend", backend, "--wait", "0", "12345", "--", "true"});
  EXPECT_EQ(refused.exit_code, 75) << refused.stderr_text;
  server_->sql(
      "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = "
      "12345");
  psql.wait();

  // The reverse: while `fencelock run 12345` holds it, psql's try fails; afterwards it succeeds.
  RunResult held = run_cli({"run", "--backend", backend, "12345", "--", "psql", "-X", "-At",
                            server_->uri(), "-c", "SELECT pg_try_advisory_lock(12345)"});
  ASSERT_EQ(held.exit_code, 0) << held.stderr_text;
  EXPECT_EQ(held.stdout_text, "f\n");
  EXPECT_EQ(server_->sql("SELECT pg_try_advisory_lock(12345)"), "t");
}

// An advisory lock lives as long as its session: status and list say so instead of a TTL (before:
// a constant "ttl 5s"), and a bare list shows a lock psql holds on a bigint key (before: only
// status of that key did), named by its key since its name is unknown.
TEST_F(CliPostgres, AdvisoryLocksShowNoTtlAndABareListShowsPsqlsLock) {
  const std::string backend = server_->uri();
  ChildProcess psql =
      ChildProcess::spawn({"psql", "-X", "-q", server_->uri(), "-c", "SELECT pg_advisory_lock(777)",
                           "-c", "SELECT pg_sleep(60)"});
  ASSERT_TRUE(eventually([&] {
    return server_->sql(
               "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = "
               "777") == "1";
  }));
  RunResult list = run_cli({"list", "--backend", backend});
  ASSERT_EQ(list.exit_code, 0) << list.stderr_text;
  EXPECT_NE(list.stdout_text.find("pg_advisory_lock(777)"), std::string::npos) << list.stdout_text;
  EXPECT_NE(list.stdout_text.find("session"), std::string::npos) << list.stdout_text;
  RunResult json = run_cli({"list", "--backend", backend, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.stderr_text;
  EXPECT_NE(json.stdout_text.find(R"x("key":"pg_advisory_lock(777)")x"), std::string::npos)
      << json.stdout_text;
  EXPECT_NE(json.stdout_text.find(R"("session_bound":true)"), std::string::npos);
  EXPECT_NE(json.stdout_text.find(R"("ttl_ms":null)"), std::string::npos);
  RunResult prefixed = run_cli({"list", "--backend", backend, "pg_"});
  EXPECT_EQ(prefixed.stdout_text.find("pg_advisory_lock(777)"), std::string::npos)
      << "a foreign lock has no name a prefix could select";
  server_->sql(
      "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = "
      "777");
  psql.wait();

  RunResult status = run_cli({"run", "--backend", backend, "--ttl", "5s", "adv/k", "--", cli_path(),
                              "status", "--backend", backend, "adv/k"});
  ASSERT_EQ(status.exit_code, 0) << status.stderr_text;
  EXPECT_NE(status.stdout_text.find("none: held while its session lives"), std::string::npos)
      << status.stdout_text;
  EXPECT_EQ(status.stdout_text.find("5s"), std::string::npos) << status.stdout_text;
}

TEST_F(CliPostgres, MigrateCreatesTheSchemaOnceAndSaysSo) {
  std::string backend = server_->uri() + "?mode=lease";
  RunResult first = run_cli({"migrate", "--backend", backend});
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_NE(first.stdout_text.find("CREATE TABLE IF NOT EXISTS fencelock_leases"),
            std::string::npos)
      << first.stdout_text;
  EXPECT_NE(first.stdout_text.find("CREATE OR REPLACE FUNCTION %1$I.fencelock_fence"),
            std::string::npos)
      << "the fence is installed too: " << first.stdout_text;
  EXPECT_NE(
      first.stdout_text.find("GRANT EXECUTE ON FUNCTION fencelock_fence(text, numeric, text) TO r; "
                             "(fencelock_fence(text, numeric) too for bare tokens; nothing on "
                             "fencelock_fences)"),
      std::string::npos)
      << first.stdout_text;
  RunResult second = run_cli({"migrate", "--backend", backend, "--json"});
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  EXPECT_EQ(second.stdout_text, "{\"statements\":[]}\n");
}

}  // namespace
}  // namespace fencelock::testing
