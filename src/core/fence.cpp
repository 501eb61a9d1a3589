#include "fencelock/fence.h"

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/lease_state.h"
#include "core/mutex.h"

namespace fencelock {

Status stale_token(FencingToken presented, FencingToken highest) {
  return Status(Code::kFenced,
                fmt::format("rejected: stale token {} < {}", presented.value(), highest.value()));
}

struct FenceGate::State {
  detail::Mutex mu;
  FencingToken highest FENCELOCK_GUARDED_BY(mu){0};
};

FenceGate::FenceGate() : state_(std::make_unique<State>()) {}
FenceGate::~FenceGate() = default;

Status FenceGate::admit(FencingToken token) {
  detail::MutexLock lock(state_->mu);
  if (token < state_->highest) return stale_token(token, state_->highest);
  state_->highest = token;
  return Status::Ok();
}

Status FenceGate::run(FencingToken token, const std::function<void()>& write) {
  detail::MutexLock lock(state_->mu);
  if (token < state_->highest) return stale_token(token, state_->highest);
  state_->highest = token;
  write();
  return Status::Ok();
}

FencingToken FenceGate::highest() const {
  detail::MutexLock lock(state_->mu);
  return state_->highest;
}

Status etcd_fenced_put(const Lease& lease, const ResourceKey& key, std::string_view value) {
  const std::string_view name = key.str();
  const detail::LeaseState& state = *lease.state_;
  if (state.backend_key.empty() || state.core == nullptr) {
    return Status(Code::kInvalidArgument,
                  "etcd_fenced_put needs a lease granted by an etcd:// Client");
  }
  const auto deadline = detail::Clock::now() + state.core->options().io_timeout * 3;
  return state.core->backend().guarded_put(state.backend_key, state.token, name, value, deadline);
}

}  // namespace fencelock
