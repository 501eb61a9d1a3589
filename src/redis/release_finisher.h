// Releases that a Redlock round left unfinished on some instance (docs/PROTOCOLS.md, "Late
// attempts").
//
// A release returns once a majority of the instances answered (a slow or silent minority must not
// hold it up). Where an instance did not answer, the attempt's acquire may still run there later:
// its release, with the tombstone that makes a late acquire do nothing, is still owed to it.
// - OwedReleases remembers, per lock, the values whose release some instance still owes, so that
//   the Client's next attempt on the same lock carries them (acquire.lua releases them first):
//   a Client taking a lock again is not refused by its own release still on the way.
// - ReleaseFinisher delivers each owed release in the background, on one thread of its own: all
//   that is due for an instance in one pipeline, again with a growing pause until the instance
//   answers or the tombstone's life has passed (after that a late acquire is not stopped anyway).
//   It also delivers a waiter's leave of the wait queue that an instance did not run, while the
//   place could last (kQueueHold).
//
// Thread-safety: every member may be called from any thread. ~ReleaseFinisher stops the thread
// (waiting for a try in progress) and tries every job left once more, all together within one
// per-try bound; what still fails is dropped (those instances' locks expire by their TTL). So a
// Client with releases owed to a silent instance takes up to twice io_timeout to destroy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "redis/connection.h"

namespace fencelock::detail::redis {

class OwedReleases {
 public:
  // At most this many values per lock (the oldest are dropped from the list, not from the
  // finisher) and this many locks (the least recently added first).
  static constexpr std::size_t kPerLock = 64;
  static constexpr std::size_t kMaxLocks = 100'000;

  // `instances` instances owe the release of `value` of `lock` until `until`.
  void add(const std::string& lock, const std::string& value, int instances,
           Clock::time_point until);
  // The values still owed for `lock` at `now`.
  std::vector<std::string> of(const std::string& lock, Clock::time_point now);
  // Every instance ran the releases of `values` (an attempt carried them): owed no longer.
  void settled(const std::string& lock, const std::vector<std::string>& values);
  // One instance ran the release of `value` (the finisher delivered it).
  void delivered(const std::string& lock, const std::string& value);

 private:
  struct Value {
    std::string value;
    int instances;
    Clock::time_point until;
  };
  Mutex mu_;
  // How many locks owe something: of() takes no lock while it is 0 (every acquisition asks).
  std::atomic<std::size_t> locks_{0};
  std::map<std::string, std::deque<Value>> owed_ FENCELOCK_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, Clock::time_point>> order_ FENCELOCK_GUARDED_BY(mu_);
};

class ReleaseFinisher {
 public:
  // `owed` (may be null) is told of every delivery. REQUIRES: it outlives this finisher.
  explicit ReleaseFinisher(OwedReleases* owed) : owed_(owed) {}
  ~ReleaseFinisher();
  ReleaseFinisher(const ReleaseFinisher&) = delete;
  ReleaseFinisher& operator=(const ReleaseFinisher&) = delete;

  // Sends `command` (the release script call of `value` of `lock`) to `instance` until it runs
  // there (a reply that is not an error reply) or `until` passes; each try is bounded by
  // `per_try`. REQUIRES: `instance` outlives this finisher.
  void finish(Instance* instance, std::string lock, std::string value, std::string command,
              Clock::time_point until, milliseconds per_try);

  // Jobs queued or running (for tests).
  std::size_t pending() const;

 private:
  struct Job {
    Instance* instance;
    std::string lock;
    std::string value;
    std::string command;
    Clock::time_point until;
    milliseconds per_try;
    Clock::time_point next_try;
    milliseconds pause{20};
  };
  void run(const std::stop_token& stop);
  // One try of `jobs`, pipelined per instance; returns those that got no reply.
  std::vector<Job> attempt(std::vector<Job> jobs, Clock::time_point deadline);

  OwedReleases* const owed_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Job> jobs_ FENCELOCK_GUARDED_BY(mu_);
  std::size_t running_ FENCELOCK_GUARDED_BY(mu_) = 0;
  std::uint64_t added_ FENCELOCK_GUARDED_BY(mu_) = 0;  // jobs ever added: wakes a timed wait
  std::jthread thread_ FENCELOCK_GUARDED_BY(mu_);      // started by the first job
};

}  // namespace fencelock::detail::redis
