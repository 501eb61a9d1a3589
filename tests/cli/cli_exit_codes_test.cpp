// `fencelock run` exit codes (docs/CLI.md): every failure is one "fencelock: " line on stderr, the
// command does not run unless the lock was taken, and no lock is left behind.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

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

class CliExitCodes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = RedisServer::start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { dir_ = make_temp_dir("fencelock-cli-exit-"); }
  void TearDown() override { remove_tree(dir_); }

  std::string marker() const { return dir_ + "/ran"; }
  // fencelock run --backend <server> ARGS... KEY -- touch MARKER
  RunResult run_touch(const std::string& key, std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"run", "--backend", server_->uri()};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {key, "--", "touch", marker()});
    return run_cli(args);
  }
  void expect_usage_error(const RunResult& r, const std::string& names_problem) {
    EXPECT_EQ(r.exit_code, 64) << r.stderr_text;
    EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr(names_problem));
    EXPECT_FALSE(file_exists(marker())) << "the command ran after a usage error";
    EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
  }

  static RedisServer* server_;
  std::string dir_;
};

RedisServer* CliExitCodes::server_ = nullptr;

bool port_6379_is_free() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(6379);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool refused = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0;
  ::close(fd);
  return refused;
}

TEST_F(CliExitCodes, CommandExitCodePropagates) {
  auto r = run_cli({"run", "--backend", server_->uri(), "exit-3", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.stderr_text;
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, CommandKilledBySignalGives128PlusSignal) {
  auto r = run_cli({"run", "--backend", server_->uri(), "killed", "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.stderr_text;
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, CommandNotFoundGives127) {
  auto r =
      run_cli({"run", "--backend", server_->uri(), "missing", "--", dir_ + "/no-such-program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("no-such-program"));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, LockHeldElsewhereGives75AndDoesNotRunTheCommand) {
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto key = LockKey::make("held-elsewhere");
  auto lease = client->acquire(*key, AcquireOptions{.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();

  for (const std::vector<std::string>& options :
       {std::vector<std::string>{}, std::vector<std::string>{"--wait", "300ms"}}) {
    auto r = run_touch("held-elsewhere", options);
    EXPECT_EQ(r.exit_code, 75) << r.stderr_text;
    EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr("not acquired"));
    EXPECT_FALSE(file_exists(marker()));
  }
  EXPECT_FALSE(lease->is_lost()) << "the waiting CLI disturbed the holder";
  EXPECT_TRUE(lease->release().ok());
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, UnreachableBackendGives69) {
  std::string uri = fmt::format("redis://127.0.0.1:{}", free_loopback_port());
  auto r = run_cli({"run", "--backend", uri, "k", "--", "touch", marker()});
  EXPECT_EQ(r.exit_code, 69) << r.stderr_text;
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_FALSE(file_exists(marker()));

  auto from_env = run_cli({"run", "k", "--", "touch", marker()}, {"FENCELOCK_BACKEND=" + uri});
  EXPECT_EQ(from_env.exit_code, 69) << from_env.stderr_text;
  EXPECT_THAT(from_env.stderr_text, HasSubstr("FENCELOCK_BACKEND"));
}

TEST_F(CliExitCodes, UnreachableDefaultBackendSaysSoAndHowToChoose) {
  if (!port_6379_is_free()) GTEST_SKIP() << "something listens on 127.0.0.1:6379";
  auto r = run_cli({"run", "k", "--", "touch", marker()});
  EXPECT_EQ(r.exit_code, 69) << r.stderr_text;
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("default redis://127.0.0.1:6379"));
  EXPECT_THAT(r.stderr_text, HasSubstr("--backend"));
  EXPECT_THAT(r.stderr_text, HasSubstr("FENCELOCK_BACKEND"));
}

TEST_F(CliExitCodes, MalformedUriGives64) {
  // What each error must name: the URI forms where the scheme is missing, the schemes (etcds://
  // and memory:// among them) for an unknown one, the bad part otherwise, and no list of URI
  // forms where the scheme was right.
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"bogus", {"backend URIs look like", "redis://", "etcds://", "memory://"}},
      {"ftp://127.0.0.1:21", {"unknown backend scheme 'ftp://'", "etcds://", "memory://"}},
      {"redis://127.0.0.1:notaport", {"port 'notaport'"}}};
  for (const auto& [uri, names] : cases) {
    auto r = run_cli({"run", "--backend", uri, "k", "--", "touch", marker()});
    EXPECT_EQ(r.exit_code, 64) << uri << ": " << r.stderr_text;
    EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
    for (const auto& name : names) EXPECT_THAT(r.stderr_text, HasSubstr(name)) << uri;
    if (uri.find("://") != std::string::npos) {
      EXPECT_THAT(r.stderr_text, Not(HasSubstr("backend URIs look like"))) << uri;
    }
    EXPECT_FALSE(file_exists(marker()));
  }
}

// Mistakes in the URI that only the server can see are usage errors (64) that say what to
// change: a database number above the server's `databases`, a password for a server that has
// none (before: 69 "check that the backend is running", and 77 "refused the credentials (ERR)").
TEST_F(CliExitCodes, AServerThatRefusesTheUrisSettingsIsAUsageErrorThatSaysWhatToChange) {
  auto db = run_cli({"status", "--backend", server_->uri() + "/99", "k"});
  EXPECT_EQ(db.exit_code, 64) << db.stderr_text;
  EXPECT_TRUE(is_one_error_line(db.stderr_text)) << db.stderr_text;
  EXPECT_THAT(db.stderr_text, HasSubstr("database number"));
  EXPECT_THAT(db.stderr_text, Not(HasSubstr("running and reachable")));

  const std::string with_password =
      "redis://:Pw-unneeded@" + server_->uri().substr(std::string("redis://").size());
  auto password =
      run_cli({"run", "k", "--", "touch", marker()}, {"FENCELOCK_BACKEND=" + with_password});
  EXPECT_EQ(password.exit_code, 64) << password.stderr_text;
  EXPECT_TRUE(is_one_error_line(password.stderr_text)) << password.stderr_text;
  EXPECT_THAT(password.stderr_text, HasSubstr("has no password set"));
  EXPECT_THAT(password.stderr_text, Not(HasSubstr("Pw-unneeded")));
  EXPECT_FALSE(file_exists(marker()));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, EmptyKeyGives64) { expect_usage_error(run_touch(""), "KEY"); }

TEST_F(CliExitCodes, KeyOver512BytesGives64) {
  expect_usage_error(run_touch(std::string(std::size_t{10} * 1024, 'k')), "512");
}

TEST_F(CliExitCodes, ZeroTtlGives64) {
  expect_usage_error(run_touch("k", {"--ttl", "0"}), "--ttl");
  expect_usage_error(run_touch("k", {"--ttl", "0s"}), "--ttl");
}

TEST_F(CliExitCodes, NegativeWaitGives64) {
  expect_usage_error(run_touch("k", {"--wait", "-1s"}), "--wait");
  expect_usage_error(run_touch("k", {"--wait=-1s"}), "negative");
}

TEST_F(CliExitCodes, BadDurationGives64) {
  expect_usage_error(run_touch("k", {"--ttl", "10x"}), "'10x'");
  expect_usage_error(run_touch("k", {"--kill-grace", "soon"}), "--kill-grace");
}

// Durations that would overflow a deadline (`--wait 2562047h` gave up after 15 ms,
// `--kill-grace 9223372036854775807ms` killed at once) or PostgreSQL's lock_timeout (597 h):
// refused at parse time, naming the option and the cap.
TEST_F(CliExitCodes, DurationsAboveTheCapGive64) {
  expect_usage_error(run_touch("k", {"--wait", "2562047h"}), "--wait: invalid duration");
  expect_usage_error(run_touch("k", {"--wait", "597h"}), "at most 596h");
  expect_usage_error(run_touch("k", {"--kill-grace", "9223372036854775807ms"}), "--kill-grace");
  expect_usage_error(run_touch("k", {"--ttl", "2510000h"}), "at most 596h");
}

// An unknown scheme is a usage error everywhere; migrate said "nothing to do".
TEST_F(CliExitCodes, MigrateWithAnUnknownSchemeGives64) {
  RunResult r = run_cli({"migrate", "--backend", "zk://h"});
  EXPECT_EQ(r.exit_code, 64) << r.stdout_text << r.stderr_text;
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("unknown backend scheme 'zk://'"));
  EXPECT_THAT(r.stdout_text, Not(HasSubstr("nothing to do")));
  // libpq's schemes are lowercase: POSTGRES:// is refused as connect() refuses it, named as typed
  // (migrate took it for a backend without a schema and exited 0).
  RunResult upper = run_cli({"migrate", "--backend", "POSTGRES://u:p@h/d"});
  EXPECT_EQ(upper.exit_code, 64) << upper.stdout_text << upper.stderr_text;
  EXPECT_THAT(upper.stderr_text, HasSubstr("unknown backend scheme 'POSTGRES://'"));
}

// Library warnings while connecting reach the operator once, on stderr (they went nowhere): here
// a redlock:// of 2 instances, which tolerates no failure.
TEST_F(CliExitCodes, ARedlockThatToleratesNoFailureIsWarnedAboutOnce) {
  auto cluster = RedisCluster::start(2);
  const std::string warning =
      "fencelock: warning: redlock:// with 2 instances tolerates no failure";
  auto human = run_cli({"status", "--backend", cluster->redlock_uri(), "k"});
  EXPECT_EQ(human.exit_code, 0) << human.stderr_text;
  const auto first = human.stderr_text.find(warning);
  ASSERT_NE(first, std::string::npos) << human.stderr_text;
  EXPECT_EQ(human.stderr_text.find(warning, first + 1), std::string::npos) << human.stderr_text;
  auto json = run_cli({"status", "--json", "--backend", cluster->redlock_uri(), "k"});
  EXPECT_EQ(json.exit_code, 0) << json.stderr_text;
  EXPECT_THAT(json.stderr_text, HasSubstr("{\"message\":\"redlock:// with 2 instances"));
  EXPECT_THAT(json.stderr_text, HasSubstr("\"warning\":\"backend\""));
}

// The waiters scenario on memory:// (in process): every pending acquisition is granted after the
// releases, and the waiting Client adds its engine's threads only, not one per waiter.
TEST_F(CliExitCodes, BenchWaitersGrantsEveryWaiterWithoutAThreadEach) {
  auto r = run_cli({"bench", "--backend", "memory://bench-waiters", "--json", "--scenario",
                    "waiters", "--waiters", "200", "--duration", "1s"},
                   {}, std::chrono::minutes(2));
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  auto result = nlohmann::json::parse(r.stdout_text.substr(0, r.stdout_text.find('\n')));
  EXPECT_EQ(result["scenario"], "waiters");
  EXPECT_EQ(result["waiters"], 200);
  EXPECT_EQ(result["granted"], 200) << r.stdout_text;
  EXPECT_EQ(result["granted_before_release"], 0) << "granted while every key was held";
  EXPECT_LT(result["threads_waiting"].get<int>() - result["threads_before"].get<int>(), 8)
      << r.stdout_text;
  // The threads by name (core/thread_name.h): the two Clients' engines while waiting, and the
  // renewal threads of the holders' Client only: a Client's start with its first lease, and the
  // waiting one holds none yet.
  EXPECT_EQ(result["threads_waiting_by_name"]["fl-engine"], 4) << r.stdout_text;
  EXPECT_EQ(result["threads_waiting_by_name"]["fl-renew"], 1) << r.stdout_text;
  EXPECT_EQ(result["threads_waiting_by_name"]["fl-watchdog"], 1) << r.stdout_text;
}

// Every subcommand that runs for a while takes --duration DUR (bench took --seconds INT, which
// stays as a hidden alias).
TEST_F(CliExitCodes, BenchTakesDurationAndStillTheOldSeconds) {
  for (const std::vector<std::string>& length :
       {std::vector<std::string>{"--duration", "1s"}, std::vector<std::string>{"--seconds", "1"}}) {
    std::vector<std::string> args = {"bench",  "--backend",  server_->uri(),
                                     "--json", "--scenario", "uncontended"};
    args.insert(args.end(), length.begin(), length.end());
    auto r = run_cli(args, {}, std::chrono::minutes(1));
    EXPECT_EQ(r.exit_code, 0) << length[0] << ": " << r.stderr_text;
    EXPECT_THAT(r.stdout_text, HasSubstr("\"scenario\":\"uncontended\"")) << r.stdout_text;
    // Both sides work: the bare baseline calls the scripts as the library does (it called them
    // with an outdated argument list, and every one of its cycles failed unexplained).
    EXPECT_THAT(r.stdout_text, HasSubstr("\"failures_baseline\":0")) << r.stdout_text;
    EXPECT_THAT(r.stdout_text, HasSubstr("\"failures_fencelock\":0")) << r.stdout_text;
  }
  auto zero = run_cli({"bench", "--backend", server_->uri(), "--duration", "0"});
  EXPECT_EQ(zero.exit_code, 64) << zero.stderr_text;
  EXPECT_THAT(zero.stderr_text, HasSubstr("--duration"));
  auto help = run_cli({"bench", "--help"});
  EXPECT_THAT(help.stdout_text, HasSubstr("--duration"));
  EXPECT_THAT(help.stdout_text, Not(HasSubstr("--seconds")));
  EXPECT_THAT(help.stdout_text, Not(HasSubstr("Excludes"))) << "a stray CLI11 line";
  EXPECT_THAT(help.stdout_text, HasSubstr("etcds://"));
  EXPECT_THAT(help.stdout_text, HasSubstr("memory://"));
  auto both = run_cli({"bench", "--backend", server_->uri(), "--seconds", "1", "--duration", "1s"});
  EXPECT_EQ(both.exit_code, 64) << both.stderr_text;
}

TEST_F(CliExitCodes, MissingCommandOrUnknownOptionGives64) {
  auto no_command = run_cli({"run", "--backend", server_->uri(), "k"});
  EXPECT_EQ(no_command.exit_code, 64);
  EXPECT_TRUE(is_one_error_line(no_command.stderr_text)) << no_command.stderr_text;
  EXPECT_THAT(no_command.stderr_text, HasSubstr("command"));

  auto unknown = run_cli({"run", "--frobnicate", "k", "--", "true"});
  EXPECT_EQ(unknown.exit_code, 64);
  EXPECT_TRUE(is_one_error_line(unknown.stderr_text)) << unknown.stderr_text;
  EXPECT_THAT(unknown.stderr_text, HasSubstr("unknown option '--frobnicate' for 'run'"));

  // The unknown word is named, with the closest known one (before: "The following argument was
  // not expected: true" for --tll, "A subcommand is required" for stauts).
  const std::pair<std::vector<std::string>, std::string> mistyped[] = {
      {{"run", "--tll", "5s", "k", "--", "true"},
       "unknown option '--tll' for 'run' (did you mean '--ttl'?)"},
      {{"stauts", "k"}, "unknown command 'stauts' (did you mean 'status'?)"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"status", "--jsn", "k"}, "(did you mean '--json'?)"},
      {{"--json", "status", "k"}, "goes after the command"}};
  for (const auto& [args, says] : mistyped) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 64) << args[0] << ": " << r.stderr_text;
    EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr(says));
  }
  // Options after "--" are CMD's.
  auto cmd_option =
      run_cli({"run", "--backend", server_->uri(), "k", "--", "sh", "-c", "exit 0", "--tll"});
  EXPECT_EQ(cmd_option.exit_code, 0) << cmd_option.stderr_text;

  auto no_subcommand = run_cli({});
  EXPECT_EQ(no_subcommand.exit_code, 64);
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

TEST_F(CliExitCodes, WrongPasswordGives77AndIsNeverPrinted) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "right-secret"});
  std::string wrong = fmt::format("redis://:wrong-secret@127.0.0.1:{}", secured->port());
  // Through the environment, as docs/CLI.md recommends (a password in --backend adds a warning
  // line, checked below).
  auto r = run_cli({"run", "k", "--", "touch", marker()}, {"FENCELOCK_BACKEND=" + wrong});
  EXPECT_EQ(r.exit_code, 77) << r.stderr_text;
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, Not(HasSubstr("wrong-secret")));
  EXPECT_FALSE(file_exists(marker()));
  // The advice is given once (it was repeated: the library's, then the CLI's).
  const std::string advice = "check the user and password";
  const auto first = r.stderr_text.find(advice);
  ASSERT_NE(first, std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find(advice, first + 1), std::string::npos) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("FENCELOCK_BACKEND")) << "where the URI came from";

  auto status = run_cli({"status", "--backend", wrong, "k"});
  EXPECT_EQ(status.exit_code, 77) << status.stderr_text;
  EXPECT_THAT(status.stderr_text, HasSubstr("warning: the password in --backend"));
  EXPECT_THAT(status.stderr_text, Not(HasSubstr("wrong-secret")));
  EXPECT_THAT(held_lock_keys(*secured), IsEmpty());
}

TEST_F(CliExitCodes, HelpAndVersion) {
  auto version = run_cli({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.stdout_text, HasSubstr("0.1.0"));

  auto help = run_cli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.stdout_text, HasSubstr("run"));
  EXPECT_THAT(help.stdout_text, HasSubstr("Exit codes"));

  auto run_help = run_cli({"run", "--help"});
  EXPECT_EQ(run_help.exit_code, 0);
  EXPECT_THAT(run_help.stdout_text, HasSubstr("FENCELOCK_TOKEN"));
  EXPECT_THAT(run_help.stdout_text, HasSubstr("--kill-grace"));
}

}  // namespace
}  // namespace fencelock::testing
