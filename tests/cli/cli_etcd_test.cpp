// The CLI against a real etcd cluster: `fencelock run` and `etcdctl lock` exclude each other both
// ways, and `fencelock elect` campaigns, observes, resigns and reports as docs/CLI.md says.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "support/etcd_cluster.h"

namespace fencelock::testing {
namespace {

class CliEtcd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = EtcdCluster::start(1).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { dir_ = make_temp_dir("fencelock-cli-etcd-"); }
  void TearDown() override { remove_tree(dir_); }

  // Number of keys starting with `prefix` (lock keys have exactly one '/').
  static long keys_under(const std::string& prefix) {
    std::string listing = cluster_->etcdctl({"get", prefix, "--prefix", "--keys-only"});
    return std::count(listing.begin(), listing.end(), '/');
  }

  static EtcdCluster* cluster_;
  std::string dir_;
};

EtcdCluster* CliEtcd::cluster_ = nullptr;

// Credentials for a cluster that does not use authentication: a usage error that says to remove
// them (before: exit 70, "this is a bug or an unexpected server reply").
TEST_F(CliEtcd, CredentialsForAClusterWithoutAuthenticationAreAUsageError) {
  const std::string uri = cluster_->uri();
  const std::string with_user =
      "etcd://someone:Pw-unused@" + uri.substr(std::string("etcd://").size());
  RunResult r =
      run_cli({"run", "k", "--", "touch", dir_ + "/ran"}, {"FENCELOCK_BACKEND=" + with_user});
  EXPECT_EQ(r.exit_code, 64) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("does not use authentication"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("Pw-unused"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("bug"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(file_exists(dir_ + "/ran"));
}

// Debian's etcd needs allow_stale_leader_revoke=true (the test URIs carry it): the accepted risk
// is one warning line, and -q/--quiet drops it (cron would mail it on every run).
TEST_F(CliEtcd, AnAcceptedRiskIsOneWarningLineThatQuietSilences) {
  RunResult loud = run_cli({"status", "--backend", cluster_->uri(), "quiet/k"});
  EXPECT_EQ(loud.exit_code, 0) << loud.stderr_text;
  EXPECT_EQ(std::count(loud.stderr_text.begin(), loud.stderr_text.end(), '\n'), 1)
      << loud.stderr_text;
  EXPECT_NE(loud.stderr_text.find("(accepted: allow_stale_leader_revoke=true)"), std::string::npos)
      << loud.stderr_text;
  for (const std::string quiet : {"-q", "--quiet"}) {
    RunResult r = run_cli({"run", quiet, "--backend", cluster_->uri(), "quiet/k", "--", "true"});
    EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
    EXPECT_EQ(r.stderr_text, "") << quiet;
  }
}

TEST_F(CliEtcd, RunAndEtcdctlLockExcludeEachOtherBothWays) {
  const std::string backend = cluster_->uri(), release = dir_ + "/release";
  const std::string etcdctl_out = dir_ + "/etcdctl.out";
  ChildProcess etcdctl = ChildProcess::spawn(
      {"etcdctl", "--endpoints=" + cluster_->endpoints(), "lock", "shared-job", "--", "sh", "-c",
       "echo held; while [ ! -e '" + release + "' ]; do sleep 0.05; done"},
      {"ETCDCTL_API=3"}, etcdctl_out);
  ASSERT_TRUE(eventually([&] { return read_file(etcdctl_out) == "held\n"; }));
  RunResult refused =
      run_cli({"run", "--backend", backend, "--wait", "0", "shared-job", "--", "true"});
  EXPECT_EQ(refused.exit_code, 75) << refused.stderr_text;

  // A waiting run is granted once etcdctl releases.
  const std::string granted = dir_ + "/granted";
  ChildProcess waiter = spawn_cli({"run", "--backend", backend, "--wait", "30s", "shared-job", "--",
                                   "sh", "-c", "echo $FENCELOCK_TOKEN > '" + granted + "'"},
                                  dir_ + "/waiter.out", dir_ + "/waiter.err");
  ASSERT_TRUE(eventually([&] {
    return keys_under("shared-job/") == 2;  // etcdctl's and the waiter's
  }));
  EXPECT_FALSE(file_exists(granted)) << "run was granted while etcdctl held the lock";
  std::ofstream(release).put('\n');
  EXPECT_EQ(waiter.wait_for(30s), std::optional<int>(0)) << read_file(dir_ + "/waiter.err");
  EXPECT_TRUE(file_exists(granted));
  EXPECT_EQ(etcdctl.wait_for(15s), std::optional<int>(0));

  // The reverse: while fencelock run holds the lock, etcdctl lock waits for it.
  const std::string started = dir_ + "/started", finish = dir_ + "/finish";
  ChildProcess holder =
      spawn_cli({"run", "--backend", backend, "shared-job", "--", "sh", "-c",
                 "touch '" + started + "'; while [ ! -e '" + finish + "' ]; do sleep 0.05; done"},
                dir_ + "/holder.out", dir_ + "/holder.err");
  ASSERT_TRUE(eventually([&] { return file_exists(started); }));
  const std::string second_out = dir_ + "/etcdctl2.out";
  ChildProcess contender = ChildProcess::spawn(
      {"etcdctl", "--endpoints=" + cluster_->endpoints(), "lock", "shared-job", "echo", "held"},
      {"ETCDCTL_API=3"}, second_out);
  ASSERT_TRUE(eventually([&] { return keys_under("shared-job/") == 2; }));
  EXPECT_EQ(read_file(second_out), "") << "etcdctl locked while fencelock run held the lock";
  std::ofstream(finish).put('\n');
  EXPECT_EQ(holder.wait_for(30s), std::optional<int>(0)) << read_file(dir_ + "/holder.err");
  EXPECT_EQ(contender.wait_for(30s), std::optional<int>(0));
  EXPECT_EQ(read_file(second_out), "held\n");
}

// An admin deletes the holder's key (`etcdctl del`) while `fencelock run` holds the lock: the
// session lease lives on, but the lock is gone, so run stops the command and exits 73.
TEST_F(CliEtcd, RunStopsTheCommandAndExits73WhenAnAdminDeletesItsKey) {
  const std::string started = dir_ + "/started";
  ChildProcess holder =
      spawn_cli({"run", "--backend", cluster_->uri(), "--ttl", "3s", "deleted-job", "--", "sh",
                 "-c", "touch '" + started + "'; exec sleep 60"},
                dir_ + "/holder.out", dir_ + "/holder.err");
  ASSERT_TRUE(eventually([&] { return file_exists(started); })) << read_file(dir_ + "/holder.err");
  ASSERT_EQ(cluster_->etcdctl({"del", "deleted-job/", "--prefix"}), "1\n");
  EXPECT_EQ(holder.wait_for(15s), std::optional<int>(73)) << read_file(dir_ + "/holder.err");
  EXPECT_NE(read_file(dir_ + "/holder.err").find("lost"), std::string::npos)
      << read_file(dir_ + "/holder.err");
}

TEST_F(CliEtcd, ElectHoldsUntilSignalledWhileObserveAndWaitZeroSeeTheLeader) {
  const std::string backend = cluster_->uri();
  const std::string observe_out = dir_ + "/observe.out";
  ChildProcess observer = spawn_cli({"elect", "--observe", "--json", "--backend", backend, "jobs"},
                                    observe_out, dir_ + "/observe.err");
  ASSERT_TRUE(eventually([&] { return read_lines(observe_out).size() == 1; }));
  EXPECT_EQ(nlohmann::json::parse(read_lines(observe_out)[0])["leader"], nullptr);

  const std::string leader_out = dir_ + "/leader.out";
  ChildProcess leader = spawn_cli({"elect", "--backend", backend, "--ttl", "5s", "jobs", "node-a"},
                                  leader_out, dir_ + "/leader.err");
  ASSERT_TRUE(eventually([&] { return read_file(leader_out).starts_with("elected: node-a"); }))
      << read_file(dir_ + "/leader.err");
  ASSERT_TRUE(eventually([&] { return read_lines(observe_out).size() == 2; }));
  auto seen = nlohmann::json::parse(read_lines(observe_out)[1]);
  EXPECT_EQ(seen["election"], "jobs");
  EXPECT_EQ(seen["leader"]["value"], "node-a");

  RunResult second = run_cli({"elect", "--backend", backend, "--wait", "0", "jobs", "node-b"});
  EXPECT_EQ(second.exit_code, 75) << second.stderr_text;
  EXPECT_TRUE(is_one_error_line(without_warnings(second.stderr_text))) << second.stderr_text;

  leader.signal(SIGTERM);  // resigns
  EXPECT_EQ(leader.wait_for(15s), std::optional<int>(0)) << read_file(dir_ + "/leader.err");
  ASSERT_TRUE(eventually([&] { return read_lines(observe_out).size() == 3; }));
  EXPECT_EQ(nlohmann::json::parse(read_lines(observe_out)[2])["leader"], nullptr);
  observer.signal(SIGINT);
  EXPECT_EQ(observer.wait_for(15s), std::optional<int>(0)) << read_file(dir_ + "/observe.err");
}

TEST_F(CliEtcd, ElectRefusesABackendWithoutElectionsAndATtlBelowTwoSeconds) {
  RunResult redis = run_cli({"elect", "--backend", "memory://", "jobs", "a"});
  EXPECT_EQ(redis.exit_code, 64) << redis.stderr_text;
  EXPECT_NE(redis.stderr_text.find("etcd://"), std::string::npos) << redis.stderr_text;
  RunResult short_ttl =
      run_cli({"elect", "--backend", cluster_->uri(), "--ttl", "1s", "jobs", "a"});
  EXPECT_EQ(short_ttl.exit_code, 64) << short_ttl.stderr_text;
  EXPECT_TRUE(is_one_error_line(without_warnings(short_ttl.stderr_text))) << short_ttl.stderr_text;
  EXPECT_EQ(cluster_->etcdctl({"get", "jobs/", "--prefix", "--keys-only"}), "");
}

}  // namespace
}  // namespace fencelock::testing
