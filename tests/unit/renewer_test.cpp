// Specification of the Renewer (src/core/renewer.h, docs/PROTOCOLS.md, the contract and the
// in-process behaviour): held leases are renewed before their validity ends, in one batched backend
// call per round, and lost() fires at once on a rejection and never later than valid_until() when
// renewals stop succeeding.
//
// The backend is a hand-written fake that records every renew_all call and answers with an
// outcome chosen by the test. Every wait is for an event (a recorded call, a lost() signal) with a
// generous bound that only a failing test reaches.
#include "core/renewer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/lease_state.h"
#include "core/mutex.h"
#include "fencelock/log.h"
#include "stub_backend.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;

constexpr auto kEventBound = 10s;

// One recorded renew_all call: when it arrived and the keys it carried.
struct RenewCall {
  Clock::time_point at;
  std::vector<std::string> keys;
  Clock::time_point deadline{};  // renew_all's
};

class FakeBackend final : public testing::StubBackend {
 public:
  // What renew_all answers for each item. Default: renewed, valid for a full TTL from now.
  using Decide = std::function<RenewOutcome(const RenewItem&)>;

  void answer_with(Decide decide) {
    fencelock::detail::MutexLock lock(mu_);
    decide_ = std::move(decide);
  }

  static RenewOutcome renewed(const RenewItem& item) {
    return RenewOutcome{RenewOutcome::kRenewed, Clock::now() + item.ttl};
  }
  static RenewOutcome rejected(const RenewItem&) {
    return RenewOutcome{RenewOutcome::kRejected, {}};
  }
  static RenewOutcome unknown(const RenewItem&) { return RenewOutcome{RenewOutcome::kUnknown, {}}; }

  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point deadline) override {
    fencelock::detail::MutexLock lock(mu_);
    RenewCall call{Clock::now(), {}};
    call.deadline = deadline;
    std::vector<RenewOutcome> out;
    for (const RenewItem& item : items) {
      call.keys.push_back(item.key->str());
      out.push_back(decide_(item));
    }
    calls_.push_back(std::move(call));
    changed_.notify_all();
    return out;
  }

  // Blocks until at least `n` renew_all calls were made (or the bound passes). True when made.
  bool wait_for_calls(std::size_t n) {
    fencelock::detail::MutexLock lock(mu_);
    return changed_.wait_for(lock, kEventBound,
                             [&]() FENCELOCK_REQUIRES(mu_) { return calls_.size() >= n; });
  }

  // Blocks until a call satisfying `pred` was made. Its index, or nullopt at the bound.
  std::optional<std::size_t> wait_for_call(const std::function<bool(const RenewCall&)>& pred) {
    fencelock::detail::MutexLock lock(mu_);
    std::optional<std::size_t> found;
    changed_.wait_for(lock, kEventBound, [&]() FENCELOCK_REQUIRES(mu_) {
      for (std::size_t i = 0; i < calls_.size(); ++i) {
        if (pred(calls_[i])) {
          found = i;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  std::vector<RenewCall> calls() const {
    fencelock::detail::MutexLock lock(mu_);
    return calls_;
  }

 private:
  mutable fencelock::detail::Mutex mu_;
  std::condition_variable_any changed_;
  Decide decide_ FENCELOCK_GUARDED_BY(mu_) = renewed;
  std::vector<RenewCall> calls_ FENCELOCK_GUARDED_BY(mu_);
};

bool contains(const RenewCall& call, const std::string& key) {
  return std::find(call.keys.begin(), call.keys.end(), key) != call.keys.end();
}

// A lease as the ClientCore hands it to the Renewer: valid until `valid_until` (default: a whole
// TTL from now, as if just granted).
std::shared_ptr<LeaseState> make_lease(
    const std::string& key, milliseconds ttl, bool renew = true,
    std::optional<Clock::time_point> valid_until = std::nullopt) {
  auto lease = std::make_shared<LeaseState>(*LockKey::make(key), OwnerId::random(), FencingToken(1),
                                            ttl, renew);
  lease->set_valid_until(valid_until.value_or(Clock::now() + ttl));
  return lease;
}

// Records when lost() fired, from whichever thread fires it.
class LostProbe {
 public:
  explicit LostProbe(const LeaseState& lease)
      : callback_(lease.lost_source.get_token(), std::function<void()>([this] {
                    fencelock::detail::MutexLock lock(mu_);
                    fired_at_ = Clock::now();
                    fired_.notify_all();
                  })) {}

  // When lost() fired, or nullopt if it did not within the bound.
  std::optional<Clock::time_point> wait() {
    fencelock::detail::MutexLock lock(mu_);
    fired_.wait_for(lock, kEventBound,
                    [&]() FENCELOCK_REQUIRES(mu_) { return fired_at_.has_value(); });
    return fired_at_;
  }

  bool fired() const {
    fencelock::detail::MutexLock lock(mu_);
    return fired_at_.has_value();
  }

 private:
  mutable fencelock::detail::Mutex mu_;
  std::condition_variable_any fired_;
  std::optional<Clock::time_point> fired_at_ FENCELOCK_GUARDED_BY(mu_);
  std::stop_callback<std::function<void()>> callback_;  // last: registered once the rest exists
};

TEST(Renewer, LostGuardIsATenthOfTheTtlWithinTwoAndFiftyMilliseconds) {
  EXPECT_EQ(Renewer::lost_guard(300ms), 30ms);
  EXPECT_EQ(Renewer::lost_guard(10ms), 2ms);
  EXPECT_EQ(Renewer::lost_guard(10s), 50ms);
}

TEST(Renewer, RenewsALeaseAtAThirdOfItsTtlAndMovesValidUntilForward) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point granted = Clock::now();
  auto lease = make_lease("k", 300ms, true, granted + 300ms);
  const Clock::time_point first_validity = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);

  ASSERT_TRUE(backend.wait_for_calls(2)) << "never renewed twice";
  std::vector<RenewCall> calls = backend.calls();
  EXPECT_GE(calls[0].at, granted + 100ms) << "renewed before ttl/3";
  EXPECT_LT(calls[0].at, first_validity) << "renewal came after the validity had ended";
  EXPECT_EQ(calls[0].keys, std::vector<std::string>{"k"});
  // The round ends by the time its lease would be declared lost: no later (an answer after it is
  // of no use), and not already over.
  EXPECT_GT(calls[0].deadline, calls[0].at);
  EXPECT_LE(calls[0].deadline, first_validity);
  // The second round is planned from the first one's outcome, so that outcome is applied by now.
  EXPECT_GT(lease->valid_until(), first_validity);
  EXPECT_GE(calls[1].at, calls[0].at + 100ms) << "the next renewal follows the new validity";
  EXPECT_FALSE(lost.fired());
}

TEST(Renewer, KeepsALeaseAliveWellPastItsFirstTtl) {
  FakeBackend backend;
  Renewer renewer(backend);
  auto lease = make_lease("k", 90ms);
  const Clock::time_point first_validity = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);
  // Wait for a renewal sent after the first validity would have ended: the lease was carried
  // across it.
  ASSERT_TRUE(
      backend.wait_for_call([&](const RenewCall& c) { return c.at > first_validity + 200ms; }));
  EXPECT_FALSE(lost.fired());
  EXPECT_GT(lease->valid_until(), first_validity + 200ms);
}

TEST(Renewer, LeasesAddedTogetherAreRenewedInOneBackendCall) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<LeaseState>> leases;
  for (const char* key : {"a", "b", "c", "d", "e"}) {
    leases.push_back(make_lease(key, 300ms, true, now + 300ms));
    renewer.add(leases.back());
  }
  ASSERT_TRUE(backend.wait_for_calls(1));
  std::vector<std::string> keys = backend.calls()[0].keys;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
}

TEST(Renewer, LeaseDueWithinASixthOfItsTtlJoinsTheCurrentRound) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point now = Clock::now();
  auto early = make_lease("early", 300ms, true, now + 300ms);  // due at +100 ms
  auto later = make_lease("later", 300ms, true, now + 340ms);  // due at +140 ms, within 50 ms
  renewer.add(early);
  renewer.add(later);
  ASSERT_TRUE(backend.wait_for_calls(1));
  std::vector<std::string> keys = backend.calls()[0].keys;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"early", "later"}));
  EXPECT_EQ(renewer.rounds(), backend.calls().size());
}

TEST(Renewer, EachLeaseJoinsARoundWithinASixthOfItsOwnTtl) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point now = Clock::now();
  // valid_until = next renewal - ttl/3 + ttl.
  auto first = make_lease("first", 900ms, true, now + 900ms);  // due at +300 ms
  // Due at +1500 ms, within its window of 1.5 s: joins.
  auto wide = make_lease("wide", 9s, true, now + 1500ms - 3s + 9s);
  // Due at +1300 ms, before `wide`, but outside its own window of 150 ms: waits for its turn.
  auto narrow = make_lease("narrow", 900ms, true, now + 1300ms - 300ms + 900ms);
  renewer.add(narrow);
  renewer.add(wide);
  renewer.add(first);
  ASSERT_TRUE(backend.wait_for_calls(1));
  std::vector<std::string> keys = backend.calls()[0].keys;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"first", "wide"}));
}

TEST(Renewer, RejectedRenewalFiresLostAtOnce) {
  FakeBackend backend;
  backend.answer_with(FakeBackend::rejected);
  Renewer renewer(backend);
  auto lease = make_lease("k", 1500ms);  // renewal at +500 ms; validity ends at +1500 ms
  LostProbe lost(*lease);
  renewer.add(lease);

  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_TRUE(lease->lost_source.stop_requested());
  std::vector<RenewCall> calls = backend.calls();
  ASSERT_EQ(calls.size(), 1u) << "a rejected lease is not renewed again";
  EXPECT_GE(*fired, calls[0].at) << "fired before the rejection";
  EXPECT_LT(*fired, lease->valid_until() - Renewer::lost_guard(lease->ttl))
      << "fired by the validity watchdog, not by the rejection";
}

// A backend whose renew_all throws (before: the exception ended the renewal thread and the
// process, and a `fencelock run` command went on with nobody renewing or watching) loses the
// leases of that round at once, and the Renewer keeps working for the others.
TEST(Renewer, ARenewalThatThrowsFiresLostAtOnce) {
  FakeBackend backend;
  backend.answer_with([](const RenewItem&) -> RenewOutcome {
    throw std::runtime_error("invalid UTF-8 byte at index 3");
  });
  Renewer renewer(backend);
  auto lease = make_lease("k", 1500ms);
  LostProbe lost(*lease);
  renewer.add(lease);
  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_LT(*fired, lease->valid_until() - Renewer::lost_guard(lease->ttl))
      << "fired by the validity watchdog, not by the failed round";

  backend.answer_with(FakeBackend::renewed);
  auto next = make_lease("k2", 1500ms);
  renewer.add(next);
  ASSERT_TRUE(backend.wait_for_call([](const RenewCall& c) { return contains(c, "k2"); }))
      << "the Renewer stopped after the failure";
  EXPECT_FALSE(next->lost_source.stop_requested());
}

// The backend reports a grant gone (Grant::gone -> lose_now, on the backend's thread) while the
// lease's renewal is in flight, and that renewal then succeeds: the lease is lost at once, keeps
// its old validity (a gone grant is not extended) and is never renewed again. The race is
// between lose_now and the renewal round that read the lease's state when it was built.
TEST(Renewer, ALeaseReportedGoneDuringASuccessfulRenewalIsLostAtOnceAndNotRenewedAgain) {
  FakeBackend backend;
  std::promise<void> entered;
  std::promise<void> resume;
  std::shared_future<void> resumed = resume.get_future().share();
  bool first = true;  // touched only by the renewal thread (inside renew_all)
  backend.answer_with([&](const RenewItem& item) {
    if (item.key->str() == "k" && first) {
      first = false;
      entered.set_value();
      resumed.wait();
    }
    return FakeBackend::renewed(item);
  });
  Renewer renewer(backend);
  auto lease = make_lease("k", 900ms);   // renewed at +300 ms, validity ends at +900 ms
  auto other = make_lease("k2", 900ms);  // joins k's rounds (same TTL, added together)
  const Clock::time_point old_valid_until = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);
  renewer.add(other);
  ASSERT_EQ(entered.get_future().wait_for(kEventBound), std::future_status::ready)
      << "no renewal round carried k";
  std::jthread gone([&] { renewer.lose_now(lease.get()); });  // the backend's thread
  gone.join();
  resume.set_value();

  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_LT(*fired, old_valid_until - Renewer::lost_guard(lease->ttl))
      << "fired by the validity watchdog, not by the gone report";
  EXPECT_EQ(lease->valid_until(), old_valid_until) << "a gone grant's validity was extended";
  // Every later round carries k2; none may carry k.
  const auto later =
      backend.wait_for_call([&](const RenewCall& c) { return c.at > *fired && contains(c, "k2"); });
  ASSERT_TRUE(later.has_value()) << "k2 was not renewed after k was lost";
  const std::vector<RenewCall> calls = backend.calls();
  for (std::size_t i = 0; i <= *later; ++i) {
    if (calls[i].at > *fired) {
      EXPECT_FALSE(contains(calls[i], "k")) << "call " << i;
    }
  }
  EXPECT_FALSE(other->lost_source.stop_requested());
}

TEST(Renewer, RenewalsThatNeverConfirmFireLostNoLaterThanValidUntil) {
  FakeBackend backend;
  backend.answer_with(FakeBackend::unknown);
  Renewer renewer(backend);
  auto lease = make_lease("k", 300ms);
  const Clock::time_point valid_until = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);

  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_LE(*fired, valid_until);
  EXPECT_EQ(lease->valid_until(), valid_until) << "an unconfirmed renewal must not extend validity";
  EXPECT_GE(backend.calls().size(), 2u) << "an unknown outcome is retried";
}

TEST(Renewer, PausedRenewerSendsNothingAndFiresLostNoLaterThanValidUntil) {
  FakeBackend backend;
  Renewer renewer(backend);
  renewer.pause_renewals_for_testing(true);
  auto lease = make_lease("k", 300ms);
  const Clock::time_point valid_until = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);

  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_LE(*fired, valid_until);
  EXPECT_TRUE(backend.calls().empty());
  EXPECT_EQ(renewer.rounds(), 0u);
}

TEST(Renewer, RemovedLeaseIsNeitherRenewedNorDeclaredLost) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point now = Clock::now();
  auto removed = make_lease("removed", 300ms, true, now + 300ms);
  auto witness = make_lease("witness", 300ms, true, now + 300ms);
  LostProbe removed_lost(*removed);
  renewer.add(removed);
  renewer.add(witness);
  ASSERT_TRUE(backend.wait_for_calls(1));
  ASSERT_TRUE(contains(backend.calls()[0], "removed"));

  renewer.remove(removed.get());
  // Rounds whose items were chosen before remove() returned are counted in rounds(); every later
  // round must leave the removed lease out.
  const std::size_t first_after = renewer.rounds();
  const Clock::time_point removed_validity = removed->valid_until();
  // The witness keeps rounds going past the removed lease's validity.
  ASSERT_TRUE(backend.wait_for_call([&](const RenewCall& c) {
    return c.at > removed_validity + 50ms;
  })) << "the witness lease stopped being renewed";

  std::vector<RenewCall> calls = backend.calls();
  for (std::size_t i = first_after; i < calls.size(); ++i) {
    EXPECT_FALSE(contains(calls[i], "removed")) << "call #" << i;
    EXPECT_TRUE(contains(calls[i], "witness")) << "call #" << i;
  }
  EXPECT_FALSE(removed_lost.fired()) << "a removed lease is no longer watched";
}

TEST(Renewer, LeaseWithoutRenewalIsNeverRenewedAndIsLostAtItsValidity) {
  FakeBackend backend;
  Renewer renewer(backend);
  auto lease = make_lease("k", 300ms, /*renew=*/false);
  const Clock::time_point valid_until = lease->valid_until();
  LostProbe lost(*lease);
  renewer.add(lease);

  std::optional<Clock::time_point> fired = lost.wait();
  ASSERT_TRUE(fired.has_value()) << "lost() never fired";
  EXPECT_LE(*fired, valid_until);
  EXPECT_GE(*fired, valid_until - Renewer::lost_guard(lease->ttl)) << "declared lost too early";
  EXPECT_TRUE(backend.calls().empty());
}

TEST(Renewer, LeaseWithoutRenewalDoesNotJoinOtherLeasesRounds) {
  FakeBackend backend;
  Renewer renewer(backend);
  const Clock::time_point now = Clock::now();
  auto fixed = make_lease("fixed", 300ms, /*renew=*/false, now + 300ms);
  auto renewed = make_lease("renewed", 300ms, true, now + 300ms);
  LostProbe fixed_lost(*fixed);
  renewer.add(fixed);
  renewer.add(renewed);
  ASSERT_TRUE(fixed_lost.wait().has_value());
  for (const RenewCall& call : backend.calls()) EXPECT_FALSE(contains(call, "fixed"));
}

// the contract in docs/PROTOCOLS.md: lost() timing must not depend on how many leases a Client
// holds. The tests below count the leases each thread looks at instead of timing it: with 100,000
// leases held, that count follows the leases that come due, never the leases held. (Before the
// deadline heaps, with every lease scanned on every wake-up, a 20 ms lease fired lost() up to 40 ms
// after its valid_until() next to 100,000 others.)
constexpr int kHeld = 100'000;

// Leases that come due neither for renewal (ttl/3 = 20 min) nor for lost() during a test.
std::vector<std::shared_ptr<LeaseState>> hold_many(Renewer& renewer) {
  std::vector<std::shared_ptr<LeaseState>> held;
  held.reserve(kHeld);
  for (int i = 0; i < kHeld; ++i) {
    held.push_back(make_lease("held/" + std::to_string(i), 1h));
    renewer.add(held.back());
  }
  return held;
}

TEST(Renewer, TheWatchdogLooksOnlyAtTheLeasesItFiresNotAtEveryLeaseHeld) {
  FakeBackend backend;
  Renewer renewer(backend);
  auto held = hold_many(renewer);
  constexpr int kShort = 20;
  std::vector<std::shared_ptr<LeaseState>> leases;
  std::vector<std::unique_ptr<LostProbe>> probes;
  const Clock::time_point now = Clock::now();
  for (int i = 0; i < kShort; ++i) {
    // Renewal off, validities 2 ms apart: the watchdog fires them one by one.
    leases.push_back(
        make_lease("short/" + std::to_string(i), 20ms, /*renew=*/false, now + 20ms + i * 2ms));
    probes.push_back(std::make_unique<LostProbe>(*leases.back()));
    renewer.add(leases.back());
  }
  for (auto& probe : probes) ASSERT_TRUE(probe->wait().has_value()) << "lost() never fired";
  EXPECT_EQ(renewer.work_for_testing().watchdog, static_cast<std::uint64_t>(kShort))
      << "the watchdog looked at leases that were not due (" << kHeld << " held)";
}

// A loop of short holds (acquire, release, acquire...) wakes neither thread for each lease: once
// the leases that came and went leave a thread with nothing to renew or watch, it stays planned
// until the earliest time they would have needed it, and the next lease is due after that.
// Before, both slept without a timeout then, so every add() woke them: a context switch on every
// acquisition, measurable in the CPU of an uncontended Redlock cycle. The state is made
// deterministic here: a lease is added and released while the renewal thread is busy in a round
// (so it sees both changes at once), and the watchdog wakes for a lease removed before its time.
TEST(Renewer, ShortHoldsOneAfterAnotherWakeNeitherThreadForEachLease) {
  FakeBackend backend;
  std::promise<void> entered_promise;
  std::shared_future<void> entered = entered_promise.get_future().share();
  std::promise<void> gate_promise;
  std::shared_future<void> gate = gate_promise.get_future().share();
  std::atomic<bool> first{true};
  backend.answer_with([&](const RenewItem& item) {
    if (first.exchange(false)) {
      entered_promise.set_value();
      gate.wait();
    }
    return FakeBackend::renewed(item);
  });
  Renewer renewer(backend);
  auto settle = [&] {
    const auto until = Clock::now() + kEventBound;
    while (!renewer.asleep_for_testing() && Clock::now() < until) std::this_thread::yield();
    return renewer.asleep_for_testing();
  };
  auto busy = make_lease("busy", 300ms);  // its renewal round (at +100 ms) waits at the gate
  renewer.add(busy);
  ASSERT_EQ(entered.wait_for(kEventBound), std::future_status::ready);
  auto early = make_lease("short-hold/0", 30s);
  renewer.add(early);
  renewer.remove(early.get());
  renewer.remove(busy.get());
  const std::uint64_t watchdog_before = renewer.work_for_testing().watchdog_wakes;
  gate_promise.set_value();
  // The watchdog wakes at busy's fire time (about +250 ms) and finds nothing to watch.
  const auto until = Clock::now() + kEventBound;
  while (renewer.work_for_testing().watchdog_wakes == watchdog_before && Clock::now() < until) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(settle()) << "the threads did not settle";
  const Renewer::Work before = renewer.work_for_testing();
  ASSERT_GT(before.watchdog_wakes, watchdog_before);
  for (int i = 1; i <= 20; ++i) {
    auto lease = make_lease("short-hold/" + std::to_string(i), 30s);
    renewer.add(lease);
    renewer.remove(lease.get());
    ASSERT_TRUE(settle()) << "the threads did not settle after hold " << i;
  }
  const Renewer::Work after = renewer.work_for_testing();
  EXPECT_EQ(after.renewal_wakes, before.renewal_wakes)
      << "the renewal thread woke for the holds one by one";
  EXPECT_EQ(after.watchdog_wakes, before.watchdog_wakes)
      << "the watchdog woke for the holds one by one";
  EXPECT_EQ(backend.calls().size(), 1u) << "only busy's round: nothing else was due";
}

TEST(Renewer, ARenewalRoundLooksOnlyAtTheLeasesItRenewsNotAtEveryLeaseHeld) {
  FakeBackend backend;
  Renewer renewer(backend);
  auto held = hold_many(renewer);
  auto busy = make_lease("busy", 300ms);  // renewed every 100 ms
  renewer.add(busy);
  ASSERT_TRUE(backend.wait_for_calls(3)) << "the busy lease stopped being renewed";
  const Renewer::Work work = renewer.work_for_testing();
  // Every round took the one lease that was due; rounds() is read after the work, so it counts
  // at least the rounds the work did.
  EXPECT_LE(work.renewal, renewer.rounds())
      << "the renewal thread looked at leases that were not due (" << kHeld << " held)";
  for (const RenewCall& call : backend.calls()) {
    EXPECT_EQ(call.keys, std::vector<std::string>{"busy"});
  }
}

// Before: leases renewed in one round come due together, and the watchdog fired them one by one,
// each with its log line, inside the fixed 50 ms guard: of 100,000 leases 98,111 were signalled
// after valid_until() (median +136 ms). Now they are fired first and logged after, and the
// watchdog starts on them early by twice what firing them costs.
TEST(Renewer, AHundredThousandLeasesLostTogetherAreAllSignalledByTheirValidity) {
#if FENCELOCK_TEST_INSTRUMENTED
  constexpr int kLeases = 10'000;  // ASan or TSan: firing costs several times more
#else
  constexpr int kLeases = 100'000;
#endif
  FakeBackend backend;
  fencelock::detail::Mutex log_mu;
  std::vector<std::string> log_lines;  // a sink that does some work per line, as a real one would
  set_log_sink(
      [&](LogLevel, std::string_view line) {
        fencelock::detail::MutexLock lock(log_mu);
        log_lines.emplace_back(line);
      },
      LogLevel::kWarning);
  std::atomic<int> fired{0};
  std::atomic<int> late{0};
  std::atomic<Clock::rep> worst{0};  // the latest signal after its validity
  {
    Renewer renewer(backend);
    std::vector<std::shared_ptr<LeaseState>> leases;
    std::vector<std::unique_ptr<std::stop_callback<std::function<void()>>>> probes;
    leases.reserve(kLeases);
    probes.reserve(kLeases);
    for (int i = 0; i < kLeases; ++i) {
      auto lease = make_lease("many/" + std::to_string(i), 3s);
      probes.push_back(std::make_unique<std::stop_callback<std::function<void()>>>(
          lease->lost_source.get_token(),
          std::function<void()>([&fired, &late, &worst, state = lease.get()] {
            const Clock::duration after = Clock::now() - state->valid_until();
            if (after > Clock::duration::zero()) {
              late.fetch_add(1);
              Clock::rep seen = worst.load();
              while (after.count() > seen && !worst.compare_exchange_weak(seen, after.count())) {
              }
            }
            fired.fetch_add(1);
          })));
      renewer.add(lease);
      leases.push_back(std::move(lease));
    }
    // One round renews them all together, in step; then no renewal is confirmed any more.
    ASSERT_TRUE(backend.wait_for_call([](const RenewCall& call) {
      return call.keys.size() == static_cast<std::size_t>(kLeases);
    })) << "the leases were not renewed in one round";
    backend.answer_with(FakeBackend::unknown);
    const auto until = Clock::now() + 60s;
    while (fired.load() < kLeases && Clock::now() < until) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(fired.load(), kLeases) << "lost() never fired on some leases";
    probes.clear();
  }
  set_log_sink({});
  EXPECT_EQ(late.load(), 0) << "signalled after valid_until(), the latest by "
                            << std::chrono::duration_cast<std::chrono::microseconds>(
                                   Clock::duration(worst.load()))
                                   .count()
                            << " us";
  fencelock::detail::MutexLock lock(log_mu);
  EXPECT_LE(log_lines.size(), 20u) << "one log line per lost lease";
}

}  // namespace
}  // namespace fencelock::detail
