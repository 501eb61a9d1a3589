// LeaseState: what a Lease, the Renewer and the ClientCore share about one grant.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/deadline_heap.h"
#include "core/mutex.h"
#include "fencelock/types.h"

namespace fencelock::detail {

class ClientCore;

struct LeaseState {
  LeaseState(LockKey k, OwnerId o, FencingToken t, milliseconds ttl_, bool renew_)
      : key(std::move(k)), owner(o), token(t), ttl(ttl_), renew(renew_) {}

  const LockKey key;
  const OwnerId owner;
  const FencingToken token;
  const milliseconds ttl;
  const bool renew;

  std::shared_ptr<ClientCore> core;  // keeps the backend alive while the lease lives
  std::string backend_key;           // Grant::backend_key

  Clock::time_point valid_until() const {
    return Clock::time_point(Clock::duration(valid_until_ticks.load(std::memory_order_acquire)));
  }
  void set_valid_until(Clock::time_point t) {
    valid_until_ticks.store(t.time_since_epoch().count(), std::memory_order_release);
  }
  // Fires lost() once, then the on_lost() callbacks; later calls do nothing.
  void mark_lost() {
    lost_source.request_stop();
    callbacks_source.request_stop();
  }

  std::atomic<Clock::rep> valid_until_ticks{0};
  // lost(): stop callbacks a program registers on the token itself run inline when it fires.
  std::stop_source lost_source;
  // Lease::on_lost() callbacks hang on this one, requested right after lost_source: the watchdog
  // signals every lease of a batch first and runs their callbacks after, so that the callbacks'
  // time never makes a later lease's signal late.
  std::stop_source callbacks_source;
  std::atomic<bool> released{false};
  // What Lease::release() or release_async() found, for a later call (release_async writes it
  // from an engine thread).
  Mutex release_mu;
  std::optional<Status> release_status FENCELOCK_GUARDED_BY(release_mu);

  Mutex callbacks_mu;
  std::vector<std::unique_ptr<std::stop_callback<std::function<void()>>>> callbacks
      FENCELOCK_GUARDED_BY(callbacks_mu);

  // The Renewer's bookkeeping (core/renewer.h), kept here so that a held lease costs it no map
  // entry: the lease's places in its schedules.
  // lost() schedule. Only touched with the Renewer's watch_mu_ held, which the analysis cannot
  // check here: a LeaseState does not know its Renewer (DeadlineHeap<...fire_slot> is guarded).
  std::size_t fire_slot = kNotInHeap;
  // How much earlier than valid_until() - lost_guard the watchdog fires this lease: the time it
  // takes to fire the leases renewed in the same round, which come due together. Same lock.
  Clock::duration fire_lead{0};
  Clock::time_point next_renew{};      // renewal thread only, from here down
  std::size_t due_slot = kNotInHeap;   // renewal schedule, by next_renew
  std::size_t join_slot = kNotInHeap;  // renewal schedule, by next_renew - ttl/6
  bool in_round = false;               // taken into the renewal round in flight
  bool renewal_removed = false;        // remove() reached the renewal thread
  // The backend reported the grant gone (Grant::gone). Set by Renewer::lose_now under its
  // watch_mu_, read without it by the renewal round (fire_time) and the loss report: atomic.
  std::atomic<bool> gone{false};

  // Calls Renewer::lose_now on Grant::gone. Declared last, so destroyed first: its destructor
  // waits for a callback running on another thread while every other member is still alive.
  std::optional<std::stop_callback<std::function<void()>>> gone_watch;
};

}  // namespace fencelock::detail
