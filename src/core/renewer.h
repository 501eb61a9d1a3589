// Renewer: one scheduler per Client that keeps every held lease alive and signals loss.
//
// Two threads:
//  - the renewal thread renews, at ttl/3 after the last renewal was sent, every lease that is due,
//    together with every lease due within the next ttl/6 of its own TTL (so that leases fall into
//    step and one round is one backend call: one request per server, whatever the number of
//    leases);
//  - the watchdog thread does no I/O: it fires lost() on every lease whose validity is about to
//    end, so that a renewal stuck on a dead server can never delay the signal.
// A renewal the backend rejects (key gone or taken over) fires lost() at once.
//
// Work follows the leases that come due, never the leases held (the contract in docs/PROTOCOLS.md).
// Each schedule is a DeadlineHeap (core/deadline_heap.h) and each thread looks only at its earliest
// entries:
//  - the lost() schedule is guarded by watch_mu_, which the watchdog takes alone and every other
//    thread holds for one O(log n) step at a time: a renewal round of 100,000 leases never holds
//    up the watchdog;
//  - the renewal schedule belongs to the renewal thread, lock-free; add() and remove() post to
//    its inbox (inbox_mu_, O(1)), so they never wait for a round's bookkeeping either.
// Whoever takes a lease out of the lost() schedule owns its loss (the watchdog when its time
// came, the renewal thread on a rejection, remove() on a release), so a loss is reported once.
//
// Observability: each round's duration and per-lease outcome, and each loss, are recorded in the
// Metrics given to the constructor (if any). A loss is logged as a warning, a renewal that is not
// confirmed as debug (core/log_internal.h); the sink runs with no lock held.
//
// Thread-safety: add/remove may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/deadline_heap.h"
#include "core/lease_state.h"
#include "core/metrics.h"
#include "core/mutex.h"

namespace fencelock::detail {

class Renewer {
 public:
  // `metrics`: where rounds and losses are recorded; nullptr records nothing. Must outlive this.
  explicit Renewer(Backend& backend, Metrics* metrics = nullptr);
  ~Renewer();  // stops both threads; leases still registered are neither renewed nor signalled

  Renewer(const Renewer&) = delete;
  Renewer& operator=(const Renewer&) = delete;

  // Starts watching (and, if lease->renew, renewing) a freshly granted lease.
  void add(const std::shared_ptr<LeaseState>& lease);
  // Stops watching a lease (released or destroyed). No round chosen after this returns renews
  // it (rounds() counts every round chosen before).
  void remove(const LeaseState* lease);
  // The backend reports the lease's grant gone (Grant::gone): the watchdog fires its lost() now,
  // without waiting for its validity or a renewal. Nothing if it is not watched any more.
  void lose_now(const LeaseState* lease);

  // Test hook: while paused no renewal is sent (as if the process were stopped); the watchdog
  // keeps running, so paused leases are declared lost at their validity.
  void pause_renewals_for_testing(bool paused);

  // Renewal rounds sent so far (each is one backend renew_all call).
  std::uint64_t rounds() const;

  // Leases each thread has looked at so far, for tests of the contract in docs/PROTOCOLS.md: both
  // follow the leases that came due, whatever the number of leases held.
  struct Work {
    std::uint64_t watchdog = 0;  // leases whose lost() time came (fired, or found renewed)
    std::uint64_t renewal = 0;   // leases taken into a renewal round (or dropped there as lost)
    std::uint64_t watchdog_wakes = 0;  // times the watchdog thread woke (notified or timed out)
    std::uint64_t renewal_wakes = 0;   // likewise the renewal thread
  };
  Work work_for_testing() const;
  // Whether both threads sleep having seen every wake-up sent to them (changes posted without
  // one may wait in the inbox): a test's next step then finds them planned.
  bool asleep_for_testing() const;

  // How long before valid_until() the watchdog fires lost(): absorbs the scheduling delay of the
  // watchdog thread itself. ttl/10, clamped to [2 ms, 50 ms]. Leases renewed in one round come
  // due together and are fired earlier still, by four times what firing them all takes (at most
  // ttl/4): lost() stays in time at any number of leases (docs/PROTOCOLS.md, "Watchdog").
  static milliseconds lost_guard(milliseconds ttl);

 private:
  // A change to the renewal schedule, posted by add() or remove().
  struct Posted {
    bool remove = false;
    std::shared_ptr<LeaseState> lease;
    Clock::time_point next_renew{};  // add only
  };
  // Past this many posted changes, add() and remove() wake the renewal thread to apply them, so
  // that removed leases are not kept long.
  static constexpr std::size_t kInboxWake = 1024;

  void start_threads();
  void renew_loop(std::stop_token stop);
  void watchdog_loop(std::stop_token stop);
  void run_round();
  // Renewal thread only: applies posted changes to the renewal schedule; returns the earliest
  // renewal time among the leases added (released ones included), or max() if none.
  Clock::time_point apply(std::vector<Posted>& posted);
  // Renewal thread only: queues a renewing lease for its renewal at lease->next_renew.
  void schedule_renewal(const std::shared_ptr<LeaseState>& lease);
  // Logs the leases whose renewal was not confirmed. REQUIRES: no lock held (the sink is user
  // code).
  void log_unconfirmed(const std::vector<std::shared_ptr<LeaseState>>& unconfirmed)
      FENCELOCK_EXCLUDES(inbox_mu_, watch_mu_);
  // Fires lost() on `lost` (`rejected`: their renewal was rejected, otherwise their validity
  // ran out), then logs them. REQUIRES: no lock held (lost() callbacks and log sinks are user
  // code).
  void report_losses(const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected)
      FENCELOCK_EXCLUDES(inbox_mu_, watch_mu_);
  // Fires lost() on every lease of `lost` not released already (recording each loss); returns
  // how many. REQUIRES: no lock held.
  std::size_t fire_losses(const std::vector<std::shared_ptr<LeaseState>>& lost)
      FENCELOCK_EXCLUDES(inbox_mu_, watch_mu_);
  // Runs the on_lost() callbacks of `lost` (after fire_losses: every lost() of a batch fires
  // before any callback runs). REQUIRES: no lock held.
  void run_lost_callbacks(const std::vector<std::shared_ptr<LeaseState>>& lost)
      FENCELOCK_EXCLUDES(inbox_mu_, watch_mu_);
  // One warning per lost lease, the first kLossesLogged of them, then one line for the rest.
  // REQUIRES: no lock held.
  void log_losses(const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected)
      FENCELOCK_EXCLUDES(inbox_mu_, watch_mu_);
  // How much earlier a lease renewed in a round of `leases` is fired: four times what firing
  // them all costs (fire_cost_ns_: a margin for a busy machine), at most a quarter of its TTL.
  Clock::duration fire_lead(std::size_t leases, milliseconds ttl) const;
  // Folds a measurement into fire_cost_ns_: `spent` for `leases` leases (at least 64, else
  // ignored).
  void note_fire_cost(Clock::duration spent, std::size_t leases);

  Backend& backend_;
  Metrics* const metrics_;

  // The renewal thread's inbox, and what add() reads to decide whether to wake that thread.
  mutable Mutex inbox_mu_;
  std::condition_variable_any renew_cv_;
  std::vector<Posted> inbox_ FENCELOCK_GUARDED_BY(inbox_mu_);
  bool paused_ FENCELOCK_GUARDED_BY(inbox_mu_) = false;
  std::uint64_t rounds_ FENCELOCK_GUARDED_BY(inbox_mu_) = 0;
  std::uint64_t renewal_work_ FENCELOCK_GUARDED_BY(inbox_mu_) = 0;
  Clock::time_point renew_planned_ FENCELOCK_GUARDED_BY(inbox_mu_) = Clock::time_point::min();
  std::uint64_t renew_version_ FENCELOCK_GUARDED_BY(inbox_mu_) = 0;
  std::uint64_t renew_seen_ FENCELOCK_GUARDED_BY(inbox_mu_) = 0;  // the version it slept on
  std::uint64_t renew_wakes_ FENCELOCK_GUARDED_BY(inbox_mu_) = 0;

  // The renewal schedule: renewing leases by next_renew (when a round must start) and by
  // next_renew - ttl/6 (from when a lease may join a round). A lease in the round in flight is
  // in neither. Renewal thread only.
  DeadlineHeap<LeaseState, &LeaseState::due_slot> due_;
  DeadlineHeap<LeaseState, &LeaseState::join_slot> joinable_;

  // The lost() schedule: every watched lease by valid_until - lost_guard. Lock order: never
  // take inbox_mu_ while holding watch_mu_, and never drop a lease's last reference while holding
  // watch_mu_ (its gone_watch destructor may wait for a lose_now() that waits for watch_mu_).
  mutable Mutex watch_mu_;
  std::condition_variable_any watchdog_cv_;
  DeadlineHeap<LeaseState, &LeaseState::fire_slot> fire_ FENCELOCK_GUARDED_BY(watch_mu_);
  std::uint64_t watchdog_work_ FENCELOCK_GUARDED_BY(watch_mu_) = 0;
  Clock::time_point watchdog_planned_ FENCELOCK_GUARDED_BY(watch_mu_) = Clock::time_point::min();
  std::uint64_t watchdog_version_ FENCELOCK_GUARDED_BY(watch_mu_) = 0;
  std::uint64_t watchdog_seen_ FENCELOCK_GUARDED_BY(watch_mu_) = 0;  // the version it slept on
  std::uint64_t watchdog_wakes_ FENCELOCK_GUARDED_BY(watch_mu_) = 0;
  // The earliest fire time of the leases added since the watchdog last planned: with nothing to
  // watch it stays planned until then (as the renewal thread does, renew_loop).
  Clock::time_point watchdog_linger_ FENCELOCK_GUARDED_BY(watch_mu_) = Clock::time_point::max();

  // What firing one lost lease costs (nanoseconds), measured on every batch the watchdog fires
  // and every renewal round's bookkeeping; 2 us until measured.
  std::atomic<std::int64_t> fire_cost_ns_{2000};

  std::once_flag started_;  // the threads start with the first add()
  std::jthread renew_thread_;
  std::jthread watchdog_thread_;
};

}  // namespace fencelock::detail
