#include "fencelock/fence.h"

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/fence_issuer.h"
#include "core/lease_state.h"
#include "core/mutex.h"

namespace fencelock {

Status stale_token(FencingToken presented, FencingToken highest) {
  return Status(Code::kFenced,
                fmt::format("rejected: stale token {} < {}", presented.value(), highest.value()));
}

Status other_lock(const Fencing& presented, const Fencing& recorded) {
  if (presented.issuer.empty()) {
    return Status(Code::kFenced,
                  fmt::format("rejected: token {} names no lock (a bare token), but lock {} "
                              "fences this resource (its highest token is {}): present the "
                              "lease's fencing(), its token and its issuer",
                              presented.token.value(), detail::shown_issuer(recorded.issuer),
                              recorded.token.value()));
  }
  return Status(Code::kFenced,
                fmt::format("rejected: token {} of lock {} cannot be compared with the tokens of "
                            "lock {}, which fences this resource (its highest token is {}): one "
                            "resource is fenced by one lock; to move it to another on purpose, "
                            "an administrator adopts it for the new lock once every writer of "
                            "the old one has stopped (docs/PROTOCOLS.md, \"Fences\")",
                            presented.token.value(), detail::shown_issuer(presented.issuer),
                            detail::shown_issuer(recorded.issuer), recorded.token.value()));
}

struct FenceGate::State {
  detail::Mutex mu;
  Fencing record FENCELOCK_GUARDED_BY(mu);
};

FenceGate::FenceGate() : state_(std::make_unique<State>()) {}
FenceGate::~FenceGate() = default;

Status FenceGate::admit(const Fencing& fencing) {
  return run(fencing, [] {});
}

Status FenceGate::run(const Fencing& fencing, const std::function<void()>& write) {
  if (Status valid = detail::check_issuer(fencing.issuer, "FenceGate"); !valid.ok()) return valid;
  detail::MutexLock lock(state_->mu);
  switch (detail::judge_fencing(fencing, state_->record)) {
    case detail::FenceVerdict::kOtherLock:
      return other_lock(fencing, state_->record);
    case detail::FenceVerdict::kStale:
      return stale_token(fencing.token, state_->record.token);
    case detail::FenceVerdict::kAdmit:
      break;
  }
  state_->record = fencing;
  write();
  return Status::Ok();
}

Status FenceGate::admit(FencingToken token) {
  return run(Fencing{token, ""}, [] {});
}

Status FenceGate::run(FencingToken token, const std::function<void()>& write) {
  return run(Fencing{token, ""}, write);
}

FencingToken FenceGate::highest() const {
  detail::MutexLock lock(state_->mu);
  return state_->record.token;
}

Fencing FenceGate::record() const {
  detail::MutexLock lock(state_->mu);
  return state_->record;
}

Status FenceGate::adopt(const Fencing& fencing) {
  if (Status valid = detail::check_issuer(fencing.issuer, "FenceGate"); !valid.ok()) return valid;
  detail::MutexLock lock(state_->mu);
  state_->record = fencing;
  return Status::Ok();
}

Status etcd_fenced_put(const Lease& lease, const ResourceKey& key, std::string_view value) {
  const std::string_view name = key.str();
  const detail::LeaseState& state = *lease.state_;
  if (state.backend_key.empty() || state.core == nullptr) {
    return Status(Code::kInvalidArgument,
                  "etcd_fenced_put needs a lease granted by an etcd:// Client");
  }
  if (state.released.load()) {
    return Status(Code::kInvalidArgument,
                  "etcd_fenced_put: the lease was released; a released lease writes nothing "
                  "(acquire the lock again)");
  }
  const auto deadline = detail::Clock::now() + state.core->options().io_timeout * 3;
  detail::GuardedWrites* writes = state.core->backend().guarded_writes();
  if (writes == nullptr) {
    return Status(Code::kInvalidArgument, "guarded writes need an etcd:// backend");
  }
  return writes->guarded_put(state.backend_key, state.token, name, value, deadline);
}

}  // namespace fencelock
