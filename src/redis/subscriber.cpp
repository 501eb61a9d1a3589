#include "redis/subscriber.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>

#include "core/errno_text.h"
#include "core/log_internal.h"
#include "core/mutex.h"
#include "core/thread_name.h"
#include "redis/script_replies.h"

namespace fencelock::detail::redis {
namespace {

// Liveness of a subscribed connection: a PING after this long without a byte from the server,
// and the connection is dropped when the PING goes unanswered as long again. So a dead
// connection that never closes is noticed within 2 s.
constexpr milliseconds kHeartbeatEvery{1000};
// How often a name lookup in progress is looked at (lookups run on threads of their own).
constexpr milliseconds kLookupTick{20};
// How often the loop wakes on its own when it has no eventfd to be woken by.
constexpr milliseconds kNoWakeFdTick{50};

}  // namespace

// One instance's subscribed connection: looked up, connected and set up (kOpening: AUTH, SELECT,
// PING and SUBSCRIBE queued at once; the SUBSCRIBE runs only after every setup reply came back
// without an error, as the server answers in order), then kSubscribed until it fails.
struct ReleaseHub::Feed {
  enum class State { kIdle, kLookup, kOpening, kSubscribed };
  State state = State::kIdle;
  Clock::time_point retry_at{};  // kIdle: when to connect again
  milliseconds backoff{0};
  std::shared_ptr<Lookup> lookup;  // kLookup
  Clock::time_point open_by{};     // kLookup, kOpening: the connect's deadline
  ConnectionPtr connection;        // kOpening, kSubscribed
  std::size_t setup_left = 0;      // kOpening: setup replies still to come
  Clock::time_point heard{};       // kSubscribed: when the server last sent a byte
  bool pinged = false;             // kSubscribed: a PING is unanswered
};

// One instance's liveness write: at most one in flight, within its own deadline.
struct ReleaseHub::Beat {
  std::unique_ptr<PolledCall> call;
  ConnectionPtr connection;  // the writes' own, kept between them
  Clock::time_point due{};   // the call's deadline
  Clock::time_point sent{};  // when it was started
  bool forget = false;       // a DEL, not a SET
  // When the instance last stored the key, while this spell of waiters lasts.
  std::optional<Clock::time_point> stored;
};

ReleaseHub::ReleaseHub(std::vector<ConnectSpec> instances, std::string wake_channel,
                       milliseconds confirm_timeout)
    : wake_channel_(std::move(wake_channel)),
      confirm_timeout_(confirm_timeout),
      instances_(std::move(instances)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wake_fd_ < 0) {
    // Out of file descriptors: nothing can interrupt the loop's poll(), so it wakes on its own
    // every kNoWakeFdTick instead (run()): later, never lost.
    log(LogLevel::kWarning,
        "wake-up subscriber: no eventfd ({}); stop and new waiters are noticed "
        "within {} ms",
        errno_text(errno), kNoWakeFdTick.count());
  }
}

ReleaseHub::~ReleaseHub() {
  stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void ReleaseHub::attach(std::vector<Instance*> instances, milliseconds io_timeout,
                        StrayHandler stray) {
  alive_on_ = std::move(instances);
  io_timeout_ = io_timeout;
  stray_ = std::move(stray);
}

void ReleaseHub::stop() {
  if (!loop_.joinable()) return;
  loop_.request_stop();
  wake_loop();
  loop_.join();
}

void ReleaseHub::drop_wake_fd_for_testing() {
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

void ReleaseHub::wake_loop() {
  std::uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;
}

std::unique_ptr<ReleaseWatch> ReleaseHub::watch(const std::string& owner,
                                                Clock::time_point deadline) {
  std::call_once(started_, [&] {
    loop_ = std::jthread([this](const std::stop_token& stop) {
      name_this_thread("fl-subscribe");
      run(stop);
    });
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
  bool was_due = false;
  {
    MutexLock lock(mu_);
    was_due = alive_due_;
    alive_due_ = true;
  }
  if (!was_due) wake_loop();
  return watch;
}

void ReleaseHub::run(const std::stop_token& stop) {
  const std::string subscribe = format_command({"SUBSCRIBE", wake_channel_});
  const std::string ping = format_command({"PING"});
  const std::string beat_command =
      format_command({"SET", alive_key(), "1", "PX", std::to_string(kAliveFor.count())});
  // Once the Client has no waiters (and when it goes), the key goes too, rather than lingering
  // for its TTL: it only ever says "this Client has places in line".
  const std::string forget_command = format_command({"DEL", alive_key()});
  const milliseconds beat_bound = std::min<milliseconds>(io_timeout_, kAliveEvery);

  std::vector<Feed> feeds(instances_.size());
  std::vector<Beat> beats(alive_on_.size());
  // The next round of liveness writes while the Client has waiters; max: none planned (the next
  // watch after an idle spell asks for one, alive_due_).
  Clock::time_point next_round = Clock::time_point::max();
  bool draining = false;  // stopping: only the last DELs are left to finish
  bool spell = false;     // the Client had waiters at the last round: the key is kept

  auto connect_failed = [&](int i) {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    f.connection.reset();
    f.lookup.reset();
    f.state = Feed::State::kIdle;
    f.backoff = std::clamp(f.backoff * 2, milliseconds(25), milliseconds(1000));
    f.retry_at = Clock::now() + f.backoff;
    on_connect_failed(i);
  };
  auto dropped = [&](int i) {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    f.connection.reset();
    f.state = Feed::State::kIdle;
    f.retry_at = Clock::now();  // at once; the backoff grows only when connecting fails
    on_connection(i, false);
  };
  auto try_open = [&](int i) {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    if (!f.lookup->done()) return;
    auto addresses = f.lookup->wait(Clock::now());
    f.lookup.reset();
    if (!addresses.ok()) return connect_failed(i);
    const ConnectSpec& spec = instances_[static_cast<std::size_t>(i)];
    auto started = Connection::start(std::move(*addresses), endpoint_text(spec.endpoint));
    if (!started.ok()) return connect_failed(i);
    f.connection = std::move(*started);
    const std::vector<std::string> setup = setup_commands(spec);
    for (const std::string& command : setup) f.connection->queue(command);
    f.connection->queue(subscribe);
    f.setup_left = setup.size();
    f.state = Feed::State::kOpening;
  };
  auto start_connect = [&](int i) {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    const ConnectSpec& spec = instances_[static_cast<std::size_t>(i)];
    f.open_by = Clock::now() + spec.connect_timeout;
    f.lookup = Lookup::start(spec.endpoint);
    f.state = Feed::State::kLookup;
    try_open(i);
  };
  // The replies that came on feed i (after a read): setup replies, then the subscription's.
  auto take_replies = [&](int i) -> bool {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    while (true) {
      auto next = f.connection->next_reply();
      if (!next.ok()) return false;
      if (!*next) return true;
      Reply reply = std::move(*next);
      if (f.state == Feed::State::kOpening) {
        if (reply->type == REDIS_REPLY_ERROR) return false;  // refused credentials, a bad db
        if (--f.setup_left == 0) {
          f.state = Feed::State::kSubscribed;
          f.heard = Clock::now();
          f.pinged = false;
          f.backoff = milliseconds(0);
          on_connection(i, true);
        }
        continue;
      }
      // {"subscribe", channel, count}, {"message", channel, payload}; {"pong", ""} and any
      // other shape only prove that the connection lives.
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3) continue;
      const std::string_view kind = reply_text(reply->element[0]);
      if (kind == "subscribe") {
        on_subscribed(i);
      } else if (kind == "message") {
        on_message(i, std::string(reply_text(reply->element[2])));
      }
    }
  };
  auto feed_events = [&](int i, short revents) {
    Feed& f = feeds[static_cast<std::size_t>(i)];
    const bool opening = f.state == Feed::State::kOpening;
    auto fail = [&] { opening ? connect_failed(i) : dropped(i); };
    if ((revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) != 0 && f.connection->wants_write()) {
      if (!f.connection->on_writable().ok()) return fail();
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL)) != 0 && !f.connection->connecting()) {
      const Status read = f.connection->on_readable();
      if (f.state == Feed::State::kSubscribed) {
        f.heard = Clock::now();
        f.pinged = false;
      }
      // Replies that came before a close are still taken.
      const bool replies_ok = take_replies(i);
      if (!read.ok() || !replies_ok) {
        f.state == Feed::State::kOpening ? connect_failed(i) : dropped(i);
      }
    }
  };
  // Starts instance i's write (SET, or DEL when `forget`); false when one is under way already
  // or the instance cannot take it now (reconnect backoff, a name lookup under way).
  auto start_beat = [&](std::size_t i, bool forget) {
    Beat& b = beats[i];
    if (b.call) return false;  // the last one is still under way (within its bound)
    auto call =
        PolledCall::start(*alive_on_[i], {forget ? &forget_command : &beat_command}, b.connection);
    if (!call.ok()) return false;
    b.call = std::move(*call);
    b.sent = Clock::now();
    b.due = b.sent + beat_bound;
    b.forget = forget;
    return true;
  };
  // A delete that could not start or did not succeed is owed: tried again a round later (not
  // when stopping: the key's own 5 s end it then).
  auto owe_delete = [&](std::size_t i) {
    if (draining) return;
    beats[i].stored = beats[i].sent;
    if (next_round == Clock::time_point::max()) next_round = Clock::now() + kAliveEvery;
  };
  auto finish_beat = [&](std::size_t i) {
    Beat& b = beats[i];
    auto replies = b.call->finish(b.connection);
    b.call.reset();
    const bool ok = replies.ok() && (*replies)[0]->type != REDIS_REPLY_ERROR;
    if (b.forget) {
      if (!draining && spell) {
        // Waiters came back while the delete was under way (start_beat left them for it):
        // their write now, not a round later.
        start_beat(i, /*forget=*/false);
      } else if (!ok) {
        owe_delete(i);
      }
      return;
    }
    if (!ok) return;
    if (draining || !spell) {
      // The waiters went (or the hub stops) while this write was under way: delete it again.
      if (!start_beat(i, /*forget=*/true)) owe_delete(i);
      return;
    }
    // The key may have expired since the last write: that instance may have dropped this
    // Client's places, so every waiter tries once more (and takes its place again).
    if (b.stored && b.sent - *b.stored >= kAliveFor) board_.notify_all();
    b.stored = b.sent;
  };
  // Deletes the key where it was stored; returns whether any delete is still owed (a write under
  // way there, or an instance that cannot take it now).
  auto forget_stored = [&] {
    bool owed = false;
    for (std::size_t i = 0; i < beats.size(); ++i) {
      if (!beats[i].stored) continue;
      if (start_beat(i, /*forget=*/true) || draining) {
        beats[i].stored.reset();
      } else {
        owed = true;
      }
    }
    return owed;
  };

  std::vector<pollfd> fds;
  std::vector<int> owners;  // fds[k] is feed owners[k], or beat -1 - owners[k]; the eventfd: none
  while (true) {
    const Clock::time_point now = Clock::now();
    if (!draining && stop.stop_requested()) {
      draining = true;
      forget_stored();
    }
    if (!draining && !beats.empty()) {
      bool due = false;
      {
        MutexLock lock(mu_);
        due = alive_due_;
        alive_due_ = false;
      }
      if (due && !spell) next_round = now;  // waiters after an idle spell: write at once
      if (now >= next_round) {
        spell = board_.watching();
        if (spell) {
          for (std::size_t i = 0; i < beats.size(); ++i) start_beat(i, /*forget=*/false);
          next_round = now + kAliveEvery;
        } else {
          next_round = forget_stored() ? now + kAliveEvery : Clock::time_point::max();
        }
      }
    }

    // Feeds: connect those due, fail those out of time, PING the quiet ones.
    Clock::time_point wake_at = draining ? Clock::time_point::max() : next_round;
    for (std::size_t n = 0; n < feeds.size() && !draining; ++n) {
      const int i = static_cast<int>(n);
      Feed& f = feeds[n];
      if (f.state == Feed::State::kIdle && now >= f.retry_at) start_connect(i);
      if (f.state == Feed::State::kLookup) try_open(i);
      if ((f.state == Feed::State::kLookup || f.state == Feed::State::kOpening) &&
          now >= f.open_by) {
        connect_failed(i);
      }
      if (f.state == Feed::State::kSubscribed) {
        const Clock::time_point silent_until = f.heard + (f.pinged ? 2 : 1) * kHeartbeatEvery;
        if (now >= silent_until) {
          if (f.pinged) {
            dropped(i);  // silent since the PING: dead
          } else {
            f.connection->queue(ping);
            f.pinged = true;
          }
        }
      }
      switch (f.state) {
        case Feed::State::kIdle:
          wake_at = std::min(wake_at, f.retry_at);
          break;
        case Feed::State::kLookup:
          wake_at = std::min({wake_at, f.open_by, now + kLookupTick});
          break;
        case Feed::State::kOpening:
          wake_at = std::min(wake_at, f.open_by);
          break;
        case Feed::State::kSubscribed:
          wake_at = std::min(wake_at, f.heard + (f.pinged ? 2 : 1) * kHeartbeatEvery);
          break;
      }
    }
    bool any_beat = false;
    for (std::size_t i = 0; i < beats.size(); ++i) {
      if (beats[i].call && now >= beats[i].due) beats[i].call->expire();
      if (beats[i].call && !beats[i].call->active()) finish_beat(i);
      if (beats[i].call) wake_at = std::min(wake_at, beats[i].due);
      any_beat = any_beat || beats[i].call != nullptr;
    }
    // Stopping: done once the last deletes have finished, answered or out of time (checked
    // after the deadlines above: with none left in flight nothing would wake the poll below).
    if (draining && !any_beat) return;

    fds.clear();
    owners.clear();
    fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    owners.push_back(0);
    for (std::size_t n = 0; n < feeds.size() && !draining; ++n) {
      const Feed& f = feeds[n];
      if (f.state != Feed::State::kOpening && f.state != Feed::State::kSubscribed) continue;
      fds.push_back(pollfd{f.connection->fd(), f.connection->poll_events(), 0});
      owners.push_back(static_cast<int>(n));
    }
    for (std::size_t i = 0; i < beats.size(); ++i) {
      if (!beats[i].call) continue;
      fds.push_back(pollfd{beats[i].call->fd(), beats[i].call->poll_events(), 0});
      owners.push_back(-1 - static_cast<int>(i));
    }
    const auto left =
        wake_at == Clock::time_point::max()
            ? milliseconds(-1)
            : std::max(std::chrono::ceil<milliseconds>(wake_at - Clock::now()), milliseconds(0));
    int wait = static_cast<int>(std::min<milliseconds::rep>(left.count(), 1 << 30));
    if (wake_fd_ < 0 && (wait < 0 || wait > kNoWakeFdTick.count())) {
      wait = static_cast<int>(kNoWakeFdTick.count());  // nothing else would interrupt it
    }
    if (::poll(fds.data(), fds.size(), wait) < 0) continue;  // EINTR
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t drained = 0;
      ssize_t n = read(wake_fd_, &drained, sizeof drained);
      (void)n;
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      if (owners[k] >= 0) {
        feed_events(owners[k], fds[k].revents);
      } else {
        const auto i = static_cast<std::size_t>(-1 - owners[k]);
        beats[i].call->on_events(fds[k].revents);
        if (!beats[i].call->active()) finish_beat(i);
      }
    }
  }
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

}  // namespace fencelock::detail::redis
