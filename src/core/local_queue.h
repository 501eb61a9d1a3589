// LocalQueue: per-key FIFO of the threads of one process that want the same key.
//
// Only the head of a key's queue talks to the backend, so N local waiters on a key cost one
// remote waiter. A Ticket is the place in line; destroying it leaves the line and wakes the next.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <stop_token>
#include <string>

#include "core/mutex.h"
#include "fencelock/status.h"

namespace fencelock::detail {

class LocalQueue {
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
    Ticket(LocalQueue* queue, std::string key, std::list<int>::iterator place, bool waited)
        : queue_(queue), key_(std::move(key)), place_(place), waited_(waited) {}
    LocalQueue* queue_;
    std::string key_;
    std::list<int>::iterator place_;
    bool waited_;
  };

  // Joins the line for `key` and blocks until this caller is at its head. kLocked if `deadline`
  // passes first, kCancelled if `stop` fires first (the place in line is given up either way).
  Result<Ticket> enter(const std::string& key, std::chrono::steady_clock::time_point deadline,
                       std::stop_token stop);

  // Number of callers in line for `key` (for tests and metrics).
  std::size_t waiting(const std::string& key) const;

 private:
  struct Line {
    std::list<int> order;  // one element per caller; the head is served
    std::condition_variable_any changed;
  };
  void leave(const std::string& key, std::list<int>::iterator place);

  mutable Mutex mu_;
  std::map<std::string, Line> lines_ FENCELOCK_GUARDED_BY(mu_);
};

}  // namespace fencelock::detail
