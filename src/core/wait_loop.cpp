#include "core/wait_loop.h"

#include <algorithm>
#include <condition_variable>

#include <fmt/format.h>

#include "core/duration.h"
#include "core/mutex.h"
#include "core/saturate.h"

namespace fencelock::detail {

Result<Grant> acquire_blocking(Backend& backend, const AcquireCall& call) {
  if (ServerQueue* queue = backend.server_queue()) return queue->acquire_queued(call);
  return acquire_by_tries(backend, call);
}

std::vector<TryResult> try_one_by_one(Backend& backend, std::span<const GrantRequest> requests,
                                      milliseconds budget) {
  std::vector<TryResult> results;
  results.reserve(requests.size());
  for (const GrantRequest& request : requests) {
    results.push_back(backend.try_acquire(request, deadline_after(Clock::now(), budget)));
  }
  return results;
}

namespace {

// Without release events: the timers alone, and the stop.
void sleep_until(Clock::time_point until, const std::stop_token& stop) {
  Mutex mu;
  std::condition_variable_any never;
  MutexLock lock(mu);
  never.wait_until(lock, stop, until, [] { return false; });
}

}  // namespace

Result<Grant> acquire_by_tries(Backend& backend, const AcquireCall& call) {
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
  ReleaseEvents* events = backend.release_events();
  std::unique_ptr<ReleaseWatch> watch =
      waits && events != nullptr
          ? events->watch(call.key, call.owner, request_deadline(call.io_timeout))
          : nullptr;
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
        GrantRequest{call.key, call.owner, call.ttl, call.metadata, queue_for, ticket},
        request_deadline(call.io_timeout));
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
    const Clock::time_point until = std::min(call.deadline, now + fallback);
    if (watch) {
      watch->wait_until(until, call.stop);
    } else {
      sleep_until(until, call.stop);
    }
    if (call.stop.stop_requested())
      return give_up(Status(Code::kCancelled, "acquisition cancelled"));
  }
}

}  // namespace fencelock::detail
