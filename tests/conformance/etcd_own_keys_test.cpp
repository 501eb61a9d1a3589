// The holder's own key NAME/<lease hex> on a real 3-member etcd 3.4 cluster, where it can go
// independently of the session lease that keeps it alive: an admin deletes it (`etcdctl del`).
// The next client is granted at once, so the holder must learn it within a renewal round (ttl/3
// plus the round's time): lost() fires, its renewal stops, and the Client's other locks on the
// same session carry on.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "fencelock/client.h"
#include "support/etcd_cluster.h"
#include "support/lost_probe.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long long ms(Clock::duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); }

class EtcdOwnKeys : public ::testing::Test {
 protected:
  void SetUp() override { cluster_ = EtcdCluster::start(3); }

  static Client connect(const std::string& uri, ClientOptions options = {}) {
    auto client = Client::connect(uri, options);
    if (!client.ok()) throw std::runtime_error("connect failed: " + client.status().to_string());
    return std::move(*client);
  }

  std::unique_ptr<EtcdCluster> cluster_;
};

TEST_F(EtcdOwnKeys, AHolderWhoseKeyAnAdminDeletedIsToldItLostTheLockWithinARenewalRound) {
  constexpr milliseconds ttl = 3s;
  Client holder = connect(cluster_->uri()), other = connect(cluster_->uri());
  const auto key = *LockKey::make("admin-delete");
  auto victim = holder.acquire(key, {.ttl = ttl});
  ASSERT_TRUE(victim.ok()) << victim.status().to_string();
  auto bystander = holder.acquire(*LockKey::make("bystander"), {.ttl = ttl});  // same session
  ASSERT_TRUE(bystander.ok()) << bystander.status().to_string();
  LostProbe probe(*victim);

  ASSERT_EQ(cluster_->etcdctl({"del", "admin-delete/", "--prefix"}), "1\n");
  const auto deleted = Clock::now();
  auto next = other.acquire(key, {.ttl = ttl});
  ASSERT_TRUE(next.ok()) << "the deleted key did not free the lock: " << next.status().to_string();

  ASSERT_TRUE(probe.wait(5 * ttl)) << "lost() never fired while another client holds the lock";
  EXPECT_LT(*probe.fired_at() - deleted, ttl / 3 + 1s)
      << "lost() fired " << ms(*probe.fired_at() - deleted) << " ms after the delete";
  EXPECT_TRUE(victim->is_lost());
  EXPECT_FALSE(next->is_lost());

  // Renewal rounds go on for the bystander; the victim is not renewed any more.
  const auto victim_until = victim->valid_until();
  const auto bystander_until = bystander->valid_until();
  ASSERT_TRUE(eventually([&] { return bystander->valid_until() > bystander_until; }, 2 * ttl))
      << "no renewal round after the loss";
  EXPECT_EQ(victim->valid_until(), victim_until) << "the lost lease was renewed";
  EXPECT_FALSE(bystander->is_lost());

  EXPECT_TRUE(victim->release().ok());  // its key is gone: nothing to delete, and not an error
  auto held = other.inspect(key);
  ASSERT_TRUE(held.ok() && held->has_value()) << held.status().to_string();
  EXPECT_EQ((*held)->token, next->token()) << "the old holder's release touched the new key";
}

}  // namespace
}  // namespace fencelock::testing
