#include "postgres/pg_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "core/mutex.h"
#include "core/thread_name.h"
#include "postgres/pg_connection.h"

namespace fencelock::detail::postgres {

PgListener::PgListener(std::string conninfo, milliseconds connect_timeout, bool enabled)
    : conninfo_(std::move(conninfo)), connect_timeout_(connect_timeout), enabled_(enabled) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

PgListener::~PgListener() {
  if (thread_.joinable()) {
    thread_.request_stop();
    std::uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof one);
    (void)n;
    thread_.join();
  }
  close(wake_fd_);
}

std::unique_ptr<ReleaseWatch> PgListener::watch(const std::string& key,
                                                Clock::time_point deadline) {
  if (!enabled_) return board_.watch(key);
  std::call_once(started_, [&] {
    thread_ = std::jthread([this](std::stop_token stop) {
      name_this_thread("fl-pg-listen");
      run(stop);
    });
  });
  MutexLock lock(mu_);
  ready_.wait_until(lock, std::min(deadline, Clock::now() + connect_timeout_),
                    [&]() FENCELOCK_REQUIRES(mu_) { return listening_ || tried_; });
  // Made under mu_, so that set_state() sees either a watch made while listening or the flag.
  if (!listening_) missed_ = true;
  return board_.watch(key);
}

void PgListener::set_state(bool listening) {
  bool wake_everyone = false;
  {
    MutexLock lock(mu_);
    listening_ = listening;
    tried_ = true;
    if (!listening) missed_ = true;  // nothing is heard until the next LISTEN
    if (listening && missed_) {
      missed_ = false;
      wake_everyone = true;
    }
    ready_.notify_all();
  }
  // Releases may have been missed while not listening: every watcher retries. Not on a first
  // LISTEN that every watch waited for (a wake-up for nothing is a try for nothing).
  if (wake_everyone) board_.notify_all();
}

void PgListener::run(std::stop_token stop) {
  milliseconds backoff(0);
  while (!stop.stop_requested()) {
    auto conn = open_connection(conninfo_, Clock::now() + connect_timeout_);
    bool broken = true;
    if (conn.ok()) {
      auto listened = execute(conn->get(), "LISTEN fencelock_release", {},
                              Clock::now() + connect_timeout_, broken);
      if (listened.ok()) {
        backoff = milliseconds(0);
        set_state(true);
        PGconn* c = conn->get();
        while (!stop.stop_requested()) {
          pollfd fds[2] = {{PQsocket(c), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
          if (poll(fds, 2, -1) < 0 || fds[0].revents == 0) continue;
          if (PQconsumeInput(c) == 0) break;
          while (PGnotify* note = PQnotifies(c)) {
            board_.notify(note->extra);
            PQfreemem(note);
          }
        }
        set_state(false);
        continue;
      }
    }
    {
      MutexLock lock(mu_);
      tried_ = true;
      ready_.notify_all();
    }
    backoff = std::clamp(backoff * 2, milliseconds(25), milliseconds(1000));
    pollfd pfd{wake_fd_, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(backoff.count()));
  }
}

}  // namespace fencelock::detail::postgres
