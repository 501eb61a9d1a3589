// redis:// and redlock:// backends (docs/PROTOCOLS.md, "Redis and Redlock").
//
// redis://  is Redlock with N = 1: the same scripts, and round 1 alone is monotonic.
// redlock:// runs round 1 on every instance in parallel, takes the maximum counter over the
// majority that granted, and writes it back (round 2) before the grant counts, so tokens stay
// strictly increasing across different majorities. See docs/PROTOCOLS.md for the argument and
// its assumption (instances keep their data: AOF fsync always, or restart delayed past max TTL).
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/uri.h"
#include "fencelock/options.h"

namespace fencelock::detail {

// Validates the URI (hosts, db number, credentials; password also from FENCELOCK_REDIS_PASSWORD)
// and connects to every instance. kUnavailable when fewer than a majority answer. With
// `check_only`, returns a null backend once the URI is found valid, connecting to nothing.
Result<std::unique_ptr<Backend>> make_redis_backend(const ParsedUri& uri,
                                                    const ClientOptions& options,
                                                    bool check_only = false);

}  // namespace fencelock::detail
