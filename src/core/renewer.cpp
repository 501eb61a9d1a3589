#include "core/renewer.h"

#include <algorithm>
#include <exception>
#include <string_view>
#include <vector>

#include "core/duration.h"
#include "core/log_internal.h"
#include "core/thread_name.h"

namespace fencelock::detail {
namespace {

// How long to wait before retrying a renewal whose outcome was unknown.
milliseconds retry_delay(milliseconds ttl) {
  return std::clamp(ttl / 10, milliseconds(5), milliseconds(500));
}

// Why a lease was lost, for the warning.
std::string_view loss_reason(const LeaseState& lease, bool rejected) {
  if (lease.gone.load(std::memory_order_relaxed))
    return "the backend reported its lock gone (the connection holding it closed)";
  if (rejected) return "its renewal was rejected (the key expired or has another owner)";
  if (!lease.renew) return "its validity ended (renewal is off)";
  return "no renewal was confirmed before its validity ended";
}

// When the watchdog fires lost() unless the lease is renewed first.
Clock::time_point fire_time(const LeaseState& lease) {
  if (lease.gone.load(std::memory_order_relaxed)) return Clock::time_point::min();
  return lease.valid_until() - Renewer::lost_guard(lease.ttl) - lease.fire_lead;
}

// The watchdog takes due leases out of its schedule and fires them this many at a time, so that
// add() and remove() never wait for a whole batch of 100,000 (each takes watch_mu_ briefly).
constexpr std::size_t kFireChunk = 1024;
// A batch of losses names this many leases one by one in the log, then sums up the rest.
constexpr std::size_t kLossesLogged = 16;
// Batches and rounds of fewer leases do not change the estimated cost of firing one.
constexpr std::size_t kFireCostSample = 64;

}  // namespace

milliseconds Renewer::lost_guard(milliseconds ttl) {
  return std::clamp(ttl / 10, milliseconds(2), milliseconds(50));
}

void Renewer::note_fire_cost(Clock::duration spent, std::size_t leases) {
  // A few leases say little: one preemption of the thread would pass for a slow lease, and
  // the lead only matters for batches of many.
  if (leases < kFireCostSample) return;
  const std::int64_t per_lease =
      std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count() /
      static_cast<std::int64_t>(leases);
  // Rises fast (at most fourfold a sample), falls slowly: one quick batch must not undo the lead
  // a slow one showed, nor one slow sample inflate it for long.
  std::int64_t old = fire_cost_ns_.load(std::memory_order_relaxed);
  const std::int64_t next =
      per_lease > old ? std::min(per_lease, 4 * old) : (7 * old + per_lease) / 8;
  fire_cost_ns_.compare_exchange_strong(old, std::max<std::int64_t>(next, 100),
                                        std::memory_order_relaxed);
}

Clock::duration Renewer::fire_lead(std::size_t leases, milliseconds ttl) const {
  const auto per_lease = std::chrono::nanoseconds(fire_cost_ns_.load(std::memory_order_relaxed));
  const Clock::duration lead = 4 * per_lease * static_cast<std::int64_t>(leases);
  return std::min<Clock::duration>(lead, ttl / 4);
}

Renewer::Renewer(Backend& backend, Metrics* metrics) : backend_(backend), metrics_(metrics) {}

// On the first lease: a Client that only waits, or holds nothing yet, runs no renewal threads.
void Renewer::start_threads() {
  std::call_once(started_, [this] {
    renew_thread_ = std::jthread([this](std::stop_token stop) {
      name_this_thread("fl-renew");
      renew_loop(stop);
    });
    watchdog_thread_ = std::jthread([this](std::stop_token stop) {
      name_this_thread("fl-watchdog");
      watchdog_loop(stop);
    });
  });
}

Renewer::~Renewer() {
  renew_thread_.request_stop();
  watchdog_thread_.request_stop();
  renew_cv_.notify_all();
  watchdog_cv_.notify_all();
}

void Renewer::add(const std::shared_ptr<LeaseState>& lease) {
  start_threads();
  {
    MutexLock watch(watch_mu_);
    const Clock::time_point fire_at = fire_time(*lease);
    fire_.schedule(lease, fire_at);
    watchdog_linger_ = std::min(watchdog_linger_, fire_at);
    if (fire_at < watchdog_planned_) {
      ++watchdog_version_;
      watchdog_cv_.notify_all();
    }
  }
  if (!lease->renew) return;
  Clock::time_point start = lease->valid_until() - lease->ttl;  // conservative send-time estimate
  const Clock::time_point next_renew = std::max(start + lease->ttl / 3, Clock::now());
  MutexLock lock(inbox_mu_);
  inbox_.push_back(Posted{false, lease, next_renew});
  // Wake the renewal thread only when the new lease is due before the time it already plans to
  // wake at, or its inbox is full: the common case (a lease like the others) costs no context
  // switch on the acquire path.
  const bool asleep = renew_planned_ != Clock::time_point::min();
  if (next_renew < renew_planned_ || (asleep && inbox_.size() >= kInboxWake)) {
    ++renew_version_;
    renew_cv_.notify_all();
  }
}

void Renewer::remove(const LeaseState* lease) {
  // Every LeaseState is created mutable (make_shared); the pointer only names the lease.
  LeaseState& state = const_cast<LeaseState&>(*lease);
  std::shared_ptr<LeaseState> held;
  {
    MutexLock watch(watch_mu_);
    held = fire_.remove(state);  // a thread planning to wake for it wakes, finds nothing, re-plans
  }
  // Not watched any more (declared lost, or dropped after a rejection): the renewal thread drops
  // it when it meets it, or has already; a lost lease is never renewed again.
  if (held == nullptr || !state.renew) return;
  MutexLock lock(inbox_mu_);
  inbox_.push_back(Posted{true, std::move(held), {}});
  if (renew_planned_ != Clock::time_point::min() && inbox_.size() >= kInboxWake) {
    ++renew_version_;
    renew_cv_.notify_all();
  }
}

void Renewer::lose_now(const LeaseState* lease) {
  LeaseState& state = const_cast<LeaseState&>(*lease);  // as in remove()
  MutexLock watch(watch_mu_);
  std::shared_ptr<LeaseState> held = fire_.remove(state);
  if (held == nullptr) return;  // released, or its loss reported already
  held->gone.store(true, std::memory_order_relaxed);
  fire_.schedule(held, Clock::time_point::min());
  ++watchdog_version_;
  watchdog_cv_.notify_all();
}

void Renewer::pause_renewals_for_testing(bool paused) {
  MutexLock lock(inbox_mu_);
  paused_ = paused;
  ++renew_version_;
  renew_cv_.notify_all();
}

std::uint64_t Renewer::rounds() const {
  MutexLock lock(inbox_mu_);
  return rounds_;
}

Renewer::Work Renewer::work_for_testing() const {
  MutexLock lock(inbox_mu_);
  MutexLock watch(watch_mu_);
  return Work{watchdog_work_, renewal_work_, watchdog_wakes_, renew_wakes_};
}

bool Renewer::asleep_for_testing() const {
  MutexLock lock(inbox_mu_);
  MutexLock watch(watch_mu_);
  return renew_planned_ != Clock::time_point::min() && renew_seen_ == renew_version_ &&
         watchdog_planned_ != Clock::time_point::min() && watchdog_seen_ == watchdog_version_;
}

void Renewer::schedule_renewal(const std::shared_ptr<LeaseState>& lease) {
  due_.schedule(lease, lease->next_renew);
  joinable_.schedule(lease, lease->next_renew - lease->ttl / 6);
}

Clock::time_point Renewer::apply(std::vector<Posted>& posted) {
  Clock::time_point earliest = Clock::time_point::max();
  for (Posted& change : posted) {
    LeaseState& lease = *change.lease;
    if (change.remove) {
      lease.renewal_removed = true;  // keeps it out of the round in flight, if it is in one
      due_.remove(lease);
      joinable_.remove(lease);
      continue;
    }
    earliest = std::min(earliest, change.next_renew);
    if (!lease.renewal_removed) {
      lease.next_renew = change.next_renew;
      schedule_renewal(change.lease);
    }
  }
  posted.clear();
  return earliest;
}

void Renewer::renew_loop(std::stop_token stop) {
  std::vector<Posted> posted;
  // The earliest renewal time of the leases added since this thread last planned (see below).
  Clock::time_point linger = Clock::time_point::max();
  while (!stop.stop_requested()) {
    // Outside inbox_mu_: add() and remove() never wait for it.
    linger = std::min(linger, apply(posted));
    MutexLock lock(inbox_mu_);
    if (!inbox_.empty()) {
      posted.swap(inbox_);
      continue;
    }
    Clock::time_point next = Clock::time_point::max();
    if (!paused_ && !due_.empty()) next = due_.earliest();
    // Nothing to renew, but leases came (and went, released) since the last plan: stay planned
    // until the earliest renewal time they had instead of sleeping without a timeout, so that
    // add() of the next lease, due later, need not wake this thread (a loop of short holds
    // would otherwise cost a context switch per acquisition). add() still wakes it for a lease
    // due sooner; a wake that finds no change sleeps without a timeout.
    if (next == Clock::time_point::max() && !paused_ && linger > Clock::now()) next = linger;
    linger = Clock::time_point::max();
    if (next > Clock::now()) {
      renew_seen_ = renew_version_;
      auto changed = [&]() FENCELOCK_REQUIRES(inbox_mu_) { return renew_version_ != renew_seen_; };
      renew_planned_ = next;
      if (next == Clock::time_point::max()) {
        renew_cv_.wait(lock, stop, changed);
      } else {
        renew_cv_.wait_until(lock, stop, next, changed);
      }
      ++renew_wakes_;
      renew_planned_ = Clock::time_point::min();  // awake: add() need not wake this thread
      continue;                                   // re-plan: the inbox may hold changes
    }
    lock.unlock();
    run_round();
  }
}

void Renewer::run_round() {
  Clock::time_point now = Clock::now();
  // Every lease within its window joins, not only those whose renewal time came: take them from
  // joinable_, and out of due_ too; the outcome puts each back (or drops it).
  std::vector<std::shared_ptr<LeaseState>> due;
  std::uint64_t examined = 0;
  while (!joinable_.empty() && joinable_.earliest() <= now) {
    std::shared_ptr<LeaseState> lease = joinable_.pop();
    due_.remove(*lease);
    ++examined;
    // Declared lost (the watchdog reports it) or being released: never renewed again.
    if (lease->lost_source.stop_requested()) continue;
    lease->in_round = true;
    due.push_back(std::move(lease));
  }
  // The round is chosen here: a removal posted before keeps its lease out of it; one posted
  // after finds the round counted in rounds() (remove()'s promise).
  std::size_t live = due.size();
  std::vector<Posted> late;
  {
    MutexLock lock(inbox_mu_);
    for (const Posted& change : inbox_) {
      if (change.remove && change.lease->in_round) --live;
    }
    late.swap(inbox_);
    renewal_work_ += examined;
    if (live > 0) ++rounds_;
  }
  apply(late);
  std::vector<std::shared_ptr<LeaseState>> sent;
  std::vector<RenewItem> items;
  sent.reserve(live);
  items.reserve(live);
  for (auto& lease : due) {
    lease->in_round = false;
    if (lease->renewal_removed) continue;
    items.push_back(
        RenewItem{&lease->key, &lease->owner, lease->ttl, fire_time(*lease), &lease->backend_key});
    sent.push_back(std::move(lease));
  }
  if (sent.empty()) return;
  const Clock::time_point sent_at = Clock::now();
  // No confirmation is of use after the last lease of the round would be declared lost.
  Clock::time_point round_deadline = sent_at;
  for (const RenewItem& item : items) round_deadline = std::max(round_deadline, item.renew_by);
  std::vector<RenewOutcome> outcomes;
  try {
    outcomes = backend_.renew_all(items, round_deadline);
  } catch (const std::exception& error) {
    // A backend that fails in a way it did not report must not stop renewal and watching with
    // it (an exception here would end the process): the leases it could not renew are lost now.
    detail::log(LogLevel::kError, "renewal of {} lease(s) failed: {}; they are lost", items.size(),
                error.what());
    outcomes.clear();
  }
  if (outcomes.size() != items.size()) {
    outcomes.assign(items.size(), RenewOutcome{RenewOutcome::kRejected, {}});
  }
  const Clock::duration round_time = Clock::now() - sent_at;
  now = Clock::now();
  // The leases renewed together come due together: the watchdog starts on them early enough to
  // fire them all by their validity, whatever their number (the contract in docs/PROTOCOLS.md).
  std::size_t renewing = 0;
  for (const RenewOutcome& outcome : outcomes) renewing += outcome.kind == RenewOutcome::kRenewed;
  const Clock::time_point bookkeeping_start = now;
  std::vector<std::shared_ptr<LeaseState>> lost;
  std::vector<std::shared_ptr<LeaseState>> unconfirmed;  // only filled when debug is logged
  std::uint64_t renewed = 0;
  std::uint64_t failed = 0;  // rejected or not confirmed
  for (std::size_t i = 0; i < sent.size(); ++i) {
    LeaseState& lease = *sent[i];
    const RenewOutcome& outcome = outcomes[i];
    bool gone = outcome.kind == RenewOutcome::kRejected || lease.lost_source.stop_requested();
    bool watched = false;  // false: released meanwhile, or declared lost by the watchdog
    {
      MutexLock watch(watch_mu_);
      watched = fire_.contains(lease);
      // Reported gone (lose_now, under watch_mu_) while this round was out: lost now, whatever
      // the answer; a renewal that succeeded must not extend a grant the backend saw end.
      gone = gone || lease.gone.load(std::memory_order_relaxed);
      if (watched && gone) {
        fire_.remove(lease);  // its loss is this thread's to report
      } else if (watched && outcome.kind == RenewOutcome::kRenewed) {
        lease.set_valid_until(outcome.valid_until);
        lease.fire_lead = fire_lead(renewing, lease.ttl);
        fire_.schedule(sent[i], fire_time(lease));
      }
    }
    if (!watched) continue;  // dropped: remove() or the watchdog took it out
    if (gone) {
      ++failed;
      lost.push_back(sent[i]);
    } else if (outcome.kind == RenewOutcome::kRenewed) {
      ++renewed;
      Clock::time_point renewal_sent = outcome.valid_until - lease.ttl;
      lease.next_renew = std::max(renewal_sent + lease.ttl / 3, now);
      schedule_renewal(sent[i]);
    } else {
      ++failed;
      lease.next_renew = now + retry_delay(lease.ttl);
      schedule_renewal(sent[i]);
      if (log_enabled(LogLevel::kDebug)) unconfirmed.push_back(sent[i]);
    }
  }
  // Putting a lease back into the lost() schedule costs about what taking it out and firing it
  // does: until the watchdog has measured a batch of its own, this is the estimate.
  note_fire_cost(Clock::now() - bookkeeping_start, sent.size());
  if (metrics_ != nullptr) metrics_->record_renew_round(round_time, renewed, failed);
  log_unconfirmed(unconfirmed);
  report_losses(lost, /*rejected=*/true);
}

void Renewer::log_unconfirmed(const std::vector<std::shared_ptr<LeaseState>>& unconfirmed) {
  for (const auto& lease : unconfirmed) {
    detail::log(LogLevel::kDebug, "renewal of '{}' (token {}) not confirmed; retrying in {}",
                lease->key.str(), lease->token.value(), format_duration(retry_delay(lease->ttl)));
  }
}

std::size_t Renewer::fire_losses(const std::vector<std::shared_ptr<LeaseState>>& lost) {
  std::size_t fired = 0;
  for (const auto& lease : lost) {
    if (lease->lost_source.stop_requested()) continue;  // already released: not a loss
    if (metrics_ != nullptr) metrics_->record_loss();   // before lost(), so that observers see it
    lease->lost_source.request_stop();
    ++fired;
  }
  return fired;
}

void Renewer::run_lost_callbacks(const std::vector<std::shared_ptr<LeaseState>>& lost) {
  for (const auto& lease : lost) lease->callbacks_source.request_stop();
}

void Renewer::log_losses(const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected) {
  std::size_t logged = 0;
  for (const auto& lease : lost) {
    if (logged == kLossesLogged) break;
    ++logged;
    detail::log(LogLevel::kWarning, "lease on '{}' lost (token {}, owner {}): {}", lease->key.str(),
                lease->token.value(), lease->owner.short_hex(), loss_reason(*lease, rejected));
  }
  if (lost.size() > logged) {
    detail::log(LogLevel::kWarning, "{} more leases lost at the same time: {}",
                lost.size() - logged, loss_reason(*lost[logged], rejected));
  }
}

void Renewer::report_losses(const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected) {
  // Every lost() first, then the log: a sink's time must not delay the signals.
  std::vector<std::shared_ptr<LeaseState>> fired;
  for (const auto& lease : lost) {
    if (!lease->lost_source.stop_requested()) fired.push_back(lease);
  }
  fire_losses(fired);
  run_lost_callbacks(fired);
  log_losses(fired, rejected);
}

void Renewer::watchdog_loop(std::stop_token stop) {
  MutexLock lock(watch_mu_);
  // The leases fired since the watchdog last slept, for one log report when the batch is done.
  std::vector<std::shared_ptr<LeaseState>> batch;
  std::size_t batch_fired = 0;
  Clock::time_point batch_start{};
  while (!stop.stop_requested()) {
    const Clock::time_point now = Clock::now();
    if (batch.empty()) batch_start = now;
    std::vector<std::shared_ptr<LeaseState>> lost;
    while (!fire_.empty() && fire_.earliest() <= now && lost.size() < kFireChunk) {
      ++watchdog_work_;
      const Clock::time_point fire_at = fire_time(*fire_.top());
      if (fire_at > now) {  // its validity moved without the schedule (not done today): follow it
        fire_.schedule(fire_.top(), fire_at);
        continue;
      }
      lost.push_back(fire_.pop());  // its loss is this thread's to report
    }
    if (!lost.empty()) {
      lock.unlock();
      std::vector<std::shared_ptr<LeaseState>> fired;
      for (auto& lease : lost) {
        if (!lease->lost_source.stop_requested()) fired.push_back(std::move(lease));
      }
      batch_fired += fire_losses(fired);
      batch.insert(batch.end(), std::make_move_iterator(fired.begin()),
                   std::make_move_iterator(fired.end()));
      // Drop them unlocked: a lease's last reference may go here, and its destructor waits for
      // a Grant::gone callback that may be waiting for watch_mu_ (lose_now).
      lost.clear();
      lock.lock();
      continue;
    }
    if (!batch.empty()) {
      // What firing one lease costs (taking it out of the schedule included): the lead that
      // renewal rounds give the leases they renew together. Rises at once, falls slowly.
      // The time to take them out of the schedule (the loop above, under the lock) and signal
      // them; not their on_lost() callbacks, which run now, after every lost() of the batch.
      note_fire_cost(Clock::now() - batch_start, batch_fired);
      lock.unlock();
      run_lost_callbacks(batch);
      log_losses(batch, /*rejected=*/false);
      batch.clear();
      batch_fired = 0;
      lock.lock();
      continue;
    }
    watchdog_seen_ = watchdog_version_;
    auto changed = [&]() FENCELOCK_REQUIRES(watch_mu_) {
      return watchdog_version_ != watchdog_seen_;
    };
    watchdog_planned_ = fire_.empty() ? Clock::time_point::max() : fire_.earliest();
    // Nothing to watch, but leases came (and went) since the last plan: planned until the
    // earliest of their fire times, so that add() of the next one need not wake this thread.
    if (fire_.empty() && watchdog_linger_ > Clock::now()) watchdog_planned_ = watchdog_linger_;
    watchdog_linger_ = Clock::time_point::max();
    if (watchdog_planned_ == Clock::time_point::max()) {
      watchdog_cv_.wait(lock, stop, changed);
    } else {
      watchdog_cv_.wait_until(lock, stop, watchdog_planned_, changed);
    }
    ++watchdog_wakes_;
    watchdog_planned_ = Clock::time_point::min();
  }
}

}  // namespace fencelock::detail
