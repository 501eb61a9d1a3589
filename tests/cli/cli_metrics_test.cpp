// `fencelock run --metrics FILE` against a real redis-server: the client's metrics are written in
// Prometheus text format when `run` exits, on every exit after the client connected (the command
// ran, or the lock was held), and never with a password in them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_harness.h"
#include "fencelock/client.h"

namespace fencelock::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of the sample `name{backend="..."}` in `text` (one line), or -1 if absent.
long sample_value(const std::string& text, const std::string& name) {
  const std::regex line("(^|\n)" + name + R"(\{backend="[^"\n]*"\} ([0-9]+)\n)");
  std::smatch m;
  if (!std::regex_search(text, m, line)) return -1;
  return std::stol(m[2]);
}

class CliMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = RedisServer::start();
    dir_ = make_temp_dir("fencelock-cli-metrics-");
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::unique_ptr<RedisServer> server_;
  std::string dir_;
};

TEST_F(CliMetrics, RunWritesOneGrantAndOneReleaseWhenTheCommandExits) {
  const std::string file = path("fencelock.prom");
  auto r =
      run_cli({"run", "--metrics", file, "--backend", server_->uri(), "metrics/key", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_TRUE(file_exists(file)) << r.stderr_text;
  const std::string text = read_file(file);
  EXPECT_EQ(sample_value(text, "fencelock_grants_total"), 1) << text;
  EXPECT_EQ(sample_value(text, "fencelock_releases_total"), 1) << text;
  EXPECT_EQ(sample_value(text, "fencelock_acquire_duration_seconds_count"), 1) << text;
  EXPECT_THAT(text, HasSubstr("# TYPE fencelock_grants_total counter\n"));
  EXPECT_THAT(text, HasSubstr("backend=\"" + server_->uri() + "\""));
  EXPECT_FALSE(file_exists(file + ".tmp")) << "the temporary file was left behind";
}

// Another user plants FILE.tmp as a symlink to a file only root may write; root's run --metrics
// FILE must neither follow it nor fail. Before, FILE.tmp was opened with fopen("w") and the
// victim was overwritten with the metrics.
TEST_F(CliMetrics, APlantedTemporaryFileSymlinkIsNeverFollowed) {
  const std::string victim = path("victim"), file = path("x.prom");
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), (file + ".tmp").c_str()), 0);
  auto r =
      run_cli({"run", "--metrics", file, "--backend", server_->uri(), "metrics/key", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_file(victim), "precious\n") << "the metrics went through the planted symlink";
  EXPECT_EQ(sample_value(read_file(file), "fencelock_grants_total"), 1) << read_file(file);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 3) << "a temporary file was left behind";  // victim, x.prom.tmp, x.prom
}

TEST_F(CliMetrics, RunWritesContentionWhenTheLockIsHeldAndTheCommandDoesNotRun) {
  auto holder = Client::connect(server_->uri());
  ASSERT_TRUE(holder.ok()) << holder.status().to_string();
  auto held = holder->acquire(*LockKey::make("metrics/held"));
  ASSERT_TRUE(held.ok()) << held.status().to_string();

  const std::string file = path("held.prom");
  auto r = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "--wait", "50ms",
                    "metrics/held", "--", "touch", path("ran")});
  EXPECT_EQ(r.exit_code, 75) << r.stderr_text;
  EXPECT_FALSE(file_exists(path("ran")));
  const std::string text = read_file(file);
  EXPECT_EQ(sample_value(text, "fencelock_grants_total"), 0) << text;
  EXPECT_EQ(sample_value(text, "fencelock_contended_total"), 1) << text;
  EXPECT_EQ(sample_value(text, "fencelock_timeouts_total"), 1) << text;
}

TEST_F(CliMetrics, RunKeepsTheCommandsExitCodeAndTheFileHasNoPassword) {
  auto secured = RedisServer::start(RedisServerOptions{.password = "metrics-secret"});
  const std::string file = path("secured.prom");
  auto r = run_cli({"run", "--metrics", file, "--backend", secured->uri_with_credentials(),
                    "metrics/key", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.stderr_text;
  const std::string text = read_file(file);
  EXPECT_EQ(sample_value(text, "fencelock_grants_total"), 1) << text;
  EXPECT_THAT(text, Not(HasSubstr("metrics-secret")));
}

TEST_F(CliMetrics, AnUnwritableMetricsPathIsAUsageErrorBeforeConnecting) {
  for (const std::string& file : {path("no-such-dir/fencelock.prom"), dir_}) {
    auto r = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "metrics/key", "--",
                      "touch", path("ran")});
    EXPECT_EQ(r.exit_code, 64) << file << ": " << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr("--metrics")) << file;
    EXPECT_FALSE(file_exists(path("ran"))) << file;
    EXPECT_TRUE(held_lock_keys(*server_).empty()) << file << ": acquired despite the usage error";
  }
}

// Another user links FILE to a FIFO (or a device) in a shared directory: root's run --metrics
// FILE must write nothing through the link, and a FIFO or device named directly is refused too.
// Before, a FILE that was (or led to) something other than a regular file was written in place:
// the metrics went into the FIFO here, and into a block device in the review's attack.
TEST_F(CliMetrics, AMetricsFileThatIsALinkOrAFifoIsRefusedAndNothingIsWrittenThroughIt) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);  // a reader: a write into the FIFO would not block, and is seen here
  const std::string link = path("z.prom");
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  for (const auto& [file, kind] : {std::pair<std::string, std::string>{link, "a symbolic link"},
                                   {fifo, "a FIFO"},
                                   {"/dev/null", "a device"}}) {
    auto r = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "metrics/key", "--",
                      "touch", path("ran")});
    EXPECT_EQ(r.exit_code, 64) << file << ": " << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr(kind)) << file;
    EXPECT_FALSE(file_exists(path("ran"))) << file;
  }
  // A link planted while the command runs: the write at the end refuses it (a warning), the
  // command's exit code stands.
  const std::string late = path("late.prom");
  auto r = run_cli({"run", "--metrics", late, "--backend", server_->uri(), "metrics/key", "--",
                    "ln", "-s", fifo, late});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("cannot write metrics")) << r.stderr_text;
  char byte = 0;
  const ssize_t got = ::read(reader, &byte, 1);
  EXPECT_LE(got, 0) << "metrics were written into the FIFO through the link";
  ::close(reader);
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the planted link was replaced";
}

// A path through a directory that another user can change is refused: that user could swap a
// directory on the way for a link to, say, /root while the command runs. Before, only the last
// component was protected: an attack replaced a root-only 0600 file (which became 0644) through
// a directory symlink planted in a directory of its own. Root's test also plants a directory and
// a symlink owned by nobody.
TEST_F(CliMetrics, APathThroughADirectoryAnotherUserControlsIsRefused) {
  const std::string victim_dir = path("private");
  ASSERT_EQ(::mkdir(victim_dir.c_str(), 0700), 0);
  const std::string victim = victim_dir + "/secret";
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  std::vector<std::pair<std::string, std::string>> cases;  // --metrics path, what it names
  const std::string open_dir = path("open");
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);  // world-writable, not sticky
  cases.emplace_back(open_dir + "/x.prom", "writable by other users");
  if (::geteuid() == 0) {
    const std::string theirs = path("theirs");
    ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    cases.emplace_back(theirs + "/x.prom", "belongs to another user");
    const std::string link = path("link");
    ASSERT_EQ(::symlink(victim_dir.c_str(), link.c_str()), 0);
    ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
    cases.emplace_back(link + "/secret", "belongs to another user");
  }
  for (const auto& [file, says] : cases) {
    auto r = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "metrics/key", "--",
                      "touch", path("ran")});
    EXPECT_EQ(r.exit_code, 64) << file << ": " << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr(says)) << file;
    EXPECT_FALSE(file_exists(path("ran"))) << file;
  }
  EXPECT_EQ(read_file(victim), "precious\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// torture's worker logs in --work-dir: a hard link planted there to another file is not
// appended to (before: the lease lines went into the linked file).
// Root's run replacing a metrics file that another user planted in a shared directory: the new
// file does not take the planted file's mode (it made root's file writable by all), and the
// planted last-success value is not carried over (it faked a recent success).
TEST_F(CliMetrics, APlantedMetricsFileGivesNeitherItsModeNorItsValues) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to plant a file of another user";  // CI runs as root
  }
  const std::string shared = path("shared");
  ASSERT_EQ(::mkdir(shared.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string file = shared + "/m.prom";
  std::ofstream(file) << "fencelock_run_last_success_timestamp_seconds{key=\"k\"} 99999999999\n";
  ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  auto r = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "k", "--", "false"});
  EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "the planted file's mode was taken";
  EXPECT_THAT(read_file(file), Not(HasSubstr("99999999999"))) << "the planted value was carried";
}

// --work-dir through a symlink that another user planted: refused before anything is created
// where it points (std::filesystem::create_directories followed it, then the check refused).
TEST_F(CliMetrics, TortureCreatesNoWorkDirThroughAnotherUsersLink) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to plant a link of another user";  // CI runs as root
  }
  const std::string target = path("target"), link = path("planted");
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  auto r = run_cli({"torture", "--backend", server_->uri(), "--duration", "2s", "--workers", "1",
                    "--faults", "none", "--work-dir", link + "/sub/deeper"});
  EXPECT_EQ(r.exit_code, 64) << r.stderr_text;
  EXPECT_THAT(r.stderr_text, HasSubstr("belongs to another user"));
  EXPECT_FALSE(std::filesystem::exists(target + "/sub")) << "created through the planted link";
}

TEST_F(CliMetrics, TortureWritesNoLogThroughAHardLinkInItsWorkDir) {
  const std::string work = path("work"), victim = path("victim");
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::link(victim.c_str(), (work + "/worker-0.log").c_str()), 0);
  auto r = run_cli({"torture", "--backend", server_->uri(), "--workers", "1", "--duration", "2s",
                    "--faults", "none", "--work-dir", work},
                   {}, std::chrono::minutes(1));
  (void)r;  // the run's verdict does not matter here, only where its logs went
  EXPECT_EQ(read_file(victim), "precious\n") << r.stderr_text;
}

// The line of `sample` (name and labels) in `text`, without the sample: its value; "" if absent.
std::string value_of(const std::string& text, const std::string& sample) {
  const auto at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return "";
  const auto start = at + sample.size() + 2;
  return text.substr(start, text.find('\n', start) - start);
}

// For a cron job's monitoring (node_exporter's textfile collector): the run's duration, exit code
// and the time of the last run of the key that exited 0, labelled with the key; a failed run
// keeps the last success of the file it replaces.
TEST_F(CliMetrics, RunWritesItsDurationExitCodeAndLastSuccessPerKey) {
  const std::string file = path("cron.prom");
  const std::string labels = R"({key="cron/\"nightly\""})";
  auto ok = run_cli(
      {"run", "--metrics", file, "--backend", server_->uri(), "cron/\"nightly\"", "--", "true"});
  ASSERT_EQ(ok.exit_code, 0) << ok.stderr_text;
  const std::string first = read_file(file);
  EXPECT_EQ(value_of(first, "fencelock_run_exit_code" + labels), "0") << first;
  EXPECT_NE(value_of(first, "fencelock_run_duration_seconds" + labels), "") << first;
  const std::string success =
      value_of(first, "fencelock_run_last_success_timestamp_seconds" + labels);
  ASSERT_NE(success, "") << first;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(std::stod(success), now, 60.0);
  EXPECT_THAT(first, HasSubstr("# TYPE fencelock_run_last_success_timestamp_seconds gauge\n"));

  auto failed = run_cli({"run", "--metrics", file, "--backend", server_->uri(), "cron/\"nightly\"",
                         "--", "sh", "-c", "exit 3"});
  ASSERT_EQ(failed.exit_code, 3) << failed.stderr_text;
  const std::string second = read_file(file);
  EXPECT_EQ(value_of(second, "fencelock_run_exit_code" + labels), "3") << second;
  EXPECT_EQ(value_of(second, "fencelock_run_last_success_timestamp_seconds" + labels), success)
      << "the failed run lost the last success";
}

TEST_F(CliMetrics, NoFileWhenTheBackendCannotBeReached) {
  std::string gone_uri;
  {
    auto gone = RedisServer::start();
    gone_uri = gone->uri();
  }  // stopped: nothing listens on its port any more
  const std::string file = path("unreachable.prom");
  auto r = run_cli({"run", "--metrics", file, "--backend", gone_uri, "metrics/key", "--", "true"});
  EXPECT_EQ(r.exit_code, 69) << r.stderr_text;
  EXPECT_FALSE(file_exists(file));
}

}  // namespace
}  // namespace fencelock::testing
