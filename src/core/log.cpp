#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "core/log_internal.h"

namespace fencelock {
namespace detail {
namespace {

// Writers (set_log_sink) take it exclusively, so that once they return no call of the old sink
// runs; messages take it shared, so that threads log concurrently.
std::shared_mutex& sink_mutex() {
  static std::shared_mutex mu;
  return mu;
}

// Guarded by sink_mutex() (shared for logging, exclusive for set_log_sink). A std::shared_mutex
// behind a function-local static: outside the annotated Mutex of core/mutex.h.
LogSink& current_sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

std::atomic<int> g_log_min_level{kLogOff};

void log_message(LogLevel level, std::string_view message) {
  std::shared_lock lock(sink_mutex());
  // Checked again under the lock: the sink may have been replaced since log_enabled().
  if (!log_enabled(level) || !current_sink()) return;
  try {
    current_sink()(level, message);
  } catch (...) {
    // A throwing sink must not unwind through a renewal thread: the message is dropped.
  }
}

}  // namespace detail

void set_log_sink(LogSink sink, LogLevel min_level) {
  std::unique_lock lock(detail::sink_mutex());
  const bool enabled = static_cast<bool>(sink);
  detail::current_sink() = std::move(sink);
  detail::g_log_min_level.store(enabled ? static_cast<int>(min_level) : detail::kLogOff,
                                std::memory_order_relaxed);
}

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace fencelock
