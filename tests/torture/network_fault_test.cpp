// Every backend through FaultProxies: after dropped connections (reset, refused for a moment)
// a Client must be granted again within about one TTL, without a new Client.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fencelock/client.h"
#include "support/etcd_cluster.h"
#include "support/postgres_server.h"
#include "support/redis_server.h"
#include "torture/endpoints.h"
#include "torture/fault_proxy.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using torture::FaultProxy;
using torture::NetworkFault;

// Proxies for every server of `uri`, and the URI that goes through them.
struct Proxied {
  std::vector<std::unique_ptr<FaultProxy>> proxies;
  std::string uri;
  void set(NetworkFault fault) {
    for (auto& p : proxies) p->set_fault(fault);
  }
};

Proxied proxy_all(const std::string& uri) {
  Proxied out;
  auto split = torture::split_uri(uri);
  EXPECT_TRUE(split.ok()) << split.status().to_string();
  for (auto& host : split->hosts) {
    out.proxies.push_back(std::make_unique<FaultProxy>(host.host, host.port));
    host = torture::HostPort{"127.0.0.1", out.proxies.back()->port()};
  }
  out.uri = torture::join_uri(*split);
  return out;
}

// Acquire+release works, connections are dropped until calls in flight fail, and afterwards the
// same Client is granted again within `bound`.
void expect_recovers_after_drop(const std::string& uri, std::chrono::milliseconds bound) {
  Proxied proxied = proxy_all(uri);
  auto client = Client::connect(proxied.uri, {.connect_timeout = 2s, .io_timeout = 500ms});
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  const auto key = *LockKey::make("recover");
  auto first = client->acquire(key, {.ttl = 2s});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(first->release().ok());
  // Another Client keeps calling through the fault, so that connections are refused while
  // calls are in flight (as in `fencelock torture`).
  auto busy = Client::connect(proxied.uri, {.connect_timeout = 2s, .io_timeout = 500ms});
  ASSERT_TRUE(busy.ok()) << busy.status().to_string();
  std::atomic<int> calls{0}, failed{0};
  // A jthread stops (and is joined) however this function returns.
  std::jthread hammer([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (!busy->acquire(*LockKey::make("busy"), {.ttl = 2s}).ok()) failed++;
      calls++;
    }
  });
  ASSERT_TRUE(eventually([&] { return calls.load() >= 1; }, 10s)) << "the hammer never called";
  proxied.set(NetworkFault::kDrop);
  // The fault lasts until calls were cut by it (connections refused while in flight).
  const int failed_before = failed.load();
  EXPECT_TRUE(eventually([&] { return failed.load() >= failed_before + 2; }, 10s))
      << "no call failed under the fault";
  proxied.set(NetworkFault::kNone);
  hammer.request_stop();
  hammer.join();
  const auto healed = Clock::now();
  Status last;
  for (auto until = healed + 30s; Clock::now() < until;) {
    auto again = client->acquire(key, {.ttl = 2s, .wait = 2s});
    if (again.ok()) break;
    last = again.status();
  }
  const auto took = Clock::now() - healed;
  EXPECT_LT(took, bound) << "granted again only after "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms; last error: " << last.to_string();
}

TEST(NetworkFaults, RedisRecoversAfterDroppedConnections) {
  auto server = RedisServer::start();
  expect_recovers_after_drop(server->uri(), 3s);
}

TEST(NetworkFaults, RedlockRecoversAfterDroppedConnections) {
  auto cluster = RedisCluster::start(3);
  expect_recovers_after_drop(cluster->redlock_uri(), 3s);
}

TEST(NetworkFaults, PostgresRecoversAfterDroppedConnections) {
  auto server = PostgresServer::start();
  expect_recovers_after_drop(server->uri(), 3s);
  expect_recovers_after_drop(server->uri() + "?mode=lease", 3s);
}

TEST(NetworkFaults, EtcdRecoversAfterDroppedConnections) {
  auto cluster = EtcdCluster::start(3);
  expect_recovers_after_drop(cluster->uri(), 3s);
}

}  // namespace
}  // namespace fencelock::testing
