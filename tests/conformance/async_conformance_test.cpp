// The asynchronous API (Client::acquire_async, acquire_future, Lease::release_async) against
// every backend: the contract of the blocking calls, completions on fencelock threads (never
// inside the call), pending acquisitions as state rather than threads, and a Client destroyed
// with acquisitions pending: every one completes kCancelled and nothing stays held.
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "conformance/harness.h"
#include "fencelock/client.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

template <typename Tag>
class AsyncConformance : public ::testing::Test {
 protected:
  void SetUp() override { harness_ = Tag::make(); }

  Client connect(ClientOptions options = {}) {
    auto client = Client::connect(harness_->uri(), options);
    if (!client.ok()) throw std::runtime_error("connect failed: " + client.status().to_string());
    return std::move(*client);
  }
  static LockKey key(std::string_view name) { return *LockKey::make(name); }
  // PostgreSQL advisory locks and etcd wait in their server's queue: a waiting acquisition holds
  // a thread (and a server session) of its own there for now.
  static constexpr bool kWaitsOnServer =
      std::is_same_v<Tag, PostgresAdvisoryBackendTag> || std::is_same_v<Tag, EtcdBackendTag>;

  std::unique_ptr<Harness> harness_;
};

using Backends = AllBackends;
TYPED_TEST_SUITE(AsyncConformance, Backends, BackendNames);

int threads_of_this_process() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) n += entry->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

// Collects completions: how many, on which thread, and the results.
struct Completions {
  std::mutex mu;
  std::condition_variable changed;
  std::vector<Result<Lease>> results;
  std::vector<std::thread::id> threads;

  std::function<void(Result<Lease>)> callback() {
    return [this](Result<Lease> lease) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(lease));
      threads.push_back(std::this_thread::get_id());
      changed.notify_all();
    };
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, limit, [&] { return results.size() >= n; });
  }
};

TYPED_TEST(AsyncConformance, AGrantCompletesOnceOnAFencelockThreadWithTheBlockingContract) {
  Client client = this->connect();
  Completions done;
  client.acquire_async(this->key("async/grant"), {.ttl = 5s}, done.callback());
  ASSERT_TRUE(done.wait_for(1, 30s)) << "no completion";
  std::lock_guard<std::mutex> lock(done.mu);
  ASSERT_EQ(done.results.size(), 1u);
  EXPECT_NE(done.threads[0], std::this_thread::get_id()) << "completed inside the call";
  Result<Lease>& lease = done.results[0];
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ(lease->key().str(), "async/grant");
  EXPECT_GT(lease->token().value(), 0u);
  EXPECT_GT(lease->valid_until(), Clock::now());
  auto holder = client.inspect(this->key("async/grant"));
  ASSERT_TRUE(holder.ok() && holder->has_value());
  EXPECT_EQ((*holder)->owner_prefix, lease->owner().short_hex());
}

TYPED_TEST(AsyncConformance, InvalidArgumentsCompleteOnAFencelockThreadToo) {
  Client client = this->connect();
  Completions done;
  client.acquire_async(this->key("async/invalid"), {.ttl = 0ms}, done.callback());
  ASSERT_TRUE(done.wait_for(1, 30s));
  std::lock_guard<std::mutex> lock(done.mu);
  EXPECT_EQ(done.results[0].code(), Code::kInvalidArgument);
  EXPECT_NE(done.threads[0], std::this_thread::get_id()) << "completed inside the call";
}

TYPED_TEST(AsyncConformance, AWaiterIsGrantedWhenTheHolderReleases) {
  Client a = this->connect(), b = this->connect();
  const std::string name = "async/wait";
  auto k = this->key(name);
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  auto waited = b.acquire_future(k, {.ttl = 30s, .wait = 20s});
  ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(name) >= 1; }));
  EXPECT_EQ(waited.wait_for(0s), std::future_status::timeout) << "granted while held";
  const long long before = this->harness_->acquire_attempts(name);
  ASSERT_TRUE(lease->release().ok());
  // The holder's TTL (30 s) exceeds the wait (20 s): only the release can explain a grant.
  Result<Lease> granted = waited.get();
  ASSERT_TRUE(granted.ok()) << granted.status().to_string();
  EXPECT_GT(granted->token().value(), lease->token().value());
  // The release and the winning try (with Redlock's second round, a late instance's retry):
  // a handful, where polling while held would show many.
  EXPECT_LE(this->harness_->acquire_attempts(name) - before, 5);
}

TYPED_TEST(AsyncConformance, AWaitExpiresWithLockedAndLeavesNothingBehind) {
  Client a = this->connect(), b = this->connect();
  auto k = this->key("async/timeout");
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  auto waited = b.acquire_future(k, {.ttl = 30s, .wait = 300ms}).get();
  EXPECT_EQ(waited.code(), Code::kLocked) << waited.status().to_string();
  EXPECT_NE(waited.status().message().find("async/timeout"), std::string::npos)
      << "the message does not name the key: " << waited.status().to_string();
  auto holder = b.inspect(k);
  ASSERT_TRUE(holder.ok() && holder->has_value());
  EXPECT_EQ((*holder)->owner_prefix, lease->owner().short_hex());
}

TYPED_TEST(AsyncConformance, AStopTokenCancelsTheWaitAndNothingIsLeftHeld) {
  Client a = this->connect(), b = this->connect();
  const std::string name = "async/cancel";
  auto k = this->key(name);
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  std::stop_source cancel;
  auto waited = b.acquire_future(k, {.ttl = 30s, .wait = 30s, .stop = cancel.get_token()});
  ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(name) >= 1; }));
  cancel.request_stop();
  EXPECT_EQ(waited.get().code(), Code::kCancelled);
  ASSERT_TRUE(lease->release().ok());
  auto holder = b.inspect(k);
  ASSERT_TRUE(holder.ok());
  EXPECT_FALSE(holder->has_value()) << "the cancelled waiter left a lock behind";
  // No place in a server queue either: another client is granted at once, without a wait.
  Client c = this->connect();
  auto next = c.acquire(k, {.ttl = 30s});
  EXPECT_TRUE(next.ok()) << next.status().to_string();
}

TYPED_TEST(AsyncConformance, AcquisitionsOfOneClientQueueLocallyInOrder) {
  constexpr int kWaiters = 6;
  Client holder = this->connect(), waiters = this->connect();
  auto k = this->key("async/fifo");
  auto held = holder.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(held.ok());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::future<void>> finished;
  for (int i = 0; i < kWaiters; ++i) {
    auto done = std::make_shared<std::promise<void>>();
    finished.push_back(done->get_future());
    waiters.acquire_async(k, {.ttl = 30s, .wait = 30s}, [&, i, done](Result<Lease> lease) {
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(lease.ok() ? i : -1 - i);
      }
      if (lease.ok()) (void)lease->release();  // the next in line goes on
      done->set_value();
    });
  }
  ASSERT_TRUE(held->release().ok());
  for (auto& f : finished) ASSERT_EQ(f.wait_for(60s), std::future_status::ready);
  std::vector<int> expected;
  for (int i = 0; i < kWaiters; ++i) expected.push_back(i);
  EXPECT_EQ(order, expected) << "not granted in the order asked, or not every one granted";
}

TYPED_TEST(AsyncConformance, ReleaseAsyncFreesTheKeyAndTheLeaseMayGoAtOnce) {
  Client client = this->connect();
  auto k = this->key("async/release");
  auto lease = client.acquire_future(k, {.ttl = 30s}).get();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  std::promise<std::pair<Status, std::thread::id>> released;
  {
    Lease gone = std::move(*lease);
    gone.release_async([&](Status status) {
      released.set_value({std::move(status), std::this_thread::get_id()});
    });
    EXPECT_TRUE(gone.is_lost()) << "lost() must fire before the servers are asked";
  }  // destroyed while the release may still run
  auto [status, thread] = released.get_future().get();
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_NE(thread, std::this_thread::get_id());
  auto holder = client.inspect(k);
  ASSERT_TRUE(holder.ok());
  EXPECT_FALSE(holder->has_value()) << "the release did not free the key";
}

// Pending acquisitions are state on the Client's engine, not threads (where the backend's server
// queues waiters, a thread each for now); when the last copy of the Client goes, every one
// completes kCancelled and none holds anything, on a server or in its queue.
TYPED_TEST(AsyncConformance, ADestroyedClientCancelsEveryPendingAcquisitionAndNothingStaysHeld) {
  const int n = TestFixture::kWaitsOnServer ? 8 : 1000;
  Client holder = this->connect();
  std::vector<LockKey> keys;
  std::vector<Lease> held;
  for (int i = 0; i < n; ++i) {
    keys.push_back(this->key("async/pending/" + std::to_string(i)));
    auto lease = holder.acquire(keys.back(), {.ttl = 60s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    held.push_back(std::move(*lease));
  }
  Completions done;
  const int threads_before = threads_of_this_process();
  {
    Client waiters = this->connect();
    for (const LockKey& k : keys)
      waiters.acquire_async(k, {.ttl = 30s, .wait = 60s}, done.callback());
    const std::string last = "async/pending/" + std::to_string(n - 1);
    ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(last) >= 1; }, 60s))
        << "the last acquisition never reached the server";
    if (!TestFixture::kWaitsOnServer) {
      EXPECT_LT(threads_of_this_process() - threads_before, 32)
          << "pending acquisitions hold threads";
    }
    std::lock_guard<std::mutex> lock(done.mu);
    EXPECT_TRUE(done.results.empty()) << "completed while every key was held";
  }  // the last copy of the waiting Client goes
  ASSERT_TRUE(done.wait_for(static_cast<std::size_t>(n), 60s))
      << "pending acquisitions never completed";
  {
    std::lock_guard<std::mutex> lock(done.mu);
    for (const Result<Lease>& r : done.results) {
      ASSERT_EQ(r.code(), Code::kCancelled) << r.status().to_string();
    }
    done.results.clear();  // no Lease of the gone Client is kept
  }
  for (Lease& lease : held) ASSERT_TRUE(lease.release().ok());
  // Nothing of the cancelled waiters is held, nor keeps a place in a server queue: a new client
  // is granted every key at once.
  Client next = this->connect();
  for (const LockKey& k : keys) {
    auto lease = next.acquire(k, {.ttl = 30s});
    ASSERT_TRUE(lease.ok()) << k.str() << ": " << lease.status().to_string();
  }
}

}  // namespace
}  // namespace fencelock::testing
