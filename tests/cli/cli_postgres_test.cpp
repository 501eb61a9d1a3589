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
