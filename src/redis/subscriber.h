// Wake-ups over Redis pub/sub: how waiters learn of a release without polling, and without a
// thundering herd.
//
// Every Client has one wake channel, "fencelock:wake:<client id>", and one Subscriber thread per
// instance that keeps one connection subscribed to it for the Client's whole life. A waiting
// acquisition records the channel next to its place in the key's wait queue; the release script
// publishes the owner id of the first waiter in line on that waiter's channel. So a release wakes
// exactly one waiter, in exactly one process, and waiting costs no SUBSCRIBE per wait.
//
// A Watch registers its owner id with the ReleaseHub, waits (once per Client) until every
// connected instance confirmed the subscription, and from then on cannot miss a wake-up. When a
// subscriber's connection drops, it reconnects with backoff and resubscribes, and every waiter is
// woken once to retry (wake-ups may have been lost meanwhile).
//
// Places in line need no refresh by their waiters: while the Client has waiters, the hub keeps
// the key "<wake channel>:alive" on every instance (kAliveFor, refreshed every kAliveEvery, all
// instances at once), and a place lives while its Client is alive (scripts/queue.lua). A wake-up
// for an owner id that has no waiter here (its leave of the queue never arrived) is handed to
// the stray handler, which sends the leave again.
//
// Thread-safety: everything here is safe for concurrent use.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/wake_board.h"
#include "redis/connection.h"

namespace fencelock::detail::redis {

class Subscriber;

class ReleaseHub {
 public:
  // How long the Client's liveness key lasts, and how often it is refreshed while the Client
  // has waiters.
  static constexpr milliseconds kAliveFor{5000};
  static constexpr milliseconds kAliveEvery{1500};

  // A wake-up on `instance` for `owner`, who has no waiter here, in the queue of `lock_key`.
  using StrayHandler =
      std::function<void(int instance, const std::string& owner, const std::string& lock_key)>;

  ReleaseHub(std::vector<ConnectSpec> instances, std::string wake_channel,
             milliseconds confirm_timeout);
  ~ReleaseHub();

  // Before the first watch: the instances the liveness key is written to (each write bounded by
  // `io_timeout`) and what to do with a stray wake-up. Without it (tests), neither happens.
  // REQUIRES: the instances and whatever `stray` uses outlive this hub, or stop() is called
  // before they go.
  void attach(std::vector<Instance*> instances, milliseconds io_timeout, StrayHandler stray);
  // Stops the subscriber and liveness threads (idempotent; the destructor calls it).
  void stop();

  // The channel the release script publishes on to wake this Client's waiters.
  const std::string& wake_channel() const { return wake_channel_; }
  // The key that says this Client is alive (scripts/queue.lua).
  std::string alive_key() const { return wake_channel_ + ":alive"; }

  // A watch for the waiter `owner` (hex). The first watch starts the subscribers and waits
  // (bounded by confirm_timeout and `deadline`) until every connected instance confirmed the
  // subscription.
  std::unique_ptr<ReleaseWatch> watch(const std::string& owner, Clock::time_point deadline);

  // Called by Subscriber threads.
  void on_subscribed(int instance);
  // payload: "<owner id woken> <lock key>" (or the owner id alone).
  void on_message(int instance, const std::string& payload);
  void on_connection(int instance, bool up);
  void on_connect_failed(int instance);

 private:
  const std::string wake_channel_;
  const milliseconds confirm_timeout_;
  const std::vector<ConnectSpec> instances_;
  WakeBoard board_;  // wake-ups by owner id
  mutable Mutex mu_;
  std::condition_variable_any ready_;
  std::set<int> subscribed_on_ FENCELOCK_GUARDED_BY(mu_);
  std::set<int> connected_ FENCELOCK_GUARDED_BY(mu_);
  std::set<int> attempted_ FENCELOCK_GUARDED_BY(mu_);  // instances tried at least once
  std::once_flag started_;  // subscriber threads start with the first watch
  std::vector<std::unique_ptr<Subscriber>> subscribers_;

  // The liveness key's writer (attach()).
  void keep_alive(const std::stop_token& stop);
  std::vector<Instance*> alive_on_;
  milliseconds io_timeout_{1000};
  StrayHandler stray_;
  std::condition_variable_any alive_wake_;
  bool alive_due_ FENCELOCK_GUARDED_BY(mu_) = false;  // a watch came after an idle spell
  std::jthread alive_thread_;
};

// One connection to one instance, subscribed to the Client's wake channel, served by its own
// thread.
class Subscriber {
 public:
  Subscriber(int index, ConnectSpec spec, ReleaseHub& hub);
  ~Subscriber();

 private:
  void run(std::stop_token stop);
  // Liveness of a subscribed connection: a PING after this long without a byte from the server,
  // and the connection is dropped when the PING goes unanswered as long again. So a dead
  // connection that never closes is noticed within 2 s.
  static constexpr milliseconds kHeartbeatEvery{1000};

  bool serve(std::stop_token stop, Connection& c);
  void wake();

  const int index_;
  const ConnectSpec spec_;
  ReleaseHub& hub_;
  int wake_fd_ = -1;  // eventfd: stops the thread's poll()
  std::jthread thread_;
};

}  // namespace fencelock::detail::redis
