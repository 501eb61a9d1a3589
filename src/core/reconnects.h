// ReconnectCounter: counts recoveries of one server connection (MetricsSnapshot::reconnects).
//
// A driver calls failed() when a connection (or a call on it) fails for a connection-level
// reason and connected() when one to the same place works again. Only a connected() that follows
// a failed() counts, so the first connection is not a reconnect and a server that stays down is
// one reconnect when it comes back, however many attempts failed in between.
//
// ReconnectBackoff: the one reconnect back-off of a server, for every driver. After a connect
// that got no answer (kUnavailable or kDeadlineExceeded) further connects fail at once with that
// error until the back-off ends; it doubles from 25 ms up to 1 s and ends with a success. Other
// failures (refused credentials, a missing database) do not back off: a retry gives the same
// clear error at once.
//
// Thread-safety: ReconnectCounter's methods may be called concurrently (two relaxed-enough
// atomics); a ReconnectBackoff is guarded by its owner's mutex.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "fencelock/status.h"

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

class ReconnectBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  // While backing off: the error a connect fails with at once. Otherwise OK (try to connect).
  Status refusal(Clock::time_point now) const {
    return now < down_until_ ? last_error_ : Status::Ok();
  }
  void connected() {
    backoff_ = std::chrono::milliseconds(0);
    down_until_ = {};
  }
  // A failed connect; backs off only when the server did not answer (then true: a connection
  // failure for ReconnectCounter::failed()).
  bool failed(const Status& error, Clock::time_point now) {
    if (error.code() != Code::kUnavailable && error.code() != Code::kDeadlineExceeded) return false;
    backoff_ =
        std::clamp(backoff_ * 2, std::chrono::milliseconds(25), std::chrono::milliseconds(1000));
    down_until_ = now + backoff_;
    last_error_ = error;
    return true;
  }

 private:
  Clock::time_point down_until_{};
  std::chrono::milliseconds backoff_{0};
  Status last_error_;
};

}  // namespace fencelock::detail
