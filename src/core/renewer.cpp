#include "core/renewer.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "core/duration.h"
#include "core/log_internal.h"

namespace fencelock::detail {
namespace {

// How long to wait before retrying a renewal whose outcome was unknown.
milliseconds retry_delay(milliseconds ttl) {
  return std::clamp(ttl / 10, milliseconds(5), milliseconds(500));
}

// Why a lease was lost, for the warning.
std::string_view loss_reason(const LeaseState& lease, bool rejected) {
  if (rejected) return "its renewal was rejected (the key expired or has another owner)";
  if (!lease.renew) return "its validity ended (renewal is off)";
  return "no renewal was confirmed before its validity ended";
}

}  // namespace

milliseconds Renewer::lost_guard(milliseconds ttl) {
  return std::clamp(ttl / 10, milliseconds(2), milliseconds(50));
}

Renewer::Renewer(Backend& backend, Metrics* metrics) : backend_(backend), metrics_(metrics) {
  renew_thread_ = std::jthread([this](std::stop_token stop) { renew_loop(stop); });
  watchdog_thread_ = std::jthread([this](std::stop_token stop) { watchdog_loop(stop); });
}

Renewer::~Renewer() {
  renew_thread_.request_stop();
  watchdog_thread_.request_stop();
  renew_cv_.notify_all();
  watchdog_cv_.notify_all();
}

void Renewer::add(const std::shared_ptr<LeaseState>& lease) {
  std::lock_guard lock(mu_);
  Clock::time_point start = lease->valid_until() - lease->ttl;  // conservative send-time estimate
  Entry& entry = entries_[lease.get()];
  entry = Entry{lease, std::max(start + lease->ttl / 3, Clock::now())};
  // Wake a thread only when the new lease is due before the time it already plans to wake at:
  // the common case (a lease like the others) costs no context switch on the acquire path.
  if (lease->renew && entry.next_renew < renew_planned_) {
    ++renew_version_;
    renew_cv_.notify_all();
  }
  if (lease->valid_until() - lost_guard(lease->ttl) < watchdog_planned_) {
    ++watchdog_version_;
    watchdog_cv_.notify_all();
  }
}

void Renewer::remove(const LeaseState* lease) {
  std::lock_guard lock(mu_);
  entries_.erase(lease);  // a thread planning to wake for it wakes, finds nothing, re-plans
}

void Renewer::pause_renewals_for_testing(bool paused) {
  std::lock_guard lock(mu_);
  paused_ = paused;
  ++renew_version_;
  renew_cv_.notify_all();
}

std::uint64_t Renewer::rounds() const {
  std::lock_guard lock(mu_);
  return rounds_;
}

void Renewer::renew_loop(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    Clock::time_point next = Clock::time_point::max();
    if (!paused_) {
      for (const auto& [_, e] : entries_) {
        if (e.lease->renew) next = std::min(next, e.next_renew);
      }
    }
    if (next > Clock::now()) {
      std::uint64_t seen = renew_version_;
      auto changed = [&] { return renew_version_ != seen; };
      renew_planned_ = next;
      if (next == Clock::time_point::max()) {
        renew_cv_.wait(lock, stop, changed);
      } else {
        renew_cv_.wait_until(lock, stop, next, changed);
      }
      renew_planned_ = Clock::time_point::min();  // awake: add() need not wake this thread
      continue;                                   // re-plan: entries may have changed
    }
    run_round(lock);
  }
}

void Renewer::run_round(std::unique_lock<std::mutex>& lock) {
  Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<LeaseState>> due;
  for (const auto& [_, e] : entries_) {
    if (e.lease->renew && e.next_renew <= now + e.lease->ttl / 6) due.push_back(e.lease);
  }
  std::vector<RenewItem> items;
  items.reserve(due.size());
  for (const auto& lease : due) {
    items.push_back(RenewItem{&lease->key, &lease->owner, lease->ttl,
                              lease->valid_until() - lost_guard(lease->ttl), &lease->backend_key});
  }
  ++rounds_;
  lock.unlock();
  const Clock::time_point sent_at = Clock::now();
  std::vector<RenewOutcome> outcomes = backend_.renew_all(items);
  const Clock::duration round_time = Clock::now() - sent_at;
  lock.lock();
  now = Clock::now();
  std::vector<std::shared_ptr<LeaseState>> lost;
  std::vector<std::shared_ptr<LeaseState>> unconfirmed;  // only filled when debug is logged
  std::uint64_t renewed = 0;
  std::uint64_t failed = 0;  // rejected or not confirmed
  for (std::size_t i = 0; i < due.size(); ++i) {
    auto it = entries_.find(due[i].get());
    if (it == entries_.end()) continue;  // released meanwhile
    LeaseState& lease = *due[i];
    const RenewOutcome& outcome = outcomes[i];
    if (outcome.kind == RenewOutcome::kRenewed && !lease.lost_source.stop_requested()) {
      ++renewed;
      lease.set_valid_until(outcome.valid_until);
      Clock::time_point sent = outcome.valid_until - lease.ttl;
      it->second.next_renew = std::max(sent + lease.ttl / 3, now);
    } else if (outcome.kind == RenewOutcome::kRejected || lease.lost_source.stop_requested()) {
      ++failed;
      lost.push_back(due[i]);
      entries_.erase(it);
    } else {
      ++failed;
      it->second.next_renew = now + retry_delay(lease.ttl);
      if (log_enabled(LogLevel::kDebug)) unconfirmed.push_back(due[i]);
    }
  }
  if (metrics_ != nullptr) metrics_->record_renew_round(round_time, renewed, failed);
  report_unlocked(lock, unconfirmed, lost, /*rejected=*/true);
}

void Renewer::report_unlocked(std::unique_lock<std::mutex>& lock,
                              const std::vector<std::shared_ptr<LeaseState>>& unconfirmed,
                              const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected) {
  if (unconfirmed.empty() && lost.empty()) return;
  lock.unlock();  // log sinks and lost() callbacks are user code: never run them under mu_
  for (const auto& lease : unconfirmed) {
    detail::log(LogLevel::kDebug, "renewal of '{}' (token {}) not confirmed; retrying in {}",
                lease->key.str(), lease->token.value(), format_duration(retry_delay(lease->ttl)));
  }
  for (const auto& lease : lost) {
    if (lease->lost_source.stop_requested()) continue;  // already released: not a loss
    if (metrics_ != nullptr) metrics_->record_loss();   // before lost(), so that observers see it
    lease->mark_lost();
    detail::log(LogLevel::kWarning, "lease on '{}' lost (token {}, owner {}): {}", lease->key.str(),
                lease->token.value(), lease->owner.short_hex(), loss_reason(*lease, rejected));
  }
  lock.lock();
}

void Renewer::watchdog_loop(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    std::vector<std::shared_ptr<LeaseState>> lost;
    for (auto it = entries_.begin(); it != entries_.end();) {
      const LeaseState& lease = *it->second.lease;
      Clock::time_point fire_at = lease.valid_until() - lost_guard(lease.ttl);
      if (fire_at <= now) {
        lost.push_back(it->second.lease);
        it = entries_.erase(it);
        continue;
      }
      next = std::min(next, fire_at);
      ++it;
    }
    if (!lost.empty()) {
      report_unlocked(lock, {}, lost, /*rejected=*/false);
      continue;
    }
    std::uint64_t seen = watchdog_version_;
    auto changed = [&] { return watchdog_version_ != seen; };
    watchdog_planned_ = next;
    if (next == Clock::time_point::max()) {
      watchdog_cv_.wait(lock, stop, changed);
    } else {
      watchdog_cv_.wait_until(lock, stop, next, changed);
    }
    watchdog_planned_ = Clock::time_point::min();
  }
}

}  // namespace fencelock::detail
