// Renewer: one scheduler per Client that keeps every held lease alive and signals loss.
//
// Two threads, one mutex:
//  - the renewal thread renews, at ttl/3 after the last renewal was sent, every lease that is due,
//    together with every lease due within the next ttl/6 (so that leases fall into step and one
//    round is one backend call: one request per server, whatever the number of leases);
//  - the watchdog thread does no I/O: it fires lost() on every lease whose validity is about to
//    end, so that a renewal stuck on a dead server can never delay the signal.
// A renewal the backend rejects (key gone or taken over) fires lost() at once.
//
// Observability: each round's duration and per-lease outcome, and each loss, are recorded in the
// Metrics given to the constructor (if any). A loss is logged as a warning, a renewal that is not
// confirmed as debug (core/log_internal.h); the sink runs outside mu_.
//
// Thread-safety: add/remove may be called from any thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/lease_state.h"
#include "core/metrics.h"

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
  // Stops watching a lease (released or destroyed).
  void remove(const LeaseState* lease);

  // Test hook: while paused no renewal is sent (as if the process were stopped); the watchdog
  // keeps running, so paused leases are declared lost at their validity.
  void pause_renewals_for_testing(bool paused);

  // Renewal rounds sent so far (each is one backend renew_all call).
  std::uint64_t rounds() const;

  // How long before valid_until() the watchdog fires lost(): absorbs the scheduling delay of the
  // watchdog thread itself. ttl/10, clamped to [2 ms, 50 ms].
  static milliseconds lost_guard(milliseconds ttl);

 private:
  struct Entry {
    std::shared_ptr<LeaseState> lease;
    Clock::time_point next_renew;
  };

  void renew_loop(std::stop_token stop);
  void watchdog_loop(std::stop_token stop);
  void run_round(std::unique_lock<std::mutex>& lock);
  // Logs the leases whose renewal was not confirmed and fires lost() on `lost` (`rejected`: their
  // renewal was rejected, otherwise their validity ran out), with mu_ released meanwhile.
  void report_unlocked(std::unique_lock<std::mutex>& lock,
                       const std::vector<std::shared_ptr<LeaseState>>& unconfirmed,
                       const std::vector<std::shared_ptr<LeaseState>>& lost, bool rejected);

  Backend& backend_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable_any renew_cv_;
  std::condition_variable_any watchdog_cv_;
  std::unordered_map<const LeaseState*, Entry> entries_;  // GUARDED_BY(mu_)
  bool paused_ = false;                                   // GUARDED_BY(mu_)
  std::uint64_t rounds_ = 0;                              // GUARDED_BY(mu_)
  // Each thread's planned wake-up time (min while awake) and a version bumped to wake it early.
  Clock::time_point renew_planned_ = Clock::time_point::min();     // GUARDED_BY(mu_)
  Clock::time_point watchdog_planned_ = Clock::time_point::min();  // GUARDED_BY(mu_)
  std::uint64_t renew_version_ = 0;                                // GUARDED_BY(mu_)
  std::uint64_t watchdog_version_ = 0;                             // GUARDED_BY(mu_)
  std::jthread renew_thread_;
  std::jthread watchdog_thread_;
};

}  // namespace fencelock::detail
