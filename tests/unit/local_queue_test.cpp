// Specification of the per-key local FIFO (src/core/local_queue.h, docs/PROTOCOLS.md, "In-process
// behaviour common to all backends", "Coalescing"): threads of one process line up per key, only
// the head proceeds, and giving up (deadline or cancellation) leaves the line.
#include "core/local_queue.h"

#include <chrono>
#include <future>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/mutex.h"
#include "support/process.h"
#include "unit/printers.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Generous bound for events that should happen within microseconds; only reached on failure.
constexpr auto kEventBound = 10s;

// Deadlines a passing test never reaches; bounded so that a failing test ends instead of hanging.
Clock::time_point far_future() { return Clock::now() + 30s; }

using testing::eventually;

TEST(LocalQueue, EmptyLineAdmitsAtOnceEvenWithAPastDeadline) {
  LocalQueue queue;
  auto ticket = queue.enter("k", Clock::now() - 1s, {});
  ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
  EXPECT_EQ(queue.waiting("k"), 1u);
}

TEST(LocalQueue, DestroyingTheTicketLeavesTheLine) {
  LocalQueue queue;
  {
    auto ticket = queue.enter("k", far_future(), {});
    ASSERT_TRUE(ticket.ok());
    EXPECT_EQ(queue.waiting("k"), 1u);
  }
  EXPECT_EQ(queue.waiting("k"), 0u);
}

TEST(LocalQueue, MovedTicketLeavesOnceWhenTheNewOwnerIsDestroyed) {
  LocalQueue queue;
  std::optional<LocalQueue::Ticket> moved;
  {
    auto ticket = queue.enter("k", far_future(), {});
    ASSERT_TRUE(ticket.ok());
    moved.emplace(std::move(*ticket));
  }
  EXPECT_EQ(queue.waiting("k"), 1u) << "the moved-from ticket must not leave the line";
  moved.reset();
  EXPECT_EQ(queue.waiting("k"), 0u);
}

TEST(LocalQueue, NextInLineEntersWhenTheHeadLeaves) {
  LocalQueue queue;
  std::optional<LocalQueue::Ticket> head;
  {
    auto t = queue.enter("k", far_future(), {});
    ASSERT_TRUE(t.ok());
    head.emplace(std::move(*t));
  }
  auto second = std::async(std::launch::async, [&] {
    auto t = queue.enter("k", far_future(), {});
    return t.code();
  });
  ASSERT_TRUE(eventually([&] { return queue.waiting("k") == 2; }));
  EXPECT_EQ(second.wait_for(0s), std::future_status::timeout) << "entered while the head held";
  head.reset();
  ASSERT_EQ(second.wait_for(kEventBound), std::future_status::ready);
  EXPECT_EQ(second.get(), Code::kOk);
  EXPECT_EQ(queue.waiting("k"), 0u);
}

TEST(LocalQueue, ThreadsEnterInTheOrderTheyJoinedTheLine) {
  constexpr int kThreads = 8;
  LocalQueue queue;
  std::optional<LocalQueue::Ticket> head;
  {
    auto t = queue.enter("k", far_future(), {});
    ASSERT_TRUE(t.ok());
    head.emplace(std::move(*t));
  }
  fencelock::detail::Mutex order_mu;
  std::vector<int> order;
  std::vector<std::jthread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto t = queue.enter("k", far_future(), {});
      ASSERT_TRUE(t.ok());
      fencelock::detail::MutexLock lock(order_mu);
      order.push_back(i);
    });  // the ticket is destroyed here, letting the next thread in
    // Thread i+1 starts only once thread i is counted in the line: the joining order is known.
    ASSERT_TRUE(eventually([&] { return queue.waiting("k") == static_cast<std::size_t>(i + 2); }))
        << "thread " << i << " never joined the line";
  }
  head.reset();
  for (auto& t : threads) t.join();
  std::vector<int> expected;
  expected.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) expected.push_back(i);
  EXPECT_EQ(order, expected);
  EXPECT_EQ(queue.waiting("k"), 0u);
}

TEST(LocalQueue, DeadlinePassingReturnsLockedAndLeavesTheLine) {
  LocalQueue queue;
  auto head = queue.enter("k", far_future(), {});
  ASSERT_TRUE(head.ok());
  const Clock::time_point deadline = Clock::now() + 50ms;
  auto late = queue.enter("k", deadline, {});  // same thread: the line is not a mutex
  EXPECT_GE(Clock::now(), deadline) << "gave up before its deadline";
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.code(), Code::kLocked);
  EXPECT_EQ(queue.waiting("k"), 1u);
}

TEST(LocalQueue, WaiterThatGivesUpLetsTheOneBehindItMoveUp) {
  LocalQueue queue;
  std::optional<LocalQueue::Ticket> head;
  {
    auto t = queue.enter("k", far_future(), {});
    ASSERT_TRUE(t.ok());
    head.emplace(std::move(*t));
  }
  std::stop_source quitter_stop;
  auto quitter = std::async(std::launch::async, [&] {
    return queue.enter("k", far_future(), quitter_stop.get_token()).code();
  });
  ASSERT_TRUE(eventually([&] { return queue.waiting("k") == 2; }));
  auto patient =
      std::async(std::launch::async, [&] { return queue.enter("k", far_future(), {}).code(); });
  ASSERT_TRUE(eventually([&] { return queue.waiting("k") == 3; }));

  quitter_stop.request_stop();
  ASSERT_EQ(quitter.wait_for(kEventBound), std::future_status::ready);
  EXPECT_EQ(quitter.get(), Code::kCancelled);
  EXPECT_EQ(queue.waiting("k"), 2u);

  head.reset();
  ASSERT_EQ(patient.wait_for(kEventBound), std::future_status::ready);
  EXPECT_EQ(patient.get(), Code::kOk);
}

TEST(LocalQueue, StopTokenCancelsTheWaitAndLeavesTheLine) {
  LocalQueue queue;
  auto head = queue.enter("k", far_future(), {});
  ASSERT_TRUE(head.ok());
  std::stop_source stop;
  auto waiter = std::async(std::launch::async,
                           [&] { return queue.enter("k", far_future(), stop.get_token()).code(); });
  ASSERT_TRUE(eventually([&] { return queue.waiting("k") == 2; }));
  stop.request_stop();
  ASSERT_EQ(waiter.wait_for(kEventBound), std::future_status::ready);
  EXPECT_EQ(waiter.get(), Code::kCancelled);
  EXPECT_EQ(queue.waiting("k"), 1u);
}

TEST(LocalQueue, AlreadyStoppedTokenCancelsAWaitAtOnce) {
  LocalQueue queue;
  auto head = queue.enter("k", far_future(), {});
  ASSERT_TRUE(head.ok());
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(queue.enter("k", far_future(), stop.get_token()).code(), Code::kCancelled);
  EXPECT_EQ(queue.waiting("k"), 1u);
}

TEST(LocalQueue, DifferentKeysDoNotBlockEachOther) {
  LocalQueue queue;
  auto a = queue.enter("a", far_future(), {});
  ASSERT_TRUE(a.ok());
  // A deadline already past: "b" must be granted without any waiting at all.
  auto b = queue.enter("b", Clock::now(), {});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(queue.waiting("a"), 1u);
  EXPECT_EQ(queue.waiting("b"), 1u);
  EXPECT_EQ(queue.waiting("c"), 0u);
}

TEST(LocalQueue, KeysAreComparedByContentIncludingPrefixes) {
  LocalQueue queue;
  auto a = queue.enter("job", far_future(), {});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(queue.enter("job:1", Clock::now(), {}).ok());
  EXPECT_TRUE(queue.enter("jo", Clock::now(), {}).ok());
}

// Asynchronous callers share the line with blocking ones: told (not polled) when they reach the
// head, in arrival order; one that gives up before then is never told and leaves the line.
TEST(LocalQueue, AnAsynchronousCallerIsToldOnceWhenItReachesTheHead) {
  LocalQueue queue;
  auto head = queue.enter("k", far_future(), {});
  ASSERT_TRUE(head.ok());
  int told = 0;
  bool at_head = true;
  std::optional<LocalQueue::Ticket> second(queue.enter_async(
      "k", [&] { ++told; }, at_head));
  EXPECT_FALSE(at_head);
  EXPECT_TRUE(second->waited());
  EXPECT_EQ(told, 0);
  { auto leaving = std::move(*head); }  // the head leaves: the next in line is told, once
  EXPECT_EQ(told, 1);
  EXPECT_EQ(queue.waiting("k"), 1u);
  second.reset();
  EXPECT_EQ(queue.waiting("k"), 0u);
  EXPECT_EQ(told, 1);
}

TEST(LocalQueue, AnAsynchronousCallerOnAnEmptyLineIsAtTheHeadAtOnce) {
  LocalQueue queue;
  bool at_head = false;
  bool told = false;
  auto ticket = queue.enter_async(
      "k", [&] { told = true; }, at_head);
  EXPECT_TRUE(at_head);
  EXPECT_FALSE(ticket.waited());
  EXPECT_FALSE(told) << "a caller at the head at once is not told again";
}

TEST(LocalQueue, AnAsynchronousCallerThatGaveUpIsNeverToldAndTheNextOneIs) {
  LocalQueue queue;
  bool at_head = false;
  std::optional<LocalQueue::Ticket> first(queue.enter_async(
      "k", [] {}, at_head));
  ASSERT_TRUE(at_head);
  bool second_told = false, third_told = false;
  std::optional<LocalQueue::Ticket> second(queue.enter_async(
      "k", [&] { second_told = true; }, at_head));
  std::optional<LocalQueue::Ticket> third(queue.enter_async(
      "k", [&] { third_told = true; }, at_head));
  second.reset();  // gives up in the middle of the line: the head is unchanged, nobody is told
  EXPECT_FALSE(second_told);
  EXPECT_FALSE(third_told);
  first.reset();
  EXPECT_FALSE(second_told);
  EXPECT_TRUE(third_told);
}

TEST(LocalQueue, ABlockingCallerBehindAnAsynchronousOneIsWokenWhenItLeaves) {
  LocalQueue queue;
  bool at_head = false;
  std::optional<LocalQueue::Ticket> first(queue.enter_async(
      "k", [] {}, at_head));
  ASSERT_TRUE(at_head);
  auto blocked =
      std::async(std::launch::async, [&] { return queue.enter("k", far_future(), {}).ok(); });
  ASSERT_TRUE(eventually([&] { return queue.waiting("k") == 2; }, kEventBound));
  first.reset();
  EXPECT_TRUE(blocked.get());
}

}  // namespace
}  // namespace fencelock::detail
