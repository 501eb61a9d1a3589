// No output channel shows a password: for each backend with a password, every command that runs
// on it (run, status, list, torture, bench, migrate), its failures (unreachable, malformed URI,
// wrong password), and every channel they write (stdout, stderr and the log lines on it, --json,
// the --metrics file, the command's environment, torture's work directory) are searched for the
// password, which is distinctive so that any echo of it would be found.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_harness.h"
#include "support/postgres_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// Raw '?', '/' and '@' are what leaked PostgreSQL passwords into describe() and metrics labels.
constexpr const char* kRedisPassword = "Rs-7c1d-secret";
constexpr const char* kPostgresPassword = "Pg?5e2/b@secret";
constexpr const char* kWrongPassword = "Wr-90af-secret";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class CliSecrets : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("fencelock-cli-secrets-"); }
  void TearDown() override { remove_tree(dir_); }

  // Every text a command produced, named by where it came from.
  struct Channels {
    std::vector<std::pair<std::string, std::string>> texts;
    void add(const std::string& where, const RunResult& r) {
      texts.emplace_back(where + " stdout", r.stdout_text);
      texts.emplace_back(where + " stderr", r.stderr_text);
    }
    void add_file(const std::string& where, const std::string& path) {
      texts.emplace_back(where, slurp(path));
    }
    void add_tree(const std::string& where, const std::string& root) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
        if (entry.is_regular_file()) add_file(where + " " + entry.path().string(), entry.path());
      }
    }
  };

  static void expect_nowhere(const Channels& channels, const std::vector<std::string>& secrets) {
    EXPECT_GT(channels.texts.size(), 10u);
    for (const auto& [where, text] : channels.texts) {
      for (const auto& secret : secrets) {
        EXPECT_THAT(text, Not(HasSubstr(secret))) << "the password shows in " << where;
      }
    }
  }

  // run (JSON summary, metrics file, the command's environment), status and list, on `uri`.
  void run_status_list(const std::string& label, const std::string& uri, Channels& out,
                       const std::vector<std::string>& env = {}) {
    const std::string metrics = fmt::format("{}/{}.prom", dir_, label);
    const std::string command_env = fmt::format("{}/{}.env", dir_, label);
    RunResult run = run_cli({"run", "--backend", uri, "--json", "--metrics", metrics, "secrets/k",
                             "--", "sh", "-c", "env > \"$1\"", "sh", command_env},
                            env);
    EXPECT_EQ(run.exit_code, 0) << label << ": " << run.stderr_text;
    out.add(label + " run", run);
    out.add_file(label + " --metrics file", metrics);
    out.add_file(label + " the command's environment", command_env);
    EXPECT_THAT(slurp(command_env), HasSubstr("FENCELOCK_BACKEND=")) << "the env was not written";
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"status", "--backend", uri, "secrets/k"},
          std::vector<std::string>{"status", "--backend", uri, "--json", "secrets/k"},
          std::vector<std::string>{"list", "--backend", uri},
          std::vector<std::string>{"list", "--backend", uri, "--json"}}) {
      RunResult r = run_cli(args, env);
      EXPECT_LT(r.exit_code, 64) << label << " " << args[0] << ": " << r.stderr_text;
      out.add(label + " " + args[0], r);
    }
  }

  // `run` on a backend URI that must fail (wrong password, unreachable, malformed), in both
  // output formats.
  static void failing_runs(const std::string& bad, Channels& out) {
    for (bool json : {false, true}) {
      std::vector<std::string> args = {"run", "--backend", bad, "secrets/k", "--", "true"};
      if (json) args.insert(args.begin() + 1, "--json");
      RunResult r = run_cli(args);
      EXPECT_NE(r.exit_code, 0) << bad;
      out.add("failing run " + std::to_string(r.exit_code), r);
    }
  }

  void torture(const std::string& label, const std::string& uri, Channels& out,
               const std::vector<std::string>& env = {}) {
    const std::string work = fmt::format("{}/{}-torture", dir_, label);
    RunResult r = run_cli({"torture", "--backend", uri, "--json", "--workers", "2", "--duration",
                           "3s", "--faults", "none", "--work-dir", work},
                          env, std::chrono::minutes(1));
    EXPECT_LT(r.exit_code, 64) << label << " torture: " << r.stderr_text;
    out.add(label + " torture", r);
    ASSERT_TRUE(std::filesystem::exists(work)) << label;
    out.add_tree(label + " torture work dir", work);
  }

  std::string dir_;
};

// A malformed URI never reaches a connection, and no library's error about it shows its
// password: libpq quoted the whole URI in some parse errors ('end of string reached when looking
// for matching "]"', 'invalid percent-encoded token'), password included, from every command, in
// both output formats, with exit 69. Each URI here is malformed for its scheme; the password is
// written raw and percent-encoded (neither form may show), and in the query (password=).
TEST_F(CliSecrets, NoMalformedUriShowsItsPasswordAndEachIsAUsageError) {
  const std::string raw = "Mk3e9fsecret";
  const std::string encoded = "Mk3e9fsecr%65t";  // decodes to `raw`
  const std::vector<std::string> uris = {
      "postgres://u:" + raw + "@[::1/db", "postgresql://u:" + encoded + "@[::1/db",
      "postgres://u:" + raw + "@h/db?foo=bar", "postgres://u:" + raw + "@h/db?x=%zz",
      "postgres://u:" + raw + "@h:99999/db", "postgres://u:" + raw + "%zz@h/db",
      "postgres://u@h/db?password=" + raw + "&x=%zz", "postgres://u:" + raw + "@h/db?mode=bogus",
      // An attack on the first version of this check leaked all of these:
      "postgres://h:1/db?user=u&password=" + raw + "@tail",  // '@' in a query value
      "postgres://h/db?password=" + raw + "%zz", "postgres://h/db?sslpassword=" + raw + "%2",
      "postgres://h/db?password=" + raw + "%00", "postgres://u:" + raw + "%00@h/db",
      "postgres://u@[::1/db?pass%77ord=" + raw,  // a percent-encoded parameter name
      "postgres://h/db?pass%77ord=" + raw + "%zz", "postgres://h/db?sslpassword=" + raw + "=%41",
      "postgres://h/db?password=" + raw + "&tail9",  // a raw '&' cuts the password
      "postgres://h/db?password=" + raw + "&cd99=ef", "redis://:" + raw + "@[::1/0",
      "redis://:" + encoded + "@h:99999", "redis://u:" + raw + "@h:6379/abc",
      "redis://:" + raw + "@h:6379/0?bogus=1", "redlock://:" + raw + "@h:1,[::1",
      "redlock://:" + raw + "@h:1,h:99999", "etcd://u:" + raw + "@[::1",
      "etcd://u:" + encoded + "@h:99999", "etcds://u:" + raw + "@h:2379?cacert=/nonexistent/ca.pem",
      "etcd://u:" + raw + "@h:2379?bogus=1", "bogus://u:" + raw + "@h"};
  const std::vector<std::vector<std::string>> commands = {
      {"run", "k", "--", "true"},
      {"status", "k"},
      {"list"},
      {"migrate"},
      {"bench", "--scenario", "uncontended", "--duration", "1s"},
      {"torture", "--workers", "1", "--duration", "2s", "--work-dir", dir_ + "/torture"}};
  Channels channels;
  for (const auto& uri : uris) {
    for (const auto& command : commands) {
      for (bool json : {false, true}) {
        std::vector<std::string> args = {command[0], "--backend", uri};
        if (json) args.emplace_back("--json");
        args.insert(args.end(), command.begin() + 1, command.end());
        RunResult r = run_cli(args);
        EXPECT_EQ(r.exit_code, 64)
            << command[0] << (json ? " --json " : " ") << uri << ": " << r.stderr_text;
        channels.add(fmt::format("{}{} {}", command[0], json ? " --json" : "", uri), r);
      }
    }
  }
  ASSERT_FALSE(std::filesystem::exists(dir_ + "/torture/history.jsonl")) << "torture ran";
  expect_nowhere(channels, {raw, encoded});
}

// The owner of a process's /proc files: root's when the process is not dumpable.
uid_t proc_owner(pid_t pid) {
  struct stat st {};
  if (::stat(fmt::format("/proc/{}/environ", pid).c_str(), &st) != 0) return static_cast<uid_t>(-1);
  return st.st_uid;
}

// fencelock is not dumpable while it runs (no core dump holds the password it read, and no other
// process of the user reads its memory or environment), and its command is dumpable again. Not
// dumpable shows as /proc/PID files owned by root although the process runs as another user: as
// root, the test runs fencelock as nobody (setpriv). Before, a core of `run` held the Redis
// password four times, and /proc/PID/environ was the user's.
TEST_F(CliSecrets, FencelockIsNotDumpableAndItsCommandIs) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  const std::string ready = dir_ + "/pids", go = dir_ + "/go";
  std::vector<std::string> argv;
  const bool root = ::geteuid() == 0;
  if (root) argv = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  for (const std::string& arg :
       cli_argv({"run", "--backend", "memory://", "dump/k", "--", "sh", "-c",
                 "echo $PPID $$ > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"; "
                 "while [ ! -e \"$2\" ]; do sleep 0.05; done",
                 "sh", ready, go})) {
    argv.push_back(arg);
  }
  ChildProcess fencelock = ChildProcess::spawn(argv, {"FENCELOCK_REDIS_PASSWORD=Rs-dump-secret"});
  ASSERT_TRUE(eventually([&] { return file_exists(ready); })) << "the command did not start";
  pid_t parent = 0, command = 0;
  {
    std::ifstream in(ready);
    in >> parent >> command;
  }
  ASSERT_GT(parent, 1);
  ASSERT_GT(command, 1);
  const uid_t user = root ? 65534 : ::geteuid();
  EXPECT_EQ(proc_owner(parent), 0u) << "fencelock is dumpable (its /proc files are its user's)";
  EXPECT_EQ(proc_owner(command), user) << "the command lost its own dumpability";
  std::ofstream(go).put('\n');
  const auto status = fencelock.wait_for(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0);
}

// Every process's environment, as /proc/PID/environ shows it, of the processes whose command
// line contains `marker`; how many such processes were read.
int scan_environments(const std::string& marker, const std::string& secret, bool& found) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (slurp(entry.path() / "cmdline").find(marker) == std::string::npos) continue;
    ++seen;
    if (slurp(entry.path() / "environ").find(secret) != std::string::npos) found = true;
  }
  return seen;
}

// torture's workers get the backend URI and passwords through a pipe, not their environment:
// /proc/PID/environ of a worker, readable by every process of the user until the new image made
// itself non-dumpable (and by root always), never holds the password. An attack read it there
// from workers starting up.
TEST_F(CliSecrets, TortureWorkersNeverHoldThePasswordInTheirEnvironment) {
  auto server = RedisServer::start(RedisServerOptions{.password = kRedisPassword});
  const std::string uri = fmt::format("redis://:{}@127.0.0.1:{}", kRedisPassword, server->port());
  ChildProcess torture = ChildProcess::spawn(
      cli_argv({"torture", "--workers", "2", "--duration", "3s", "--faults", "none", "--work-dir",
                dir_ + "/environ-torture"}),
      // A FENCELOCK_SECRETS_FD of the user's own must not displace the workers' pipe.
      {"FENCELOCK_BACKEND=" + uri, "FENCELOCK_REDIS_PASSWORD=" + std::string(kRedisPassword),
       "FENCELOCK_SECRETS_FD=8"});
  int seen = 0;
  bool found = false;
  std::optional<int> status;
  while (!(status = torture.wait_for(std::chrono::milliseconds(5)))) {
    seen += scan_environments("torture-worker", kRedisPassword, found);
  }
  EXPECT_EQ(*status, 0);
  EXPECT_GT(seen, 0) << "no worker was seen: this test proves nothing";
  EXPECT_FALSE(found) << "a worker's environment held the password";
}

TEST_F(CliSecrets, ARedisPasswordAppearsInNoOutputChannel) {
  auto server = RedisServer::start(RedisServerOptions{.password = kRedisPassword});
  const std::string uri = server->uri_with_credentials();
  ASSERT_THAT(uri, HasSubstr(kRedisPassword));
  Channels out;
  run_status_list("redis-uri", uri, out);
  // The password from the environment instead of the URI: the command must not get it either.
  run_status_list("redis-env", server->uri(), out,
                  {std::string("FENCELOCK_REDIS_PASSWORD=") + kRedisPassword});
  torture("redis", uri, out);
  RunResult bench =
      run_cli({"bench", "--backend", uri, "--scenario", "uncontended", "--seconds", "1"}, {}, 1min);
  EXPECT_EQ(bench.exit_code, 0) << bench.stderr_text;
  out.add("bench", bench);
  RunResult bench_json =
      run_cli({"bench", "--backend", uri, "--json", "--scenario", "uncontended", "--seconds", "1"},
              {}, 1min);
  out.add("bench --json", bench_json);
  out.add("migrate", run_cli({"migrate", "--backend", uri}));

  // Failures: a wrong password, an unreachable server, a malformed URI, each in both formats.
  const std::string wrong = fmt::format("redis://:{}@127.0.0.1:{}", kWrongPassword, server->port());
  const std::string unreachable = fmt::format("redis://:{}@127.0.0.1:1", kRedisPassword);
  const std::string malformed = fmt::format("redis://:{}@127.0.0.1:notaport", kRedisPassword);
  for (const auto& bad : {wrong, unreachable, malformed}) {
    failing_runs(bad, out);
    out.add("failing torture", run_cli({"torture", "--backend", bad, "--duration", "1s"}));
  }
  expect_nowhere(out, {kRedisPassword, kWrongPassword});
}

TEST_F(CliSecrets, APostgresPasswordWithUriDelimitersAppearsInNoOutputChannel) {
  auto server = PostgresServer::start(PostgresServerOptions{.password = kPostgresPassword});
  // Raw, not percent-encoded: the form that leaked.
  const std::string uri = fmt::format("postgres://fencelock:{}@127.0.0.1:{}/fencelock",
                                      kPostgresPassword, server->port());
  Channels out;
  out.add("migrate", run_cli({"migrate", "--backend", uri}));
  run_status_list("postgres-advisory", uri, out);
  run_status_list("postgres-lease", uri + "?mode=lease", out);
  // From PGPASSWORD: kept from the command too.
  run_status_list("postgres-env",
                  fmt::format("postgres://fencelock@127.0.0.1:{}/fencelock", server->port()), out,
                  {std::string("PGPASSWORD=") + kPostgresPassword});
  torture("postgres", uri, out);
  const std::string wrong =
      fmt::format("postgres://fencelock:{}@127.0.0.1:{}/fencelock", kWrongPassword, server->port());
  const std::string unreachable =
      fmt::format("postgres://fencelock:{}@127.0.0.1:1/fencelock", kPostgresPassword);
  const std::string malformed = fmt::format("postgres://fencelock:{}%@127.0.0.1:{}/fencelock",
                                            kPostgresPassword, server->port());
  for (const auto& bad : {wrong, unreachable, malformed}) failing_runs(bad, out);
  // Pieces libpq used to quote ("could not translate host name "cret@127.0.0.1"").
  expect_nowhere(out, {kPostgresPassword, kWrongPassword, "5e2/b", "b@secret"});
}

}  // namespace
}  // namespace fencelock::testing
