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

}  // namespace fencelock::detail
