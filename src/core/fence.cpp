#include "fencelock/fence.h"

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/lease_state.h"

namespace fencelock {

Status stale_token(FencingToken presented, FencingToken highest) {
  return Status(Code::kFenced,
                fmt::format("rejected: stale token {} < {}", presented.value(), highest.value()));
}

Status FenceGate::admit(FencingToken token) {
  std::lock_guard lock(mu_);
  if (token < highest_) return stale_token(token, highest_);
  highest_ = token;
  return Status::Ok();
}

Status FenceGate::run(FencingToken token, const std::function<void()>& write) {
  std::lock_guard lock(mu_);
  if (token < highest_) return stale_token(token, highest_);
  highest_ = token;
  write();
  return Status::Ok();
}

FencingToken FenceGate::highest() const {
  std::lock_guard lock(mu_);
  return highest_;
}

Status etcd_fenced_put(const Lease& lease, std::string_view key, std::string_view value) {
  const detail::LeaseState& state = *lease.state_;
  if (state.backend_key.empty() || state.core == nullptr) {
    return Status(Code::kInvalidArgument,
                  "etcd_fenced_put needs a lease granted by an etcd:// Client");
  }
  const auto deadline = detail::Clock::now() + state.core->options().io_timeout * 3;
  return state.core->backend().guarded_put(state.backend_key, state.token, key, value, deadline);
}

}  // namespace fencelock
