#include "core/wait_loop.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/duration.h"

namespace fencelock::detail {

Result<Grant> Backend::acquire(const AcquireCall& call) {
  return acquire_with_release_events(*this, call);
}

std::vector<TryResult> Backend::try_acquire_many(std::span<const GrantRequest> requests) {
  std::vector<TryResult> results;
  results.reserve(requests.size());
  for (const GrantRequest& request : requests) results.push_back(try_acquire(request));
  return results;
}

Result<Grant> acquire_with_release_events(Backend& backend, const AcquireCall& call) {
  // The place in the backend's FIFO queue: arrival time, the same on every retry and instance.
  const auto ticket = static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  const bool waits = call.wait > milliseconds(0);
  // How long a place in line lasts without its Client's liveness (its first seconds, before
  // the Client's liveness key is written): about one TTL, within [1 s, kQueueHold].
  const milliseconds hold = std::clamp(call.ttl, milliseconds(1000), kQueueHold);
  // Watch before the first try, so that a release between a failed try and the wait is never
  // missed. (For Redis this subscribes once per Client; later watches cost a map insert.)
  std::unique_ptr<ReleaseWatch> watch = waits ? backend.watch(call.key, call.owner) : nullptr;
  // Gives up: leaves the queue (release by owner id also covers an ambiguous timeout).
  auto give_up = [&](Status status) {
    if (waits) (void)backend.release(call.key, call.owner, Clock::now() + call.io_timeout);
    return status;
  };
  bool found_held = false;
  while (true) {
    Clock::time_point now = Clock::now();
    milliseconds queue_for = waits
                                 ? std::clamp(std::chrono::ceil<milliseconds>(call.deadline - now),
                                              milliseconds(1), hold)
                                 : milliseconds(0);
    TryResult attempt = backend.try_acquire(
        GrantRequest{call.key, call.owner, call.ttl, call.metadata, queue_for, ticket});
    if (attempt.grant) {
      attempt.grant->contended = attempt.grant->contended || found_held;
      return *attempt.grant;
    }
    // Errors: the backend already released what the try took; leave the queue place too.
    if (attempt.status.code() != Code::kLocked) return give_up(attempt.status);
    found_held = true;
    now = Clock::now();
    if (now >= call.deadline) {
      if (!waits) return attempt.status;
      return give_up(Status(Code::kLocked, fmt::format("key is still held after waiting {}",
                                                       format_duration(call.wait))));
    }
    // The fallback, for a holder that dies silently: its remaining TTL (the backend's
    // retry_after). A place in line needs no refresh by its waiter (Redis: the Client keeps it
    // alive, scripts/queue.lua).
    const milliseconds fallback = attempt.retry_after + milliseconds(1);
    watch->wait_until(std::min(call.deadline, now + fallback), call.stop);
    if (call.stop.stop_requested())
      return give_up(Status(Code::kCancelled, "acquisition cancelled"));
  }
}

}  // namespace fencelock::detail
