// `fencelock run` guards CMD's whole process tree: no process CMD started outlives the lock, not
// when the lease is lost, not when CMD exits first, and not when fencelock itself is killed.
// Against a real redis-server; the processes are real shells and sleeps, observed through /proc.
#include <dirent.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
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
#include "core/errno_text.h"

namespace fencelock::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

bool alive(pid_t pid) { return process_alive(pid); }

std::vector<pid_t> pids_in(const std::string& file) {
  std::vector<pid_t> pids;
  for (const std::string& line : read_lines(file)) {
    if (!line.empty()) pids.push_back(static_cast<pid_t>(std::stol(line)));
  }
  return pids;
}

// Every process's state letter and parent, from /proc/PID/stat.
struct ProcessRow {
  char state = '?';
  pid_t ppid = 0;
};
std::map<pid_t, ProcessRow> process_table() {
  std::map<pid_t, ProcessRow> table;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return table;
  while (const dirent* entry = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atol(entry->d_name));
    if (pid <= 0) continue;
    const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    std::istringstream rest(stat.substr(close + 2));
    ProcessRow row;
    long ppid = 0;
    rest >> row.state >> ppid;
    row.ppid = static_cast<pid_t>(ppid);
    table[pid] = row;
  }
  ::closedir(dir);
  return table;
}

// The processes below `root` whose command line is exactly `sleep 60`.
std::vector<pid_t> sleeps_below(pid_t root) {
  std::map<pid_t, pid_t> parent;
  for (const auto& [pid, row] : process_table()) parent[pid] = row.ppid;
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    std::string cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
    if (cmdline != std::string("sleep\0"
                               "60\0",
                               9))
      continue;
    for (pid_t up = ppid; up > 1 && parent.count(up) != 0; up = parent[up]) {
      if (up == root) {
        out.push_back(pid);
        break;
      }
    }
  }
  return out;
}

// Each worker records its pid in $1 (one line) and then sleeps, ignoring nothing.
constexpr const char* kWorker = "sh -c 'echo $$ >> \"$0\"; exec sleep 60' \"$1\"";

class CliRunTree : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = RedisServer::start();
    dir_ = make_temp_dir("fencelock-cli-tree-");
  }
  // A failed test leaves no sleeps behind: ChildProcess kills fencelock's group, and fencelock's
  // guardian then kills CMD's.
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Starts `fencelock run [options] KEY -- sh -c SCRIPT sh <pids file>` and waits until the
  // pids file has `workers` lines.
  ChildProcess start(const std::string& key, const std::string& script, std::size_t workers,
                     std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"run", "--backend", server_->uri()};
    args.insert(args.end(), options.begin(), options.end());
    for (const std::string& a : {key, std::string("--"), std::string("sh"), std::string("-c"),
                                 script, std::string("sh"), path("pids")}) {
      args.push_back(a);
    }
    ChildProcess cli = spawn_cli(args, path("stdout"), path("stderr"));
    EXPECT_TRUE(eventually([&] { return pids_in(path("pids")).size() >= workers; }))
        << read_file(path("stderr"));
    return cli;
  }

  std::unique_ptr<RedisServer> server_;
  std::string dir_;
};

TEST_F(CliRunTree, ALostLeaseEndsAPipelineAndABackgroundJobBeforeFencelockExits) {
  const std::string script =
      fmt::format("{0} | {0} & {0} & wait", kWorker);  // a background pipeline and a background job
  ChildProcess cli = start("tree-lost", script, 3, {"--ttl", "1s", "--kill-grace", "5s"});
  const std::vector<pid_t> workers = pids_in(path("pids"));
  ASSERT_EQ(workers.size(), 3u);
  for (pid_t pid : workers) ASSERT_TRUE(alive(pid));

  server_->command({"DEL", "fencelock:{tree-lost}"});
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << "fencelock did not notice the lost lease";
  EXPECT_EQ(*code, 73) << read_file(path("stderr"));
  // When fencelock exits, the lock's protection is over: no worker may still run.
  for (pid_t pid : workers) EXPECT_FALSE(alive(pid)) << "worker " << pid << " outlived the lease";
  EXPECT_THAT(read_file(path("stderr")), HasSubstr("and every process it started"));
}

TEST_F(CliRunTree, ProcessesLeftBehindByCmdAreEndedBeforeTheLockIsReleased) {
  // The command exits at once; one worker ignores SIGTERM, one left CMD's session (setsid).
  const std::string script = fmt::format(
      "sh -c 'trap \"\" TERM; echo $$ >> \"$0\"; while :; do sleep 0.05; done' \"$1\" & "
      "setsid {0} & "
      "while [ $(wc -l < \"$1\") -lt 2 ]; do sleep 0.01; done; exit 3",
      kWorker);
  for (const bool json : {false, true}) {
    SCOPED_TRACE(json ? "--json" : "text");
    std::vector<std::string> args = {"run", "--backend", server_->uri(), "--kill-grace", "300ms"};
    if (json) args.emplace_back("--json");
    for (const std::string& a : {std::string("tree-left"), std::string("--"), std::string("sh"),
                                 std::string("-c"), script, std::string("sh"), path("pids")}) {
      args.push_back(a);
    }
    std::ofstream(path("pids"), std::ios::trunc).close();
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 3) << "fencelock run exits with CMD's own code: " << r.stderr_text;
    const std::vector<pid_t> workers = pids_in(path("pids"));
    ASSERT_EQ(workers.size(), 2u);
    for (pid_t pid : workers) EXPECT_FALSE(alive(pid)) << "process " << pid << " outlived the lock";
    if (json) {
      nlohmann::json summary = nlohmann::json::parse(r.stderr_text);
      EXPECT_EQ(summary["exit_code"], 3);
      // The two workers, and maybe the `sleep 0.05` of the one ignoring SIGTERM.
      EXPECT_GE(summary["leftover_processes"].get<int>(), 2);
      EXPECT_EQ(summary["killed"], true);
    } else {
      EXPECT_THAT(r.stderr_text, HasSubstr("sh exited but left "));
      EXPECT_THAT(r.stderr_text, HasSubstr("sent SIGKILL to all of them"));
    }
    EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
  }
}

// A command whose work keeps moving to a new pid (each generation starts the next in a new
// session and exits at once, as a daemon's double fork does) once made one scan of /proc find
// nothing: the child was created after the scan had read past its pid, and the parent was a
// zombie by the time its stat was read. fencelock then released the lock while the work went on
// (an attack measured writes 945 ms after the next holder's grant). The lock must stay held
// until the last generation, which writes END, has exited.
TEST_F(CliRunTree, WorkThatKeepsMovingToNewPidsIsWaitedForBeforeTheLockIsReleased) {
  const std::string hop = path("hop.sh");
  std::ofstream(hop) << "trap '' TERM\n"
                        "echo $$ >> \"$2\"\n"
                        "if [ \"$1\" -ge 300 ]; then echo END >> \"$2\"; exit 0; fi\n"
                        "setsid sh \"$0\" $(($1 + 1)) \"$2\" &\n";
  std::ofstream(path("hops"), std::ios::trunc).close();
  auto r = run_cli({"run", "--backend", server_->uri(), "--kill-grace", "60s", "tree-hop", "--",
                    "sh", hop, "0", path("hops")});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::vector<std::string> lines = read_lines(path("hops"));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "END") << "fencelock run released the lock after " << lines.size()
                                 << " of 302 lines, while the work went on";
  EXPECT_THAT(r.stderr_text, HasSubstr("left "));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
  // Cleanup when the assertion failed: the generations end by themselves.
  EXPECT_TRUE(eventually([&] { return read_lines(path("hops")).back() == "END"; }, 30s, 10ms));
}

// True while some thread of `pid` runs: /proc shows a process whose main thread exited as 'Z'
// although its other threads run on (the 20th field, num_threads, is then above 1).
bool some_thread_runs(pid_t pid) {
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  long field = 0;
  rest >> state;
  for (int i = 4; i <= 20 && rest >> field; ++i) {
  }
  return state != "Z" && state != "X" ? true : field > 1;
}

// A process whose main thread ended (pthread_exit) while another thread writes on reads as a
// zombie in /proc: fencelock took it for one, released the lock while it wrote on (an attack saw
// 1,998 to 2,168 writes after the next holder's grant), and the guardian would not have killed it
// either. It is a process like any other: ended before the lock is released.
TEST_F(CliRunTree, AProcessWhoseMainThreadExitedIsEndedBeforeTheLockIsReleased) {
  const std::string out = path("threads");
  // CMD starts the writer and exits once it has written; the writer is left behind.
  const std::string script =
      ": > \"$1\"; \"$0\" --thread \"$1\" & "
      "while [ \"$(wc -l < \"$1\")\" -lt 3 ]; do sleep 0.01; done";
  auto r = run_cli({"run", "--backend", server_->uri(), "--kill-grace", "300ms", "tree-thread",
                    "--", "sh", "-c", script, MONOTONIC_WRITER, out});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_FALSE(lines.empty());
  ASSERT_TRUE(lines.front().starts_with("pid "));
  const pid_t writer = static_cast<pid_t>(std::stol(lines.front().substr(4)));
  EXPECT_FALSE(some_thread_runs(writer))
      << "the writer's thread ran on after fencelock run released the lock";
  EXPECT_THAT(r.stderr_text, HasSubstr("left "));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
  ::kill(writer, SIGKILL);  // cleanup when the assertion failed
}

TEST_F(CliRunTree, KillingFencelockKillsCmdAndItsBackgroundChildWithin1sAndTheGuardianExits) {
  ChildProcess cli = start("tree-kill9", fmt::format("{0} & {0} & wait", kWorker), 2);
  const std::vector<pid_t> workers = pids_in(path("pids"));
  ASSERT_EQ(workers.size(), 2u);
  const std::optional<pid_t> guardian = guardian_of(cli.pid());
  ASSERT_TRUE(guardian.has_value()) << "no fencelock-guard process shares a pipe with fencelock";
  cli.signal(SIGKILL);
  ASSERT_TRUE(cli.wait_for(5s).has_value());
  for (pid_t pid : workers) {
    EXPECT_TRUE(eventually([&] { return !alive(pid); }, 1s, 5ms))
        << "worker " << pid << " outlived fencelock run by more than 1 s";
  }
  EXPECT_TRUE(eventually([&] { return !alive(*guardian); }, 5s, 5ms))
      << "the guardian outlived fencelock and its command";
}

TEST_F(CliRunTree, WithAPidNamespaceEvenASetsidGrandchildDiesWithFencelock) {
  ChildProcess cli =
      start("tree-ns", fmt::format("setsid {0} & {0} & wait", kWorker), 2, {"--pid-namespace"});
  const std::vector<pid_t> inner = pids_in(path("pids"));  // pids inside the namespace
  ASSERT_EQ(inner.size(), 2u) << read_file(path("stderr"));
  // The workers' pids as the test sees them: the sleeps among fencelock's descendants.
  std::vector<pid_t> outer;
  ASSERT_TRUE(eventually([&] {
    outer = sleeps_below(cli.pid());
    return outer.size() == 2;
  })) << outer.size()
      << " sleeps below fencelock";
  cli.signal(SIGKILL);
  ASSERT_TRUE(cli.wait_for(5s).has_value());
  for (pid_t pid : outer) {
    EXPECT_TRUE(eventually([&] { return !alive(pid); }, 1s, 5ms))
        << "sleep " << pid << " outlived fencelock run by more than 1 s";
  }
}

TEST_F(CliRunTree, ASignalToFencelocksProcessGroupReachesEveryProcessOfCmdOnce) {
  // What a terminal's Ctrl-C does when fencelock is not the terminal's foreground job's owner:
  // SIGINT to fencelock's process group. CMD's own group is reached through fencelock.
  const std::string trap_int =
      "sh -c 'trap \"echo $$ >> \\\"$0\\\".int; exit 0\" INT; echo $$ >> \"$0\"; "
      "while :; do sleep 0.05; done' \"$1\"";
  // CMD's shell waits for its pipeline (its own INT trap does nothing).
  ChildProcess cli = start("tree-int", fmt::format("trap : INT; {0} | {0}", trap_int), 2);
  const std::vector<pid_t> workers = pids_in(path("pids"));
  ASSERT_EQ(workers.size(), 2u);
  cli.signal_group(SIGINT);
  auto code = cli.wait_for(15s);
  ASSERT_TRUE(code.has_value()) << read_file(path("stderr"));
  std::vector<pid_t> interrupted = pids_in(path("pids") + ".int");
  std::sort(interrupted.begin(), interrupted.end());
  std::vector<pid_t> expected = workers;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(interrupted, expected) << "each pipeline member gets SIGINT exactly once";
  for (pid_t pid : workers) EXPECT_FALSE(alive(pid));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

// Under a terminal (a pty), fencelock hands the terminal's foreground to CMD's group: CMD reads
// the terminal without being stopped, Ctrl-Z stops the job and fencelock with it, and Ctrl-C
// goes to CMD's whole job.
TEST_F(CliRunTree, UnderATerminalCmdReadsItCtrlZStopsTheJobAndCtrlCReachesAllOfIt) {
  const std::string script =
      "trap 'echo int-sh >> \"$1\".int; exit 130' INT; "
      "read line; echo \"$line\" > \"$1\".read; "
      "sh -c 'trap \"echo int-child >> \\\"$0\\\".int; exit 0\" INT; echo $$ >> \"$0\"; "
      "while :; do sleep 0.05; done' \"$1\"; exit 0";
  std::vector<std::string> args = cli_argv({"run", "--backend", server_->uri(), "tree-tty", "--",
                                            "sh", "-c", script, "sh", path("pids")});
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0) << detail::errno_text(errno);
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  auto reap = [&](std::chrono::milliseconds limit) -> std::optional<int> {
    int status = 0;
    std::optional<int> code;
    char buf[256];
    eventually(
        [&] {
          while (::read(master, buf, sizeof buf) > 0) {
          }  // keep the pty's buffer from filling
          if (::waitpid(pid, &status, WNOHANG) != pid) return false;
          code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        limit, 5ms);
    return code;
  };
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  const std::string input = "hello\n";
  ASSERT_EQ(::write(master, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  const bool started = eventually([&] { return !pids_in(path("pids")).empty(); });
  if (!started) {
    ::kill(pid, SIGKILL);
    reap(5s);
    FAIL() << "the command did not read the terminal (stopped by SIGTTIN?)";
  }
  EXPECT_EQ(read_file(path("pids") + ".read"), "hello\n");
  const pid_t worker = pids_in(path("pids")).front();
  auto state_of = [](pid_t p) {
    const std::string stat = read_file(fmt::format("/proc/{}/stat", p));
    const auto close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
  };

  // Ctrl-Z stops CMD's job, then fencelock itself (what a shell's job control waits for);
  // SIGCONT to fencelock (the shell's `fg`) continues both.
  const char ctrl_z = '\x1a';
  ASSERT_EQ(::write(master, &ctrl_z, 1), 1);
  int stop_status = 0;
  const bool fencelock_stopped = eventually(
      [&] { return ::waitpid(pid, &stop_status, WNOHANG | WUNTRACED) == pid; }, 15s, 5ms);
  EXPECT_TRUE(fencelock_stopped && WIFSTOPPED(stop_status)) << "fencelock did not stop with CMD";
  // Stopped: the worker is, or it is inside vfork() for its `sleep` (state D, uninterruptible
  // until the child execs) and that child was stopped before its exec. CI saw the second.
  auto stopped = [&](pid_t p) {
    const char state = state_of(p);
    if (state == 'T') return true;
    if (state != 'D') return false;
    for (const auto& [child, row] : process_table()) {
      if (row.ppid == p && row.state == 'T') return true;
    }
    return false;
  };
  EXPECT_TRUE(eventually([&] { return stopped(worker); }, 15s, 5ms))
      << "CMD's job is not stopped (state " << state_of(worker) << ")";
  ::kill(pid, SIGCONT);
  EXPECT_TRUE(eventually([&] { return !stopped(worker); }, 15s, 5ms))
      << "CMD's job was not continued";
  const char ctrl_c = '\x03';
  ASSERT_EQ(::write(master, &ctrl_c, 1), 1);
  std::optional<int> code = reap(15s);
  if (!code) {
    ::kill(pid, SIGKILL);
    reap(5s);
  }
  ::close(master);
  ASSERT_TRUE(code.has_value()) << "Ctrl-C did not end the command";
  EXPECT_EQ(*code, 130);
  std::vector<std::string> marks = read_lines(path("pids") + ".int");
  std::sort(marks.begin(), marks.end());
  EXPECT_EQ(marks, (std::vector<std::string>{"int-child", "int-sh"}));
  EXPECT_THAT(held_lock_keys(*server_), IsEmpty());
}

}  // namespace
}  // namespace fencelock::testing
