// `fencelock torture` against real servers of every backend: short runs with pause, kill,
// partition and drop faults must end SAFE with every fault kind seen taking effect, and every
// attack that broke the old checker must now be caught against a real server: a lock key deleted
// under the holders, a fence counter deleted mid-run, a write-only fence, no fence at all, a
// squatter on the key, a control program that fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stop_token>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "support/etcd_cluster.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

constexpr const char* kFaults = "pause,kill,partition,drop";

// Runs a torture and returns its JSON report (fails the test when there is none).
nlohmann::json torture(const std::string& backend, const std::vector<std::string>& extra,
                       int expected_exit) {
  std::vector<std::string> args = {"torture", "--backend", backend, "--json", "--workers", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult run = run_cli(args, {}, std::chrono::minutes(3));
  EXPECT_EQ(run.exit_code, expected_exit) << run.stderr_text << run.stdout_text;
  auto report = nlohmann::json::parse(run.stdout_text, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(report.is_object()) << run.stdout_text << run.stderr_text;
  return report.is_object() ? report : nlohmann::json::object();
}

// What every backend must show under faults. `expires` is true for TTL-based backends: there a
// holder paused past its TTL is overtaken, and its stale read or write must be refused.
void expect_safe_under_faults(const nlohmann::json& r, bool expires) {
  for (const char* count : {"fenced_violations", "lost_updates", "token_violations",
                            "exclusion_violations", "late_lost", "unsignalled_expiries"}) {
    EXPECT_EQ(r.value(count, -1), 0) << count << ": " << r.dump();
  }
  EXPECT_EQ(r.value("verdict", ""), "SAFE") << r.dump();
  EXPECT_TRUE(r.value("safe", false)) << r.dump();
  EXPECT_GT(r.value("grants", 0), 10) << r.dump();
  EXPECT_GE(r.value("faults_injected", 0), 4) << r.dump();
  for (const char* kind : {"pause", "kill", "partition", "drop"}) {
    ASSERT_TRUE(r["by_fault"].contains(kind)) << kind << " was not injected: " << r.dump();
    EXPECT_GE(r["by_fault"][kind].value("effective", 0), 1) << kind << ": " << r.dump();
  }
  EXPECT_TRUE(r.contains("overlaps"));
  if (expires) {
    EXPECT_GE(r.value("stale_rejected", 0), 1) << "no pause was absorbed: " << r.dump();
  }
}

const std::vector<std::string> kRun = {"--duration", "24s", "--faults", kFaults};

TEST(TortureCli, RedisIsSafeUnderPauseKillPartitionAndDrop) {
  auto server = RedisServer::start();
  expect_safe_under_faults(torture(server->uri(), kRun, 0), true);
}

TEST(TortureCli, RedlockIsSafeUnderPauseKillPartitionAndDrop) {
  auto cluster = RedisCluster::start(3);
  expect_safe_under_faults(torture(cluster->redlock_uri(), kRun, 0), true);
}

TEST(TortureCli, PostgresAdvisoryAndLeaseModesAreSafeUnderPauseKillPartitionAndDrop) {
  auto server = PostgresServer::start();
  // Advisory locks belong to the session: a paused holder keeps its lock, nobody overtakes it.
  expect_safe_under_faults(torture(server->uri(), kRun, 0), false);
  expect_safe_under_faults(torture(server->uri() + "?mode=lease", kRun, 0), true);
}

TEST(TortureCli, EtcdIsSafeUnderPauseKillPartitionAndDrop) {
  auto cluster = EtcdCluster::start(3);
  expect_safe_under_faults(torture(cluster->uri(), kRun, 0), true);
}

// The same faults with every worker on acquire_async / release_async (--api async): the
// asynchronous path keeps the contract, and the broken variant is caught there too.
TEST(TortureCli, TheAsyncApiIsSafeUnderPauseKillPartitionAndDropOnRedlock) {
  auto cluster = RedisCluster::start(3);
  std::vector<std::string> run = kRun;
  run.insert(run.end(), {"--api", "async"});
  auto r = torture(cluster->redlock_uri(), run, 0);
  EXPECT_EQ(r.value("api", ""), "async") << r.dump();
  expect_safe_under_faults(r, true);
  auto broken =
      torture(cluster->redlock_uri(),
              {"--duration", "10s", "--faults", "pause", "--unsafe-no-fence", "--api", "async"}, 1);
  EXPECT_EQ(broken.value("verdict", ""), "UNSAFE") << broken.dump();
}

// A server-control program for servers the test started: admin-delete KIND KEY deletes the lock
// key on every Redis; pause/resume PORT stop and continue the server on PORT.
std::string write_control_script(const std::string& dir, RedisCluster& cluster) {
  std::string cases;
  std::string deletes;
  for (int i = 0; i < cluster.size(); ++i) {
    cases += fmt::format("  {}) pid={} ;;\n", cluster[i].port(), cluster[i].pid());
    deletes += fmt::format("redis-cli -p {} DEL \"fencelock:{{$3}}\" >/dev/null || exit 1\n",
                           cluster[i].port());
  }
  std::string path = dir + "/control.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "set -eu\n"
                      << "if [ \"$1\" = admin-delete ]; then\n"
                      << deletes << "exit 0\nfi\n"
                      << "case $2 in\n"
                      << cases << "  *) exit 2 ;;\nesac\n"
                      << "case $1 in pause) kill -STOP $pid ;; resume) kill -CONT $pid ;; "
                         "*) exit 2 ;; esac\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// The fault classes that act on the lock, on Redlock: the lock taken away behind the holder's back
// (its holder must learn within a renewal period, and the next holder's overlap is then excused),
// one of three instances silent for 1.5 TTL while TTLs are short, and one request or reply held
// past later commands of other clients.
TEST(TortureCli, RedlockIsSafeUnderAdminDeletesAStalledMinorityAndADelayedCommand) {
  auto cluster = RedisCluster::start(3);
  const std::string dir = make_temp_dir("fencelock-torture-control-");
  const std::string control = write_control_script(dir, *cluster);
  auto r = torture(cluster->redlock_uri(),
                   {"--duration", "24s", "--ttl", "1s", "--faults",
                    "admin-delete,minority-stall,delay-one", "--server-control", control},
                   0);
  EXPECT_EQ(r.value("verdict", ""), "SAFE") << r.dump();
  EXPECT_EQ(r.value("deletions_unnoticed", -1), 0) << r.dump();
  EXPECT_EQ(r.value("exclusion_violations", -1), 0) << r.dump();
  EXPECT_EQ(r.value("left_held", -1), 0) << r.dump();
  for (const char* kind : {"admin-delete", "minority-stall", "delay-one"}) {
    EXPECT_GE(r["by_fault"][kind].value("effective", 0), 1) << kind << ": " << r.dump();
  }
  remove_tree(dir);
}

// A PostgreSQL primary and its streaming standby started by scripts/servers.sh (its own state
// directory and ports), which is also the control program of the failover fault.
class PostgresPair {
 public:
  // failover_min_draws: the failover's stall lasts until that many tokens were drawn in it.
  // standby false: the primary alone, with a WAL writer that flushes only every 10 s (a crash
  // loses the commits of the last seconds), for server-kill.
  explicit PostgresPair(bool synchronous, int failover_min_draws = 0, bool standby = true)
      : dir_(make_temp_dir("fencelock-torture-failover-")),
        env_{"FENCELOCK_SERVICES=postgres", "FENCELOCK_STATE_DIR=" + dir_ + "/state",
             fmt::format("FENCELOCK_PG_PORT={}", free_loopback_port()),
             std::string("FENCELOCK_PG_SYNC=") + (synchronous ? "1" : "0"),
             fmt::format("FENCELOCK_PG_FAILOVER_MIN_DRAWS={}", failover_min_draws)} {
    if (standby) {
      env_.push_back(fmt::format("FENCELOCK_PG_STANDBY_PORT={}", free_loopback_port()));
    } else {
      env_.push_back("FENCELOCK_PG_WAL_WRITER_DELAY=10s");
    }
    // As root the servers run as the OS user postgres, which must reach the state directory.
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all |
                                           std::filesystem::perms::group_exec |
                                           std::filesystem::perms::others_exec);
    RunResult started = servers({"start"}, std::chrono::minutes(2));
    if (started.exit_code != 0) {
      throw std::runtime_error("servers.sh start: " + started.stdout_text + started.stderr_text);
    }
    RunResult env = servers({"env"});
    const std::string prefix = "export FENCELOCK_PG_URI=";
    const auto at = env.stdout_text.find(prefix);
    if (at == std::string::npos) throw std::runtime_error("servers.sh env: " + env.stdout_text);
    uri_ = env.stdout_text.substr(at + prefix.size());
    uri_ = uri_.substr(0, uri_.find('\n'));
  }
  ~PostgresPair() {
    (void)servers({"stop"});
    remove_tree(dir_);
  }
  PostgresPair(const PostgresPair&) = delete;
  PostgresPair& operator=(const PostgresPair&) = delete;

  // The primary first, the standby second, target_session_attrs=read-write.
  const std::string& uri() const { return uri_; }
  const std::vector<std::string>& env() const { return env_; }

 private:
  RunResult servers(const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const {
    std::vector<std::string> argv = {"bash", FENCELOCK_SERVERS_SH};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, env_, "", timeout);
  }

  std::string dir_;
  std::vector<std::string> env_;
  std::string uri_;
};

// Redis servers without persistence started by scripts/servers.sh on the test's own ports and
// state directory: the control program of server-kill (kill PORT, start) for them.
class RedisServers {
 public:
  explicit RedisServers(int n) : dir_(make_temp_dir("fencelock-torture-server-kill-")) {
    std::string ports;
    for (int i = 0; i < n; ++i) {
      ports_.push_back(free_loopback_port());
      ports += (i ? " " : "") + std::to_string(ports_.back());
    }
    env_ = {"FENCELOCK_SERVICES=redis", "FENCELOCK_STATE_DIR=" + dir_ + "/state",
            "FENCELOCK_REDIS_PORTS=" + ports};
    RunResult started =
        run_command({"bash", FENCELOCK_SERVERS_SH, "start"}, env_, "", std::chrono::seconds(60));
    if (started.exit_code != 0) {
      throw std::runtime_error("servers.sh start: " + started.stdout_text + started.stderr_text);
    }
  }
  ~RedisServers() {
    (void)run_command({"bash", FENCELOCK_SERVERS_SH, "stop"}, env_, "", std::chrono::seconds(60));
    remove_tree(dir_);
  }
  RedisServers(const RedisServers&) = delete;
  RedisServers& operator=(const RedisServers&) = delete;

  std::string uri() const {
    std::string hosts;
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      hosts += fmt::format("{}127.0.0.1:{}", i ? "," : "", ports_[i]);
    }
    return (ports_.size() == 1 ? "redis://" : "redlock://") + hosts;
  }
  const std::vector<std::string>& env() const { return env_; }

 private:
  std::string dir_;
  std::vector<std::uint16_t> ports_;
  std::vector<std::string> env_;
};

// A torture run of server-kill: SAFE, no token below an earlier one, at least two crashes that
// took effect, and grants enough to show it.
void expect_safe_under_server_kill(const RunResult& run) {
  auto r = nlohmann::json::parse(run.stdout_text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(r.is_object()) << run.stdout_text << run.stderr_text;
  EXPECT_EQ(run.exit_code, 0) << r.dump();
  EXPECT_EQ(r.value("verdict", ""), "SAFE") << r.dump();
  EXPECT_EQ(r.value("token_violations", -1), 0) << r.dump();
  EXPECT_GE(r["by_fault"]["server-kill"].value("effective", 0), 2) << r.dump();
  EXPECT_GT(r.value("grants", 0), 10) << r.dump();
}

// Before clock-seeded counters a Redis restarted without its data handed out token 1 again
// (UNSAFE with thousands of token violations). Each server is crashed in turn and restarted one
// TTL later, empty.
TEST(TortureCli, ServerKillWithoutPersistenceKeepsTokensMonotonicOnRedisAndRedlock) {
  for (int n : {1, 3}) {
    RedisServers servers(n);
    RunResult run =
        run_cli({"torture", "--backend", servers.uri(), "--json", "--workers", "3", "--duration",
                 "14s", "--faults", "server-kill", "--server-control", FENCELOCK_SERVERS_SH},
                servers.env(), std::chrono::minutes(2));
    expect_safe_under_server_kill(run);
  }
}

// Advisory mode's count lives in an unlogged table (no WAL flush per grant) under a durable
// epoch: each crash (an immediate shutdown of the only server, whose WAL writer lags 10 s)
// empties it, and the next grant must raise the epoch above every token before.
TEST(TortureCli, ServerKillKeepsPostgresAdvisoryTokensMonotonic) {
  PostgresPair server(/*synchronous=*/false, 0, /*standby=*/false);
  const std::string sep = server.uri().find('?') == std::string::npos ? "?" : "&";
  RunResult run = run_cli(
      {"torture", "--backend", server.uri() + sep + "mode=advisory", "--json", "--workers", "3",
       "--duration", "16s", "--faults", "server-kill", "--server-control", FENCELOCK_SERVERS_SH},
      server.env(), std::chrono::minutes(2));
  expect_safe_under_server_kill(run);
}

nlohmann::json torture_failover(const PostgresPair& pair, const std::string& mode,
                                int expected_exit, const std::string& ttl = "2s",
                                const std::string& duration = "20s") {
  std::vector<std::string> args = {"torture",
                                   "--backend",
                                   pair.uri() + "&mode=" + mode,
                                   "--json",
                                   "--workers",
                                   "3",
                                   "--ttl",
                                   ttl,
                                   "--duration",
                                   duration,
                                   "--faults",
                                   "failover",
                                   "--server-control",
                                   FENCELOCK_SERVERS_SH};
  RunResult run = run_cli(args, pair.env(), std::chrono::minutes(3));
  EXPECT_EQ(run.exit_code, expected_exit) << run.stderr_text << run.stdout_text;
  auto report = nlohmann::json::parse(run.stdout_text, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(report.is_object()) << run.stdout_text << run.stderr_text;
  return report.is_object() ? report : nlohmann::json::object();
}

// A failover to a standby that lagged (replication stalled, then the primary crashed and the
// standby was promoted). Asynchronous replication, which fencelock does not support
// (docs/PROTOCOLS.md): the standby's token sequence is behind what was granted, and the tester
// must say UNSAFE with repeated tokens. Synchronous: nothing committed is lost, SAFE.
// A repeat needs more tokens drawn in the stall than a sequence logs ahead (32). The stall is
// 4 TTL and then goes on until 48 tokens were drawn in it (FENCELOCK_PG_FAILOVER_MIN_DRAWS):
// stalls of a fixed time drew too few on a busy machine (86 grants in a whole 40 s run, 83 in
// 56 s, and none repeated). Lease mode draws a token per grant only.
TEST(TortureCli, AFailoverToALaggingAsynchronousStandbyRepeatsTokensAndIsCaught) {
  PostgresPair pair(/*synchronous=*/false, /*failover_min_draws=*/48);
  auto r = torture_failover(pair, "lease", 1, "2s", "50s");
  EXPECT_EQ(r.value("verdict", ""), "UNSAFE") << r.dump();
  EXPECT_GT(r.value("token_violations", 0), 0) << r.dump();
  EXPECT_EQ(r["by_fault"]["failover"].value("effective", 0), 1) << r.dump();
}

TEST(TortureCli, AFailoverToASynchronousStandbyIsSafeInBothModes) {
  for (const char* mode : {"lease", "advisory"}) {
    PostgresPair pair(/*synchronous=*/true);
    auto r = torture_failover(pair, mode, 0);
    EXPECT_EQ(r.value("verdict", ""), "SAFE") << mode << ": " << r.dump();
    EXPECT_EQ(r.value("token_violations", -1), 0) << mode << ": " << r.dump();
    EXPECT_EQ(r.value("exclusion_violations", -1), 0) << mode << ": " << r.dump();
    EXPECT_EQ(r["by_fault"]["failover"].value("effective", 0), 1) << mode << ": " << r.dump();
  }
}

// --work-dir names a directory other users can write to: names planted there as symlinks (a
// worker's log, the history) must not redirect the tool's writes. Before, both were opened
// through the symlink and the victim was appended to or overwritten.
TEST(TortureCli, SymlinksPlantedInTheWorkDirAreNeverFollowed) {
  auto server = RedisServer::start();
  const std::string dir = make_temp_dir("fencelock-torture-planted-");
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "precious\n";
  for (const char* planted : {"worker-0.log", "history.jsonl", "clock-0"}) {
    ASSERT_EQ(::symlink(victim.c_str(), (dir + "/" + planted).c_str()), 0) << planted;
  }
  RunResult run = run_cli({"torture", "--backend", server->uri(), "--json", "--workers", "2",
                           "--duration", "3s", "--faults", "none", "--work-dir", dir},
                          {}, std::chrono::minutes(1));
  EXPECT_GE(run.exit_code, 0) << run.stderr_text;  // exited (a refused log may end a worker)
  EXPECT_LT(run.exit_code, 128) << "killed by a signal: " << run.stderr_text;
  EXPECT_EQ(read_file(victim), "precious\n") << "a write went through a planted symlink";
  remove_tree(dir);
}

// The control program runs by fork and exec with an argument vector: shell syntax in --work-dir
// (which names its log) is never interpreted. With std::system, as before, this work
// directory ran `touch .../INJECTED`.
TEST(TortureCli, ShellSyntaxInTheWorkDirIsNeverRun) {
  auto server = RedisServer::start();
  const std::string dir = make_temp_dir("fencelock-torture-inject-");
  const std::string work = dir + "/x';touch " + dir + "/INJECTED;'";
  std::filesystem::create_directories(work);
  RunResult run = run_cli({"torture", "--backend", server->uri(), "--json", "--workers", "2",
                           "--duration", "5s", "--ttl", "1s", "--faults", "server-kill",
                           "--server-control", "/bin/true", "--work-dir", work},
                          {}, std::chrono::minutes(1));
  EXPECT_LT(run.exit_code, 128) << run.stderr_text;
  EXPECT_TRUE(std::filesystem::exists(work + "/server-control.log"))
      << "the control program never ran: " << run.stderr_text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/INJECTED")) << "the work dir was run as shell";
  remove_tree(dir);
}

// Clock faults through libfaketime: a worker whose clocks run at a quarter speed (its renewals
// come late, its validity estimate is 4x too long) and a worker whose wall clock steps back.
TEST(TortureCli, ClockSkewAndWallClockJumpsAreSafe) {
  auto server = RedisServer::start();
  auto r = torture(server->uri(), {"--duration", "20s", "--faults", "skew,jump"}, 0);
  EXPECT_EQ(r.value("fenced_violations", -1), 0) << r.dump();
  EXPECT_EQ(r.value("lost_updates", -1), 0) << r.dump();
  EXPECT_EQ(r.value("late_lost", -1), 0) << r.dump();
  EXPECT_EQ(r.value("exclusion_violations", -1), 0) << r.dump();
  EXPECT_EQ(r.value("verdict", ""), "SAFE") << r.dump();
  EXPECT_GE(r["by_fault"]["skew"].value("effective", 0), 1) << r.dump();
  EXPECT_GE(r["by_fault"]["jump"].value("effective", 0), 1) << r.dump();
}

// The checker can fail: with the fence switched off, a holder paused between its read and its
// write overwrites a newer holder's increments.
TEST(TortureCli, TheBrokenVariantWithoutAFenceIsCaught) {
  auto server = RedisServer::start();
  auto r =
      torture(server->uri(), {"--duration", "10s", "--faults", "pause", "--unsafe-no-fence"}, 1);
  EXPECT_FALSE(r.value("safe", true)) << r.dump();
  EXPECT_EQ(r.value("verdict", ""), "UNSAFE") << r.dump();
  EXPECT_GT(r.value("lost_updates", 0) + r.value("fenced_violations", 0), 0) << r.dump();
}

// A write-only fence (reads not fenced, as with RedisFence::peek before the write) lets two
// holders read the same value: the paused holder resumes inside the newer holder's
// read-modify-write, both writes are accepted, one increment is lost.
TEST(TortureCli, AWriteOnlyFenceLosesUpdatesUnderPausesAndIsCaught) {
  auto server = RedisServer::start();
  auto r = torture(server->uri(),
                   {"--duration", "12s", "--faults", "pause", "--fence", "write-only"}, 1);
  EXPECT_EQ(r.value("verdict", ""), "UNSAFE") << r.dump();
  EXPECT_GT(r.value("lost_updates", 0), 0) << r.dump();
  EXPECT_EQ(r.value("fence", ""), "write-only");
}

// Someone deletes the lock key every 100 ms: a second holder enters while the first one's lease
// is still valid by its own account. The old checker counted 14 overlaps and said SAFE.
TEST(TortureCli, ALockKeyDeletedUnderTheHoldersIsAMutualExclusionViolation) {
  auto server = RedisServer::start();
  std::jthread deleter([&](std::stop_token stop) {
    for (int i = 0; i < 300 && !stop.stop_requested(); ++i) {
      server->command({"DEL", "fencelock:{torture}"});
      std::this_thread::sleep_for(100ms);  // the fault's own rhythm, not a wait for an event
    }
  });
  auto r = torture(server->uri(), {"--duration", "8s", "--faults", "none"}, 1);
  deleter.request_stop();
  EXPECT_EQ(r.value("verdict", ""), "UNSAFE") << r.dump();
  EXPECT_GT(r.value("exclusion_violations", 0), 0) << r.dump();
}

// The fence counter pushed a minute ahead of the server's clock, then deleted mid-run (a clock
// that stepped back, then a data loss): grant tokens fall back to the clock floor. The old checker
// only counted the grants (tokens 1013, 1, 2, ... and SAFE).
TEST(TortureCli, AFenceCounterDeletedMidRunIsATokenRegression) {
  auto server = RedisServer::start();
  std::jthread deleter([&](std::stop_token stop) {
    const std::string counter_key = "fencelock:{torture}:fence";
    std::uint64_t first = 0;  // the first counter seen
    std::uint64_t ahead = 0;  // the counter set ahead of the clock
    while (!stop.stop_requested()) {
      const std::string text = server->command({"GET", counter_key});
      const std::uint64_t counter = text == "(nil)" ? 0 : std::stoull(text);
      if (first == 0) {
        first = counter;
      } else if (ahead == 0 && counter > first) {  // grants at the clock floor came first
        ahead = clock_floor(*server, 60s);
        server->command({"SET", counter_key, std::to_string(ahead)});
      } else if (ahead != 0 && counter > ahead) {  // one grant above it: its worker alone saw it
        server->command({"DEL", counter_key});
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  auto r = torture(server->uri(), {"--duration", "8s", "--faults", "none"}, 1);
  deleter.request_stop();
  EXPECT_EQ(r.value("verdict", ""), "UNSAFE") << r.dump();
  EXPECT_GT(r.value("token_violations", 0), 0) << r.dump();
}

// Runs that prove nothing exit 2, INCONCLUSIVE: a squatter holds the key for the whole run (no
// grant), the server-control program fails (no server was ever killed), or it exits 0 and does
// nothing (before, minority-stall and evict then counted as injected and the run was SAFE).
TEST(TortureCli, RunsThatProveNothingAreInconclusive) {
  auto server = RedisServer::start();
  ASSERT_EQ(server->command({"SET", "fencelock:{squatted}", "someone", "PX", "120000"}), "OK");
  auto squatted =
      torture(server->uri(), {"--duration", "3s", "--faults", "none", "--key", "squatted"}, 2);
  EXPECT_EQ(squatted.value("verdict", ""), "INCONCLUSIVE") << squatted.dump();
  EXPECT_EQ(squatted.value("grants", -1), 0) << squatted.dump();
  EXPECT_EQ(squatted.value("key", ""), "squatted");

  auto failing =
      torture(server->uri(),
              {"--duration", "8s", "--faults", "server-kill", "--server-control", "/bin/false"}, 2);
  EXPECT_EQ(failing.value("verdict", ""), "INCONCLUSIVE") << failing.dump();
  EXPECT_EQ(failing["by_fault"]["server-kill"].value("effective", -1), 0) << failing.dump();
  EXPECT_NE(failing.dump().find("exited 1"), std::string::npos) << failing.dump();

  auto nothing = torture(server->uri(),
                         {"--duration", "6s", "--ttl", "1s", "--faults", "minority-stall,evict",
                          "--server-control", "/bin/true"},
                         2);
  EXPECT_EQ(nothing.value("verdict", ""), "INCONCLUSIVE") << nothing.dump();
  for (const char* kind : {"minority-stall", "evict"}) {
    EXPECT_GE(nothing["by_fault"][kind].value("count", 0), 1) << kind << ": " << nothing.dump();
    EXPECT_EQ(nothing["by_fault"][kind].value("effective", -1), 0)
        << kind << ": " << nothing.dump();
  }
  EXPECT_NE(nothing.dump().find("did not stay silent"), std::string::npos) << nothing.dump();
  EXPECT_NE(nothing.dump().find("no key was evicted"), std::string::npos) << nothing.dump();
}

TEST(TortureCli, BadOptionsAndUnreachableBackendsAreClearErrors) {
  RunResult fault = run_cli({"torture", "--backend", "memory://", "--faults", "pause,flood"});
  EXPECT_EQ(fault.exit_code, 64) << fault.stderr_text;
  EXPECT_NE(fault.stderr_text.find("flood"), std::string::npos) << fault.stderr_text;
  RunResult memory = run_cli({"torture", "--backend", "memory://", "--faults", "partition"});
  EXPECT_EQ(memory.exit_code, 64) << memory.stderr_text;
  EXPECT_TRUE(is_one_error_line(memory.stderr_text)) << memory.stderr_text;
  RunResult down = run_cli({"torture", "--backend", "redis://127.0.0.1:1", "--duration", "1s"});
  EXPECT_EQ(down.exit_code, 69) << down.stderr_text;
}

}  // namespace
}  // namespace fencelock::testing
