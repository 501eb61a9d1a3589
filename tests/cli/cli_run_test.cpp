// `fencelock run` against real redis-server processes: mutual exclusion and fencing across
// processes, the command's environment, lease loss, and signal forwarding.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "fencelock/client.h"

namespace fencelock::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A shell command that records "started", turns SIGTERM into a "term" marker and exit 143, and
// otherwise waits (interruptibly) for a long time. $1: marker for TERM, $2: marker for started.
const std::vector<std::string> kWaitForTerm = {
    "sh", "-c",
    "trap 'echo term > \"$1\"; kill $! 2>/dev/null; exit 143' TERM; "
    "echo started > \"$2\"; sleep 60 & wait",
    "sh"};

class CliRun : public ::testing::Test {
 protected:
  // A server per test: a lost lease (deleted by a test) leaves its holder metadata until the TTL.
  void SetUp() override {
    server_ = RedisServer::start();
    dir_ = make_temp_dir("fencelock-cli-run-");
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Starts `fencelock run [options] KEY -- <kWaitForTerm>` and waits until the command started.
  ChildProcess start_holder(const std::string& key, std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"run", "--backend", server_->uri()};
    args.insert(args.end(), options.begin(), options.end());
    args.push_back(key);
    args.emplace_back("--");
    args.insert(args.end(), kWaitForTerm.begin(), kWaitForTerm.end());
    args.push_back(path("term"));
    args.push_back(path("started"));
    ChildProcess cli = spawn_cli(args, path("stdout"), path("stderr"));
    bool started = eventually([&] { return file_exists(path("started")); });
    EXPECT_TRUE(started) << read_file(path("stderr"));
    return cli;
  }

  std::unique_ptr<RedisServer> server_;
  std::string dir_;
};

TEST_F(CliRun, CommandSeesKeyTokenIssuerAndBackendWithoutPassword) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "env-secret"});
  auto script =
      R"(printf '%s\n%s\n%s\n%s\n' "$FENCELOCK_KEY" "$FENCELOCK_TOKEN" "$FENCELOCK_BACKEND" )"
      R"("$FENCELOCK_ISSUER")";
  std::vector<std::uint64_t> tokens;
  for (int i = 0; i < 2; ++i) {
    auto r = run_cli(
        {"run", "--backend", secured->uri_with_credentials(), "env/key", "--", "sh", "-c", script});
    ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
    std::vector<std::string> lines;
    std::istringstream out(r.stdout_text);
    for (std::string line; std::getline(out, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 4u) << r.stdout_text;
    EXPECT_EQ(lines[0], "env/key");
    ASSERT_FALSE(lines[1].empty());
    EXPECT_TRUE(std::all_of(lines[1].begin(), lines[1].end(), ::isdigit)) << lines[1];
    tokens.push_back(std::stoull(lines[1]));
    EXPECT_GT(tokens.back(), 0u);
    EXPECT_THAT(lines[2], HasSubstr(fmt::format("127.0.0.1:{}", secured->port())));
    EXPECT_THAT(lines[2], Not(HasSubstr("env-secret")));
    // What RedisFence::script() takes as ARGV[3]: the lock's issuer (fence.h), no password.
    EXPECT_EQ(lines[3], fmt::format("redis://127.0.0.1:{}/0 env/key", secured->port()));
    EXPECT_THAT(r.stderr_text, Not(HasSubstr("env-secret")));
  }
  EXPECT_LT(tokens[0], tokens[1]) << "tokens of successive grants must increase";
  EXPECT_THAT(held_lock_keys(*secured), IsEmpty());
}

TEST_F(CliRun, InheritedBackendPasswordIsNotPassedToTheCommand) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "env-secret"});
  auto r = run_cli({"run", "inherited", "--", "sh", "-c", R"(printf '%s' "$FENCELOCK_BACKEND")"},
                   {"FENCELOCK_BACKEND=" + secured->uri_with_credentials()});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_THAT(r.stdout_text, HasSubstr(fmt::format("127.0.0.1:{}", secured->port())));
  EXPECT_THAT(r.stdout_text, Not(HasSubstr("env-secret")));
}

// The backends' password variables stay out of the command's environment unless --pass-secrets
// (the password is fencelock's, not the command's). Before, all three reached the command.
TEST_F(CliRun, PasswordVariablesAreKeptFromTheCommandUnlessPassed) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "redis-secret"});
  const std::vector<std::string> env = {"FENCELOCK_REDIS_PASSWORD=redis-secret",
                                        "FENCELOCK_ETCD_PASSWORD=etcd-secret",
                                        "PGPASSWORD=pg-secret", "KEPT=visible"};
  for (const bool pass : {false, true}) {
    std::vector<std::string> args = {"run", "--backend", secured->uri()};
    if (pass) args.emplace_back("--pass-secrets");
    for (const char* a : {"secrets", "--", "env"}) args.emplace_back(a);
    auto r = run_cli(args, env);
    ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
    EXPECT_THAT(r.stdout_text, HasSubstr("KEPT=visible"));
    for (const char* secret : {"redis-secret", "etcd-secret", "pg-secret"}) {
      if (pass) {
        EXPECT_THAT(r.stdout_text, HasSubstr(secret));
      } else {
        EXPECT_THAT(r.stdout_text, Not(HasSubstr(secret))) << "passed to the command";
      }
    }
  }
}

// A password on the command line is visible to every local user: warned once, without the
// password, and the environment is recommended.
TEST_F(CliRun, APasswordInBackendIsWarnedAbout) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "argv-secret"});
  auto r = run_cli({"run", "--backend", secured->uri_with_credentials(), "argv", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("warning: the password in --backend"));
  EXPECT_THAT(r.stderr_text, HasSubstr("FENCELOCK_BACKEND"));
  EXPECT_THAT(r.stderr_text, Not(HasSubstr("argv-secret")));
  auto plain = run_cli({"run", "--backend", server_->uri(), "argv", "--", "true"});
  EXPECT_THAT(plain.stderr_text, Not(HasSubstr("warning")));
}

// What the acquisition's rounds find reaches the operator (before: the CLI's warning sink ended
// with connect(), so a fencing counter far ahead of its server's clock was said only to library
// users).
TEST_F(CliRun, AFencingCounterFarAheadOfItsServersClockIsWarnedAbout) {
  server_->command({"SET", "fencelock:{ahead}:fence", std::to_string(clock_floor(*server_, 10s))});
  auto r = run_cli({"run", "--backend", server_->uri(), "ahead", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("warning:"));
  EXPECT_THAT(r.stderr_text, HasSubstr("ahead of this server's clock"));
}

TEST_F(CliRun, JsonSummaryIsOneObjectOnStderr) {
  auto r = run_cli({"run", "--json", "--backend", server_->uri(), "json/key", "--", "sh", "-c",
                    "echo out; exit 4"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.stdout_text, "out\n");
  nlohmann::json summary = nlohmann::json::parse(r.stderr_text);
  EXPECT_EQ(summary["key"], "json/key");
  EXPECT_EQ(summary["exit_code"], 4);
  EXPECT_EQ(summary["command_exit_code"], 4);
  EXPECT_EQ(summary["lease_lost"], false);
  EXPECT_GT(summary["token"].get<std::uint64_t>(), 0u);

  auto bad =
      run_cli({"run", "--json", "--backend", server_->uri(), "--ttl", "5x", "k", "--", "true"});
  EXPECT_EQ(bad.exit_code, 64);
  nlohmann::json error = nlohmann::json::parse(bad.stderr_text);
  EXPECT_EQ(error["error"], "usage");
  EXPECT_EQ(error["exit_code"], 64);
}

TEST_F(CliRun, LostLeaseSendsSigtermAndExits73) {
  ChildProcess cli = start_holder("lose-me", {"--ttl", "1s"});
  ASSERT_THAT(held_lock_keys(*server_), ::testing::Contains("fencelock:{lose-me}"));

  // Someone else (an operator, an expiry during a pause) removes the lock: the next renewal fails.
  server_->command({"DEL", "fencelock:{lose-me}"});
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << "fencelock did not notice the lost lease";
  EXPECT_EQ(*code, 73) << read_file(path("stderr"));
  EXPECT_EQ(read_file(path("term")), "term\n") << "the command did not get SIGTERM";
  std::string err = read_file(path("stderr"));
  EXPECT_THAT(err, HasSubstr("fencelock: lease on 'lose-me' lost"));
  EXPECT_THAT(err, HasSubstr("sent SIGTERM to sh"));
  // The lock key stays gone (fencelock's release must not recreate it); the holder metadata of
  // the lost grant may linger until its TTL because the test deleted only the lock key.
  EXPECT_THAT(held_lock_keys(*server_), Not(::testing::Contains("fencelock:{lose-me}")));
}

TEST_F(CliRun, CommandIgnoringSigtermIsKilledAfterTheGrace) {
  std::vector<std::string> args = {
      "run", "--backend",    server_->uri(), "--ttl",
      "1s",  "--kill-grace", "300ms",        "stubborn",
      "--",  "sh",           "-c",           "trap '' TERM; echo started > \"$1\"; sleep 60",
      "sh",  path("started")};
  ChildProcess cli = spawn_cli(args, path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return file_exists(path("started")); }))
      << read_file(path("stderr"));

  server_->command({"DEL", "fencelock:{stubborn}"});
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << "the command outlived SIGKILL";
  EXPECT_EQ(*code, 73);
  EXPECT_THAT(read_file(path("stderr")), HasSubstr("sent SIGKILL"));
}

// The default never lets the command run past the lease's validity, whatever --kill-grace says:
// with the server paused, renewals stop; SIGTERM comes while validity is left (min(grace,
// TTL/2) before it ends) and SIGKILL when it ends. Before, a 30 s grace ran from lost().
TEST_F(CliRun, ACommandIgnoringSigtermNeverOutlivesTheLeaseValidityByDefault) {
  std::vector<std::string> args = {
      "run",   "--backend",    server_->uri(),
      "--ttl", "2s",           "--kill-grace",
      "30s",   "outlive",      "--",
      "sh",    "-c",           "trap '' TERM; echo started > \"$1\"; while :; do sleep 0.05; done",
      "sh",    path("started")};
  ChildProcess cli = spawn_cli(args, path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return file_exists(path("started")); }))
      << read_file(path("stderr"));
  server_->pause();
  auto code = cli.wait_for(20s);
  server_->resume();
  ASSERT_TRUE(code.has_value()) << "the command outlived the lease: " << read_file(path("stderr"));
  EXPECT_EQ(*code, 73) << read_file(path("stderr"));
  const std::string err = read_file(path("stderr"));
  EXPECT_THAT(err, HasSubstr("sent SIGTERM"));
  EXPECT_THAT(err, HasSubstr("has not been renewed and has"));
  EXPECT_THAT(err, HasSubstr("when the lease's validity ended; sent SIGKILL"));
}

// --grace-outlives-lease is the explicit choice of the old behaviour: the whole grace, from
// SIGTERM, whatever the validity (only for a command whose writes are fenced).
TEST_F(CliRun, GraceOutlivesLeaseGivesTheWholeGraceAfterTheLoss) {
  // The grace (3 s) is longer than the lease (1 s): only with the flag does it run out in full;
  // without it SIGKILL would come when the validity ends, with the other message.
  std::vector<std::string> args = {
      "run",
      "--backend",
      server_->uri(),
      "--ttl",
      "1s",
      "--kill-grace",
      "3s",
      "--grace-outlives-lease",
      "outlive-ok",
      "--",
      "sh",
      "-c",
      "trap '' TERM; echo started > \"$1\"; while :; do sleep 0.05; done",
      "sh",
      path("started")};
  ChildProcess cli = spawn_cli(args, path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return file_exists(path("started")); }))
      << read_file(path("stderr"));
  server_->command({"DEL", "fencelock:{outlive-ok}"});
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << read_file(path("stderr"));
  EXPECT_EQ(*code, 73);
  const std::string err = read_file(path("stderr"));
  EXPECT_THAT(err, HasSubstr("did not exit within 3s of SIGTERM"));
  EXPECT_THAT(err, Not(HasSubstr("when the lease's validity ended")));
}

TEST_F(CliRun, SigtermIsForwardedAndTheLockReleasedAfterTheCommandExits) {
  ChildProcess cli = start_holder("forward");
  ASSERT_THAT(held_lock_keys(*server_), ::testing::Contains("fencelock:{forward}"));

  cli.signal(SIGTERM);
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 143) << "the command's own exit code (its TERM trap) is returned";
  EXPECT_EQ(read_file(path("term")), "term\n") << "SIGTERM was not forwarded to the command";
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

// A command that stopped itself never handled a forwarded SIGTERM (it stayed pending while the
// lock was renewed: 10 minutes under `timeout 6 fencelock run`); SIGCONT after each forwarded
// signal wakes it to handle it.
const std::string kStopsItself =
    "trap 'echo term > \"$1\"; exit 143' TERM; echo $$ > \"$2\"; kill -STOP $$; "
    "while :; do sleep 0.05; done";

// The state letter of `pid` (/proc/PID/stat), '?' if it is gone.
char state_of(pid_t pid) {
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

TEST_F(CliRun, ASignalForwardedToACommandThatStoppedItselfLands) {
  ChildProcess cli = spawn_cli({"run", "--backend", server_->uri(), "stopped-self", "--", "sh",
                                "-c", kStopsItself, "sh", path("term"), path("pid")},
                               path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return !read_lines(path("pid")).empty(); }))
      << read_file(path("stderr"));
  const pid_t command = static_cast<pid_t>(std::stol(read_lines(path("pid")).front()));
  ASSERT_TRUE(eventually([&] { return state_of(command) == 'T'; })) << state_of(command);
  cli.signal(SIGTERM);
  const std::optional<int> code = cli.wait_for(10s);
  ASSERT_TRUE(code.has_value()) << "SIGTERM never reached the stopped command";
  EXPECT_EQ(*code, 143) << read_file(path("stderr"));
  EXPECT_EQ(read_file(path("term")), "term\n");
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

// The same for fencelock's own SIGTERM after a loss: the stopped command gets to handle it
// (before, it was killed by SIGKILL at the validity's end without having run its trap).
TEST_F(CliRun, ALostLeasesSigtermReachesACommandThatStoppedItself) {
  ChildProcess cli = spawn_cli({"run", "--backend", server_->uri(), "--ttl", "1s", "stopped-lost",
                                "--", "sh", "-c", kStopsItself, "sh", path("term"), path("pid")},
                               path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return !read_lines(path("pid")).empty(); }))
      << read_file(path("stderr"));
  const pid_t command = static_cast<pid_t>(std::stol(read_lines(path("pid")).front()));
  ASSERT_TRUE(eventually([&] { return state_of(command) == 'T'; })) << state_of(command);
  server_->command({"DEL", "fencelock:{stopped-lost}"});
  const std::optional<int> code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << read_file(path("stderr"));
  EXPECT_EQ(*code, 73) << read_file(path("stderr"));
  EXPECT_EQ(read_file(path("term")), "term\n") << "the stopped command never handled SIGTERM";
}

TEST_F(CliRun, SigintWhileWaitingCancelsWithoutRunningTheCommand) {
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make("interrupt-wait"), AcquireOptions{.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();

  ChildProcess cli = spawn_cli({"run", "--backend", server_->uri(), "--wait", "60s",
                                "interrupt-wait", "--", "touch", path("ran")},
                               path("stdout"), path("stderr"));
  // A waiter takes a place in the key's wait queue: once the server shows it, fencelock is
  // inside its wait (and its signals are blocked, so SIGINT reaches its handler).
  ASSERT_TRUE(eventually([&] {
    return server_->command({"ZCARD", "fencelock:{interrupt-wait}:queue"}) == "1";
  })) << read_file(path("stderr"));
  cli.signal(SIGINT);
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << "SIGINT did not cancel the wait";
  EXPECT_EQ(*code, 130);
  EXPECT_THAT(read_file(path("stderr")), HasSubstr("interrupted by SIGINT"));
  EXPECT_FALSE(file_exists(path("ran")));
  EXPECT_FALSE(lease->is_lost());
  EXPECT_EQ(server_->command({"ZCARD", "fencelock:{interrupt-wait}:queue"}), "0")
      << "the interrupted waiter kept its place in line";
  EXPECT_TRUE(lease->release().ok());
}

// 16 processes increment a counter in a file under one Redlock lock (3 instances). Without mutual
// exclusion the read-sleep-write would lose updates; the log proves the critical sections never
// overlapped and ran in fencing-token order.
TEST(CliRunRedlock, SixteenProcessesAreMutuallyExclusiveAndTokensIncrease) {
  auto cluster = RedisCluster::start(3);
  std::string dir = make_temp_dir("fencelock-cli-redlock-");
  std::string counter = dir + "/counter";
  std::string log = dir + "/log";
  { std::ofstream(counter) << "0\n"; }
  const std::string script =
      "echo \"$FENCELOCK_TOKEN start\" >> \"$2\"; n=$(cat \"$1\"); sleep 0.05; "
      "echo $((n + 1)) > \"$1\"; echo \"$FENCELOCK_TOKEN end\" >> \"$2\"";
  constexpr int kProcesses = 16;
  std::vector<ChildProcess> clis;
  clis.reserve(kProcesses);
  for (int i = 0; i < kProcesses; ++i) {
    clis.push_back(spawn_cli({"run", "--backend", cluster->redlock_uri(), "--wait", "60s",
                              "counter", "--", "sh", "-c", script, "sh", counter, log},
                             "", fmt::format("{}/stderr.{}", dir, i)));
  }
  for (int i = 0; i < kProcesses; ++i) {
    auto code = clis[i].wait_for(120s);
    ASSERT_TRUE(code.has_value()) << "process " << i << " did not finish";
    EXPECT_EQ(*code, 0) << read_file(fmt::format("{}/stderr.{}", dir, i));
  }

  EXPECT_EQ(read_file(counter), "16\n");
  std::vector<std::string> lines = read_lines(log);
  ASSERT_EQ(lines.size(), 2u * kProcesses);
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < lines.size(); i += 2) {
    std::istringstream start(lines[i]);
    std::istringstream end(lines[i + 1]);
    std::uint64_t start_token = 0, end_token = 0;
    std::string start_word, end_word;
    start >> start_token >> start_word;
    end >> end_token >> end_word;
    EXPECT_EQ(start_word, "start") << "line " << i << ": sections overlap";
    EXPECT_EQ(end_word, "end") << "line " << i + 1 << ": sections overlap";
    EXPECT_EQ(start_token, end_token) << "line " << i << ": another holder ended this section";
    EXPECT_GT(start_token, previous) << "line " << i << ": tokens must strictly increase";
    previous = start_token;
  }
  for (int i = 0; i < cluster->size(); ++i) EXPECT_THAT(held_lock_keys((*cluster)[i]), IsEmpty());
  remove_tree(dir);
}

}  // namespace
}  // namespace fencelock::testing
