// errno_text(): the message of an errno value, the text std::strerror gives ("Connection
// refused"), safe to call from any thread: std::strerror may return a buffer that another thread's
// call overwrites (glibc documents it MT-Unsafe; clang-tidy's concurrency-mt-unsafe), so this
// uses the GNU strerror_r with a buffer of the caller's own. Pure; no I/O.
#pragma once

#include <string.h>  // strerror_r (the GNU one: g++ and clang++ define _GNU_SOURCE for C++)

#include <string>

namespace fencelock::detail {

inline std::string errno_text(int error) {
  char buffer[128];
  // GNU strerror_r returns the message: a static string, or `buffer` for an unknown error.
  return ::strerror_r(error, buffer, sizeof buffer);
}

}  // namespace fencelock::detail
