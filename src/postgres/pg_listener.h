// Release notifications for the lease mode: one LISTEN connection per Client, its own thread.
//
// The release statement runs pg_notify('fencelock_release', name). The listener counts releases
// per watched key; a Watch taken before a try never misses a release after it. When the
// connection drops, the listener reconnects with backoff and wakes every waiter once to retry.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/backend.h"
#include "core/wake_board.h"

namespace fencelock::detail::postgres {

class PgListener {
 public:
  PgListener(std::string conninfo, milliseconds connect_timeout);
  ~PgListener();

  // A watch on `key`. The first one starts the thread and waits (bounded by connect_timeout)
  // until the LISTEN is in place.
  std::unique_ptr<ReleaseWatch> watch(const std::string& key);

 private:
  void run(std::stop_token stop);
  void set_state(bool listening);

  const std::string conninfo_;
  const milliseconds connect_timeout_;
  WakeBoard board_;  // releases by key name
  std::mutex mu_;
  std::condition_variable ready_;
  bool listening_ = false;  // GUARDED_BY(mu_)
  bool tried_ = false;      // GUARDED_BY(mu_): one connection attempt finished
  int wake_fd_ = -1;
  std::once_flag started_;
  std::jthread thread_;
};

}  // namespace fencelock::detail::postgres
