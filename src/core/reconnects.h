// ReconnectCounter: counts recoveries of one server connection (MetricsSnapshot::reconnects).
//
// A driver calls failed() when a connection (or a call on it) fails for a connection-level
// reason and connected() when one to the same place works again. Only a connected() that follows
// a failed() counts, so the first connection is not a reconnect and a server that stays down is
// one reconnect when it comes back, however many attempts failed in between.
//
// Thread-safety: all methods may be called concurrently (two relaxed-enough atomics).
#pragma once

#include <atomic>
#include <cstdint>

namespace fencelock::detail {

class ReconnectCounter {
 public:
  void failed() noexcept { failed_.store(true, std::memory_order_relaxed); }
  void connected() noexcept {
    // Cheap on the hot path: one relaxed load when nothing failed.
    if (failed_.load(std::memory_order_relaxed) &&
        failed_.exchange(false, std::memory_order_relaxed)) {
      count_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> failed_{false};
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace fencelock::detail
