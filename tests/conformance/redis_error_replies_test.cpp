// Error replies from Redis instances, against real redis-server processes: an error reply from a
// minority is a failed instance of the round, never its verdict (a READONLY replica in the list,
// an instance out of memory, a flushed script cache); an error reply to an inspection is an error
// with its code, never "free"; a subscriber connection that dies without closing is noticed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "fencelock/client.h"
#include "fencelock/log.h"
#include "redis/redis_keys.h"
#include "redis/subscriber.h"
#include "support/process.h"
#include "support/redis_server.h"
#include "torture/fault_proxy.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::redis::lock_key;

LockKey key(std::string_view name) { return *LockKey::make(name); }

Client connect_or_throw(const std::string& uri) {
  auto client = Client::connect(uri);
  if (!client.ok()) throw std::runtime_error(client.status().to_string());
  return std::move(*client);
}

std::vector<std::string> warnings_while(const std::function<void()>& run) {
  detail::Mutex mu;
  std::vector<std::string> warnings;
  set_log_sink(
      [&](LogLevel, std::string_view text) {
        detail::MutexLock lock(mu);
        warnings.emplace_back(text);
      },
      LogLevel::kWarning);
  run();
  set_log_sink({});
  detail::MutexLock lock(mu);
  return warnings;
}

bool mentions(const std::vector<std::string>& lines, std::string_view text) {
  for (const auto& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

// A waiting acquisition on a key another Client holds, released once the waiter is in line on
// `healthy`: granted by the majority, whatever the failed instance answers meanwhile.
void expect_granted_after_the_release(const std::string& uri, RedisServer& healthy,
                                      std::string_view name) {
  Client holder = connect_or_throw(uri);
  auto held = holder.acquire(key(name), {.ttl = 10s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  std::jthread releaser([&](std::stop_token stop) {
    while (!stop.stop_requested() &&
           healthy.command({"ZCARD", detail::redis::queue_key(name)}) == "0") {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_TRUE(held->release().ok());
  });
  Client waiter = connect_or_throw(uri);
  auto lease = waiter.acquire(key(name), {.ttl = 5s, .wait = 10s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
}

// Before: a READONLY replica among three instances made every waiting acquisition fail at once
// with kInternal ("unexpected error reply", exit 70), 3 ms into its wait.
TEST(RedlockErrorReplies, AReadOnlyReplicaInTheListIsAFailedInstanceNotTheVerdict) {
  auto cluster = RedisCluster::start(3);
  (*cluster)[2].command({"REPLICAOF", "127.0.0.1", std::to_string((*cluster)[1].port())});
  const std::string uri = cluster->redlock_uri();
  auto warnings =
      warnings_while([&] { expect_granted_after_the_release(uri, (*cluster)[0], "replica"); });
  EXPECT_TRUE(mentions(warnings, "read-only replica")) << ::testing::PrintToString(warnings);
}

// Before: OOM from one instance under noeviction failed the waiting acquisition in 10 ms.
TEST(RedlockErrorReplies, AnInstanceOutOfMemoryIsAFailedInstanceNotTheVerdict) {
  auto cluster = RedisCluster::start(3);
  const std::string uri = cluster->redlock_uri();
  Client early = connect_or_throw(uri);  // connects while the policy can still be read
  (*cluster)[0].command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  (*cluster)[0].command({"CONFIG", "SET", "maxmemory", "1"});
  auto warnings =
      warnings_while([&] { expect_granted_after_the_release(uri, (*cluster)[1], "oom"); });
  EXPECT_TRUE(mentions(warnings, "out of memory")) << ::testing::PrintToString(warnings);
}

// Before: after SCRIPT FLUSH, the next acquisition through a kept connection failed with kInternal
// (NOSCRIPT). The script is sent again with its text, on the only instance too.
TEST(RedisErrorReplies, AFlushedScriptCacheIsReloadedWithinTheAcquisition) {
  auto server = RedisServer::start();
  Client client = connect_or_throw(server->uri());
  for (int i = 0; i < 3; ++i) {
    auto warm = client.acquire(key("warm"), {.ttl = 5s});  // leaves idle, loaded connections
    ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  }
  ASSERT_EQ(server->command({"SCRIPT", "FLUSH"}), "OK");
  // A try (a wait would start the subscriber, whose new connection loads the scripts again).
  auto lease = client.acquire(key("flushed"), {.ttl = 5s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  const std::string errors = server->command({"INFO", "errorstats"});
  EXPECT_NE(errors.find("errorstat_NOSCRIPT"), std::string::npos)
      << "the acquisition never met the flushed cache: " << errors;
}

// Before: only round 1 was sent again after NOSCRIPT. Round 2 (raise_fence.lua) and every
// release (release.lua) failed on a flushed instance: the failed attempt's lock stayed for its
// TTL, and release() said "released on 0 of 3".
TEST(RedlockErrorReplies, EveryScriptIsSentAgainAfterAFlushedCacheRoundTwoAndReleasesToo) {
  auto cluster = RedisCluster::start(3);
  // Instance 0's counter runs ahead, so the others lag and round 2 writes to them.
  (*cluster)[0].command({"SET", detail::redis::fence_key("flushed-r2"),
                         std::to_string(clock_floor((*cluster)[0], 60s))});
  Client client = connect_or_throw(cluster->redlock_uri());
  for (int i = 0; i < 3; ++i) {  // idle, loaded connections on every instance
    auto warm = client.acquire(key("warm"), {.ttl = 5s});
    ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  }
  for (int i = 1; i < 3; ++i) ASSERT_EQ((*cluster)[i].command({"SCRIPT", "FLUSH"}), "OK");
  auto lease = client.acquire(key("flushed-r2"), {.ttl = 5s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  for (int i = 0; i < 3; ++i) ASSERT_EQ((*cluster)[i].command({"SCRIPT", "FLUSH"}), "OK");
  ASSERT_TRUE(lease->release().ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*cluster)[i].command({"EXISTS", lock_key("flushed-r2")}), "0") << "instance " << i;
  }
}

// Before: one instance's counter decided everyone's tokens: a hostile value just below 2^64 on
// one instance was granted, copied to the others by round 2, and no grant of the key was
// possible again ("cannot grow"). Such a counter is a failed instance of the round now.
TEST(RedlockErrorReplies, ACounterNoInstanceCouldHaveIssuedIsAFailedInstanceNotTheToken) {
  auto cluster = RedisCluster::start(3);
  (*cluster)[0].command({"SET", detail::redis::fence_key("hostile"), "18446744073709551614"});
  Client client = connect_or_throw(cluster->redlock_uri());
  std::vector<std::string> warnings;
  warnings = warnings_while([&] {
    for (int i = 0; i < 3; ++i) {
      auto lease = client.acquire(key("hostile"), {.ttl = 5s});
      ASSERT_TRUE(lease.ok()) << lease.status().to_string();
      EXPECT_LT(lease->token().value(), std::uint64_t{1} << 63);
      ASSERT_TRUE(lease->release().ok());
    }
  });
  EXPECT_TRUE(mentions(warnings, "cannot have issued")) << ::testing::PrintToString(warnings);
  for (int i = 1; i < 3; ++i) {
    EXPECT_NE((*cluster)[i].command({"GET", detail::redis::fence_key("hostile")}),
              "18446744073709551615");
  }
}

// A user whose ACL reaches only its own tenant's locks lists those, and the others' are left out
// with one warning (before: one NOPERM reply discarded the whole instance's answer).
TEST(RedisErrorReplies, AListLeavesOutLocksTheUserMayNotReadAndSaysSo) {
  auto server = RedisServer::start();
  Client admin = connect_or_throw(server->uri());
  auto mine = admin.acquire(key("app1/job"), {.ttl = 10s});
  auto theirs = admin.acquire(key("app2/job"), {.ttl = 10s});
  ASSERT_TRUE(mine.ok() && theirs.ok());
  server->command({"ACL", "SETUSER", "tenant", "on", ">tenant-pw", "~fencelock:{app1/*", "+@all"});
  Client tenant = connect_or_throw("redis://tenant:tenant-pw@" + server->address());
  std::vector<std::string> warnings = warnings_while([&] {
    auto listed = tenant.list("");
    ASSERT_TRUE(listed.ok()) << listed.status().to_string();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].key.str(), "app1/job");
  });
  EXPECT_TRUE(mentions(warnings, "left out 1 held lock")) << ::testing::PrintToString(warnings);
  EXPECT_EQ(tenant.inspect(key("app2/job")).code(), Code::kPermissionDenied);
}

// A majority that refuses alike decides: two of three instances without rights on fencelock's
// keys are kPermissionDenied, not "no quorum".
TEST(RedlockErrorReplies, AMajorityRefusingAlikeIsTheVerdict) {
  auto cluster = RedisCluster::start(3);
  for (int i = 0; i < 3; ++i) {
    // Rights on every key on the last instance only.
    (*cluster)[i].command(
        {"ACL", "SETUSER", "limited", "on", ">limited-pw", i == 2 ? "~*" : "~other:*", "+@all"});
  }
  std::string uri = "redlock://limited:limited-pw@";
  for (int i = 0; i < 3; ++i) uri += (i ? "," : "") + (*cluster)[i].address();
  Client client = connect_or_throw(uri);
  auto lease = client.acquire(key("rights"), {.ttl = 5s, .wait = 1s});
  EXPECT_EQ(lease.code(), Code::kPermissionDenied) << lease.status().to_string();
}

// Before: status said "free" and list "no locks held" when the server refused the inspection
// (an ACL user without rights on the lock's keys: NOPERM).
TEST(RedisErrorReplies, AnInspectionRefusedByTheServerIsAnErrorNotFree) {
  auto server = RedisServer::start();
  Client owner = connect_or_throw(server->uri());
  auto held = owner.acquire(key("watched"), {.ttl = 10s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  server->command({"ACL", "SETUSER", "viewer", "on", ">viewer-pw", "~other:*", "+@all"});
  Client viewer =
      connect_or_throw("redis://viewer:viewer-pw@" + server->address());  // connects: PING is ok
  auto holder = viewer.inspect(key("watched"));
  EXPECT_EQ(holder.code(), Code::kPermissionDenied)
      << (holder.ok() ? (holder->has_value() ? "held" : "free") : holder.status().to_string());
  auto listed = viewer.list("");
  EXPECT_EQ(listed.code(), Code::kPermissionDenied)
      << (listed.ok() ? std::to_string(listed->size()) + " held" : listed.status().to_string());
}

// A lock key that someone replaced with another type (a hash here) is lost alone: the renewal of
// the other leases in the same batch goes on. Before, GET answered WRONGTYPE for the whole
// script call, and every lease of the batch (up to renew_batch) got no vote and was lost.
TEST(RedisErrorReplies, ALockKeyOfAnotherTypeLosesItsLeaseAloneNotItsBatch) {
  auto server = RedisServer::start();
  Client client = connect_or_throw(server->uri());
  auto replaced = client.acquire(key("typed-replaced"), {.ttl = 1500ms});
  auto kept = client.acquire(key("typed-kept"), {.ttl = 1500ms});
  ASSERT_TRUE(replaced.ok() && kept.ok());
  const std::string lock = lock_key("typed-replaced");
  ASSERT_EQ(server->command({"DEL", lock}), "1");
  ASSERT_EQ(server->command({"HSET", lock, "field", "value"}), "1");
  const Clock::time_point first_validity = kept->valid_until();
  EXPECT_TRUE(eventually([&] { return replaced->is_lost(); }, 10s))
      << "a lease whose key became a hash was not found lost";
  EXPECT_TRUE(eventually(
      [&] { return kept->is_lost() || kept->valid_until() > first_validity + 1s; }, 10s));
  EXPECT_FALSE(kept->is_lost()) << "the other lease of the batch was lost with it";
  // Its release finds the key is not its value: done (before: WRONGTYPE, an error, and the
  // release sent again in the background for a minute).
  const Status released = replaced->release();
  EXPECT_TRUE(released.ok()) << released.to_string();
}

// Names starting with '}' or '{' get a hash tag of their own (redis_keys.h) and work like any.
TEST(RedisKeys, NamesStartingWithABraceAreLockedListedAndInspected) {
  auto server = RedisServer::start();
  Client client = connect_or_throw(server->uri());
  for (std::string_view name : {"}closing", "{opening", "{}", "}"}) {
    auto lease = client.acquire(key(name), {.ttl = 10s});
    ASSERT_TRUE(lease.ok()) << name << ": " << lease.status().to_string();
    EXPECT_EQ(server->command({"EXISTS", lock_key(name)}), "1") << name;
    auto holder = client.inspect(key(name));
    ASSERT_TRUE(holder.ok() && holder->has_value()) << name;
    auto listed = client.list(name);
    ASSERT_TRUE(listed.ok()) << listed.status().to_string();
    ASSERT_EQ(listed->size(), 1u) << name;
    EXPECT_EQ((*listed)[0].key.str(), name);
    ASSERT_TRUE(lease->release().ok());
  }
}

// Before: the subscriber only waited for bytes, so a connection that died without closing went
// deaf for good. It now PINGs after a quiet second and drops a connection that stays silent:
// every waiter is woken once to retry.
TEST(RedisSubscriber, AConnectionThatGoesSilentWithoutClosingIsDroppedAndWaitersWoken) {
  auto server = RedisServer::start();
  torture::FaultProxy proxy("127.0.0.1", server->port());
  auto parsed = detail::parse_uri("redis://127.0.0.1:" + std::to_string(proxy.port()), 6379);
  ASSERT_TRUE(parsed.ok());
  auto specs = detail::redis::connect_specs(*parsed, 1s);
  ASSERT_TRUE(specs.ok()) << specs.status().to_string();
  detail::redis::ReleaseHub hub(*specs, detail::redis::wake_channel("silent-test"), 2s);
  auto watch = hub.watch(OwnerId::random().hex(), Clock::now() + 10s);  // returns once subscribed
  proxy.set_fault(torture::NetworkFault::kBlackhole);
  // Nothing is published: only the heartbeat's verdict can wake the waiter.
  EXPECT_TRUE(watch->wait_until(Clock::now() + 20s, std::stop_token()))
      << "a waiter on a silent subscriber connection was never woken";
  proxy.set_fault(torture::NetworkFault::kNone);
}

// This process's threads named `name` (/proc/self/task/*/comm).
int threads_named(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) count++;
  }
  return count;
}

// A Client with waiters goes while its instance is silent (a blackhole: nothing answers, nothing
// closes): its subscriber thread deletes the liveness key within its bound and ends. Review:
// the loop saw the delete run out of time, and then slept in poll() with nothing left to wake
// it, so the last Client handle's destructor (or the engine thread that dropped it) hung for
// good, even after the instance came back.
// A hub whose eventfd could not be made (the process was out of descriptors) has nothing to
// interrupt its loop's poll(): it wakes on its own every 50 ms instead, so a watch is taken up
// and stop() returns. Before, its loop slept with no timeout and the destructor hung for good.
// (The eventfd is closed by a test hook: exhausting the descriptors with RLIMIT_NOFILE also
// broke the sanitizers' runtime checks in that window.)
TEST(RedisSubscriber, AHubWithoutAnEventfdStillStops) {
  auto hub = std::make_unique<detail::redis::ReleaseHub>(
      std::vector<detail::redis::ConnectSpec>{}, detail::redis::wake_channel("no-eventfd"), 1s);
  hub->drop_wake_fd_for_testing();
  auto watch = hub->watch("0123456789abcdef0123456789abcdef", Clock::now() + 1s);
  ASSERT_NE(watch, nullptr);
  watch.reset();
  auto stopped = std::make_shared<std::promise<void>>();
  auto done = stopped->get_future();
  // Detached: were stop() to hang, the test fails at the bound instead of hanging with it.
  std::thread([hub = std::move(hub), stopped]() mutable {
    hub.reset();
    stopped->set_value();
  }).detach();
  EXPECT_EQ(done.wait_for(10s), std::future_status::ready) << "stop() never returned";
}

TEST(RedisSubscriber, AClientWithWaitersGoesWithinItsBoundWhileTheInstanceIsSilent) {
  auto server = RedisServer::start();
  torture::FaultProxy proxy("127.0.0.1", server->port());
  Client holder = connect_or_throw(server->uri());
  auto held = holder.acquire(*LockKey::make("silent-exit"), {.ttl = 60s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  auto waiter =
      Client::connect("redis://127.0.0.1:" + std::to_string(proxy.port()), {.io_timeout = 500ms});
  ASSERT_TRUE(waiter.ok()) << waiter.status().to_string();
  std::stop_source cancel;
  auto waiting = waiter->acquire_future(*LockKey::make("silent-exit"),
                                        {.ttl = 5s, .wait = 60s, .stop = cancel.get_token()});
  ASSERT_TRUE(eventually([&] {
    return server->command({"ZCARD", detail::redis::queue_key("silent-exit")}) == "1" &&
           server->keys("fencelock:wake:*:alive").size() == 1;
  })) << "the waiter never took its place, or its liveness key was never written";
  proxy.set_fault(torture::NetworkFault::kBlackhole);
  cancel.request_stop();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiting.get().code(), Code::kCancelled);
  std::atomic<bool> gone{false};
  std::thread destroyer([client = std::move(*waiter), &gone]() mutable {
    { Client last = std::move(client); }
    gone = true;
  });
  if (!eventually([&] { return gone.load(); }, 10s)) {
    // A hung destructor would hang this test too: fail loudly instead.
    std::fprintf(stderr, "FAILED: the last handle of the Client was not gone 10 s later\n");
    std::_Exit(1);
  }
  destroyer.join();
  // The Client's state may go on an engine thread instead (the cancelled acquisition's last
  // reference): its subscriber thread must end all the same.
  EXPECT_TRUE(eventually([] { return threads_named("fl-subscribe") == 0; }, 10s))
      << "the subscriber thread still runs 10 s after its Client went";
  proxy.set_fault(torture::NetworkFault::kNone);
  EXPECT_TRUE(held->release().ok());
}

}  // namespace
}  // namespace fencelock::testing
