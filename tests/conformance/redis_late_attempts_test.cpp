// Late attempts on Redis and Redlock (docs/PROTOCOLS.md, "Late attempts"): an acquire command
// the client gave up on (no reply in time, or a majority had answered without it) can still run
// on its server later, after the release that was meant to settle it. It must take nothing: no
// lock held by nobody for a whole TTL, no place in line. Against real redis-server processes,
// with a proxy (tests/support/delay_proxy.h) that holds back the acquire script on one instance.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fencelock/client.h"
#include "redis/redis_keys.h"
#include "redis_scripts.h"
#include "support/delay_proxy.h"
#include "support/process.h"
#include "support/redis_server.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using detail::redis::lock_key;

LockKey key(std::string_view name) { return *LockKey::make(name); }

Client connect_or_throw(const std::string& uri, ClientOptions options = {}) {
  auto client = Client::connect(uri, options);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

// The keys of lock `name` on `server` that hold or reserve it: the lock key, its holder record
// and the wait queue's keys (not the fencing counter, not tombstones).
std::vector<std::string> holding_keys(RedisServer& server, std::string_view name) {
  std::vector<std::string> out;
  for (const std::string& k : server.keys(lock_key(name) + "*")) {
    if (k.ends_with(":fence") || k.find("}:dead:") != std::string::npos) continue;
    out.push_back(k);
  }
  return out;
}

// The acquire script as the proxy sees it on the wire: EVALSHA with its SHA-1.
std::string acquire_marker() { return std::string(detail::lua::acquire_sha1); }

// Redlock: two instances grant at once, the third's acquire is held back 1.5 s, its reply given
// up once the majority answered. The lease's release reaches the third instance on a fresh
// connection first; then the held acquire runs there. Before tombstones it took the lock for its
// whole TTL (10 s), held by nobody: with one more instance down, nobody could take the lock.
TEST(RedlockLateAttempts, AnAcquireThatRunsAfterItsReleaseTakesNothing) {
  auto cluster = RedisCluster::start(3);
  auto proxy = DelayProxy::start((*cluster)[2].port());
  const std::string uri = fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
                                      (*cluster)[0].port(), (*cluster)[1].port(), proxy->port());
  Client client = connect_or_throw(uri);
  proxy->delay(acquire_marker(), 1500ms);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    const std::string name = fmt::format("late-redlock-{}", round);
    auto lease = client.acquire(key(name), {.ttl = 10s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    ASSERT_TRUE(lease->release().ok());
    ASSERT_TRUE(proxy->wait_answered_late(round + 1, 10s)) << "the held acquire never ran";
    EXPECT_EQ(holding_keys((*cluster)[2], name), std::vector<std::string>())
        << "the late acquire took the lock for nobody";
  }
  EXPECT_EQ(proxy->held(), 3);
  // With the held instance's keys free, the lock can be taken while another instance is down.
  proxy->delay("", 0ms);
  (*cluster)[0].pause();
  auto again = client.acquire(key("late-redlock-0"), {.ttl = 2s});
  (*cluster)[0].resume();
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

// Single Redis: the acquire is held back 1.5 s, past the acquisition's I/O cap (1 s): the attempt
// fails with its outcome unknown and is released; then the acquire runs. Before, it took the lock
// for 10 s and `fencelock run --wait 0` of the next user was refused all that time, although the
// message said the attempt was released.
TEST(RedisLateAttempts, AnAcquireThatTimedOutAndRunsAfterItsReleaseTakesNothing) {
  auto server = RedisServer::start();
  auto proxy = DelayProxy::start(server->port());
  Client slow = connect_or_throw(fmt::format("redis://127.0.0.1:{}", proxy->port()));
  Client direct = connect_or_throw(server->uri());
  proxy->delay(acquire_marker(), 1500ms);
  auto lease = slow.acquire(key("late-single"), {.ttl = 10s});
  ASSERT_EQ(lease.code(), Code::kDeadlineExceeded) << lease.status().to_string();
  EXPECT_NE(lease.status().message().find("outcome unknown; this attempt was released"),
            std::string::npos)
      << lease.status().message();
  ASSERT_TRUE(proxy->wait_answered_late(1, 10s)) << "the held acquire never ran";
  EXPECT_EQ(holding_keys(*server, "late-single"), std::vector<std::string>())
      << "the late acquire took the lock for nobody";
  auto next = direct.acquire(key("late-single"), {.ttl = 10s});
  EXPECT_TRUE(next.ok()) << next.status().to_string();
}

// When the release cannot be confirmed either, the message says so instead of "released".
TEST(RedisLateAttempts, WhenTheReleaseTimesOutTooTheMessageSaysTheLockMayStayHeld) {
  auto server = RedisServer::start();
  auto proxy = DelayProxy::start(server->port());
  Client slow =
      connect_or_throw(fmt::format("redis://127.0.0.1:{}", proxy->port()), {.io_timeout = 300ms});
  proxy->delay("EVALSHA", 1500ms);  // every script call: the acquire and its release
  auto lease = slow.acquire(key("late-unreleased"), {.ttl = 10s});
  ASSERT_EQ(lease.code(), Code::kDeadlineExceeded) << lease.status().to_string();
  EXPECT_EQ(lease.status().message().find("this attempt was released"), std::string::npos)
      << lease.status().message();
  EXPECT_NE(lease.status().message().find("may stay held until its TTL ends"), std::string::npos)
      << lease.status().message();
  // Both still arrive, in the order they were sent: the release deletes what the acquire took.
  ASSERT_TRUE(proxy->wait_answered_late(2, 10s));
  EXPECT_EQ(holding_keys(*server, "late-unreleased"), std::vector<std::string>());
}

// A Client that takes its lock again while its release of the previous grant is still on the way
// to an instance (held 3 s by a proxy) and another instance is stopped: the new attempt carries
// the owed release (acquire.lua releases it first), so that instance grants it and two of three
// make a majority. Before, that instance refused ("held by another owner on 1 of 3 instances"):
// a thread re-taking its own lock on a busy machine was refused by its own release.
TEST(RedlockLateAttempts, TheNextAttemptCarriesAReleaseStillOnItsWay) {
  auto cluster = RedisCluster::start(3);
  auto proxy = DelayProxy::start((*cluster)[2].port());
  // The stopped instance last: a round connects to instances without a connection one after the
  // other, and a connect to a stopped server takes all the time left.
  const std::string uri = fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
                                      (*cluster)[0].port(), proxy->port(), (*cluster)[1].port());
  Client client = connect_or_throw(uri);
  auto first = client.acquire(key("carried"), {.ttl = 10s});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  proxy->delay(std::string(detail::lua::release_sha1), 3000ms);
  (*cluster)[1].pause();
  // Released on one instance of three only: the others owe it (one stopped, one held back).
  EXPECT_EQ(first->release().code(), Code::kUnavailable);
  auto again = client.acquire(key("carried"), {.ttl = 10s});
  (*cluster)[1].resume();
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_GE(proxy->held(), 1);
}

// A release that the instance answers with an error reply (BUSY while another client's script
// runs: the release did not run) is owed like one that got no answer: sent again in the
// background until it runs. Before, only a missing answer was; the lock stayed held by nobody
// for its whole TTL.
TEST(RedisLateAttempts, AReleaseRefusedWithAnErrorReplyIsSentAgainUntilItRuns) {
  auto server = RedisServer::start();
  Client client = connect_or_throw(server->uri());
  auto lease = client.acquire(key("refused-release"), {.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  ASSERT_EQ(server->command({"CONFIG", "SET", "busy-reply-threshold", "10"}), "OK");
  std::jthread busy([&] {
    try {
      (void)server->command({"EVAL", "while true do end", "0"});
    } catch (const std::exception&) {
      // the server killed the script: its connection may answer with an error or close
    }
  });
  bool refusing = false;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       !refusing && std::chrono::steady_clock::now() < until;) {
    refusing = server->command({"PING"}).starts_with("BUSY");
  }
  ASSERT_TRUE(refusing) << "the server never answered BUSY";
  const Status released = lease->release();
  EXPECT_FALSE(released.ok()) << "the release ran although the server was busy";
  (void)server->command({"SCRIPT", "KILL"});
  busy.join();
  bool gone = false;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       !gone && std::chrono::steady_clock::now() < until;) {
    gone = holding_keys(*server, "refused-release").empty();
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "the refused release was never sent again";
}

// A tombstone lives as long as the longest release that left it: a later release (or an attempt
// carrying it) with a shorter TTL does not cut it short. Before, each one SET its own PX.
TEST(RedisLateAttempts, ATombstoneIsNeverShortenedByALaterShorterOne) {
  auto server = RedisServer::start();
  const std::string name = "tombstone-life";
  const std::string value = std::string(32, 'a') + std::string(16, 'b');
  const std::string tomb = detail::redis::tombstone_key(name, value);
  auto release = [&](const std::string& life_ms) {
    return server->command({"EVAL", std::string(detail::lua::release), "6", lock_key(name),
                            lock_key(name) + ":holder", lock_key(name) + ":queue",
                            lock_key(name) + ":queue_exp", lock_key(name) + ":queue_wake", tomb,
                            std::string(32, 'a'), "0", value, life_ms});
  };
  ASSERT_EQ(release("120000"), "0");
  ASSERT_GT(std::stoll(server->command({"PTTL", tomb})), 60'000);
  ASSERT_EQ(release("60000"), "0");
  EXPECT_GT(std::stoll(server->command({"PTTL", tomb})), 60'000)
      << "a release with a shorter TTL cut the tombstone short";
}

// The server's clock in ms (TIME), to compare with the queue's expiry scores.
long long server_ms(RedisServer& server) {
  return std::stoll(server.command(
      {"EVAL", "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)", "0"}));
}

// A waiting acquisition that gives up leaves the wait queue of every instance, also of one that
// refused the leave at that moment (BUSY with another client's script): the leave is sent again
// until it runs. Before, that instance kept the place, for nobody, until it expired (up to 5 s;
// the queue's keys lived twice that), and every later waiter there queued behind it.
TEST(RedlockLateAttempts, AWaiterThatGivesUpLeavesTheQueueOfAnInstanceThatRefusedTheLeave) {
  auto cluster = RedisCluster::start(3);
  const std::string uri =
      fmt::format("redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", (*cluster)[0].port(),
                  (*cluster)[1].port(), (*cluster)[2].port());
  Client holder = connect_or_throw(uri);
  auto held = holder.acquire(key("queued"), {.ttl = 30s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  Client waiter = connect_or_throw(uri, {.io_timeout = 300ms});
  std::stop_source stop;
  std::optional<Result<Lease>> waited;
  std::jthread waiting([&] {
    waited.emplace(
        waiter.acquire(key("queued"), {.ttl = 30s, .wait = 60s, .stop = stop.get_token()}));
  });
  const std::string queue = detail::redis::queue_key("queued");
  ASSERT_TRUE(eventually([&] {
    for (int i = 0; i < 3; ++i) {
      if ((*cluster)[i].command({"ZCARD", queue}) != "1") return false;
    }
    return true;
  })) << "the waiter never queued on every instance";
  RedisServer& busy_one = (*cluster)[2];
  ASSERT_EQ(busy_one.command({"CONFIG", "SET", "busy-reply-threshold", "10"}), "OK");
  std::jthread busy([&] {
    try {
      (void)busy_one.command({"EVAL", "while true do end", "0"});
    } catch (const std::exception&) {
      // the server killed the script: its connection may answer with an error or close
    }
  });
  ASSERT_TRUE(eventually([&] { return busy_one.command({"PING"}).starts_with("BUSY"); }, 10s))
      << "the server never answered BUSY";
  // The place there ends at most 5 s (the queue hold) from now: no refresh can run there.
  const long long place_ends = server_ms((*cluster)[0]) + 5000;
  stop.request_stop();
  waiting.join();
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(waited->code(), Code::kCancelled) << waited->status().to_string();
  (void)busy_one.command({"SCRIPT", "KILL"});
  busy.join();
  ASSERT_TRUE(eventually([&] { return busy_one.command({"ZCARD", queue}) == "0"; }, 20s));
  EXPECT_LT(server_ms(busy_one), place_ends) << "the place was left only when it expired";
}

}  // namespace
}  // namespace fencelock::testing
