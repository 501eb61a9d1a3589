#include "fencelock/lease.h"

#include "core/client_core.h"
#include "core/mutex.h"

namespace fencelock {

Lease::Lease(std::shared_ptr<detail::LeaseState> state) : state_(std::move(state)) {}
Lease::Lease(Lease&&) noexcept = default;

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Lease dying(std::move(*this));  // releases what this held
    state_ = std::move(other.state_);
  }
  return *this;
}

Lease::~Lease() {
  if (!state_) return;
  auto core =
      std::move(state_->core);  // a renewal thread may hold the state: never let it own the core
  if (core && !state_->released.exchange(true)) {
    std::chrono::milliseconds budget = core->options().release_timeout;
    if (budget > std::chrono::milliseconds(0)) {
      (void)core->release(*state_, detail::Clock::now() + budget);
    } else {
      core->renewer().remove(state_.get());
      core->forget_held(*state_);
      state_->mark_lost();
    }
  }
}

const LockKey& Lease::key() const { return state_->key; }
const OwnerId& Lease::owner() const { return state_->owner; }
FencingToken Lease::token() const { return state_->token; }
Fencing Lease::fencing() const {
  return Fencing{state_->token, state_->core ? state_->core->fence_issuer(state_->key) : ""};
}
std::chrono::steady_clock::time_point Lease::valid_until() const { return state_->valid_until(); }
std::stop_token Lease::lost() const { return state_->lost_source.get_token(); }

void Lease::on_lost(std::function<void()> callback) {
  detail::MutexLock lock(state_->callbacks_mu);
  state_->callbacks.push_back(std::make_unique<std::stop_callback<std::function<void()>>>(
      state_->callbacks_source.get_token(), std::move(callback)));
}

Status Lease::release() {
  // A second call says what the first did (OK only if the lock was freed then, or while an
  // asynchronous release is still under way).
  if (state_->released.exchange(true)) {
    detail::MutexLock lock(state_->release_mu);
    return state_->release_status.value_or(Status::Ok());
  }
  auto& core = *state_->core;
  Status status = core.release(*state_, detail::Clock::now() + core.options().io_timeout);
  detail::MutexLock lock(state_->release_mu);
  state_->release_status = status;
  return status;
}

void Lease::release_async(std::function<void(Status)> done) {
  std::shared_ptr<detail::ClientCore> core = state_->core;  // ~Lease may take state_->core
  detail::Engine& engine = core->engine();
  if (state_->released.exchange(true)) {
    detail::MutexLock lock(state_->release_mu);
    // The task holds the core: an engine whose Client went would drop it without running it.
    engine.post(
        [core, done = std::move(done), status = state_->release_status.value_or(Status::Ok())] {
          core->callback_begin();
          done(status);
          core->callback_end();
        });
    return;
  }
  // The holder's work stops now, before this call returns; the release goes out with the others
  // that come due together (ClientCore::release_async).
  core->release_async(core, state_, [core, state = state_, done = std::move(done)](Status status) {
    {
      detail::MutexLock lock(state->release_mu);
      state->release_status = status;
    }
    core->callback_begin();
    done(std::move(status));
    core->callback_end();
  });
}

}  // namespace fencelock
