// LostProbe: records when a Lease's lost() fired and lets a test wait for it (no polling).
#pragma once

#include <chrono>
#include <condition_variable>
#include <optional>

#include "core/mutex.h"
#include "fencelock/lease.h"

namespace fencelock::testing {

class LostProbe {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LostProbe(Lease& lease) {
    lease.on_lost([this] {
      fencelock::detail::MutexLock lock(mu_);
      fired_at_ = Clock::now();
      cv_.notify_all();
    });
  }
  // Whether lost() fired within `limit`.
  bool wait(std::chrono::milliseconds limit) {
    fencelock::detail::MutexLock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return fired_at_.has_value(); });
  }
  std::optional<Clock::time_point> fired_at() {
    fencelock::detail::MutexLock lock(mu_);
    return fired_at_;
  }

 private:
  fencelock::detail::Mutex mu_;
  std::condition_variable_any cv_;
  std::optional<Clock::time_point> fired_at_;
};

}  // namespace fencelock::testing
