// DeadlineHeap: a binary min-heap of shared items ordered by a deadline, in which every item
// records its own position, so that the earliest item is found in O(1) and an item is queued,
// moved to another deadline or taken out in O(log n), without a search.
//
// The Renewer keeps one heap per order it needs (renewal due, renewal window, lost() time), so
// that a wake-up looks only at the leases that are due, never at every lease held
// (docs/PROTOCOLS.md, the contract: lost() timing must not depend on how many leases a Client
// holds).
//
// An item is a T with a std::size_t member, named by the `Slot` template argument, that belongs
// to the heap: kNotInHeap while the item is not queued (initialise it so). The heap holds a
// reference (std::shared_ptr) to every queued item. Items with equal deadlines leave in no
// particular order.
//
// Thread-safety: none; the owner's lock (or thread) guards the heap and the items' slots together.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace fencelock::detail {

inline constexpr std::size_t kNotInHeap = std::numeric_limits<std::size_t>::max();

template <typename T, std::size_t T::*Slot>
class DeadlineHeap {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  bool empty() const { return nodes_.empty(); }
  std::size_t size() const { return nodes_.size(); }
  bool contains(const T& item) const { return item.*Slot != kNotInHeap; }

  // REQUIRES: !empty().
  TimePoint earliest() const { return nodes_.front().at; }
  const std::shared_ptr<T>& top() const { return nodes_.front().item; }

  // Queues `item` at `at`, or moves it there if it is queued already.
  void schedule(const std::shared_ptr<T>& item, TimePoint at) {
    if (!contains(*item)) {
      nodes_.push_back(Node{at, item});
      nodes_.back().item.get()->*Slot = nodes_.size() - 1;
      sift_up(nodes_.size() - 1);
      return;
    }
    const std::size_t i = (*item).*Slot;  // `item` may be a node of this heap: not used below
    const bool earlier = at < nodes_[i].at;
    nodes_[i].at = at;
    if (earlier) {
      sift_up(i);
    } else {
      sift_down(i);
    }
  }

  // Takes `item` out and returns the heap's reference to it; nullptr if it was not queued.
  std::shared_ptr<T> remove(T& item) {
    if (!contains(item)) return nullptr;
    const std::size_t i = item.*Slot;
    item.*Slot = kNotInHeap;
    std::shared_ptr<T> out = std::move(nodes_[i].item);
    Node last = std::move(nodes_.back());
    nodes_.pop_back();
    if (i == nodes_.size()) return out;  // it was the last node
    const TimePoint at = last.at;
    place(i, std::move(last));
    if (i > 0 && at < nodes_[(i - 1) / 2].at) {
      sift_up(i);
    } else {
      sift_down(i);
    }
    return out;
  }

  // Takes out the item with the earliest deadline and returns it. REQUIRES: !empty().
  std::shared_ptr<T> pop() { return remove(*top()); }

 private:
  struct Node {
    TimePoint at;
    std::shared_ptr<T> item;
  };

  void place(std::size_t i, Node&& node) {
    node.item.get()->*Slot = i;
    nodes_[i] = std::move(node);
  }

  void sift_up(std::size_t i) {
    Node node = std::move(nodes_[i]);
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!(node.at < nodes_[parent].at)) break;
      place(i, std::move(nodes_[parent]));
      i = parent;
    }
    place(i, std::move(node));
  }

  void sift_down(std::size_t i) {
    Node node = std::move(nodes_[i]);
    const std::size_t n = nodes_.size();
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && nodes_[child + 1].at < nodes_[child].at) ++child;
      if (!(nodes_[child].at < node.at)) break;
      place(i, std::move(nodes_[child]));
      i = child;
    }
    place(i, std::move(node));
  }

  std::vector<Node> nodes_;
};

}  // namespace fencelock::detail
