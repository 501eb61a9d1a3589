// Specification of the Engine (src/core/engine.h): a fixed set of threads that runs posted tasks
// and timers; a timer taken back never runs; the engine may be destroyed from its own thread.
#include "core/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Engine, PostedTasksRunOnTheEnginesOwnThreadsOnly) {
  Engine engine(2);
  EXPECT_EQ(engine.threads(), 2);
  EXPECT_FALSE(engine.on_engine_thread());
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  std::vector<std::future<bool>> done;
  for (int i = 0; i < 200; ++i) {
    auto promise = std::make_shared<std::promise<bool>>();
    done.push_back(promise->get_future());
    engine.post([&, promise] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ran_on.insert(std::this_thread::get_id());
      }
      promise->set_value(engine.on_engine_thread());
    });
  }
  for (auto& f : done) EXPECT_TRUE(f.get());
  EXPECT_LE(ran_on.size(), 2u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
}

TEST(Engine, TimersRunInTimeOrderAndNotBeforeTheirTime) {
  Engine engine(2);
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> last;
  const Clock::time_point start = Clock::now();
  Clock::time_point ran_at{};
  engine.post_at(start + 60ms, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(3);
    ran_at = Clock::now();
    last.set_value();
  });
  engine.post_at(start + 20ms, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
  });
  engine.post_at(start - 1s, [&] {  // past: at once
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  last.get_future().wait();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(ran_at - start, 60ms);
}

TEST(Engine, ACancelledTimerNeverRunsAndCancelSaysWhetherItStoppedIt) {
  Engine engine(1);
  std::atomic<bool> ran{false};
  auto id = engine.post_at(Clock::now() + 50ms, [&] { ran = true; });
  EXPECT_TRUE(engine.cancel(id));
  EXPECT_FALSE(engine.cancel(id)) << "a second cancel cannot stop it again";
  // A later timer on the same (only) thread has run, so the cancelled one's time has passed.
  std::promise<void> later;
  engine.post_at(Clock::now() + 100ms, [&] { later.set_value(); });
  later.get_future().wait();
  EXPECT_FALSE(ran);
  std::promise<void> fired;
  auto run_id = engine.post_at(Clock::now(), [&] { fired.set_value(); });
  fired.get_future().wait();
  EXPECT_FALSE(engine.cancel(run_id)) << "a timer that ran cannot be cancelled";
}

TEST(Engine, TheEngineMayBeDestroyedFromOneOfItsOwnTasks) {
  auto engine = std::make_shared<Engine>(2);
  std::promise<void> destroyed;
  std::weak_ptr<Engine> watch = engine;
  engine->post([owner = engine]() mutable {
    owner.reset();  // not the last reference yet: the test's is
  });
  // Hand the last reference to a task: it destroys the Engine on one of its threads.
  engine->post([last = std::move(engine), &destroyed]() mutable {
    last.reset();
    destroyed.set_value();
  });
  ASSERT_EQ(destroyed.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace fencelock::detail
