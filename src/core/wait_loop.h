// The blocking way to take a lock: through the backend's ServerQueue when it has one; otherwise
// try, and on contention sleep until a release event (ReleaseEvents, when the backend has them)
// or the holder's remaining TTL.
#pragma once

#include "core/backend.h"

namespace fencelock::detail {

// The longest a waiter's place in a backend's FIFO queue lasts on its own: its waiter's TTL
// within [1 s, kQueueHold]. After that it lasts while the waiter's Client is alive (Redis: the
// Client's liveness key, scripts/queue.lua), so a Client that crashed blocks the line about
// this long, and waiters do not refresh their places.
inline constexpr milliseconds kQueueHold{5000};

// Takes the lock, waiting up to call.deadline: kLocked when the wait ran out, kCancelled when
// call.stop fired; either way nothing of this owner is left behind.
Result<Grant> acquire_blocking(Backend& backend, const AcquireCall& call);

// The part for backends without a ServerQueue: tries, and waits between them.
Result<Grant> acquire_by_tries(Backend& backend, const AcquireCall& call);

// Backend::try_acquire one request after another: BatchedTries::try_acquire_many for a backend
// without it.
// Each try ends within `budget` of when it is sent.
std::vector<TryResult> try_one_by_one(Backend& backend, std::span<const GrantRequest> requests,
                                      milliseconds budget);

}  // namespace fencelock::detail
