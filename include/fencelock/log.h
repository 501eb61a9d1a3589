// fencelock/log.h: where fencelock's diagnostic messages go.
//
//   fencelock::set_log_sink(
//       [](fencelock::LogLevel level, std::string_view message) { std::clog << message << "\n"; },
//       fencelock::LogLevel::kInfo);
//
// fencelock is silent by default: until a sink is set, nothing is formatted and nothing written
// (a message costs one relaxed atomic load). The sink is process-wide, shared by every Client.
// Messages are one line of text without a trailing newline. They name keys and fencing tokens but
// never credentials, and owner ids only by their 8-digit prefix (OwnerId::short_hex()).
//
// Messages come from fencelock's own threads (the renewal and watchdog threads) as well as from
// the threads that call into a Client, so a sink may be called concurrently from several threads
// and must be thread-safe. It must not block for long (it may delay a renewal) and must not call
// set_log_sink().
//
// Thread-safety: set_log_sink() may be called from any thread. When it returns, no call of the
// previous sink is running and none will start, so the previous sink may be destroyed.
#pragma once

#include <functional>
#include <string_view>

namespace fencelock {

enum class LogLevel {
  kDebug,    // routine events worth tracing: a renewal not confirmed (retried until validity ends)
  kInfo,     // notable events that need no action: a release failed, the lock expires by its TTL
  kWarning,  // a lease was lost before its release: its holder must stop working under it
  kError,    // failures fencelock cannot recover from: a backend's renewal that failed without
             // reporting it (its leases are declared lost)
};

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Sends every message at `min_level` or above to `sink`, replacing the previous sink. An empty
// `sink` (the default state) silences fencelock again.
void set_log_sink(LogSink sink, LogLevel min_level = LogLevel::kInfo);

// "debug", "info", "warning" or "error".
std::string_view log_level_name(LogLevel level);

}  // namespace fencelock
