// Sessions for advisory mode: pooled connections that remember which advisory keys they hold.
//
// A session-level advisory lock belongs to the connection that took it, so the pool tracks, per
// connection, the keys it holds and whether a statement is running on it:
//   - a try (pg_try_advisory_lock) runs on any idle session that does not hold the key (never on
//     the one that does: advisory locks stack per session, which would grant a second holder);
//   - a blocking wait (pg_advisory_lock, in PostgreSQL's FIFO queue) runs on an idle session that
//     holds nothing, and keeps it busy until granted or given up: a wait must never delay the
//     release of a lock held by the same session;
//   - a release or health check runs on the session that holds the key, once it is idle.
// At most `max` sessions exist; a caller that needs one while all are busy or unsuitable waits
// for one until its deadline. A session whose connection broke (or that the backend gives up on)
// is closed for real (PQfinish, which ends its server backend and every lock it held) and
// dropped; leases on it are reported lost at once (Session::gone is each one's Grant::gone), not
// at their next health check.
// A release that finds the holding session busy past its deadline does not give up: it leaves
// the unlock with the session (defer_unlock), and whoever checks the session in next runs it
// before the session is idle again (checkin() hands the pending unlocks back); that release
// reports the lock as not yet released.
//
// Every session is marked when it opens (SessionSetup::mark: a random value in the custom setting
// fencelock.session), and every statement the advisory backend runs on it compares the mark
// first and does nothing on a server session without it: behind a pooler that does not keep
// sessions, a statement that lands in another server session is refused instead of taking or
// freeing a lock there (open_connection() refuses a new session that already had a mark).
// Opening a session is bounded by connect_timeout, not by the caller's deadline (a short wait
// still gets a session to ask the server on; the deadline bounds waiting for a busy pool).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <set>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "postgres/pg_connection.h"

namespace fencelock::detail::postgres {

struct Session {
  ConnPtr conn;
  std::string mark;             // its fencelock.session (hex; set once, before it is shared)
  std::uint32_t prepared = 0;   // statements prepared on it (execute_prepared; its user's)
  std::set<std::int64_t> held;  // advisory keys this session holds (pool mutex)
  bool busy = false;            // a statement runs on it (pool mutex)
  bool closed = false;          // its connection broke (pool mutex)
  // Unlocks left by releases that found the session busy: {key, shared} (pool mutex).
  std::vector<std::pair<std::int64_t, bool>> pending_unlocks;
  // Releases waiting for it in checkout_this (pool mutex). While any waits, checkout() does not
  // hand it out: tries prefer sessions that hold locks, and with many threads they took it again
  // and again until the release gave up ("held until then": 595 refusals in a 4 s run of
  // `fencelock bench --scenario throughput --busy 2` with 64 lockers).
  int releasers = 0;
  // Requested when the pool closes the session (after `closed` is set, with no pool lock held):
  // every lease on it fires lost() (Grant::gone).
  std::stop_source gone;
};

class SessionPool {
 public:
  enum class Need {
    kAny,     // any idle session (read-only statements)
    kNotKey,  // an idle session that does not hold `key`
    kEmpty,   // an idle session that holds nothing
  };

  SessionPool(std::string conninfo, std::size_t max, milliseconds connect_timeout)
      : conninfo_(std::move(conninfo)), max_(max), connect_timeout_(connect_timeout) {}

  // Marks a suitable session busy and returns it. kDeadlineExceeded when none became available
  // in time; kUnavailable/kUnauthenticated/... when a new connection could not be opened.
  Result<std::shared_ptr<Session>> checkout(Need need, std::int64_t key,
                                            Clock::time_point deadline);
  // Waits until `session` is idle and marks it busy, before any checkout() may take it.
  // kUnavailable when it is closed.
  Status checkout_this(const std::shared_ptr<Session>& session, Clock::time_point deadline);
  // Marks it idle again; `broken` closes and drops it. If releases left unlocks with the session
  // (and it is not broken), it stays checked out instead and they are returned: the caller runs
  // them and calls checkin() again.
  [[nodiscard]] std::vector<std::pair<std::int64_t, bool>> checkin(
      const std::shared_ptr<Session>& session, bool broken);
  // For a release whose session stayed busy: leaves the unlock of `key` with the session, to be
  // run by whoever checks it in next. False if the session is idle by now (check it out again);
  // true if the unlock was left, or the session is closed (its locks are gone).
  bool defer_unlock(const std::shared_ptr<Session>& session, std::int64_t key, bool shared);

  bool closed(const std::shared_ptr<Session>& session);
  // Releases now waiting in checkout_this for `session` (for tests).
  int releasers_waiting(const std::shared_ptr<Session>& session);
  // Sessions opened again after one broke or could not be opened (ReconnectCounter).
  std::uint64_t reconnects() const { return reconnects_.count(); }
  // Records that the session now holds / no longer holds `key` (REQUIRES: checked out by caller).
  void note_held(const std::shared_ptr<Session>& session, std::int64_t key, bool held);

 private:
  bool suitable(const Session& s, Need need, std::int64_t key) const;

  const std::string conninfo_;
  const std::size_t max_;
  const milliseconds connect_timeout_;
  ReconnectCounter reconnects_;
  Mutex mu_;
  std::condition_variable_any changed_;
  std::list<std::shared_ptr<Session>> sessions_ FENCELOCK_GUARDED_BY(mu_);
  std::size_t opening_ FENCELOCK_GUARDED_BY(mu_) = 0;
};

}  // namespace fencelock::detail::postgres
