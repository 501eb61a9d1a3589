// Release notifications for the lease mode: one LISTEN connection per Client, its own thread.
//
// The release statement runs pg_notify('fencelock_release', name). The listener counts releases
// per watched key; a Watch taken before a try never misses a release after it. When the
// connection drops, the listener reconnects with backoff and wakes every waiter once to retry.
// Its connection has TCP keepalives (postgres_uri.h), so a listener cut off from its server
// notices within their bound instead of staying deaf.
// Through a pooler that does not keep sessions LISTEN cannot work (the server connection that
// ran it serves other clients next, and its notifications go to them): a disabled listener
// never connects, and its watches only time out (the waiters' timed fallback).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <memory>
#include <string>
#include <thread>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/wake_board.h"

namespace fencelock::detail::postgres {

class PgListener {
 public:
  // `enabled` false: never LISTEN (see above).
  PgListener(std::string conninfo, milliseconds connect_timeout, bool enabled = true);
  ~PgListener();

  // A watch on `key`. The first one starts the thread and waits (bounded by connect_timeout and
  // `deadline`) until the LISTEN is in place.
  std::unique_ptr<ReleaseWatch> watch(const std::string& key, Clock::time_point deadline);

 private:
  void run(std::stop_token stop);
  void set_state(bool listening);

  const std::string conninfo_;
  const milliseconds connect_timeout_;
  const bool enabled_;
  WakeBoard board_;  // releases by key name
  Mutex mu_;
  std::condition_variable_any ready_;
  bool listening_ FENCELOCK_GUARDED_BY(mu_) = false;
  bool tried_ FENCELOCK_GUARDED_BY(mu_) = false;  // one connection attempt finished
  // A watch was made while not listening, or a LISTEN connection was lost: releases may have
  // been missed, so the next LISTEN wakes every watcher (and only then: a wake-up for nothing is
  // a try for nothing).
  bool missed_ FENCELOCK_GUARDED_BY(mu_) = false;
  int wake_fd_ = -1;
  std::once_flag started_;
  std::jthread thread_;
};

}  // namespace fencelock::detail::postgres
