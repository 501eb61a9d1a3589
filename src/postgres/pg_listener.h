// Release notifications for the lease mode: one LISTEN connection per Client, its own thread.
//
// The release statement runs pg_notify('fencelock_release', name). The listener counts releases
// per watched key; a Watch taken before a try never misses a release after it. When the
// connection drops, the listener reconnects with backoff and wakes every waiter once to retry.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/backend.h"

namespace fencelock::detail::postgres {

class PgListener {
 public:
  PgListener(std::string conninfo, milliseconds connect_timeout);
  ~PgListener();

  // A watch on `key`. The first one starts the thread and waits (bounded by connect_timeout)
  // until the LISTEN is in place.
  std::unique_ptr<ReleaseWatch> watch(const std::string& key);

 private:
  friend class ListenerWatch;
  void run(std::stop_token stop);
  void forget(const std::string& key);
  bool wait_release(const std::string& key, std::uint64_t& seen, Clock::time_point until,
                    std::stop_token stop);
  std::uint64_t events_for(const std::string& key) const;  // REQUIRES: mu_ held

  const std::string conninfo_;
  const milliseconds connect_timeout_;
  mutable std::mutex mu_;
  std::condition_variable_any changed_;
  std::map<std::string, std::pair<int, std::uint64_t>> keys_;  // GUARDED_BY(mu_): watchers, releases
  bool listening_ = false;                                      // GUARDED_BY(mu_)
  bool tried_ = false;                                          // GUARDED_BY(mu_)
  std::uint64_t reconnects_ = 0;                                // GUARDED_BY(mu_)
  int wake_fd_ = -1;
  std::once_flag started_;
  std::jthread thread_;
};

}  // namespace fencelock::detail::postgres
