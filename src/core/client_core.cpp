#include "core/client_core.h"

#include <unistd.h>

#include <cerrno>  // program_invocation_short_name (glibc)

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/duration.h"

namespace fencelock::detail {

std::string process_metadata() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json meta = {{"host", host}, {"pid", getpid()}, {"program", program_invocation_short_name}};
  return meta.dump();
}

ClientCore::ClientCore(std::unique_ptr<Backend> backend, ClientOptions options)
    : backend_(std::move(backend)),
      options_(options),
      default_metadata_(process_metadata()),
      renewer_(*backend_) {}

Status ClientCore::validate(const AcquireOptions& options) const {
  if (options.ttl <= milliseconds(0)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("TTL must be positive, got {}ms", options.ttl.count()));
  }
  if (options.ttl < backend_->min_ttl()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("TTL {} is below this backend's minimum of {}",
                              format_duration(options.ttl), format_duration(backend_->min_ttl())));
  }
  if (options.wait < milliseconds(0)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("wait must not be negative, got {}ms", options.wait.count()));
  }
  return Status::Ok();
}

Result<std::shared_ptr<LeaseState>> ClientCore::acquire(const LockKey& key,
                                                        const AcquireOptions& options) {
  if (Status st = validate(options); !st.ok()) return st;
  if (options.stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
  Clock::time_point deadline = Clock::now() + options.wait;
  auto ticket = queue_.enter(key.str(), deadline, options.stop);
  if (!ticket.ok()) return ticket.status();
  return acquire_as_head(key, options, deadline);
}

Result<std::shared_ptr<LeaseState>> ClientCore::acquire_as_head(const LockKey& key,
                                                                const AcquireOptions& options,
                                                                Clock::time_point deadline) {
  const OwnerId owner = OwnerId::random();
  const std::string& metadata = options.metadata.empty() ? default_metadata_ : options.metadata;
  // The place in the backend's FIFO queue: arrival time, the same on every retry and instance.
  const auto ticket = static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  const bool waits = options.wait > milliseconds(0);
  // Watch before the first try, so that a release between a failed try and the wait is never
  // missed. (For Redis this subscribes once per Client; later watches cost a map insert.)
  std::unique_ptr<ReleaseWatch> watch = waits ? backend_->watch(key, owner) : nullptr;
  // Gives up: leaves the queue (release by owner id also covers an ambiguous timeout).
  auto give_up = [&](Status status) {
    if (waits) (void)backend_->release(key, owner, Clock::now() + options_.io_timeout);
    return status;
  };
  while (true) {
    Clock::time_point now = Clock::now();
    milliseconds queue_for =
        waits ? std::clamp(std::chrono::ceil<milliseconds>(deadline - now), milliseconds(1), kQueueHold)
              : milliseconds(0);
    TryResult attempt = backend_->try_acquire(
        GrantRequest{key, owner, options.ttl, metadata, queue_for, ticket});
    if (attempt.grant) {
      auto lease = std::make_shared<LeaseState>(key, owner, attempt.grant->token, options.ttl,
                                                options.renew);
      lease->set_valid_until(attempt.grant->valid_until);
      lease->core = shared_from_this();
      renewer_.add(lease);
      return lease;
    }
    if (attempt.status.code() != Code::kLocked) return attempt.status;  // already released
    now = Clock::now();
    if (now >= deadline) {
      if (!waits) return attempt.status;
      return give_up(Status(Code::kLocked, fmt::format("key is still held after waiting {}",
                                                       format_duration(options.wait))));
    }
    // Fallbacks: the holder's remaining TTL, for a holder that dies silently; half the queue
    // hold, to keep this waiter's place in line.
    milliseconds fallback = std::min(attempt.retry_after, kQueueHold / 2) + milliseconds(1);
    watch->wait_until(std::min(deadline, now + fallback), options.stop);
    if (options.stop.stop_requested()) return give_up(Status(Code::kCancelled, "acquisition cancelled"));
  }
}

Status ClientCore::release(LeaseState& lease, Clock::time_point deadline) {
  renewer_.remove(&lease);
  lease.mark_lost();  // stop the holder's work before anyone else can be granted
  return backend_->release(lease.key, lease.owner, deadline);
}

}  // namespace fencelock::detail
