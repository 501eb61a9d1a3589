// One torture worker process (`fencelock torture-worker`, started by `fencelock torture`):
// contends for the lock (--key, default "torture") and, while holding it, increments the shared
// register (ENTER = read, WRITE = write, EXIT). It tells the register when it starts, before each
// acquire() and what it was granted (the register's clock times them), and logs one JSON line per
// lease to its log file: the lease's valid_until(), whether and when lost() fired, and when it
// looked. The first of every 8 critical sections lasts 3/4 TTL
// between the read and the write, so the lease must be renewed while it is held. It does not stop
// its critical section when lost() fires: it plays a holder that was paused or ignores the signal,
// which the fence must absorb. SIGTERM ends it after the current cycle. With --extra-leases N it
// first takes N long leases on keys KEY-extra/ID/I (TTL 60 s, renewed by the same Client) and
// logs {"t":"extra","held":N}: the contended lease must still signal lost() in time. Between
// SIGUSR1 and SIGUSR2 (cancel-race) its waits end about when a holder releases: every other one
// times out after 1..3x the critical section, the others are cancelled after as long; each such
// end is logged {"t":"race"}.
#pragma once

#include <string>

namespace fencelock::torture {

struct WorkerArgs {
  std::string backend;
  std::string socket;  // the shared register
  std::string log;     // JSON lines, appended
  int id = 0;
  int ttl_ms = 2000;
  int critical_ms = 20;
  std::string key = "torture";
  int extra_leases = 0;  // long leases on other keys held for the whole run (many-leases)
  // "async": the contended lock is taken with acquire_async and released with release_async
  // (the worker waits for each completion); "blocking": acquire() and release().
  std::string api = "blocking";
};

int run_worker(const WorkerArgs& args);

}  // namespace fencelock::torture
