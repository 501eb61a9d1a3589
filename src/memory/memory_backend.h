// memory:// : an in-process lock service for unit tests and examples.
//
// All Clients of one process that connect to the same memory://NAME share one lock table (the
// name defaults to "default"), so they contend exactly as clients of one server would. Expiry
// follows steady_clock; tokens come from one counter per key that never resets.
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/uri.h"

namespace fencelock::detail {

Result<std::unique_ptr<Backend>> make_memory_backend(const ParsedUri& uri);

// What a server would let an operator observe, for tests: acquisition attempts on `key` of the
// table `name`, and the number of release watches currently registered on it.
struct MemoryStats {
  std::uint64_t attempts = 0;
  std::uint64_t watchers = 0;
};
MemoryStats memory_stats(const std::string& name, const std::string& key);

}  // namespace fencelock::detail
