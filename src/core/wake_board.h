// WakeBoard: the waiting side of a backend's release events, shared by the drivers.
//
// A driver thread that hears "a release concerns id X" (Redis: a wake-up for owner X; PostgreSQL:
// a release of key X) calls notify(X); after a reconnect, when events may have been missed, it
// calls notify_all(). A watch made for X before a try sees every notify(X) and notify_all() that
// came after it, so a release between a failed try and the wait is never missed.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/mutex.h"

namespace fencelock::detail {

class WakeBoard {
 public:
  std::unique_ptr<ReleaseWatch> watch(const std::string& id);
  // Whether anyone watched `id` (nothing happens when nobody does).
  bool notify(const std::string& id);
  void notify_all();
  // Whether anyone watches anything.
  bool watching() const;

 private:
  friend class BoardWatch;
  struct Slot {
    int watchers = 0;
    std::uint64_t events = 0;
    std::map<std::uint64_t, std::function<void()>> wakers;  // ReleaseWatch::set_waker, by id
  };
  std::uint64_t events_for(const std::string& id) const FENCELOCK_REQUIRES(mu_);
  void forget(const std::string& id, std::uint64_t waker);
  std::uint64_t add_waker(const std::string& id, std::function<void()> wake);
  bool wait(const std::string& id, std::uint64_t& seen, Clock::time_point until,
            std::stop_token stop);

  mutable Mutex mu_;
  std::condition_variable_any changed_;
  std::map<std::string, Slot> slots_ FENCELOCK_GUARDED_BY(mu_);
  std::uint64_t broadcasts_ FENCELOCK_GUARDED_BY(mu_) = 0;
  std::uint64_t next_waker_ FENCELOCK_GUARDED_BY(mu_) = 1;
};

}  // namespace fencelock::detail
