// The conformance suite: every guarantee of the contract in docs/PROTOCOLS.md, checked against
// every backend through the public API only, each case twice: through the blocking API
// ("redis") and the asynchronous one ("redis_async": acquire_future, release_async). Each test is
// named after the guarantee it checks.
//
// Backends: memory://, redis:// (one real redis-server), redlock:// (three real redis-servers).
// A backend joins by adding its harness tag to AllBackends (harness.h); the cases never change.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <type_traits>
#include <vector>

#include "conformance/harness.h"
#include "core/client_core.h"
#include "core/mutex.h"
#include "fencelock/client.h"
#include "support/lost_probe.h"
#include "support/process.h"

namespace fencelock::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A Client whose acquire() goes through the API under test: the blocking call, or
// acquire_future() (the asynchronous path) waited on.
class ApiClient : public Client {
 public:
  ApiClient(Client client, bool async) : Client(std::move(client)), async_(async) {}
  Result<Lease> acquire(const LockKey& key, const AcquireOptions& options = {}) {
    return async_ ? acquire_future(key, options).get() : Client::acquire(key, options);
  }

 private:
  bool async_;
};

template <typename Tag>
class Conformance : public ::testing::Test {
 protected:
  static constexpr bool kAsync = kAsyncApi<Tag>;
  void SetUp() override { harness_ = Tag::make(); }

  ApiClient connect(ClientOptions options = {}) {
    auto client = Client::connect(harness_->uri(), options);
    if (!client.ok()) throw std::runtime_error("connect failed: " + client.status().to_string());
    return {std::move(*client), kAsync};
  }
  static LockKey key(std::string_view name) { return *LockKey::make(name); }
  // Lease::release(), or release_async() waited on.
  static Status release(Lease& lease) {
    if (!kAsync) return lease.release();
    std::promise<Status> released;
    std::future<Status> status = released.get_future();
    lease.release_async([&released](Status s) { released.set_value(std::move(s)); });
    return status.get();
  }

  std::unique_ptr<Harness> harness_;
};

using Backends = AllBackendsBothApis;
TYPED_TEST_SUITE(Conformance, Backends, BackendNames);

// --- the Lease contract ----------------------------------------------------------------------

TYPED_TEST(Conformance, Contract_GrantCarriesKeyOwnerNonZeroTokenAndFutureValidity) {
  ApiClient client = this->connect();
  // valid_until() counts from the send of the statement that granted. A first acquire of a key
  // may send more than one (the PostgreSQL lease table inserts the key's row, then grants), and
  // opens connections between them: take and release the key once first, so that the acquire
  // measured below is one round trip on open connections and `before` precedes its send.
  {
    auto first = client.acquire(this->key("contract"), {.ttl = 5s});
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE(this->release(*first).ok());
  }
  auto before = Clock::now();
  auto lease = client.acquire(this->key("contract"), {.ttl = 5s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ(lease->key().str(), "contract");
  EXPECT_EQ(lease->owner().hex().size(), 32u);
  EXPECT_GT(lease->token().value(), 0u);
  EXPECT_GT(lease->valid_until(), Clock::now());
  EXPECT_LE(lease->valid_until(), before + 5s);  // drift allowance and elapsed time subtracted
  EXPECT_FALSE(lease->is_lost());
}

TYPED_TEST(Conformance, Contract_InvalidTtlAndWaitAreRejectedAndNothingIsHeld) {
  ApiClient client = this->connect();
  auto k = this->key("invalid");
  EXPECT_EQ(client.acquire(k, {.ttl = 0ms}).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.acquire(k, {.ttl = -5s}).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.acquire(k, {.ttl = 1ms}).code(), Code::kInvalidArgument);  // below every minimum
  EXPECT_EQ(client.acquire(k, {.ttl = 5s, .wait = -1ms}).code(), Code::kInvalidArgument);
  // A TTL above what every backend can represent: refused, not wrapped.
  EXPECT_EQ(client.acquire(k, {.ttl = kMaxDuration + 1ms}).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.acquire(k, {.ttl = std::chrono::milliseconds::max()}).code(),
            Code::kInvalidArgument);
  auto holder = client.inspect(k);
  ASSERT_TRUE(holder.ok()) << holder.status().to_string();
  EXPECT_FALSE(holder->has_value());
}

// The cap itself works on every backend: a 596 h TTL is granted with a validity that far ahead,
// and a 596 h wait fits PostgreSQL's lock_timeout (597 h overflowed it). A longer wait, up to
// std::chrono::milliseconds::max(), saturates its deadline (it gave up at once when the sum
// wrapped).
TYPED_TEST(Conformance, Contract_TheLongestTtlAndWaitAreGranted) {
  ApiClient client = this->connect();
  auto k = this->key("longest");
  auto lease = client.acquire(k, {.ttl = kMaxDuration, .wait = kMaxDuration, .renew = false});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_GT(lease->valid_until(), Clock::now() + kMaxDuration - 24h);
  EXPECT_FALSE(lease->is_lost());
  EXPECT_TRUE(this->release(*lease).ok());
  auto waited = client.acquire(k, {.ttl = 5s, .wait = kMaxDuration});
  ASSERT_TRUE(waited.ok()) << waited.status().to_string();
  ASSERT_TRUE(this->release(*waited).ok());
  auto forever = client.acquire(k, {.ttl = 5s, .wait = std::chrono::milliseconds::max()});
  ASSERT_TRUE(forever.ok()) << forever.status().to_string();
}

// --- 1. Fencing ------------------------------------------------------------------------------

TYPED_TEST(Conformance, Fencing_TokensStrictlyIncreaseAcross1000GrantsFromSeveralClients) {
  std::vector<ApiClient> clients;
  clients.reserve(4);
  for (int i = 0; i < 4; ++i) clients.push_back(this->connect());
  auto k = this->key("fencing/sequential");
  std::uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    auto lease = clients[static_cast<std::size_t>(i % 4)].acquire(k, {.ttl = 10s, .renew = false});
    ASSERT_TRUE(lease.ok()) << "grant " << i << ": " << lease.status().to_string();
    ASSERT_GT(lease->token().value(), last) << "grant " << i;
    last = lease->token().value();
    ASSERT_TRUE(this->release(*lease).ok());
  }
}

TYPED_TEST(Conformance, Fencing_TokensIncreaseInGrantOrderUnderContention) {
  constexpr int kClients = 4, kGrantsEach = 15;
  std::vector<ApiClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) clients.push_back(this->connect());
  auto k = this->key("fencing/contended");
  fencelock::detail::Mutex mu;
  std::vector<std::uint64_t> order;  // tokens in the order the critical sections ran
  std::atomic<int> failures{0};
  std::vector<std::jthread> threads;
  threads.reserve(kClients);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < kGrantsEach; ++i) {
        auto lease = clients[static_cast<std::size_t>(c)].acquire(k, {.ttl = 5s, .wait = 30s});
        if (!lease.ok()) {
          failures++;
          continue;
        }
        {
          fencelock::detail::MutexLock lock(mu);
          order.push_back(lease->token().value());
        }
        (void)this->release(*lease);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kClients * kGrantsEach));
  for (std::size_t i = 1; i < order.size(); ++i) EXPECT_GT(order[i], order[i - 1]) << "at " << i;
}

// --- 2. Mutual exclusion while valid ----------------------------------------------------------

TYPED_TEST(Conformance, MutualExclusion_SecondClientIsLockedWhileTheLeaseIsValid) {
  ApiClient a = this->connect(), b = this->connect();
  auto k = this->key("mutex/simple");
  auto held = a.acquire(k, {.ttl = 10s});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  auto second = b.acquire(k, {.ttl = 10s});
  EXPECT_EQ(second.code(), Code::kLocked) << second.status().to_string();
  // The refusal names the key; another Client's is not told it holds it.
  EXPECT_NE(second.status().message().find("'" + k.str() + "'"), std::string::npos)
      << second.status().to_string();
  EXPECT_EQ(second.status().message().find("not reentrant"), std::string::npos);
  auto same_client =
      a.acquire(k, {.ttl = 10s});  // not re-entrant: a second grant is a second holder
  EXPECT_EQ(same_client.code(), Code::kLocked);
  // ... and says that this Client holds it, with the token, and why that is refused.
  const std::string why = same_client.status().message();
  EXPECT_NE(why.find("this Client holds it itself (token " + std::to_string(held->token().value()) +
                     ", not released)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("not reentrant"), std::string::npos) << why;
  ASSERT_TRUE(this->release(*held).ok());
  auto again = b.acquire(k, {.ttl = 10s});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto after_release = a.acquire(k, {.ttl = 10s});
  EXPECT_EQ(after_release.code(), Code::kLocked);
  EXPECT_EQ(after_release.status().message().find("holds it itself"), std::string::npos)
      << "a released Lease still counts as held: " << after_release.status().to_string();
}

TYPED_TEST(Conformance, MutualExclusion_NeverTwoValidLeasesAtOnceUnderContention) {
  constexpr int kClients = 4, kThreadsPerClient = 2, kGrantsEach = 8;
  std::vector<ApiClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) clients.push_back(this->connect());
  auto k = this->key("mutex/contended");
  std::atomic<int> inside{0}, overlaps{0}, grants{0};
  std::vector<std::jthread> threads;
  for (int c = 0; c < kClients; ++c) {
    for (int t = 0; t < kThreadsPerClient; ++t) {
      threads.emplace_back([&, c] {
        for (int i = 0; i < kGrantsEach; ++i) {
          auto lease = clients[static_cast<std::size_t>(c)].acquire(k, {.ttl = 5s, .wait = 30s});
          if (!lease.ok()) continue;
          grants++;
          if (inside.fetch_add(1) != 0) overlaps++;
          std::this_thread::sleep_for(1ms);  // the critical section's work
          if (lease->is_lost() || lease->valid_until() <= Clock::now()) overlaps++;
          inside.fetch_sub(1);
          (void)this->release(*lease);
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(grants.load(), kClients * kThreadsPerClient * kGrantsEach);
}

// --- 3. Liveness -----------------------------------------------------------------------------

TYPED_TEST(Conformance, Liveness_AHolderThatVanishesWithoutReleasingFreesTheKeyWithinItsTtl) {
  ApiClient crashing = this->connect({.release_timeout = 0ms});  // its leases die without a release
  ApiClient other = this->connect();
  auto k = this->key("liveness");
  {
    auto lease = crashing.acquire(k, {.ttl = this->harness_->short_ttl()});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  }  // gone: no release, no renewal
  this->harness_->crashed("liveness");
  if (this->harness_->validity_bounds_exclusion()) {
    EXPECT_EQ(other.acquire(k, {.ttl = 5s}).code(), Code::kLocked);  // not before its TTL
  }
  auto start = Clock::now();
  auto lease = other.acquire(k, {.ttl = 5s, .wait = 10s});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_LT(Clock::now() - start, 5s);  // freed by its short TTL, not by anything slower
}

// --- 4. Loss is signalled --------------------------------------------------------------------

TYPED_TEST(Conformance, Loss_APausedHolderIsToldItLostTheLockBeforeAnotherClientIsGranted) {
  ApiClient holder = this->connect(), other = this->connect();
  auto k = this->key("loss/paused");
  auto lease = holder.acquire(k, {.ttl = 2 * this->harness_->short_ttl()});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  LostProbe probe(*lease);
  auto validity = lease->valid_until();
  this->harness_->cut_off(holder, "loss/paused");  // "GC pause"
  auto next = other.acquire(k, {.ttl = 5s, .wait = 10s});
  auto granted_at = Clock::now();
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_GT(next->token(), lease->token());
  if (!this->harness_->validity_bounds_exclusion()) {
    // No time bound to promise: the holder is told within its health-check interval, and the
    // larger token of the next holder is what keeps a fenced resource safe meanwhile.
    EXPECT_TRUE(probe.wait(10s)) << "the cut-off holder was never told";
    return;
  }
  auto fired = probe.fired_at();
  ASSERT_TRUE(fired.has_value()) << "another client was granted while the holder was not told";
  EXPECT_LE(*fired, granted_at);
  EXPECT_LE(*fired, validity);
}

TYPED_TEST(Conformance, Loss_ALeaseWithoutRenewalSignalsLossNoLaterThanItsValidity) {
  ApiClient client = this->connect();
  auto lease = client.acquire(this->key("loss/norenew"),
                              {.ttl = this->harness_->short_ttl(), .renew = false});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  LostProbe probe(*lease);
  ASSERT_TRUE(probe.wait(5s));
  EXPECT_LE(*probe.fired_at(), lease->valid_until());
  EXPECT_TRUE(lease->lost().stop_requested());
}

TYPED_TEST(Conformance, Loss_RenewalKeepsTheLeaseValidPastItsTtl) {
  ApiClient holder = this->connect(), other = this->connect();
  auto k = this->key("loss/renewed");
  const auto ttl = this->harness_->short_ttl();
  auto lease = holder.acquire(k, {.ttl = ttl});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  auto first = lease->valid_until();
  // Two renewals later the validity has moved a whole TTL past the first one.
  ASSERT_TRUE(eventually([&] { return lease->valid_until() > first + ttl; }, 10s));
  EXPECT_FALSE(lease->is_lost());
  EXPECT_EQ(other.acquire(k, {.ttl = 5s}).code(), Code::kLocked);
}

// --- 5. Nothing leaks; release ---------------------------------------------------------------

TYPED_TEST(Conformance, Release_FreesTheKeyAtOnceAndFiresLost) {
  ApiClient a = this->connect(), b = this->connect();
  auto k = this->key("release/explicit");
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(this->release(*lease).ok());
  EXPECT_TRUE(lease->is_lost());
  EXPECT_TRUE(this->release(*lease).ok());  // idempotent
  auto next = b.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(next.ok()) << next.status().to_string();
}

TYPED_TEST(Conformance, Release_TheDestructorReleasesAndAMovedFromLeaseReleasesNothing) {
  ApiClient a = this->connect(), b = this->connect();
  auto k = this->key("release/raii");
  {
    auto lease = a.acquire(k, {.ttl = 30s});
    ASSERT_TRUE(lease.ok());
    Lease moved = std::move(*lease);
    EXPECT_EQ(b.acquire(k, {.ttl = 30s}).code(), Code::kLocked);
  }
  EXPECT_TRUE(b.acquire(k, {.ttl = 30s}).ok());
}

TYPED_TEST(Conformance, Wait_AWaiterIsWokenByTheReleaseWithoutPolling) {
  ApiClient a = this->connect(), b = this->connect();
  std::string name = "wait/event";
  auto k = this->key(name);
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  std::optional<Result<Lease>> waited;
  std::jthread waiter([&] { waited.emplace(b.acquire(k, {.ttl = 30s, .wait = 20s})); });
  ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(name) >= 1; }));
  long long before = this->harness_->acquire_attempts(name);
  // Hold on for a while: a polling waiter would try many times in this window.
  std::this_thread::sleep_for(1s);
  long long during = this->harness_->acquire_attempts(name) - before;
  auto released_at = Clock::now();
  ASSERT_TRUE(this->release(*lease).ok());
  waiter.join();
  ASSERT_TRUE(waited->ok()) << waited->status().to_string();
  // The holder's TTL (30 s) exceeds the wait (20 s): only the release event can explain a grant.
  EXPECT_LT(Clock::now() - released_at, 5s);
  // At most the waiter's re-try right after subscribing can fall in the window.
  EXPECT_LE(during, 1) << "the waiter polled the server while the lock was held";
  // That re-try, the release, and the winning try (with Redlock's round 2), plus at most one
  // more try when an instance answered the winning try too late (seen on a loaded 2-core CI
  // machine): a handful, where polling would show hundreds.
  EXPECT_LE(this->harness_->acquire_attempts(name) - before, 5);
}

TYPED_TEST(Conformance, Wait_ExpiresWithLockedAndLeavesNothingBehind) {
  ApiClient a = this->connect(), b = this->connect();
  auto k = this->key("wait/timeout");
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  auto start = Clock::now();
  auto waited = b.acquire(k, {.ttl = 30s, .wait = 300ms});
  EXPECT_EQ(waited.code(), Code::kLocked) << waited.status().to_string();
  EXPECT_GE(Clock::now() - start, 300ms);
  auto holder = b.inspect(k);
  ASSERT_TRUE(holder.ok() && holder->has_value());
  EXPECT_EQ((*holder)->owner_prefix, lease->owner().short_hex());
}

TYPED_TEST(Conformance, Wait_AStopTokenCancelsTheWaitAndNothingIsLeftHeld) {
  ApiClient a = this->connect(), b = this->connect();
  std::string name = "wait/cancel";
  auto k = this->key(name);
  auto lease = a.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  std::stop_source cancel;
  std::optional<Result<Lease>> waited;
  std::jthread waiter(
      [&] { waited.emplace(b.acquire(k, {.ttl = 30s, .wait = 30s, .stop = cancel.get_token()})); });
  ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(name) >= 1; }));
  auto cancelled_at = Clock::now();
  cancel.request_stop();
  waiter.join();
  EXPECT_LT(Clock::now() - cancelled_at, 5s);
  EXPECT_EQ(waited->code(), Code::kCancelled);
  ASSERT_TRUE(this->release(*lease).ok());
  auto holder = b.inspect(k);
  ASSERT_TRUE(holder.ok());
  EXPECT_FALSE(holder->has_value()) << "the cancelled waiter left a lock behind";
  std::stop_source already;
  already.request_stop();
  EXPECT_EQ(b.acquire(k, {.ttl = 30s, .stop = already.get_token()}).code(), Code::kCancelled);
}

TYPED_TEST(Conformance, Wait_ThreadsOfOneClientQueueLocallyBehindOneRemoteWaiter) {
  constexpr int kThreads = 8;
  ApiClient holder = this->connect(), waiters = this->connect();
  std::string name = "wait/coalesced";
  auto k = this->key(name);
  auto lease = holder.acquire(k, {.ttl = 30s});
  ASSERT_TRUE(lease.ok());
  fencelock::detail::Mutex mu;
  std::vector<std::uint64_t> tokens;
  std::vector<std::jthread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto mine = waiters.acquire(k, {.ttl = 10s, .wait = 30s});
      if (!mine.ok()) return;
      fencelock::detail::MutexLock lock(mu);
      tokens.push_back(mine->token().value());
    });
  }
  auto& queue = detail::ClientAccess::core(waiters).queue();
  ASSERT_TRUE(eventually([&] { return queue.waiting(name) == kThreads; }));
  ASSERT_TRUE(eventually([&] { return this->harness_->server_waiters(name) >= 1; }));
  EXPECT_EQ(this->harness_->server_waiters(name), 1);
  ASSERT_TRUE(this->release(*lease).ok());
  for (auto& t : threads) t.join();
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(kThreads));
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]);
  EXPECT_EQ(waiters.metrics().contended_grants, static_cast<std::uint64_t>(kThreads))
      << "every thread waited: the first for the holder, the others for a thread ahead";
}

// --- metrics ---------------------------------------------------------------------------------

TYPED_TEST(Conformance, Metrics_AWaiterGrantedAtTheReleaseIsAContendedGrant) {
  ApiClient a = this->connect(), b = this->connect();
  std::string name = "metrics/contended-grant";
  auto k = this->key(name);
  auto lease = a.acquire(k, {.ttl = 30s, .wait = 10s});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(a.metrics().contended_grants, 0u) << "the key was free";
  const long long before = this->harness_->acquire_attempts(name);
  std::optional<Result<Lease>> waited;
  std::jthread waiter([&] { waited.emplace(b.acquire(k, {.ttl = 30s, .wait = 20s})); });
  // Released only after the server saw the waiter's try, and the waiter waits (a queue place,
  // a blocked session, a key in line; a listener for the lease table, a watch in memory).
  ASSERT_TRUE(eventually([&] {
    return this->harness_->acquire_attempts(name) > before &&
           this->harness_->server_waiters(name) >= 1;
  }));
  ASSERT_TRUE(this->release(*lease).ok());
  waiter.join();
  ASSERT_TRUE(waited->ok()) << waited->status().to_string();
  MetricsSnapshot m = b.metrics();
  EXPECT_EQ(m.grants, 1u);
  EXPECT_EQ(m.contended_grants, 1u);
  EXPECT_EQ(m.contended, 0u) << "granted in the end: not kLocked";
  EXPECT_EQ(a.metrics().contended_grants, 0u);
}

// --- inspection ------------------------------------------------------------------------------

// Holder metadata is one thing everywhere: a JSON object in UTF-8, or nothing. Before, PostgreSQL
// answered non-JSON metadata with "kInternal: this is a bug", the others stored it, and invalid
// UTF-8 aborted the process when it was encoded.
TYPED_TEST(Conformance, Acquire_MetadataMustBeAJsonObjectInUtf8) {
  ApiClient client = this->connect();
  for (const std::string bad : {"not json", "[1,2]", "\"text\"", "{\"a\":\"\xff\"}"}) {
    auto refused = client.acquire(this->key("meta"), {.ttl = 5s, .metadata = bad});
    EXPECT_EQ(refused.code(), Code::kInvalidArgument)
        << bad << ": " << refused.status().to_string();
  }
  auto held = client.acquire(this->key("meta"), {.ttl = 5s, .metadata = R"({"job":"nightly"})"});
  ASSERT_TRUE(held.ok()) << "a refused acquisition left the key held: "
                         << held.status().to_string();
  auto holder = client.inspect(this->key("meta"));
  ASSERT_TRUE(holder.ok() && holder->has_value());
  EXPECT_NE((*holder)->metadata.find("nightly"), std::string::npos) << (*holder)->metadata;
}

// A prefix with a NUL is refused on every backend. Before, PostgreSQL cut it at the NUL and
// listed every lock starting with "tenant-a" (here tenant-b's too, through "tenant-").
TYPED_TEST(Conformance, Inspect_AListPrefixWithANulIsRefused) {
  ApiClient client = this->connect();
  auto mine = client.acquire(this->key("tenant-a/job"), {.ttl = 30s});
  auto theirs = client.acquire(this->key("tenant-b/job"), {.ttl = 30s});
  ASSERT_TRUE(mine.ok() && theirs.ok());
  auto listed = client.list(std::string_view("tenant-\0a/", 10));
  EXPECT_EQ(listed.code(), Code::kInvalidArgument)
      << (listed.ok() ? std::to_string(listed->size()) + " locks listed"
                      : listed.status().to_string());
}

TYPED_TEST(Conformance, Inspect_ShowsTheHolderAndListFiltersByPrefix) {
  ApiClient client = this->connect();
  auto a = client.acquire(this->key("jobs/a"), {.ttl = 30s});
  auto b = client.acquire(this->key("jobs/b"), {.ttl = 30s});
  auto other = client.acquire(this->key("other"), {.ttl = 30s});
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  auto holder = client.inspect(this->key("jobs/a"));
  ASSERT_TRUE(holder.ok() && holder->has_value()) << holder.status().to_string();
  EXPECT_EQ((*holder)->key.str(), "jobs/a");
  EXPECT_EQ((*holder)->owner_prefix, a->owner().short_hex());
  EXPECT_EQ((*holder)->token, a->token());
  if constexpr (std::is_same_v<BackendOf<TypeParam>, PostgresAdvisoryBackendTag>) {
    // PostgreSQL advisory locks live as long as their session: no TTL to show.
    EXPECT_TRUE((*holder)->session_bound);
    EXPECT_EQ((*holder)->ttl_remaining, 0ms);
  } else {
    EXPECT_FALSE((*holder)->session_bound);
    EXPECT_GT((*holder)->ttl_remaining, 0ms);
    EXPECT_LE((*holder)->ttl_remaining, 30s);
  }
  EXPECT_NE((*holder)->metadata.find("\"pid\""), std::string::npos) << (*holder)->metadata;

  auto jobs = client.list("jobs/");
  ASSERT_TRUE(jobs.ok()) << jobs.status().to_string();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].key.str(), "jobs/a");
  EXPECT_EQ((*jobs)[1].key.str(), "jobs/b");
  auto all = client.list();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
  ASSERT_TRUE(this->release(*b).ok());
  jobs = client.list("jobs/");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 1u);
  auto freed = client.inspect(this->key("jobs/b"));
  ASSERT_TRUE(freed.ok());
  EXPECT_FALSE(freed->has_value());
}

TYPED_TEST(Conformance, Keys_AnyBytesButNulWorkAndDoNotCollide) {
  ApiClient client = this->connect();
  std::vector<std::string> names = {
      "a}b", "{a}",     "a*",      "a?[x]", "with space", "ünïcode", std::string(512, 'k'),
      "a",   "a:fence", "a}:fence"};
  std::vector<Lease> held;
  for (const auto& name : names) {
    auto lease = client.acquire(this->key(name), {.ttl = 30s});
    ASSERT_TRUE(lease.ok()) << name << ": " << lease.status().to_string();
    held.push_back(std::move(*lease));
  }
  auto all = client.list();
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(all->size(), names.size());
  auto star = client.list("a*");
  ASSERT_TRUE(star.ok());
  ASSERT_EQ(star->size(), 1u);  // a literal '*', not a glob
  EXPECT_EQ((*star)[0].key.str(), "a*");
}

}  // namespace
}  // namespace fencelock::testing
