// LocalQueue: per-key FIFO of the threads of one process that want the same key.
//
// Only the head of a key's queue talks to the backend, so N local waiters on a key cost one
// remote waiter. A Ticket is the place in line; destroying it leaves the line and wakes the next.
// Blocking callers (enter) and asynchronous ones (enter_async) share one line per key.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <stop_token>
#include <string>

#include "core/mutex.h"
#include "fencelock/status.h"

namespace fencelock::detail {

class LocalQueue {
 private:
  struct Place {
    std::function<void()> on_head;  // an asynchronous caller's; empty for a blocking one
  };

 public:
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket();
    // Whether the caller had to wait behind another caller of this process.
    bool waited() const { return waited_; }

   private:
    friend class LocalQueue;
    Ticket(LocalQueue* queue, std::string key, std::list<Place>::iterator place, bool waited)
        : queue_(queue), key_(std::move(key)), place_(place), waited_(waited) {}
    LocalQueue* queue_;
    std::string key_;
    std::list<Place>::iterator place_;
    bool waited_;
  };

  // Joins the line for `key` and blocks until this caller is at its head. kLocked if `deadline`
  // passes first, kCancelled if `stop` fires first (the place in line is given up either way).
  Result<Ticket> enter(const std::string& key, std::chrono::steady_clock::time_point deadline,
                       std::stop_token stop);

  // Joins the line for `key` without blocking. When the caller is at the head at once, `at_head`
  // is set and `on_head` dropped; otherwise `on_head` runs once when it reaches the head (on the
  // thread whose Ticket left the line, after the queue's lock is released: keep it short), unless
  // the Ticket is destroyed first (giving up: a deadline, a stop).
  Ticket enter_async(const std::string& key, std::function<void()> on_head, bool& at_head);

  // Number of callers in line for `key` (for tests and metrics).
  std::size_t waiting(const std::string& key) const;

 private:
  struct Line {
    std::list<Place> order;  // one element per caller; the head is served
    std::condition_variable_any changed;
  };
  void leave(const std::string& key, std::list<Place>::iterator place);

  mutable Mutex mu_;
  std::map<std::string, Line> lines_ FENCELOCK_GUARDED_BY(mu_);
};

}  // namespace fencelock::detail
