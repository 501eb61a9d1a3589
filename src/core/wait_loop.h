// The default way to wait for a lock: try, and on contention sleep until a release event
// (ReleaseWatch), the holder's remaining TTL, or the refresh of the waiter's queue place.
#pragma once

#include "core/backend.h"

namespace fencelock::detail {

// The longest a waiter's place in a backend's FIFO queue lasts without a retry: a waiter that
// crashed blocks the line at most this long. The place actually lasts the waiter's TTL within
// [1 s, kQueueHold]; waiters retry (refresh) at half of that.
inline constexpr milliseconds kQueueHold{5000};

Result<Grant> acquire_with_release_events(Backend& backend, const AcquireCall& call);

}  // namespace fencelock::detail
