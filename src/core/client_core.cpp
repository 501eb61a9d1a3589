#include "core/client_core.h"

#include <unistd.h>

#include <cerrno>  // program_invocation_short_name (glibc)
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/duration.h"
#include "core/fence_issuer.h"
#include "core/holder_metadata.h"
#include "core/log_internal.h"
#include "core/saturate.h"
#include "core/wait_loop.h"

namespace fencelock::detail {

std::string process_metadata() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json meta = {
      {"host", host}, {"pid", getpid()}, {"program", program_invocation_short_name}};
  // A program or host name need not be UTF-8: replace what is not (dump() would throw).
  return meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ClientCore::ClientCore(std::unique_ptr<Backend> backend, ClientOptions options,
                       std::string issuer_identity)
    : backend_(std::move(backend)),
      options_(options),
      default_metadata_(process_metadata()),
      issuer_identity_(backend_->issuer_identity().empty() ? std::move(issuer_identity)
                                                           : backend_->issuer_identity()),
      renewer_(*backend_, &metrics_) {}

std::string ClientCore::fence_issuer(const LockKey& key) const {
  return make_issuer(issuer_identity_, backend_->issuer_name(key));
}

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
  if (options.shared && !backend_->supports_shared()) {
    return Status(Code::kInvalidArgument,
                  "shared (reader) locks are available only with PostgreSQL advisory locks");
  }
  if (options.wait < milliseconds(0)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("wait must not be negative, got {}ms", options.wait.count()));
  }
  // A longer wait is fine (deadlines saturate: milliseconds::max() waits until granted or
  // stopped); a longer TTL is not (no backend could keep it).
  if (options.ttl > kMaxDuration) {
    return Status(Code::kInvalidArgument,
                  fmt::format("TTL {}ms is above the longest every backend can represent ({})",
                              options.ttl.count(), format_duration(kMaxDuration)));
  }
  return Status::Ok();
}

Result<std::shared_ptr<LeaseState>> ClientCore::acquire(const LockKey& key,
                                                        const AcquireOptions& options,
                                                        bool campaign) {
  const Clock::time_point start = Clock::now();
  bool contended = false;
  auto result = acquire_unrecorded(key, options, campaign, contended);
  return record_acquire(key, std::move(result), options.wait > milliseconds(0),
                        Clock::now() - start, contended);
}

Result<std::shared_ptr<LeaseState>> ClientCore::record_acquire(
    const LockKey& key, Result<std::shared_ptr<LeaseState>> result, bool waited,
    Clock::duration took, bool contended) {
  metrics_.record_acquire(result.code(), waited, took, contended);
  if (result.code() == Code::kLocked) return explain_locked(key, result.status());
  return result;
}

void ClientCore::callback_begin() {
  MutexLock lock(callbacks_mu_);
  ++callbacks_running_;
}

void ClientCore::callback_end() {
  MutexLock lock(callbacks_mu_);
  if (--callbacks_running_ == 0) callbacks_done_.notify_all();
}

void ClientCore::wait_for_callbacks() {
  MutexLock lock(callbacks_mu_);
  if (callbacks_running_ == 0) return;
  // A callback runs: the engine exists (callbacks run on it), and this may be one of its threads.
  if (engine_->on_engine_thread()) return;
  callbacks_done_.wait(lock,
                       [&]() FENCELOCK_REQUIRES(callbacks_mu_) { return callbacks_running_ == 0; });
}

Engine& ClientCore::engine() {
  std::call_once(engine_started_, [&] { engine_ = std::make_unique<Engine>(kEngineThreads); });
  return *engine_;
}

Status ClientCore::explain_locked(const LockKey& key, const Status& status) const {
  constexpr std::size_t kShown = 200;
  const std::string& name = key.str();
  std::string message = fmt::format("'{}{}': {}", name.substr(0, kShown),
                                    name.size() > kShown ? "..." : "", status.message());
  std::vector<std::uint64_t> tokens;
  {
    MutexLock lock(held_mu_);
    for (auto [it, end] = held_.equal_range(name); it != end; ++it) tokens.push_back(it->second);
  }
  if (!tokens.empty()) {
    message += fmt::format(
        "; this Client holds it itself (token {}, not released): locks are not reentrant, so use "
        "that Lease or release it first",
        fmt::join(tokens, ", "));
  }
  return Status(Code::kLocked, std::move(message));
}

void ClientCore::forget_held(const LeaseState& lease) {
  MutexLock lock(held_mu_);
  for (auto [it, end] = held_.equal_range(lease.key.str()); it != end; ++it) {
    if (it->second == lease.token.value()) {
      held_.erase(it);
      return;
    }
  }
}

MetricsSnapshot ClientCore::metrics_snapshot() const {
  MetricsSnapshot snapshot = metrics_.snapshot();
  snapshot.reconnects = backend_->reconnects();
  return snapshot;
}

Status ClientCore::check_acquire(const LockKey& key, const AcquireOptions& options,
                                 bool campaign) const {
  if (Status st = validate(options); !st.ok()) return st;
  if (Status st = backend_->check_name(key.str()); !st.ok()) return st;
  if (!campaign && !options.metadata.empty()) {
    // One rule on every backend (a campaign's value is stored verbatim instead).
    if (Status st = validate_holder_metadata(options.metadata); !st.ok()) return st;
  }
  return Status::Ok();
}

Result<std::shared_ptr<LeaseState>> ClientCore::acquire_unrecorded(const LockKey& key,
                                                                   const AcquireOptions& options,
                                                                   bool campaign, bool& contended) {
  if (Status st = check_acquire(key, options, campaign); !st.ok()) return st;
  if (options.stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
  Clock::time_point deadline = deadline_after(Clock::now(), options.wait);
  auto ticket = queue_.enter(key.str(), deadline, options.stop);
  if (!ticket.ok()) return ticket.status();
  contended = ticket->waited();
  return acquire_as_head(key, options, deadline, campaign, contended);
}

Result<std::shared_ptr<LeaseState>> ClientCore::acquire_as_head(const LockKey& key,
                                                                const AcquireOptions& options,
                                                                Clock::time_point deadline,
                                                                bool campaign, bool& contended) {
  const OwnerId owner = OwnerId::random();
  const std::uint64_t before = granted_before(key);
  auto grant = acquire_blocking(
      *backend_,
      AcquireCall{key, owner, options.ttl, metadata_for(options, campaign), options.wait, deadline,
                  options.stop, options_.io_timeout, options.shared, campaign});
  if (!grant.ok()) return grant.status();
  return lease_from_grant(key, owner, options, std::move(*grant), before, contended);
}

Result<std::shared_ptr<LeaseState>> ClientCore::lease_from_grant(
    const LockKey& key, const OwnerId& owner, const AcquireOptions& options, Grant grant,
    std::uint64_t granted_before, bool& contended) {
  if (Clock::now() >= grant.valid_until) {
    // Handed over after its validity (a slow try, a busy engine, a long batch): never a lease
    // that is gone already, whose lost() could not come before its validity ended.
    const Status released =
        backend_->release_grant(key, owner, grant.backend_key, options.ttl,
                                deadline_after(Clock::now(), options_.release_timeout));
    return Status(
        Code::kDeadlineExceeded,
        fmt::format("acquiring took longer than the lease's validity; the grant was {}; "
                    "use a longer TTL",
                    released.ok() ? "released" : "left to expire (" + released.message() + ")"));
  }
  if (grant.token.value() <= granted_before)
    return refuse_backwards(key, owner, grant, options.ttl, granted_before);
  tokens_.record(key.str(), grant.token.value());
  contended = contended || grant.contended;
  auto lease = std::make_shared<LeaseState>(key, owner, grant.token, options.ttl, options.renew);
  lease->set_valid_until(grant.valid_until);
  lease->backend_key = std::move(grant.backend_key);
  lease->core = shared_from_this();
  renewer_.add(lease);
  {
    MutexLock lock(held_mu_);
    held_.emplace(key.str(), grant.token.value());
  }
  if (grant.gone.stop_possible()) {
    // Runs at once if the grant is gone already. The lease outlives its callback (gone_watch).
    lease->gone_watch.emplace(grant.gone, std::function<void()>([this, state = lease.get()] {
                                renewer_.lose_now(state);
                              }));
  }
  return lease;
}

Status ClientCore::refuse_backwards(const LockKey& key, const OwnerId& owner, const Grant& grant,
                                    milliseconds ttl, std::uint64_t granted_before) {
  const Status released = backend_->release_grant(
      key, owner, grant.backend_key, ttl, deadline_after(Clock::now(), options_.release_timeout));
  std::string message = fmt::format(
      "the backend granted '{}' with fencing token {}, not above token {} that this Client was "
      "granted before: the server lost its tokens (a restart without its data while its clock "
      "stepped back, a failover to a replica that missed the newest ones); the grant was {} and "
      "is refused, because a fence would take the older holder's writes for newer "
      "(docs/PROTOCOLS.md, \"Tokens after data loss\")",
      key.str(), grant.token.value(), granted_before,
      released.ok() ? "released" : "left to expire (" + released.message() + ")");
  detail::log(LogLevel::kWarning, "{}", message);
  return Status(Code::kUnavailable, std::move(message));
}

Status ClientCore::release(LeaseState& lease, Clock::time_point deadline) {
  renewer_.remove(&lease);
  forget_held(lease);
  lease.mark_lost();  // stop the holder's work before anyone else can be granted
  const Clock::time_point start = Clock::now();
  Status status =
      backend_->release_grant(lease.key, lease.owner, lease.backend_key, lease.ttl, deadline);
  released(lease, status, Clock::now() - start);
  return status;
}

void ClientCore::release_async(const std::shared_ptr<ClientCore>& self,
                               std::shared_ptr<LeaseState> lease,
                               std::function<void(Status)> done) {
  renewer_.remove(lease.get());
  forget_held(*lease);
  lease->mark_lost();  // stop the holder's work before anyone else can be granted
  const Clock::time_point start = Clock::now();
  if (backend_->batched_releases() == nullptr) {
    // Each release a task of its own: the engine's threads send them side by side.
    engine().post([self, lease = std::move(lease), done = std::move(done)] {
      done(self->release(*lease, Clock::now() + self->options().io_timeout));
    });
    return;
  }
  ReleaseItem item{ReleaseRequest{lease->key, lease->owner, lease->backend_key, lease->ttl},
                   options_.io_timeout};
  releases_.submit(std::move(item),
                   [self, lease = std::move(lease), start, done = std::move(done)](Status status) {
                     self->released(*lease, status, Clock::now() - start);
                     done(std::move(status));
                   });
}

void ClientCore::released(const LeaseState& lease, const Status& status, Clock::duration took) {
  metrics_.record_release(status.code(), took);
  if (!status.ok()) {
    detail::log(LogLevel::kInfo,
                "release of '{}' (token {}, owner {}) failed: {}; it expires by its TTL",
                lease.key.str(), lease.token.value(), lease.owner.short_hex(), status.to_string());
  }
}

}  // namespace fencelock::detail
