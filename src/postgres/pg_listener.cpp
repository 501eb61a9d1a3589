#include "postgres/pg_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "postgres/pg_connection.h"

namespace fencelock::detail::postgres {

class ListenerWatch final : public ReleaseWatch {
 public:
  ListenerWatch(PgListener& listener, std::string key, std::uint64_t seen)
      : listener_(listener), key_(std::move(key)), seen_(seen) {}
  ~ListenerWatch() override { listener_.forget(key_); }
  bool wait_until(Clock::time_point until, std::stop_token stop) override {
    return listener_.wait_release(key_, seen_, until, std::move(stop));
  }

 private:
  PgListener& listener_;
  std::string key_;
  std::uint64_t seen_;
};

PgListener::PgListener(std::string conninfo, milliseconds connect_timeout)
    : conninfo_(std::move(conninfo)), connect_timeout_(connect_timeout) {
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

std::unique_ptr<ReleaseWatch> PgListener::watch(const std::string& key) {
  std::call_once(started_, [&] { thread_ = std::jthread([this](std::stop_token stop) { run(stop); }); });
  std::unique_lock lock(mu_);
  keys_[key].first++;
  changed_.wait_for(lock, connect_timeout_, [&] { return listening_ || tried_; });
  return std::make_unique<ListenerWatch>(*this, key, events_for(key));
}

void PgListener::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  if (--it->second.first == 0) keys_.erase(it);
}

std::uint64_t PgListener::events_for(const std::string& key) const {
  auto it = keys_.find(key);
  return reconnects_ + (it == keys_.end() ? 0 : it->second.second);
}

bool PgListener::wait_release(const std::string& key, std::uint64_t& seen, Clock::time_point until,
                              std::stop_token stop) {
  std::unique_lock lock(mu_);
  bool woke = changed_.wait_until(lock, stop, until, [&] { return events_for(key) != seen; });
  seen = events_for(key);
  return woke;
}

void PgListener::run(std::stop_token stop) {
  milliseconds backoff(0);
  while (!stop.stop_requested()) {
    auto conn = open_connection(conninfo_, Clock::now() + connect_timeout_);
    bool broken = true;
    if (conn.ok()) {
      auto listened = execute(conn->get(), "LISTEN fencelock_release", {}, Clock::now() + connect_timeout_, broken);
      if (listened.ok()) {
        backoff = milliseconds(0);
        {
          std::lock_guard lock(mu_);
          listening_ = tried_ = true;
          reconnects_++;  // releases may have been missed while not listening: everyone retries
          changed_.notify_all();
        }
        PGconn* c = conn->get();
        while (!stop.stop_requested()) {
          pollfd fds[2] = {{PQsocket(c), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
          if (poll(fds, 2, -1) < 0 || fds[0].revents == 0) continue;
          if (PQconsumeInput(c) == 0) break;
          std::lock_guard lock(mu_);
          while (PGnotify* note = PQnotifies(c)) {
            auto it = keys_.find(note->extra);
            if (it != keys_.end()) it->second.second++;
            PQfreemem(note);
          }
          changed_.notify_all();
        }
        std::lock_guard lock(mu_);
        listening_ = false;
        reconnects_++;
        changed_.notify_all();
        continue;
      }
    }
    {
      std::lock_guard lock(mu_);
      tried_ = true;
      changed_.notify_all();
    }
    backoff = std::clamp(backoff * 2, milliseconds(25), milliseconds(1000));
    pollfd pfd{wake_fd_, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(backoff.count()));
  }
}

}  // namespace fencelock::detail::postgres
