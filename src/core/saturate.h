// Deadlines that cannot overflow: `from + d` clamped to the clock's range (pure).
//
// Durations that come from users are capped at kMaxDuration (fencelock/options.h), so that a
// deadline computed from one cannot overflow today; the saturating sum keeps it so for every
// duration that reaches a deadline, however it was made.
#pragma once

#include <chrono>

namespace fencelock::detail {

template <class Clock, class Rep, class Period>
typename Clock::time_point saturating_add(typename Clock::time_point from,
                                          std::chrono::duration<Rep, Period> d) {
  using Point = typename Clock::time_point;
  using Dur = typename Clock::duration;
  // Convert with a check: a duration too long for the clock's own unit saturates too. (Durations
  // are never finer than the clock's unit here, so these casts only divide.)
  static_assert(std::ratio_greater_equal_v<Period, typename Dur::period>);
  const auto max_d = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(Dur::max());
  const auto min_d = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(Dur::min());
  if (d >= max_d) return Point::max();
  if (d <= min_d) return Point::min();
  const Dur step = std::chrono::duration_cast<Dur>(d);
  const Dur since = from.time_since_epoch();
  if (step > Dur::zero() && since > Dur::max() - step) return Point::max();
  if (step < Dur::zero() && since < Dur::min() - step) return Point::min();
  return from + step;
}

// The common case: a deadline on the steady clock, `d` after `from`.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point from,
                                                     std::chrono::duration<Rep, Period> d) {
  return saturating_add<std::chrono::steady_clock>(from, d);
}

}  // namespace fencelock::detail
