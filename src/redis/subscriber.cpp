#include "redis/subscriber.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/mutex.h"
#include "core/thread_name.h"
#include "redis/script_replies.h"

namespace fencelock::detail::redis {

ReleaseHub::ReleaseHub(std::vector<ConnectSpec> instances, std::string wake_channel,
                       milliseconds confirm_timeout)
    : wake_channel_(std::move(wake_channel)),
      confirm_timeout_(confirm_timeout),
      instances_(std::move(instances)) {}

ReleaseHub::~ReleaseHub() { stop(); }

void ReleaseHub::attach(std::vector<Instance*> instances, milliseconds io_timeout,
                        StrayHandler stray) {
  alive_on_ = std::move(instances);
  io_timeout_ = io_timeout;
  stray_ = std::move(stray);
}

void ReleaseHub::stop() {
  if (alive_thread_.joinable()) {
    alive_thread_.request_stop();
    {
      MutexLock lock(mu_);
      alive_wake_.notify_all();
    }
    alive_thread_.join();
  }
  subscribers_.clear();
}

std::unique_ptr<ReleaseWatch> ReleaseHub::watch(const std::string& owner,
                                                Clock::time_point deadline) {
  std::call_once(started_, [&] {
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      subscribers_.push_back(
          std::make_unique<Subscriber>(static_cast<int>(i), instances_[i], *this));
    }
    if (!alive_on_.empty()) {
      alive_thread_ = std::jthread([this](const std::stop_token& stop) {
        name_this_thread("fl-alive");
        keep_alive(stop);
      });
    }
  });
  {
    // Wait until every instance was tried once and every connected one confirmed (instances that
    // are down cannot publish to us either; the holder's TTL is the fallback for them).
    MutexLock lock(mu_);
    ready_.wait_until(lock, std::min(deadline, Clock::now() + confirm_timeout_),
                      [&]() FENCELOCK_REQUIRES(mu_) {
                        return attempted_.size() == instances_.size() &&
                               std::includes(subscribed_on_.begin(), subscribed_on_.end(),
                                             connected_.begin(), connected_.end());
                      });
  }
  auto watch = board_.watch(owner);
  {
    MutexLock lock(mu_);
    alive_due_ = true;
    alive_wake_.notify_all();
  }
  return watch;
}

void ReleaseHub::keep_alive(const std::stop_token& stop) {
  const std::string beat =
      format_command({"SET", alive_key(), "1", "PX", std::to_string(kAliveFor.count())});
  // When each instance last stored the key (nullopt: not while this run of waiters lasts).
  std::vector<std::optional<Clock::time_point>> stored(alive_on_.size());
  // Once the Client has no waiters (and when it goes), the key goes too, rather than lingering
  // for its TTL: it only ever says "this Client has places in line".
  const std::string forget = format_command({"DEL", alive_key()});
  auto forget_stored = [&] {
    std::vector<InstanceCall> calls;
    for (std::size_t i = 0; i < stored.size(); ++i) {
      if (!stored[i]) continue;
      InstanceCall& call = calls.emplace_back();
      call.instance = alive_on_[i];
      call.commands.push_back(&forget);
    }
    if (!calls.empty())
      fan_out(calls, Clock::now() + std::min<milliseconds>(io_timeout_, kAliveEvery));
    std::fill(stored.begin(), stored.end(), std::nullopt);
  };
  while (!stop.stop_requested()) {
    if (board_.watching()) {
      std::vector<InstanceCall> calls(alive_on_.size());
      for (std::size_t i = 0; i < calls.size(); ++i) {
        calls[i].instance = alive_on_[i];
        calls[i].commands.push_back(&beat);
      }
      // Every instance at once, each within io_timeout and within the period: a silent one
      // delays no other, nor the next write to the others.
      const Clock::time_point sent = Clock::now();
      fan_out(calls, sent + std::min<milliseconds>(io_timeout_, kAliveEvery));
      bool lapsed = false;
      for (std::size_t i = 0; i < calls.size(); ++i) {
        if (!calls[i].error.ok() || calls[i].replies[0]->type == REDIS_REPLY_ERROR) continue;
        // The key may have expired since the last write: that instance may have dropped this
        // Client's places, so every waiter tries once more (and takes its place again).
        if (stored[i] && sent - *stored[i] >= kAliveFor) lapsed = true;
        stored[i] = sent;
      }
      if (lapsed) board_.notify_all();
    } else {
      forget_stored();
    }
    MutexLock lock(mu_);
    alive_wake_.wait_for(lock, stop, kAliveEvery,
                         [&]() FENCELOCK_REQUIRES(mu_) { return alive_due_; });
    alive_due_ = false;
  }
  forget_stored();
}

void ReleaseHub::on_subscribed(int instance) {
  // Every waiter retries once: a wake-up may have gone unheard while this instance's
  // subscription was down (and its places there may have been dropped meanwhile: the retry takes
  // them again). Only now that the subscription is confirmed, so no release after the retry is
  // missed. Before a new watch can start (it waits for subscribed_on_ below): a watch that begins
  // after the subscription tries first anyway, and a late wake-up would cost it a second try.
  board_.notify_all();
  MutexLock lock(mu_);
  subscribed_on_.insert(instance);
  ready_.notify_all();
}

void ReleaseHub::on_message(int instance, const std::string& payload) {
  const std::size_t space = payload.find(' ');
  const std::string owner = payload.substr(0, space);
  if (board_.notify(owner) || space == std::string::npos || !stray_) return;
  stray_(instance, owner, payload.substr(space + 1));
}

void ReleaseHub::on_connect_failed(int instance) {
  MutexLock lock(mu_);
  attempted_.insert(instance);
  ready_.notify_all();
}

void ReleaseHub::on_connection(int instance, bool up) {
  {
    MutexLock lock(mu_);
    attempted_.insert(instance);
    if (up) {
      connected_.insert(instance);
    } else {
      connected_.erase(instance);
      subscribed_on_.erase(instance);
    }
    ready_.notify_all();
  }
  // A drop: every waiter retries once now (a wake-up may have gone unheard), and once more when
  // the subscription is back (on_subscribed).
  if (!up) board_.notify_all();
}

Subscriber::Subscriber(int index, ConnectSpec spec, ReleaseHub& hub)
    : index_(index), spec_(std::move(spec)), hub_(hub) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::jthread([this](std::stop_token stop) {
    name_this_thread("fl-subscribe");
    run(stop);
  });
}

Subscriber::~Subscriber() {
  thread_.request_stop();
  wake();
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
}

void Subscriber::wake() {
  std::uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;
}

void Subscriber::run(std::stop_token stop) {
  milliseconds backoff(0);
  while (!stop.stop_requested()) {
    auto opened = open_connection(spec_, Clock::now() + spec_.connect_timeout);
    if (opened.ok()) {
      backoff = milliseconds(0);
      hub_.on_connection(index_, true);
      serve(stop, **opened);
      hub_.on_connection(index_, false);
      continue;
    }
    hub_.on_connect_failed(index_);
    backoff = std::clamp(backoff * 2, milliseconds(25), milliseconds(1000));
    pollfd pfd{wake_fd_, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(backoff.count()));  // wait out the backoff, or until stopped
  }
}

bool Subscriber::serve(std::stop_token stop, Connection& c) {
  c.queue(format_command({"SUBSCRIBE", hub_.wake_channel()}));
  if (!flush(c, Clock::now() + kHeartbeatEvery).ok()) return false;
  // A connection that dies without closing (a partition, a stopped server, a NAT that forgot it)
  // would never be noticed by a reader that only waits: after kHeartbeatEvery without a byte
  // from the server, a PING (allowed while subscribed) must be answered within kHeartbeatEvery,
  // else the connection counts as dropped (reconnect, and every waiter retries once).
  Clock::time_point heard = Clock::now();
  bool pinged = false;
  const std::string ping = format_command({"PING"});
  while (!stop.stop_requested()) {
    const Clock::time_point due = heard + (pinged ? 2 : 1) * kHeartbeatEvery;
    const Clock::time_point now = Clock::now();
    if (now >= due) {
      if (pinged) return false;  // silent since the PING: dead
      c.queue(ping);
      if (!flush(c, Clock::now() + kHeartbeatEvery).ok()) return false;
      pinged = true;
      continue;
    }
    const auto wait = std::chrono::ceil<milliseconds>(due - now);
    pollfd fds[2] = {{c.fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(wait.count())) < 0 || fds[0].revents == 0) continue;
    if (!c.on_readable().ok()) return false;
    heard = Clock::now();
    pinged = false;
    while (true) {
      auto next = c.next_reply();
      if (!next.ok()) return false;
      if (!*next) break;
      Reply reply = std::move(*next);
      // {"subscribe", channel, count}, {"message", channel, payload}; {"pong", ""} and any
      // other shape only prove that the connection lives.
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3) continue;
      const std::string_view kind = reply_text(reply->element[0]);
      if (kind == "subscribe") {
        hub_.on_subscribed(index_);
      } else if (kind == "message") {
        hub_.on_message(index_, std::string(reply_text(reply->element[2])));
      }
    }
  }
  return true;
}

}  // namespace fencelock::detail::redis
