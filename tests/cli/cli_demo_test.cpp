// `fencelock demo`: bare, it runs on the servers named by FENCELOCK_*_URI when any is set, else
// on memory:// in its own process; either way the paused holder's stale write is refused.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"

namespace fencelock::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The environment entries that remove every backend variable the demo reads.
std::vector<std::string> without_backend_variables() {
  return {"FENCELOCK_REDIS_URI", "FENCELOCK_REDLOCK_URI", "FENCELOCK_PG_URI", "FENCELOCK_ETCD_URI"};
}

TEST(CliDemo, BareItRunsOnMemoryInProcessAndSaysHowToIncludeRealServers) {
  auto demo = run_cli({"demo", "--json"}, without_backend_variables());
  ASSERT_EQ(demo.exit_code, 0) << demo.stdout_text << demo.stderr_text;
  EXPECT_THAT(demo.stdout_text, HasSubstr("== memory://fencelock-demo"));
  EXPECT_THAT(demo.stdout_text, HasSubstr("worker 2 is granted token 2"));
  EXPECT_THAT(demo.stdout_text,
              HasSubstr("the fence refuses its write: rejected: stale token 1 < 2"));
  EXPECT_THAT(demo.stdout_text, HasSubstr("./scripts/demo.sh"));
  EXPECT_THAT(demo.stdout_text, HasSubstr("--backend URI"));
  const auto rows = nlohmann::json::parse(demo.stderr_text);
  ASSERT_EQ(rows.size(), 1u) << demo.stderr_text;
  EXPECT_EQ(rows[0]["backend"], "memory://fencelock-demo");
  EXPECT_EQ(rows[0]["tokens"], 2);
  EXPECT_EQ(rows[0]["stale_rejected"], 1);
  EXPECT_EQ(rows[0]["overlaps"], 0) << "worker 2 was granted while worker 1's lease was valid";
  EXPECT_EQ(rows[0]["verdict"], "SAFE");
  EXPECT_TRUE(rows[0]["safe"].get<bool>());
}

// With FENCELOCK_REDIS_URI set (what `eval "$(scripts/servers.sh env)"` exports) and no
// --backend, the demo runs there, with worker processes, and not on memory://.
TEST(CliDemo, BareItRunsOnTheServersTheEnvironmentNames) {
  auto server = RedisServer::start();
  std::vector<std::string> env = without_backend_variables();
  env[0] = "FENCELOCK_REDIS_URI=" + server->uri();
  auto demo = run_cli({"demo"}, env, 120s);
  ASSERT_EQ(demo.exit_code, 0) << demo.stdout_text << demo.stderr_text;
  EXPECT_THAT(demo.stdout_text, HasSubstr("== redis ("));
  EXPECT_THAT(demo.stdout_text, HasSubstr("is paused for"));
  EXPECT_THAT(demo.stdout_text, HasSubstr("Every stale write was refused"));
  EXPECT_THAT(demo.stdout_text, Not(HasSubstr("memory://")));
}

}  // namespace
}  // namespace fencelock::testing
