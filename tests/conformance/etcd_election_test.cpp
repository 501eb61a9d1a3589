// Leader elections (fencelock/election.h) against a real etcd cluster: the concurrency.Election
// key layout, campaign / proclaim / leader / observe / resign, cancellation, session loss, and
// interoperability with `etcdctl elect` both ways.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/mutex.h"
#include "fencelock/election.h"
#include "support/etcd_cluster.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// What an observer saw: one entry per call, "-" for "no leader".
class Observed {
 public:
  void add(const std::optional<LeaderInfo>& leader) {
    fencelock::detail::MutexLock lock(mu_);
    values_.push_back(leader ? leader->value : "-");
    if (leader) tokens_.push_back(leader->token.value());
  }
  std::vector<std::string> values() const {
    fencelock::detail::MutexLock lock(mu_);
    return values_;
  }
  std::vector<std::uint64_t> tokens() const {
    fencelock::detail::MutexLock lock(mu_);
    return tokens_;
  }
  bool last_is(const std::string& value) const {
    fencelock::detail::MutexLock lock(mu_);
    return !values_.empty() && values_.back() == value;
  }

 private:
  mutable fencelock::detail::Mutex mu_;
  std::vector<std::string> values_;
  std::vector<std::uint64_t> tokens_;
};

class EtcdElection : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = EtcdCluster::start(3).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { dir_ = make_temp_dir("fencelock-election-"); }
  void TearDown() override { remove_tree(dir_); }

  static Client connect() {
    auto client = Client::connect(cluster_->uri());
    if (!client.ok()) throw std::runtime_error("connect failed: " + client.status().to_string());
    return std::move(*client);
  }
  static Election election(const Client& client, const std::string& name) {
    auto made = Election::make(client, name);
    if (!made.ok()) throw std::runtime_error("Election::make: " + made.status().to_string());
    return std::move(*made);
  }
  // Keys under NAME/ as `etcdctl get --prefix` prints them: key, value, key, value, ...
  static std::vector<std::string> keys_and_values(const std::string& name) {
    return lines_of(cluster_->etcdctl({"get", name + "/", "--prefix"}));
  }

  static EtcdCluster* cluster_;
  std::string dir_;
};

EtcdCluster* EtcdElection::cluster_ = nullptr;

TEST_F(EtcdElection, ACampaignStoresItsValueVerbatimAtNameSlashLeaseHex) {
  Client client = connect();
  Election e = election(client, "layout");
  auto leadership = e.campaign("node-a:8080");
  ASSERT_TRUE(leadership.ok()) << leadership.status().to_string();
  const auto stored = keys_and_values("layout");
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_TRUE(stored[0].starts_with("layout/")) << stored[0];
  EXPECT_EQ(stored[1], "node-a:8080");  // verbatim, as etcd's Election stores it
  auto leader = e.leader();
  ASSERT_TRUE(leader.ok() && leader->has_value()) << leader.status().to_string();
  EXPECT_EQ((*leader)->key, stored[0]);
  EXPECT_EQ((*leader)->value, "node-a:8080");
  EXPECT_EQ((*leader)->token, leadership->token());
  ASSERT_TRUE(leadership->resign().ok());
  EXPECT_TRUE(leadership->is_lost());
  auto none = e.leader();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST_F(EtcdElection, ObserveSeesEveryLeaderAndProclaimInOrderWithGrowingTokens) {
  Client a = connect(), b = connect(), watcher = connect();
  Election ea = election(a, "terms"), eb = election(b, "terms"), ew = election(watcher, "terms");
  Observed seen;
  std::stop_source stop_observing;
  Status observe_status;
  std::jthread observer([&] {
    observe_status =
        ew.observe([&](const auto& leader) { seen.add(leader); }, stop_observing.get_token());
  });
  ASSERT_TRUE(eventually([&] { return seen.last_is("-"); }));

  auto first = ea.campaign("a");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(eventually([&] { return seen.last_is("a"); }));
  std::optional<Result<Leadership>> second;
  std::jthread campaigner([&] { second.emplace(eb.campaign("b")); });
  ASSERT_TRUE(eventually([&] { return keys_and_values("terms").size() == 4; }))
      << "b never joined the line";
  EXPECT_FALSE(second.has_value()) << "b was elected while a led";

  ASSERT_TRUE(first->proclaim("a2").ok());
  ASSERT_TRUE(eventually([&] { return seen.last_is("a2"); }));
  ASSERT_TRUE(first->resign().ok());
  campaigner.join();
  ASSERT_TRUE(second->ok()) << second->status().to_string();
  ASSERT_TRUE(eventually([&] { return seen.last_is("b"); }));
  EXPECT_GT((*second)->token(), first->token());

  ASSERT_TRUE((*second)->resign().ok());
  ASSERT_TRUE(eventually([&] { return seen.last_is("-"); }));
  stop_observing.request_stop();
  observer.join();
  EXPECT_TRUE(observe_status.ok()) << observe_status.to_string();
  EXPECT_EQ(seen.values(), (std::vector<std::string>{"-", "a", "a2", "b", "-"}));
  const auto tokens = seen.tokens();
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0], tokens[1]);  // a proclaim keeps the term
  EXPECT_LT(tokens[1], tokens[2]);  // a new leader has a larger token
}

TEST_F(EtcdElection, ACampaignThatCannotWinNowOrIsCancelledLeavesNoKey) {
  Client a = connect(), b = connect();
  Election ea = election(a, "busy"), eb = election(b, "busy");
  auto leader = ea.campaign("a");
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();

  EXPECT_EQ(eb.campaign("b", {.wait = 0ms}).code(), Code::kLocked);
  EXPECT_EQ(keys_and_values("busy").size(), 2u) << "the refused campaign left its key";

  EXPECT_EQ(eb.campaign("b", {.wait = 300ms}).code(), Code::kLocked);
  EXPECT_EQ(keys_and_values("busy").size(), 2u) << "the timed-out campaign left its key";

  std::stop_source cancel;
  std::optional<Result<Leadership>> cancelled;
  std::jthread campaigner(
      [&] { cancelled.emplace(eb.campaign("b", {.stop = cancel.get_token()})); });
  ASSERT_TRUE(eventually([&] { return keys_and_values("busy").size() == 4; }));
  cancel.request_stop();
  campaigner.join();
  EXPECT_EQ(cancelled->code(), Code::kCancelled);
  EXPECT_EQ(keys_and_values("busy").size(), 2u) << "the cancelled campaign left its key";
  auto still = ea.leader();
  ASSERT_TRUE(still.ok() && still->has_value());
  EXPECT_EQ((*still)->value, "a");
}

TEST_F(EtcdElection, ProclaimIsRefusedOnceTheLeaderKeyIsGone) {
  Client client = connect();
  Election e = election(client, "deposed");
  auto leadership = e.campaign("a");
  ASSERT_TRUE(leadership.ok()) << leadership.status().to_string();
  (void)cluster_->etcdctl({"del", "deposed/", "--prefix"});
  Status proclaimed = leadership->proclaim("a2");
  EXPECT_EQ(proclaimed.code(), Code::kLocked) << proclaimed.to_string();
  EXPECT_TRUE(keys_and_values("deposed").empty()) << "proclaim re-created a deleted leader key";
  ASSERT_TRUE(leadership->resign().ok());
  EXPECT_EQ(leadership->proclaim("a3").code(), Code::kLocked);
}

// A leader whose session can no longer be renewed loses the leadership (lost() fires no later
// than valid_until()) and the next campaigner leads with a larger token once etcd expires it.
TEST_F(EtcdElection, ALeaderWhoseSessionLapsesIsDeposedAndTheNextTermHasALargerToken) {
  Client a = connect(), b = connect();
  Election ea = election(a, "lapse"), eb = election(b, "lapse");
  auto leadership = ea.campaign("a", {.ttl = 2s});
  ASSERT_TRUE(leadership.ok()) << leadership.status().to_string();
  detail::ClientAccess::core(a).renewer().pause_renewals_for_testing(true);
  const auto valid_until = leadership->valid_until();
  auto next = eb.campaign("b", {.ttl = 5s, .wait = 20s});
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_TRUE(leadership->is_lost()) << "b leads while a still believes it leads";
  EXPECT_GE(Clock::now(), valid_until);
  EXPECT_GT(next->token(), leadership->token());
  detail::ClientAccess::core(a).renewer().pause_renewals_for_testing(false);
}

TEST_F(EtcdElection, EtcdctlElectAndFencelockCampaignInTheSameElection) {
  const std::string output = dir_ + "/etcdctl-elect.out";
  ChildProcess etcdctl = ChildProcess::spawn(
      {"etcdctl", "--endpoints=" + cluster_->endpoints(), "elect", "shared", "from-etcdctl"},
      {"ETCDCTL_API=3"}, output);
  ASSERT_TRUE(eventually([&] { return lines_of(read_file(output)).size() >= 2; }, 20s))
      << "etcdctl was never elected";
  Client client = connect();
  Election e = election(client, "shared");
  auto leader = e.leader();
  ASSERT_TRUE(leader.ok() && leader->has_value()) << leader.status().to_string();
  EXPECT_EQ((*leader)->value, "from-etcdctl");
  EXPECT_EQ((*leader)->key, lines_of(read_file(output))[0]);
  EXPECT_EQ(e.campaign("fencelock", {.wait = 0ms}).code(), Code::kLocked);

  std::optional<Result<Leadership>> mine;
  std::jthread campaigner([&] { mine.emplace(e.campaign("from-fencelock", {.wait = 20s})); });
  ASSERT_TRUE(eventually([&] { return keys_and_values("shared").size() == 4; }));
  etcdctl.signal(SIGINT);  // etcdctl elect resigns on interrupt
  EXPECT_TRUE(etcdctl.wait_for(10s).has_value());
  campaigner.join();
  ASSERT_TRUE(mine->ok()) << mine->status().to_string();
  EXPECT_GT((*mine)->token(), (*leader)->token);

  // The reverse: etcdctl's observer sees fencelock's leader and its proclaimed values.
  const std::string listen_output = dir_ + "/etcdctl-listen.out";
  ChildProcess listener = ChildProcess::spawn(
      {"etcdctl", "--endpoints=" + cluster_->endpoints(), "elect", "--listen", "shared"},
      {"ETCDCTL_API=3"}, listen_output);
  ASSERT_TRUE(eventually([&] {
    auto lines = lines_of(read_file(listen_output));
    return lines.size() >= 2 && lines[1] == "from-fencelock";
  })) << read_file(listen_output);
  ASSERT_TRUE((*mine)->proclaim("proclaimed").ok());
  ASSERT_TRUE(eventually([&] { return lines_of(read_file(listen_output)).back() == "proclaimed"; }))
      << read_file(listen_output);
  listener.signal(SIGKILL);
  (void)listener.wait_for(5s);
}

TEST(ElectionWithoutEtcd, MakeRefusesABackendWithoutElectionsAndABadName) {
  auto client = Client::connect("memory://");
  ASSERT_TRUE(client.ok());
  auto refused = Election::make(*client, "jobs");
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("etcd://"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(Election::make(*client, "").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace fencelock::testing
