// TryBatcher and ReleaseBatcher: calls that come due while a batch runs go to the backend
// together, in order, and each caller hears its own outcome once.
#include "core/try_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "stub_backend.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
constexpr auto kEventBound = 10s;

// The calls a fake backend received, each as the keys it carried and its budget; the first call
// blocks until let_go().
class CallRecorder {
 public:
  void record(std::vector<std::string> keys, milliseconds budget) {
    MutexLock lock(mu_);
    batches_.push_back(std::move(keys));
    budgets_.push_back(budget);
    changed_.notify_all();
    if (batches_.size() == 1) {
      changed_.wait_for(lock, kEventBound, [&]() FENCELOCK_REQUIRES(mu_) { return let_go_; });
    }
  }
  bool wait_for_batches(std::size_t n) {
    MutexLock lock(mu_);
    return changed_.wait_for(lock, kEventBound,
                             [&]() FENCELOCK_REQUIRES(mu_) { return batches_.size() >= n; });
  }
  void let_go() {
    MutexLock lock(mu_);
    let_go_ = true;
    changed_.notify_all();
  }
  std::vector<std::vector<std::string>> batches() const {
    MutexLock lock(mu_);
    return batches_;
  }
  std::vector<milliseconds> budgets() const {
    MutexLock lock(mu_);
    return budgets_;
  }

 private:
  mutable Mutex mu_;
  std::condition_variable_any changed_;
  std::vector<std::vector<std::string>> batches_ FENCELOCK_GUARDED_BY(mu_);
  std::vector<milliseconds> budgets_ FENCELOCK_GUARDED_BY(mu_);
  bool let_go_ FENCELOCK_GUARDED_BY(mu_) = false;
};

// Answers every try with kLocked and retry_after = the try's ticket in ms (so each caller can
// tell its own answer); the first call blocks until let go.
class BatchRecordingBackend final : public testing::StubBackend,
                                    public BatchedTries,
                                    public CallRecorder {
 public:
  BatchedTries* batched_tries() override { return this; }
  std::vector<TryResult> try_acquire_many(std::span<const GrantRequest> requests,
                                          milliseconds budget) override {
    std::vector<std::string> keys;
    for (const GrantRequest& r : requests) keys.push_back(r.key.str());
    record(std::move(keys), budget);
    std::vector<TryResult> out;
    for (const GrantRequest& r : requests) {
      out.push_back(TryResult{Status(Code::kLocked, "held"), std::nullopt,
                              milliseconds(static_cast<long long>(r.ticket))});
    }
    return out;
  }
  bool batches_tries(milliseconds) const override { return true; }
};

// Throws from its first batch, answers the next with kLocked.
class ThrowingBackend final : public testing::StubBackend, public BatchedTries {
 public:
  BatchedTries* batched_tries() override { return this; }
  std::vector<TryResult> try_acquire_many(std::span<const GrantRequest> requests,
                                          milliseconds /*budget*/) override {
    if (calls_.fetch_add(1) == 0) throw std::runtime_error("out of sockets");
    return std::vector<TryResult>(requests.size(),
                                  TryResult{Status(Code::kLocked, "held"), std::nullopt, 1ms});
  }
  bool batches_tries(milliseconds) const override { return true; }

 private:
  std::atomic<int> calls_{0};
};

// The tries' budgets: try i's is 1 s + (7i mod 50) ms, neither rising nor falling (among tries
// 1..49 the least is try 43's, 1001 ms).

TryBatcher::Request request(int i) {
  return TryBatcher::Request{*LockKey::make("k" + std::to_string(i)),
                             OwnerId::random(),
                             1s,
                             "",
                             1s,
                             static_cast<std::uint64_t>(i),
                             1s + milliseconds((7 * i) % 50)};
}

TEST(TryBatcher, TriesThatComeDueDuringABatchGoTogetherInOrderAndEachHearsItsOwnOutcome) {
  BatchRecordingBackend backend;
  Engine engine(2);
  TryBatcher batcher(backend, [&]() -> Engine& { return engine; });
  constexpr int kTries = 50;
  Mutex mu;
  std::condition_variable_any answered;
  std::vector<int> answers(kTries, 0);       // how often each try was answered
  std::vector<long long> retry(kTries, -1);  // what each heard
  int total = 0;
  auto submit = [&](int i) {
    batcher.submit(request(i), [&, i](const TryResult& result) {
      MutexLock lock(mu);
      answers[static_cast<std::size_t>(i)]++;
      retry[static_cast<std::size_t>(i)] = result.retry_after.count();
      total++;
      answered.notify_all();
    });
  };
  submit(0);  // a lone try goes out at once ...
  ASSERT_TRUE(backend.wait_for_batches(1));
  for (int i = 1; i < kTries; ++i) submit(i);  // ... the rest wait for it, then go together
  backend.let_go();
  {
    MutexLock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, kEventBound, [&] { return total == kTries; }));
  }
  const auto batches = backend.batches();
  ASSERT_EQ(batches.size(), 2u) << "the waiting tries were not sent as one batch";
  EXPECT_EQ(batches[0], std::vector<std::string>{"k0"});
  ASSERT_EQ(batches[1].size(), static_cast<std::size_t>(kTries - 1));
  for (int i = 1; i < kTries; ++i) {
    EXPECT_EQ(batches[1][static_cast<std::size_t>(i - 1)], "k" + std::to_string(i));
  }
  // A batch takes the least budget of its tries, not its first's or last's: the second batch
  // (tries 1..49) takes try 43's.
  EXPECT_EQ(backend.budgets()[1], 1001ms);
  MutexLock lock(mu);
  for (int i = 0; i < kTries; ++i) {
    EXPECT_EQ(answers[static_cast<std::size_t>(i)], 1) << "try " << i;
    EXPECT_EQ(retry[static_cast<std::size_t>(i)], i) << "try " << i << " heard another's outcome";
  }
}

TEST(TryBatcher, ABatchThatThrowsFailsItsTriesAndTheNextTriesStillGoOut) {
  ThrowingBackend backend;
  Engine engine(2);
  TryBatcher batcher(backend, [&]() -> Engine& { return engine; });
  Mutex mu;
  std::condition_variable_any answered;
  std::vector<Status> heard;
  auto submit = [&](int i) {
    batcher.submit(request(i), [&](const TryResult& result) {
      MutexLock lock(mu);
      heard.push_back(result.status);
      answered.notify_all();
    });
  };
  submit(0);
  {
    MutexLock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, kEventBound, [&] { return heard.size() == 1; }));
    EXPECT_EQ(heard[0].code(), Code::kInternal);
    EXPECT_NE(heard[0].message().find("out of sockets"), std::string::npos) << heard[0].message();
  }
  submit(1);  // stalled for good before: the batcher still thought a batch was running
  MutexLock lock(mu);
  ASSERT_TRUE(answered.wait_for(lock, kEventBound, [&] { return heard.size() == 2; }));
  EXPECT_EQ(heard[1].code(), Code::kLocked);
}

TEST(TryBatcher, ABatchTakesAtMostMaxBatchTriesAndTheRestFollow) {
  BatchRecordingBackend backend;
  Engine engine(2);
  TryBatcher batcher(backend, [&]() -> Engine& { return engine; });
  const int tries = static_cast<int>(TryBatcher::kMaxBatch) + 10;
  Mutex mu;
  std::condition_variable_any answered;
  int total = 0;
  auto submit = [&](int i) {
    batcher.submit(request(i), [&](const TryResult&) {
      MutexLock lock(mu);
      total++;
      answered.notify_all();
    });
  };
  submit(0);
  ASSERT_TRUE(backend.wait_for_batches(1));
  for (int i = 1; i < tries; ++i) submit(i);
  backend.let_go();
  {
    MutexLock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, kEventBound, [&] { return total == tries; }));
  }
  const auto batches = backend.batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].size(), TryBatcher::kMaxBatch);
  EXPECT_EQ(batches[2].size(), 9u);
}

// Records every call: a release_many batch, or a release_grant as a batch of one (`singles`
// counts those). Each release is answered with kUnavailable when its TTL is odd, so each caller
// can tell its own answer; the first call blocks until let go.
class ReleaseRecordingBackend final : public testing::StubBackend,
                                      public BatchedReleases,
                                      public CallRecorder {
 public:
  explicit ReleaseRecordingBackend(bool batches) : batches_releases_(batches) {}
  BatchedReleases* batched_releases() override { return batches_releases_ ? this : nullptr; }
  std::vector<Status> release_many(std::span<const ReleaseRequest> requests,
                                   milliseconds budget) override {
    std::vector<std::string> keys;
    for (const ReleaseRequest& r : requests) keys.push_back(r.key.str());
    record(std::move(keys), budget);
    std::vector<Status> out;
    for (const ReleaseRequest& r : requests) out.push_back(outcome(r.ttl));
    return out;
  }
  Status release_grant(const LockKey& key, const OwnerId&, const std::string&, milliseconds ttl,
                       Clock::time_point deadline) override {
    singles_++;
    record({key.str()},
           std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()));
    return outcome(ttl);
  }
  static Status outcome(milliseconds ttl) {
    return ttl.count() % 2 == 1 ? Status(Code::kUnavailable, "odd") : Status::Ok();
  }
  int singles() const { return singles_.load(); }

 private:
  const bool batches_releases_;
  std::atomic<int> singles_{0};
};

// Release i: key "r<i>", TTL 1000 + i ms (odd i: kUnavailable), budget 2 s - i ms.
ReleaseItem release_item(int i) {
  return ReleaseItem{ReleaseRequest{*LockKey::make("r" + std::to_string(i)), OwnerId::random(),
                                    "value" + std::to_string(i), milliseconds(1000 + i)},
                     2s - milliseconds(i)};
}

TEST(ReleaseBatcher, ReleasesThatComeDueDuringABatchGoTogetherAndEachHearsItsOwnStatus) {
  ReleaseRecordingBackend backend(/*batches=*/true);
  Engine engine(2);
  ReleaseBatcher batcher(backend, [&]() -> Engine& { return engine; });
  constexpr int kReleases = 20;
  Mutex mu;
  std::condition_variable_any answered;
  std::vector<int> answers(kReleases, 0);
  std::vector<Code> codes(kReleases, Code::kOk);
  int total = 0;
  auto submit = [&](int i) {
    batcher.submit(release_item(i), [&, i](const Status& status) {
      MutexLock lock(mu);
      answers[static_cast<std::size_t>(i)]++;
      codes[static_cast<std::size_t>(i)] = status.code();
      total++;
      answered.notify_all();
    });
  };
  submit(0);
  ASSERT_TRUE(backend.wait_for_batches(1));
  for (int i = 1; i < kReleases; ++i) submit(i);
  backend.let_go();
  {
    MutexLock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, kEventBound, [&] { return total == kReleases; }));
  }
  // The first release went alone: through release_grant, as a lone release would.
  EXPECT_EQ(backend.singles(), 1);
  const auto batches = backend.batches();
  ASSERT_EQ(batches.size(), 2u) << "the waiting releases were not sent as one batch";
  EXPECT_EQ(batches[0], std::vector<std::string>{"r0"});
  ASSERT_EQ(batches[1].size(), static_cast<std::size_t>(kReleases - 1));
  for (int i = 1; i < kReleases; ++i) {
    EXPECT_EQ(batches[1][static_cast<std::size_t>(i - 1)], "r" + std::to_string(i));
  }
  EXPECT_EQ(backend.budgets()[1], 2s - milliseconds(kReleases - 1)) << "the least budget";
  MutexLock lock(mu);
  for (int i = 0; i < kReleases; ++i) {
    EXPECT_EQ(answers[static_cast<std::size_t>(i)], 1) << "release " << i;
    EXPECT_EQ(codes[static_cast<std::size_t>(i)], i % 2 == 1 ? Code::kUnavailable : Code::kOk)
        << "release " << i << " heard another's status";
  }
}

TEST(ReleaseBatcher, ABackendWithoutBatchedReleasesGetsThemOneByOne) {
  ReleaseRecordingBackend backend(/*batches=*/false);
  Engine engine(2);
  ReleaseBatcher batcher(backend, [&]() -> Engine& { return engine; });
  constexpr int kReleases = 6;
  Mutex mu;
  std::condition_variable_any answered;
  std::vector<Code> codes;
  for (int i = 0; i < kReleases; ++i) {
    batcher.submit(release_item(i), [&](const Status& status) {
      MutexLock lock(mu);
      codes.push_back(status.code());
      answered.notify_all();
    });
  }
  backend.let_go();
  MutexLock lock(mu);
  ASSERT_TRUE(answered.wait_for(
      lock, kEventBound, [&] { return codes.size() == static_cast<std::size_t>(kReleases); }));
  EXPECT_EQ(backend.singles(), kReleases);
  EXPECT_EQ(backend.batches().size(), static_cast<std::size_t>(kReleases)) << "one call each";
}

}  // namespace
}  // namespace fencelock::detail
