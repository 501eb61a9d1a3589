#include "postgres/session_pool.h"

#include <fmt/format.h>
#include "core/mutex.h"

namespace fencelock::detail::postgres {

bool SessionPool::suitable(const Session& s, Need need, std::int64_t key) const {
  if (s.busy || s.closed || s.releasers > 0) return false;
  switch (need) {
    case Need::kAny:
      return true;
    case Need::kNotKey:
      return !s.held.contains(key);
    case Need::kEmpty:
      return s.held.empty();
  }
  return false;
}

Result<std::shared_ptr<Session>> SessionPool::checkout(Need need, std::int64_t key,
                                                       Clock::time_point deadline) {
  {
    MutexLock lock(mu_);
    while (true) {
      // Prefer sessions that already hold locks for tries, so that empty ones stay free for waits.
      std::shared_ptr<Session> pick;
      for (auto& s : sessions_) {
        if (!suitable(*s, need, key)) continue;
        if (!pick || (need != Need::kEmpty && s->held.size() > pick->held.size())) pick = s;
      }
      if (pick) {
        pick->busy = true;
        return pick;
      }
      if (sessions_.size() + opening_ < max_) break;
      if (!changed_.wait_until(lock, deadline, [&]() FENCELOCK_REQUIRES(mu_) {
            for (auto& s : sessions_) {
              if (suitable(*s, need, key)) return true;
            }
            return sessions_.size() + opening_ < max_;
          })) {
        return Status(
            Code::kDeadlineExceeded,
            fmt::format("no suitable PostgreSQL session came free in time (pool of {})", max_));
      }
    }
    opening_++;
  }
  std::string mark = OwnerId::random().hex();
  auto opened = open_connection(conninfo_, Clock::now() + connect_timeout_,
                                SessionSetup{.pin = true, .mark = mark});
  MutexLock lock(mu_);
  opening_--;
  changed_.notify_all();
  if (!opened.ok()) {
    if (opened.code() == Code::kUnavailable) reconnects_.failed();
    return opened.status();
  }
  reconnects_.connected();
  auto session = std::make_shared<Session>();
  session->conn = std::move(*opened);
  session->mark = std::move(mark);
  session->busy = true;
  sessions_.push_back(session);
  return session;
}

Status SessionPool::checkout_this(const std::shared_ptr<Session>& session,
                                  Clock::time_point deadline) {
  MutexLock lock(mu_);
  session->releasers++;
  bool idle =
      changed_.wait_until(lock, deadline, [&] { return session->closed || !session->busy; });
  session->releasers--;
  if (session->releasers == 0) changed_.notify_all();  // checkout() may take it again
  if (session->closed)
    return Status(Code::kUnavailable, "the PostgreSQL session holding the lock is gone");
  if (!idle)
    return Status(Code::kDeadlineExceeded, "the PostgreSQL session holding the lock stayed busy");
  session->busy = true;
  return Status::Ok();
}

int SessionPool::releasers_waiting(const std::shared_ptr<Session>& session) {
  MutexLock lock(mu_);
  return session->releasers;
}

std::vector<std::pair<std::int64_t, bool>> SessionPool::checkin(
    const std::shared_ptr<Session>& session, bool broken) {
  ConnPtr closing;  // PQfinish outside the mutex
  bool closed_now = false;
  std::vector<std::pair<std::int64_t, bool>> pending;
  {
    MutexLock lock(mu_);
    const bool healthy = PQstatus(session->conn.get()) == CONNECTION_OK;
    if (!broken && healthy && !session->pending_unlocks.empty()) {
      pending.swap(session->pending_unlocks);
      return pending;  // still busy: the caller runs them first
    }
    session->busy = false;
    if (broken || !healthy) {
      session->closed = true;  // its advisory locks end with its connection, closed here
      // A deliberate close (to free what an ambiguous call took) is not a connection failure.
      if (!healthy) reconnects_.failed();
      session->held.clear();
      session->pending_unlocks.clear();
      // Leases on this session still point at it; the connection must not stay open under them.
      closing = std::move(session->conn);
      closed_now = true;
      sessions_.remove(session);
    }
    changed_.notify_all();
  }
  if (closed_now) {
    session->gone.request_stop();  // lost() on its leases before the server frees their locks
    closing.reset();
  }
  return pending;
}

bool SessionPool::defer_unlock(const std::shared_ptr<Session>& session, std::int64_t key,
                               bool shared) {
  MutexLock lock(mu_);
  if (session->closed) return true;
  if (!session->busy) return false;
  session->pending_unlocks.emplace_back(key, shared);
  return true;
}

bool SessionPool::closed(const std::shared_ptr<Session>& session) {
  MutexLock lock(mu_);
  return session->closed;
}

void SessionPool::note_held(const std::shared_ptr<Session>& session, std::int64_t key, bool held) {
  MutexLock lock(mu_);
  if (held) {
    session->held.insert(key);
  } else {
    session->held.erase(key);
  }
}

}  // namespace fencelock::detail::postgres
