// detail::log: how fencelock's own code writes to the sink set by set_log_sink() (fencelock/log.h).
//
//   detail::log(LogLevel::kWarning, "lease on '{}' lost (token {})", key.str(), token.value());
//
// When no sink is set, or the level is below the sink's minimum, a call is one relaxed atomic load
// and a comparison: the arguments are not formatted. Never pass credentials or a full owner id.
//
// Thread-safety: may be called from any thread.
#pragma once

#include <atomic>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "fencelock/log.h"

namespace fencelock::detail {

// The sink's minimum level as an int, or kLogOff while no sink is set.
inline constexpr int kLogOff = static_cast<int>(LogLevel::kError) + 1;
extern std::atomic<int> g_log_min_level;

inline bool log_enabled(LogLevel level) {
  return static_cast<int>(level) >= g_log_min_level.load(std::memory_order_relaxed);
}

// Hands an already formatted message to the sink (if one is still set at that level).
void log_message(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!log_enabled(level)) return;
  log_message(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fencelock::detail
