// `fencelock status` and `fencelock list` while a `fencelock run` holds a lock, and after.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

using nlohmann::json;
using ::testing::HasSubstr;

class CliInspect : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = RedisServer::start();
    dir_ = make_temp_dir("fencelock-cli-inspect-");
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  RunResult cli(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--backend", server_->uri()});
    return run_cli(args);
  }

  std::unique_ptr<RedisServer> server_;
  std::string dir_;
};

// Whether `text` has a byte that a terminal would act on, other than the newlines that end lines.
bool has_terminal_control(const std::string& text) {
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7f || c == 0x9b) return true;
  }
  return false;
}

// A lock name and holder metadata with terminal escapes (set the window title, clear the
// screen) and a newline that forges a row: status and list print them escaped, one line per
// row; --json keeps the raw bytes (JSON escapes them itself). Before, they reached the terminal.
TEST_F(CliInspect, TerminalEscapesInNamesAndMetadataAreShownEscaped) {
  const std::string name = "evil\x1b]0;pwned\x07\x1b[2J\nforged/row";
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make(name),
                               {.ttl = 20s, .metadata = R"({"host":"h\u001b[2J\nX","pid":1})"});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();

  auto list = cli({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.stderr_text;
  EXPECT_FALSE(has_terminal_control(list.stdout_text)) << list.stdout_text;
  EXPECT_EQ(std::count(list.stdout_text.begin(), list.stdout_text.end(), '\n'), 2)
      << "a header and one row: " << list.stdout_text;
  EXPECT_THAT(list.stdout_text, HasSubstr("evil\\x1b]0;pwned\\x07\\x1b[2J\\nforged/row"));

  auto status = cli({"status", name});
  ASSERT_EQ(status.exit_code, 0) << status.stderr_text;
  EXPECT_FALSE(has_terminal_control(status.stdout_text)) << status.stdout_text;
  EXPECT_THAT(status.stdout_text, HasSubstr("host=h\\x1b[2J\\nX"));

  auto as_json = cli({"status", "--json", name});
  ASSERT_EQ(as_json.exit_code, 0) << as_json.stderr_text;
  EXPECT_EQ(json::parse(as_json.stdout_text)["key"], name);
}

// Names that are not UTF-8 stay apart in --json: each such byte is written as \udcXX (before,
// both became U+FFFD and "a\xff" and "a\xfe" printed the same name); a prefix the user typed
// is echoed back escaped like any other human output.
TEST_F(CliInspect, NamesThatAreNotUtf8StayDistinctInJsonAndEchoedTextIsEscaped) {
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto ff = client->acquire(*LockKey::make("bytes/a\xff"), {.ttl = 20s});
  auto fe = client->acquire(*LockKey::make("bytes/a\xfe"), {.ttl = 20s});
  ASSERT_TRUE(ff.ok() && fe.ok());

  auto list = cli({"list", "--json", "bytes/"});
  ASSERT_EQ(list.exit_code, 0) << list.stderr_text;
  EXPECT_THAT(list.stdout_text, HasSubstr(R"("key":"bytes/a\udcff")"));
  EXPECT_THAT(list.stdout_text, HasSubstr(R"("key":"bytes/a\udcfe")"));
  auto status = cli({"status", "--json", "bytes/a\xff"});
  ASSERT_EQ(status.exit_code, 0) << status.stderr_text;
  EXPECT_THAT(status.stdout_text, HasSubstr(R"("key":"bytes/a\udcff")"));

  auto none = cli({"list", "none\x1b[31m/"});
  ASSERT_EQ(none.exit_code, 0) << none.stderr_text;
  EXPECT_FALSE(has_terminal_control(none.stdout_text)) << none.stdout_text;
  EXPECT_THAT(none.stdout_text, HasSubstr("no locks held under 'none\\x1b[31m/'"));
}

// `list --max-locks N`: more matching locks than N is an error that says to narrow the prefix
// (no partial table); N = 0 or a timeout of 0 are usage errors.
TEST_F(CliInspect, ListStopsAtMaxLocksAndRefusesBoundsThatAllowNothing) {
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  std::vector<Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto lease = client->acquire(*LockKey::make("bounded/" + std::to_string(i)), {.ttl = 20s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    held.push_back(std::move(*lease));
  }
  auto all = cli({"list", "--max-locks", "3", "bounded/"});
  EXPECT_EQ(all.exit_code, 0) << all.stderr_text;
  auto over = cli({"list", "--max-locks", "2", "bounded/"});
  EXPECT_NE(over.exit_code, 0);
  EXPECT_THAT(over.stderr_text, HasSubstr("more than 2 locks match the prefix 'bounded/'"));
  EXPECT_EQ(over.stdout_text, "");
  auto zero = cli({"list", "--max-locks", "0"});
  EXPECT_EQ(zero.exit_code, 64) << zero.stderr_text;
  EXPECT_THAT(zero.stderr_text, HasSubstr("--max-locks must be at least 1"));
  auto no_time = cli({"list", "--timeout", "0s"});
  EXPECT_EQ(no_time.exit_code, 64) << no_time.stderr_text;
  EXPECT_THAT(no_time.stderr_text, HasSubstr("--timeout must be greater than 0"));
}

// A key in fencelock's layout whose name is no lock key (written by another client, 605 bytes):
// `list` shows the real locks and says on stderr, once, that it left one out.
TEST_F(CliInspect, ListSaysOnStderrThatItLeftOutANameThatIsNoLockKey) {
  auto client = Client::connect(server_->uri());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  auto lease = client->acquire(*LockKey::make("jobs/real"), {.ttl = 20s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  const std::string foreign = "fencelock:{jobs/" + std::string(600, 'x') + "}";
  ASSERT_EQ(server_->command({"SET", foreign, std::string(32, 'a'), "PX", "20000"}), "OK");

  auto list = cli({"list", "jobs/"});
  ASSERT_EQ(list.exit_code, 0) << list.stderr_text;
  EXPECT_THAT(list.stdout_text, HasSubstr("jobs/real"));
  EXPECT_EQ(std::count(list.stdout_text.begin(), list.stdout_text.end(), '\n'), 2)
      << "a header and one row: " << list.stdout_text;
  EXPECT_THAT(list.stderr_text,
              HasSubstr("fencelock: warning: list: left out 1 held lock(s) whose name is not a "
                        "lock key"));
  EXPECT_THAT(list.stderr_text, HasSubstr("605 bytes"));
}

// The default holder metadata carries the program's name, which need not be UTF-8: a fencelock
// started under the name "fl\xff" must list and run. Before, encoding it threw at connect and
// the tool aborted (exit 134).
TEST_F(CliInspect, AProgramNameThatIsNotUtf8DoesNotAbort) {
  const std::string link = path("fl\xff");
  ASSERT_EQ(::symlink(cli_path().c_str(), link.c_str()), 0);
  auto list = run_command({link, "list", "--backend", server_->uri()});
  EXPECT_EQ(list.exit_code, 0) << list.stderr_text;
  auto run = run_command({link, "run", "--backend", server_->uri(), "utf8", "--", "true"});
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  // A command whose name is not UTF-8 (its name goes into the holder metadata).
  const std::string command = path("t\xfe");
  ASSERT_EQ(::symlink("/bin/true", command.c_str()), 0);
  auto odd = run_cli({"run", "--backend", server_->uri(), "utf8", "--", command});
  EXPECT_EQ(odd.exit_code, 0) << odd.stderr_text;
}

TEST_F(CliInspect, StatusAndListShowAHeldLockThenFree) {
  ChildProcess holder = spawn_cli(
      {"run", "--backend", server_->uri(), "--ttl", "20s", "jobs/nightly", "--", "sh", "-c",
       "trap 'kill $! 2>/dev/null; exit 0' TERM; echo started > \"$1\"; sleep 60 & wait", "sh",
       path("started")},
      path("stdout"), path("stderr"));
  ASSERT_TRUE(eventually([&] { return file_exists(path("started")); }))
      << read_file(path("stderr"));

  auto status = cli({"status", "--json", "jobs/nightly"});
  ASSERT_EQ(status.exit_code, 0) << status.stderr_text;
  json held = json::parse(status.stdout_text);
  EXPECT_EQ(held["key"], "jobs/nightly");
  EXPECT_EQ(held["held"], true);
  ASSERT_TRUE(held["token"].is_number_unsigned()) << held.dump();
  EXPECT_GT(held["token"].get<std::uint64_t>(), 0u);
  EXPECT_GT(held["ttl_ms"].get<long>(), 0);
  EXPECT_LE(held["ttl_ms"].get<long>(), 20'000);
  EXPECT_EQ(held["owner"].get<std::string>().size(), 8u);
  ASSERT_TRUE(held["holder"].is_object()) << held.dump();
  EXPECT_EQ(held["holder"]["pid"], holder.pid());
  EXPECT_EQ(held["holder"]["command"], "sh");

  auto human = cli({"status", "jobs/nightly"});
  ASSERT_EQ(human.exit_code, 0) << human.stderr_text;
  EXPECT_THAT(human.stdout_text, HasSubstr("jobs/nightly: held"));
  EXPECT_THAT(human.stdout_text,
              HasSubstr(fmt::format("token   {}", held["token"].get<std::uint64_t>())));

  auto list = cli({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.stderr_text;
  json all = json::parse(list.stdout_text);
  ASSERT_TRUE(all.is_array());
  ASSERT_EQ(all.size(), 1u) << all.dump();
  EXPECT_EQ(all[0]["key"], "jobs/nightly");
  EXPECT_EQ(all[0]["token"], held["token"]);

  EXPECT_EQ(json::parse(cli({"list", "--json", "jobs/"}).stdout_text).size(), 1u);
  EXPECT_EQ(json::parse(cli({"list", "--json", "other/"}).stdout_text).size(), 0u);
  auto table = cli({"list"});
  EXPECT_THAT(table.stdout_text, HasSubstr("KEY"));
  EXPECT_THAT(table.stdout_text, HasSubstr("jobs/nightly"));

  holder.signal(SIGTERM);
  auto code = holder.wait_for(15s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << read_file(path("stderr"));

  auto free_json = cli({"status", "--json", "jobs/nightly"});
  EXPECT_EQ(free_json.exit_code, 0) << free_json.stderr_text;
  EXPECT_EQ(json::parse(free_json.stdout_text), json({{"key", "jobs/nightly"}, {"held", false}}));
  auto free_text = cli({"status", "jobs/nightly"});
  EXPECT_EQ(free_text.exit_code, 0);
  EXPECT_EQ(free_text.stdout_text, "jobs/nightly: free\n");
  EXPECT_EQ(json::parse(cli({"list", "--json"}).stdout_text), json::array());
  EXPECT_EQ(cli({"list"}).stdout_text, "no locks held\n");
}

TEST_F(CliInspect, StatusOfAnUnreachableBackendGives69) {
  auto r = run_cli(
      {"status", "--backend", fmt::format("redis://127.0.0.1:{}", free_loopback_port()), "k"});
  EXPECT_EQ(r.exit_code, 69);
  EXPECT_TRUE(is_one_error_line(r.stderr_text)) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "");
}

TEST_F(CliInspect, JsonErrorsAreOneJsonObjectOnStderr) {
  auto r = run_cli({"status", "--json", "--backend",
                    fmt::format("redis://127.0.0.1:{}", free_loopback_port()), "k"});
  EXPECT_EQ(r.exit_code, 69);
  json error = json::parse(r.stderr_text);
  EXPECT_EQ(error["error"], "unavailable");
  EXPECT_EQ(error["exit_code"], 69);
}

}  // namespace
}  // namespace fencelock::testing
