// Specification of DeadlineHeap (src/core/deadline_heap.h): the earliest deadline is always on
// top, and an item can be queued, moved and taken out in any order through the slot it carries
// (so that its owner never searches the heap). Checked against a model over random sequences.
#include "core/deadline_heap.h"

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

struct Item {
  int id = 0;
  std::size_t slot = kNotInHeap;
};
using Heap = DeadlineHeap<Item, &Item::slot>;

TimePoint at(int ms) { return TimePoint(std::chrono::milliseconds(ms)); }

std::vector<std::shared_ptr<Item>> make_items(int n) {
  std::vector<std::shared_ptr<Item>> items;
  items.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) items.push_back(std::make_shared<Item>(Item{i, kNotInHeap}));
  return items;
}

TEST(DeadlineHeap, PopsInDeadlineOrder) {
  auto items = make_items(5);
  Heap heap;
  const int deadlines[] = {30, 10, 50, 20, 40};
  for (int i = 0; i < 5; ++i) heap.schedule(items[i], at(deadlines[i]));
  std::vector<TimePoint> popped;
  while (!heap.empty()) {
    popped.push_back(heap.earliest());
    heap.pop();
  }
  EXPECT_EQ(popped, (std::vector<TimePoint>{at(10), at(20), at(30), at(40), at(50)}));
  for (const auto& item : items) EXPECT_EQ(item->slot, kNotInHeap);
}

TEST(DeadlineHeap, SchedulingAQueuedItemMovesItInsteadOfQueueingItTwice) {
  auto items = make_items(2);
  auto &a = items[0], &b = items[1];
  Heap heap;
  heap.schedule(a, at(10));
  heap.schedule(b, at(20));
  heap.schedule(a, at(30));  // later: b is now first
  EXPECT_EQ(heap.size(), 2u);
  EXPECT_EQ(heap.top(), b);
  heap.schedule(a, at(5));  // earlier again
  EXPECT_EQ(heap.top(), a);
  EXPECT_EQ(heap.earliest(), at(5));
  heap.schedule(heap.top(), at(40));  // the heap's own reference names the item too
  EXPECT_EQ(heap.top(), b);
}

TEST(DeadlineHeap, HoldsAReferenceToEveryQueuedItemAndHandsItBackOnRemoval) {
  auto items = make_items(2);
  auto &a = items[0], &b = items[1];
  Heap heap;
  heap.schedule(a, at(10));
  EXPECT_EQ(a.use_count(), 2);
  EXPECT_EQ(heap.remove(*b), nullptr) << "b was not queued";
  EXPECT_EQ(heap.size(), 1u);
  EXPECT_TRUE(heap.contains(*a));
  EXPECT_FALSE(heap.contains(*b));
  EXPECT_EQ(heap.remove(*a), a);
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(heap.remove(*a), nullptr);
  EXPECT_TRUE(heap.empty());
}

TEST(DeadlineHeap, MatchesAnOrderedModelUnderRandomSchedulesMovesAndRemovals) {
  constexpr int kItems = 200;
  std::mt19937 random(12);  // fixed seed: a failure reproduces
  auto items = make_items(kItems);
  std::vector<std::optional<int>> model(kItems);  // each item's deadline, if queued
  Heap heap;
  for (int step = 0; step < 20'000; ++step) {
    const std::shared_ptr<Item>& item = items[random() % kItems];
    switch (random() % 4) {
      case 0:
      case 1: {
        const int deadline = static_cast<int>(random() % 1000);
        heap.schedule(item, at(deadline));
        model[item->id] = deadline;
        break;
      }
      case 2:
        EXPECT_EQ(heap.remove(*item) != nullptr, model[item->id].has_value());
        model[item->id].reset();
        break;
      default:
        if (!heap.empty()) {
          const std::shared_ptr<Item> top = heap.top();
          ASSERT_TRUE(model[top->id].has_value());
          EXPECT_EQ(heap.earliest(), at(*model[top->id]));
          EXPECT_EQ(heap.pop(), top);
          model[top->id].reset();
        }
    }
    std::multimap<int, int> expected;
    for (int i = 0; i < kItems; ++i) {
      ASSERT_EQ(heap.contains(*items[i]), model[i].has_value()) << "item " << i << " step " << step;
      if (model[i]) expected.emplace(*model[i], i);
    }
    ASSERT_EQ(heap.size(), expected.size()) << "step " << step;
    if (!expected.empty()) {
      ASSERT_EQ(heap.earliest(), at(expected.begin()->first)) << "step " << step;
      ASSERT_EQ(*model[heap.top()->id], expected.begin()->first) << "step " << step;
    }
  }
  // Draining yields every queued item once, in order.
  const std::size_t queued = heap.size();
  int last = -1;
  std::size_t drained = 0;
  while (!heap.empty()) {
    const int deadline = *model[heap.top()->id];
    EXPECT_LE(last, deadline);
    last = deadline;
    model[heap.pop()->id].reset();
    ++drained;
  }
  for (const auto& deadline : model) EXPECT_FALSE(deadline.has_value());
  EXPECT_EQ(drained, queued);
}

}  // namespace
}  // namespace fencelock::detail
