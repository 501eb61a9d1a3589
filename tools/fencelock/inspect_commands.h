// `fencelock status KEY` and `fencelock list [PREFIX]`: read-only views of held locks.
//
// Both exit 0 whether or not anything is held (a free lock is an answer, not an error); results go
// to stdout, errors to stderr. See holder_format.h for the output formats.
#pragma once

#include <string>

namespace fencelock::cli {

struct StatusArgs {
  std::string backend;  // --backend; empty: $FENCELOCK_BACKEND, then the default
  bool json = false;
  std::string key;
};

struct ListArgs {
  std::string backend;
  bool json = false;
  std::string prefix;               // empty: every held lock
  std::string timeout = "10s";      // --timeout: the whole listing
  std::size_t max_locks = 100'000;  // --max-locks
};

int status_command(const StatusArgs& args);
int list_command(const ListArgs& args);

}  // namespace fencelock::cli
