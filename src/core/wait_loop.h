// The default way to wait for a lock: try, and on contention sleep until a release event
// (ReleaseWatch) or the holder's remaining TTL.
#pragma once

#include "core/backend.h"

namespace fencelock::detail {

// The longest a waiter's place in a backend's FIFO queue lasts on its own: its waiter's TTL
// within [1 s, kQueueHold]. After that it lasts while the waiter's Client is alive (Redis: the
// Client's liveness key, scripts/queue.lua), so a Client that crashed blocks the line about
// this long, and waiters do not refresh their places.
inline constexpr milliseconds kQueueHold{5000};

Result<Grant> acquire_with_release_events(Backend& backend, const AcquireCall& call);

}  // namespace fencelock::detail
