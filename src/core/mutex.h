// The mutex and scoped locks of fencelock's shared state: std::mutex with the capability
// annotations of core/thread_annotations.h, so clang's -Wthread-safety checks every
// FENCELOCK_GUARDED_BY member. Wait on a condition with std::condition_variable_any and a
// MutexLock (it is BasicLockable); a wait predicate that reads guarded state is a lambda marked
// FENCELOCK_REQUIRES(mu) (the wait calls it with the lock held).
#pragma once

#include <mutex>

#include "core/thread_annotations.h"

namespace fencelock::detail {

class FENCELOCK_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FENCELOCK_ACQUIRE() { mu_.lock(); }
  void unlock() FENCELOCK_RELEASE() { mu_.unlock(); }
  bool try_lock() FENCELOCK_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex where it cannot see it (a callback the
  // holder runs); checks nothing at run time.
  void assert_held() const FENCELOCK_ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, like std::unique_lock: unlock() and lock() in
// between are allowed (a condition wait does both), and the destructor unlocks only if held.
class FENCELOCK_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FENCELOCK_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() FENCELOCK_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() FENCELOCK_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() FENCELOCK_RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace fencelock::detail
